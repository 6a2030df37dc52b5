"""Benchmark tilepipe.grouped_mm (issue 39's shapes) against torch._grouped_mm and against tilepipe's dense GEMM over
the same rows, in one process on the same inputs, interleaved (tilepipe.tools.bench.compare).

`python -m tilepipe.tools.bench_grouped [NAME]` writes bench/results/NAME.json (default grouped-h200). Every case
runs with expert sizes uniform, Zipf-skewed (s = 1.1) and with a quarter of the experts empty; B is K-major (a
transposed (G, N, K) weight, as MoE layers hold it) and D bf16. `... NAME one-group`: each case's rows as one group
of one expert against tilepipe.matmul on that expert, which separates the kernel's own cost (its scheduler and
epilogue) from what G distinct experts cost (each one's B read from DRAM where the dense GEMM reuses one B from L2).
`... NAME masked`: the decode case in the masked form (grouped_mm_masked over a capacity of 4x the mean rows per
expert), each call a CUDA-graph replay, against torch._grouped_mm and tilepipe.grouped_mm over the same rows packed,
each replayed from its own graph.
`... NAME busy`: grouped_mm's dynamic schedule against its static one, on an idle GPU and with 20 SMs held by another
kernel for half the GEMM's time (as a MoE layer's all-to-all holds them: tools/busy_sms.py), and against
torch._grouped_mm there.
"""

import random
import statistics
import sys
import time
from pathlib import Path
from typing import Callable

import torch

import tilepipe
from tilepipe.host.checks import GROUPED_SCHEDULERS
from tilepipe.tools.bench import RESULTS_DIR, Row, _rel_err, compare, run_record, warmed_graph, write_results

CASES = [("DeepSeek-V3 EP8 gate-up", 32, 4096, 7168, 32768), ("DeepSeek-V3 EP8 down", 32, 7168, 2048, 32768),
         ("Mixtral-8x7B gate-up", 8, 28672, 4096, 16384), ("Mixtral-8x7B down", 8, 4096, 14336, 16384),
         ("decode 512 rows / 32 experts", 32, 4096, 7168, 512)]
"""(name, experts G, N, K, routed rows): issue 39's table."""
DISTRIBUTIONS = ("uniform", "zipf", "quarter-empty")


def expert_sizes(rows: int, G: int, distribution: str, seed: int = 0) -> list[int]:
    """Rows per expert summing to `rows`: equal, Zipf (s = 1.1, experts in random order), or a random quarter of the
    experts empty and the rows split equally over the rest."""
    rng = random.Random(seed)
    if distribution == "zipf":
        weights = [1.0 / (i + 1) ** 1.1 for i in range(G)]
        rng.shuffle(weights)
    else:
        empty = set(rng.sample(range(G), G // 4)) if distribution == "quarter-empty" else set()
        weights = [0.0 if g in empty else 1.0 for g in range(G)]
    sizes = [int(rows * w / sum(weights)) for w in weights]
    sizes[max(range(G), key=lambda g: weights[g])] += rows - sum(sizes)
    return sizes


def bench_case(name: str, G: int, N: int, K: int, rows: int, distribution: str, pairs: int, rep_ms: int
               ) -> list[Row]:
    """One case and distribution: grouped_mm against torch._grouped_mm, and against tilepipe.matmul over all rows."""
    sizes = expert_sizes(rows, G, distribution)
    offs = torch.tensor(sizes, device="cuda").cumsum(0).to(torch.int32)
    a = torch.randn(rows, K, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(G, N, K, device="cuda", dtype=torch.bfloat16).transpose(1, 2)
    ours = torch.full((rows, N), float("nan"), device="cuda", dtype=torch.bfloat16)
    theirs = torch.empty_like(ours)
    tilepipe.grouped_mm(a, b, offs, out=ours)
    reference = torch._grouped_mm(a, b, offs=offs)
    err = _rel_err(ours, reference)
    flops = 2.0 * rows * N * K
    shape = f"{name}: G={G} {rows}x{N}x{K} {distribution} (largest {max(sizes)}, empty {sizes.count(0)})"
    result = compare(lambda: tilepipe.grouped_mm(a, b, offs, out=ours), lambda: torch._grouped_mm(a, b, offs=offs),
                     flops, pairs, rep_ms, settle=1)
    found = [Row(shape, "grouped_mm B kmajor", "torch._grouped_mm", *result[:3], err, result[3])]
    dense = b[0]
    tilepipe.matmul(a, dense, out=theirs)
    result = compare(lambda: tilepipe.grouped_mm(a, b, offs, out=ours), lambda: tilepipe.matmul(a, dense, out=theirs),
                     flops, pairs, rep_ms, settle=1)
    return found + [Row(shape, "grouped_mm B kmajor", "tilepipe.matmul dense over the same rows", *result[:3], err,
                        result[3])]


def bench_one_group(name: str, G: int, N: int, K: int, rows: int, pairs: int, rep_ms: int) -> Row:
    """A case's rows as one group of one expert: grouped_mm against tilepipe.matmul on the same expert."""
    offs = torch.tensor([rows], device="cuda", dtype=torch.int32)
    a = torch.randn(rows, K, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(1, N, K, device="cuda", dtype=torch.bfloat16).transpose(1, 2)
    ours, theirs = (torch.empty((rows, N), device="cuda", dtype=torch.bfloat16) for _ in range(2))
    tilepipe.grouped_mm(a, b, offs, out=ours)
    tilepipe.matmul(a, b[0], out=theirs)
    result = compare(lambda: tilepipe.grouped_mm(a, b, offs, out=ours), lambda: tilepipe.matmul(a, b[0], out=theirs),
                     2.0 * rows * N * K, pairs, rep_ms, settle=1)
    return Row(f"{name}: one group of {rows}x{N}x{K}", "grouped_mm B kmajor, G=1", "tilepipe.matmul (same expert)",
               *result[:3], _rel_err(ours, theirs), result[3])


def bench_masked(name: str, G: int, N: int, K: int, rows: int, distribution: str, pairs: int, rep_ms: int
                 ) -> list[Row]:
    """The masked form under CUDA-graph replay, given the mean rows a group holds as expected_m (the hint a decode
    step knows), against the contiguous calls over the same rows, replayed too."""
    sizes = expert_sizes(rows, G, distribution)
    capacity = 4 * -(-rows // G)
    sizes = [min(size, capacity) for size in sizes]  # a capacity drops the tokens past it, as a MoE layer's does
    rows = sum(sizes)
    masked_m = torch.tensor(sizes, device="cuda", dtype=torch.int32)
    offs = masked_m.cumsum(0).to(torch.int32)
    a3 = torch.randn(G, capacity, K, device="cuda", dtype=torch.bfloat16)
    a = torch.cat([a3[g, :size] for g, size in enumerate(sizes)])
    b = torch.randn(G, N, K, device="cuda", dtype=torch.bfloat16).transpose(1, 2)
    ours = torch.full((G, capacity, N), float("nan"), device="cuda", dtype=torch.bfloat16)
    packed = torch.empty((rows, N), device="cuda", dtype=torch.bfloat16)
    expected_m = -(-rows // G)
    calls = {"masked": lambda: tilepipe.grouped_mm_masked(a3, b, masked_m, out=ours, expected_m=expected_m),
             "torch._grouped_mm": lambda: torch._grouped_mm(a, b, offs=offs, out_dtype=torch.bfloat16),
             "tilepipe.grouped_mm": lambda: tilepipe.grouped_mm(a, b, offs, out=packed)}
    replays = {key: warmed_graph(call).replay for key, call in calls.items()}
    replays["masked"]()
    torch.cuda.synchronize()
    err = _rel_err(torch.cat([ours[g, :size] for g, size in enumerate(sizes)]), torch._grouped_mm(a, b, offs=offs))
    shape = (f"{name}: G={G} {rows}x{N}x{K} {distribution} masked, capacity {capacity} (largest {max(sizes)}, "
             f"empty {sizes.count(0)})")
    found = []
    for baseline in ("torch._grouped_mm", "tilepipe.grouped_mm"):
        result = compare(replays["masked"], replays[baseline], 2.0 * rows * N * K, pairs, rep_ms, settle=1)
        found.append(Row(shape, "grouped_mm_masked B kmajor, graph replay", f"{baseline} (graph replay)",
                         *result[:3], err, result[3]))
    return found


BUSY_SMS = 20
"""SMs held beside the GEMM in the "busy" mode: DeepEP's all-to-all kernels take 20-24 beside a MoE layer's GEMMs."""


def bench_busy(name: str, G: int, N: int, K: int, rows: int, distribution: str, pairs: int, rep_ms: int
               ) -> list[Row]:
    """grouped_mm's dynamic schedule against its static one and torch._grouped_mm, idle and beside held SMs
    (busy_rows)."""
    sizes = expert_sizes(rows, G, distribution)
    offs = torch.tensor(sizes, device="cuda").cumsum(0).to(torch.int32)
    a = torch.randn(rows, K, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(G, N, K, device="cuda", dtype=torch.bfloat16).transpose(1, 2)
    outs = {s: torch.empty((rows, N), device="cuda", dtype=torch.bfloat16) for s in GROUPED_SCHEDULERS}
    calls = {s: (lambda s=s: tilepipe.grouped_mm(a, b, offs, out=outs[s], scheduler=s)) for s in GROUPED_SCHEDULERS}
    calls["dynamic"]()
    err = _rel_err(outs["dynamic"], torch._grouped_mm(a, b, offs=offs))
    return busy_rows(f"{name}: G={G} {rows}x{N}x{K} {distribution}", "grouped_mm", calls,
                     {"torch._grouped_mm": lambda: torch._grouped_mm(a, b, offs=offs)}, 2.0 * rows * N * K, err, pairs,
                     rep_ms)


def busy_rows(shape: str, op: str, calls: dict[str, Callable[[], object]], others: dict[str, Callable[[], object]],
              flops: float, err: float, pairs: int, rep_ms: int) -> list[Row]:
    """`op`'s dynamic schedule (calls["dynamic"]) against its static one (calls["static"]) on an idle GPU (do_bench),
    then each call (and `others`, the baselines a user would call) with BUSY_SMS SMs held for half the static call's
    idle time and alone, timed by CUDA events (tools/busy_sms.py): the dynamic schedule against the static one and
    the others there, and each schedule's call with the SMs held against itself alone. Medians of interleaved calls."""
    from tilepipe.tools.busy_sms import timed_beside_holders

    everything = {f"{op} {scheduler}": call for scheduler, call in calls.items()} | others
    for call in everything.values():
        call()
    dynamic, static = f"{op} dynamic", f"{op} static"
    idle = compare(calls["dynamic"], calls["static"], flops, pairs, rep_ms, settle=1)
    found = [Row(f"{shape}, idle GPU", dynamic, static, *idle[:3], err, idle[3])]
    hold_us = 0.5 * flops / idle[1] * 1e-6
    times: dict[tuple[str, int], list[float]] = {(key, sms): [] for key in everything for sms in (BUSY_SMS, 0)}
    for _ in range(1 + 5 * pairs):  # the first round dropped, as compare's settle
        for (key, sms), found_times in times.items():
            found_times.append(timed_beside_holders(everything[key], sms, hold_us))
    held = f"{BUSY_SMS} SMs held for {hold_us:.0f} us"
    pairs_timed = [((dynamic, BUSY_SMS), (key, BUSY_SMS), held) for key in everything if key != dynamic]
    pairs_timed += [((key, BUSY_SMS), (key, 0), f"{held} / alone") for key in (dynamic, static)]
    for ours, theirs, setting in pairs_timed:
        ratios = [t / o for o, t in zip(times[ours][1:], times[theirs][1:])]
        found.append(Row(f"{shape}, {setting}", ours[0], theirs[0] + ("" if theirs[1] else " alone (events)"),
                         flops / statistics.median(times[ours][1:]) * 1e-9,
                         flops / statistics.median(times[theirs][1:]) * 1e-9, statistics.median(ratios), err,
                         [round(r, 4) for r in ratios]))
    return found


def run(name: str = "grouped-h200", mode: str = "groups", pairs: int = 3, rep_ms: int = 50,
        out_dir: Path = RESULTS_DIR) -> Path:
    """Every case in every distribution (`mode` "groups"), each case as one group ("one-group"), the decode case
    in the masked form ("masked"), or the dynamic schedule beside held SMs ("busy": the first three cases, uniform and
    Zipf); prints the table and writes OUT_DIR/NAME.json."""
    start = time.time()
    if mode == "one-group":
        rows = [bench_one_group(*case, pairs, rep_ms) for case in CASES if case[-1] > 512]
    elif mode == "busy":
        rows = [row for case in CASES[:3] for distribution in ("uniform", "zipf")
                for row in bench_busy(*case, distribution, pairs, rep_ms)]
    elif mode == "masked":
        rows = [row for distribution in DISTRIBUTIONS for row in bench_masked(*CASES[-1], distribution, pairs, rep_ms)]
    else:
        rows = [row for case in CASES for distribution in DISTRIBUTIONS
                for row in bench_case(*case, distribution, pairs, rep_ms)]
    record = run_record(name, "bf16 in, bf16 out", __doc__, pairs, rep_ms, start, rows)
    path = write_results(record, rows, out_dir)
    print(f"\n{record['gpu']}, torch {record['torch']}, triton {record['triton']}: wrote {path}")
    return path


if __name__ == "__main__":
    run(*sys.argv[1:3])
