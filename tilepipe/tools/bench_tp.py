"""Benchmark of tilepipe.distributed on the GPUs of one host, under torchrun (every rank runs it):

    torchrun --nproc-per-node 2 -m tilepipe.tools.bench_tp [NAME]

All-gather + GEMM on the issue's three shapes (A split on M, each rank its N / W columns of B) and GEMM +
reduce-scatter on its two (K split): tilepipe as a user calls it (overlap=None: overlapped where the cost model says it
pays; where it runs the sequence, the overlapped op too, "tilepipe overlapped"), NCCL + torch.matmul in sequence, torch's
fused_all_gather_matmul / fused_matmul_reduce_scatter, and the GEMM (torch's and tilepipe's) and the collective alone
(the ideal is the larger of torch's GEMM and the collective). Where plan.gather_config moves the all-gather off the
128x256 tile, the overlapped op also runs with 128x256 ("tilepipe 128x256": the rule's check). The FP8 per-tensor
forms (e4m3, bf16 D) on one shape each, against NCCL + torch._scaled_mm.
Methods interleave, REPS rounds of ITERS calls each, every round started at a barrier; a method's time is its median
round on the slowest rank. Rank 0 writes bench/results/NAME.json (default tp-h200x2) and prints the table last.
"""

import json
import os
import statistics
import sys
import time
from collections.abc import Callable

import torch
import torch.distributed as dist

from tilepipe._text import format_table
from tilepipe.host.gpus import device_model
from tilepipe.tools.bench import RESULTS_DIR, run_environment

AG_SHAPES = ((8192, 28672, 8192), (4096, 8192, 8192), (1024, 28672, 8192))
RS_SHAPES = ((8192, 8192, 28672), (4096, 8192, 8192))
FP8_SHAPES = ((4096, 8192, 8192), )
REPS = 5
WARMUP = 3


def timed(fn: Callable[[], object], iters: int) -> float:
    """Milliseconds a call of `fn` over `iters` calls, started together on every rank; the slowest rank's."""
    dist.barrier()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(iters):
        fn()
    end.record()
    end.synchronize()
    mine = torch.tensor([start.elapsed_time(end) / iters], device="cuda")
    dist.all_reduce(mine, op=dist.ReduceOp.MAX)
    return mine.item()


def compare(methods: dict[str, Callable[[], object]], iters: int) -> dict[str, dict]:
    """Each method's median time and rounds (interleaved), or its error; a None method is one this form lacks."""
    methods = {name: fn for name, fn in methods.items() if fn is not None}
    rounds: dict[str, list[float]] = {name: [] for name in methods}
    errors = {}
    for name, fn in methods.items():
        try:
            for _ in range(WARMUP):
                fn()
            torch.cuda.synchronize()
        except Exception as error:  # a baseline this torch lacks is a row without it, not a lost run
            errors[name] = f"{type(error).__name__}: {str(error)[:300]}"
        dist.barrier()
    for _ in range(REPS):
        for name, fn in methods.items():
            if name not in errors:
                rounds[name].append(timed(fn, iters))
    return {name: ({"error": errors[name]} if name in errors else
                   {"ms": statistics.median(rounds[name]), "rounds": rounds[name]}) for name in methods}


def all_gather_row(M: int, N: int, K: int, group: dist.ProcessGroup, fp8: bool = False) -> dict:
    from tilepipe.distributed import all_gather, all_gather_matmul
    from tilepipe.distributed.plan import tile_config

    world, rank = group.size(), group.rank()
    a_shard, b, scales = operands((M // world, K), (K, N // world), fp8)
    full = a_shard.new_empty((M, K))

    def gather():
        dist.all_gather_into_tensor(full.view(torch.uint8), a_shard.view(torch.uint8), group=group)

    def sequence():
        gather()
        return torch_gemm(full, b, scales)

    def large_tile():  # the overlapped op on 128x256 tiles where gather_config chose 128x128
        chosen = all_gather.gather_config
        all_gather.gather_config = lambda *args: tile_config(N // world)
        try:
            return all_gather_matmul(a_shard, b, group, overlap=True, **scales)
        finally:
            all_gather.gather_config = chosen

    gpu = device_model(torch.cuda.current_device())
    methods = {"tilepipe": lambda: all_gather_matmul(a_shard, b, group, **scales),  # the default: overlap=None
               "nccl + torch.matmul": sequence,
               "torch fused": None if fp8 else
               lambda: torch.ops.symm_mem.fused_all_gather_matmul(a_shard, [b], 0, group.group_name),
               "gemm alone": lambda: torch_gemm(full, b, scales),
               "tilepipe gemm alone": lambda: tilepipe_gemm(full, b, scales),
               "all-gather alone": gather}
    if not all_gather.gather_overlaps(M // world, N // world, K, world, torch.cuda.current_device(), fp8):
        methods["tilepipe overlapped"] = lambda: all_gather_matmul(a_shard, b, group, overlap=True, **scales)
    if not fp8 and all_gather.gather_config(M // world, N // world, world, gpu) != tile_config(N // world):
        methods["tilepipe 128x256"] = large_tile
    gather()
    err = rel_err(all_gather_matmul(a_shard, b, group, overlap=True, **scales), sequence())
    return row("all_gather_matmul" + " fp8" * fp8, M, N, K, rank, compare(methods, iters(M, N // world, K)),
               "all-gather alone", err)


def reduce_scatter_row(M: int, N: int, K: int, group: dist.ProcessGroup, fp8: bool = False) -> dict:
    from tilepipe.distributed import matmul_reduce_scatter

    world, rank = group.size(), group.rank()
    a, b, scales = operands((M, K // world), (K // world, N), fp8)
    partial = torch_gemm(a, b, scales)
    out = partial.new_empty((M // world, N))

    def sequence():
        dist.reduce_scatter_tensor(out, torch_gemm(a, b, scales), group=group)
        return out

    methods = {"tilepipe": lambda: matmul_reduce_scatter(a, b, group, **scales),  # the default: overlap=None
               "nccl + torch.matmul": sequence,
               "torch fused": None if fp8 else
               lambda: torch.ops.symm_mem.fused_matmul_reduce_scatter(a, b, "sum", 0, group.group_name),
               "gemm alone": lambda: torch_gemm(a, b, scales),
               "tilepipe gemm alone": lambda: tilepipe_gemm(a, b, scales),
               "reduce-scatter alone": lambda: dist.reduce_scatter_tensor(out, partial, group=group)}
    err = rel_err(matmul_reduce_scatter(a, b, group, overlap=True, **scales), sequence().clone())
    return row("matmul_reduce_scatter" + " fp8" * fp8, M, N, K, rank, compare(methods, iters(M, N, K // world)),
               "reduce-scatter alone", err)


def operands(a_shape: tuple[int, int], b_shape: tuple[int, int], fp8: bool
             ) -> tuple[torch.Tensor, torch.Tensor, dict]:
    """Random A and B (K-major, e4m3, with per-tensor scales where `fp8`; bf16 row-major B otherwise)."""
    if not fp8:
        return (torch.randn(*a_shape, device="cuda", dtype=torch.bfloat16),
                torch.randn(*b_shape, device="cuda", dtype=torch.bfloat16), {})
    a = torch.randn(*a_shape, device="cuda").to(torch.float8_e4m3fn)
    b = torch.randn(*reversed(b_shape), device="cuda").to(torch.float8_e4m3fn).t()
    one = torch.ones(1, device="cuda")
    return a, b, {"scale_a": one * 0.5, "scale_b": one * 0.25}


def torch_gemm(a: torch.Tensor, b: torch.Tensor, scales: dict) -> torch.Tensor:
    """torch.matmul, or torch._scaled_mm (bf16 D) for the FP8 form."""
    if not scales:
        return torch.matmul(a, b)
    return torch._scaled_mm(a, b, scales["scale_a"], scales["scale_b"], out_dtype=torch.bfloat16)


def tilepipe_gemm(a: torch.Tensor, b: torch.Tensor, scales: dict) -> torch.Tensor:
    """tilepipe.matmul, or tilepipe.matmul_fp8 for the FP8 form."""
    from tilepipe.distributed.launch import local_matmul

    return local_matmul(a, b, scales.get("scale_a"), scales.get("scale_b"), torch.bfloat16, None)


def iters(M: int, N: int, K: int) -> int:
    """Calls per round: about 30 ms of GEMM at 600 TFLOP/s, at least 5."""
    return max(5, int(30e-3 * 600e12 / (2.0 * M * N * K)))


def rel_err(ours: torch.Tensor, theirs: torch.Tensor) -> float:
    return ((ours.float() - theirs.float()).norm() / theirs.float().norm()).item()


def row(op: str, M: int, N: int, K: int, rank: int, times: dict, collective: str, err: float) -> dict:
    """A results row: the times, the ideal (the larger of torch's GEMM and the collective alone) and the ratios."""
    ms = {name: t.get("ms") for name, t in times.items()}
    ideal = max(ms["gemm alone"] or 0.0, ms[collective] or 0.0)
    ratio = {f"tilepipe / {name}": (ms["tilepipe"] / ms[name]) if ms["tilepipe"] and ms.get(name) else None
             for name in ("nccl + torch.matmul", "torch fused", "tilepipe 128x256")}
    return {"op": op, "shape": f"{M}x{N}x{K}", "times": times, "ideal_ms": ideal,
            "tilepipe_over_ideal": ms["tilepipe"] / ideal if ms["tilepipe"] and ideal else None, **ratio,
            "rel_err_vs_sequence": err, "rank": rank}


def table(rows: list[dict]) -> str:
    def cell(value, digits=3):
        return "-" if value is None else f"{value:.{digits}f}"

    lines = [("op", "shape", "tilepipe ms", "tp gemm ms", "seq ms", "fused ms", "ideal ms", "/ideal", "vs seq",
              "vs fused", "128x256 ms", "overlapped ms", "rel err")]
    for r in rows:
        ms = {name: t.get("ms") for name, t in r["times"].items()}
        lines.append((r["op"], r["shape"], cell(ms["tilepipe"]), cell(ms.get("tilepipe gemm alone")),
                      cell(ms["nccl + torch.matmul"]), cell(ms.get("torch fused")), cell(r["ideal_ms"]),
                      cell(r["tilepipe_over_ideal"]), cell(_inverse(r["tilepipe / nccl + torch.matmul"])),
                      cell(_inverse(r["tilepipe / torch fused"])), cell(ms.get("tilepipe 128x256")),
                      cell(ms.get("tilepipe overlapped")), f"{r['rel_err_vs_sequence']:.1e}"))
    return format_table(lines) + ("\n(vs seq, vs fused: their time over tilepipe's; > 1 is tilepipe faster. tp gemm: "
                                  "tilepipe's GEMM alone; 128x256: the all-gather on 128x256 tiles where it chose "
                                  "128x128; overlapped: the overlapped op where the default, timed as tilepipe, is the "
                                  "sequence)")


def _inverse(value: float | None) -> float | None:
    return 1.0 / value if value else None


def main(name: str = "tp-h200x2") -> int:
    from tilepipe.distributed.workspace import MULTICAST_OFF

    for variable, value in MULTICAST_OFF.items():  # before NCCL or symmetric memory start
        os.environ.setdefault(variable, value)
    local = int(os.environ.get("LOCAL_RANK", "0"))
    torch.cuda.set_device(local)
    dist.init_process_group("nccl", device_id=torch.device("cuda", local))
    group = dist.group.WORLD
    start = time.time()
    rows = []
    cases = [("all_gather_matmul", shape, all_gather_row, False) for shape in AG_SHAPES]
    cases += [("matmul_reduce_scatter", shape, reduce_scatter_row, False) for shape in RS_SHAPES]
    cases += [(op, shape, make, True) for shape in FP8_SHAPES
              for op, make in (("all_gather_matmul", all_gather_row), ("matmul_reduce_scatter", reduce_scatter_row))]
    for op, (M, N, K), make, fp8 in cases:
        if group.rank() == 0:
            print(f"[rank 0] bench {op}{' fp8' * fp8} {M}x{N}x{K} ...", flush=True)
        try:
            rows.append(make(M, N, K, group, fp8))
        except Exception as error:  # the next shape still runs
            print(f"[rank {group.rank()}] {op} {M}x{N}x{K} failed: {type(error).__name__}: {error}", flush=True)
        torch.cuda.empty_cache()
    names: list = [None] * group.size()
    dist.all_gather_object(names, torch.cuda.get_device_name())
    if group.rank() == 0:
        record = {**run_environment(name), "gpus": names, "world": group.size(), "reps": REPS,
                  "seconds": round(time.time() - start, 1), "rows": rows}
        RESULTS_DIR.mkdir(parents=True, exist_ok=True)
        (RESULTS_DIR / f"{name}.json").write_text(json.dumps(record, indent=1) + "\n")
        print(table(rows), flush=True)
    dist.barrier()
    dist.destroy_process_group()
    return 0 if len(rows) == len(cases) else 1


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:]))
