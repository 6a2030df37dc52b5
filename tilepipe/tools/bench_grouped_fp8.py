"""Benchmark tilepipe.grouped_mm_fp8 (issue 39's FP8 goal: blockwise grouped >= 0.95x dense blockwise matmul_fp8 over
the same rows) in one process on the same inputs, interleaved (tilepipe.tools.bench.compare).

`python -m tilepipe.tools.bench_grouped_fp8 [NAME]` writes bench/results/NAME.json (default grouped-fp8-h200):
DeepSeek-V3's experts at EP8 (G = 32, 32768 routed rows; gate-up N = 4096, K = 7168; down N = 7168, K = 2048), expert
sizes uniform and Zipf-skewed (s = 1.1); e4m3 operands, B K-major (a transposed (G, N, K) weight), D bf16. Rows:
blockwise scales (1x128 for A, 128x128 per expert for B) against tilepipe.matmul_fp8 blockwise over all the rows
with one expert's B and scales (the dense GEMM's pace: what the grouped kernel should keep), and per-row scales against
torch._scaled_grouped_mm with use_fast_accum=True (where this torch has it: else the row records why not).
`... NAME busy`: the dynamic schedule against the static one (and per-row against torch._scaled_grouped_mm), idle and
with 20 SMs held by another kernel for half the call (tools/busy_sms.py, as bench_grouped's busy mode).
"""

import sys
import time
from pathlib import Path

import torch

import tilepipe
from tilepipe.host.checks import GROUPED_SCHEDULERS
from tilepipe.tools.bench import RESULTS_DIR, Row, _rel_err, compare, run_record, write_results
from tilepipe.tools.bench_grouped import busy_rows, expert_sizes

CASES = [("DeepSeek-V3 EP8 gate-up", 32, 4096, 7168, 32768), ("DeepSeek-V3 EP8 down", 32, 7168, 2048, 32768)]
"""(name, experts G, N, K, routed rows)."""
DISTRIBUTIONS = ("uniform", "zipf")


def scales(*shape: int) -> torch.Tensor:
    """Positive fp32 scales near 1, distinct per element."""
    return torch.rand(shape, device="cuda") + 0.5


def bench_case(name: str, G: int, N: int, K: int, rows: int, distribution: str, pairs: int, rep_ms: int
               ) -> list[Row]:
    """One case and distribution: blockwise against dense matmul_fp8, per-row against torch._scaled_grouped_mm."""
    sizes = expert_sizes(rows, G, distribution)
    offs = torch.tensor(sizes, device="cuda").cumsum(0).to(torch.int32)
    a = torch.randn(rows, K, device="cuda").to(torch.float8_e4m3fn)
    b = torch.randn(G, N, K, device="cuda").to(torch.float8_e4m3fn).transpose(1, 2)
    sa = scales(K // 128, rows).t()  # M-major, as linear_fp8 makes them
    sb = scales(G, N // 128, K // 128).transpose(1, 2)  # DeepSeek-V3's (N/128, K/128) per expert, transposed
    ours = torch.full((rows, N), float("nan"), device="cuda", dtype=torch.bfloat16)
    dense = torch.empty_like(ours)
    flops = 2.0 * rows * N * K
    shape = f"{name}: G={G} {rows}x{N}x{K} {distribution} (largest {max(sizes)}, empty {sizes.count(0)})"
    grouped = lambda: tilepipe.grouped_mm_fp8(a, b, sa, sb, offs, out=ours)  # noqa: E731
    one_expert = lambda: tilepipe.matmul_fp8(a, b[0], sa, sb[0], out=dense)  # noqa: E731
    grouped()
    one_expert()
    first = sizes[0]  # the first group's rows use expert 0 in both
    err = _rel_err(ours[:first], dense[:first]) if first else float("nan")
    result = compare(grouped, one_expert, flops, pairs, rep_ms, settle=1)
    found = [Row(shape, "grouped_mm_fp8 blockwise", "matmul_fp8 blockwise, all rows, expert 0", *result[:3], err,
                 result[3])]
    row_a, row_b = scales(rows), scales(G, N)
    per_row = lambda: tilepipe.grouped_mm_fp8(a, b, row_a, row_b, offs, out=ours)  # noqa: E731
    theirs = lambda: torch._scaled_grouped_mm(a, b, row_a, row_b, offs=offs, out_dtype=torch.bfloat16,  # noqa: E731
                                              use_fast_accum=True)
    per_row()
    try:
        reference = theirs()
    except (AttributeError, RuntimeError, TypeError) as error:  # absent, or refusing these shapes
        reason = f"torch._scaled_grouped_mm: {type(error).__name__}: {str(error).splitlines()[0][:120]}"
        return found + [Row(shape, "grouped_mm_fp8 per-row", reason, 0.0, 0.0, 0.0, float("nan"), [])]
    err = _rel_err(ours, reference)
    result = compare(per_row, theirs, flops, pairs, rep_ms, settle=1)
    return found + [Row(shape, "grouped_mm_fp8 per-row", "torch._scaled_grouped_mm fast accum", *result[:3], err,
                        result[3])]


def bench_busy(name: str, G: int, N: int, K: int, rows: int, distribution: str, pairs: int, rep_ms: int
               ) -> list[Row]:
    """grouped_mm_fp8's dynamic schedule against its static one, idle and beside held SMs (bench_grouped.busy_rows),
    blockwise, and per-row also against torch._scaled_grouped_mm."""
    sizes = expert_sizes(rows, G, distribution)
    offs = torch.tensor(sizes, device="cuda").cumsum(0).to(torch.int32)
    a = torch.randn(rows, K, device="cuda").to(torch.float8_e4m3fn)
    b = torch.randn(G, N, K, device="cuda").to(torch.float8_e4m3fn).transpose(1, 2)
    shape, flops = f"{name}: G={G} {rows}x{N}x{K} {distribution}", 2.0 * rows * N * K
    found = []
    for scaling, sa, sb in (("blockwise", scales(K // 128, rows).t(), scales(G, N // 128, K // 128).transpose(1, 2)),
                            ("per-row", scales(rows), scales(G, N))):
        outs = {s: torch.empty((rows, N), device="cuda", dtype=torch.bfloat16) for s in GROUPED_SCHEDULERS}
        calls = {s: (lambda s=s, sa=sa, sb=sb: tilepipe.grouped_mm_fp8(a, b, sa, sb, offs, out=outs[s], scheduler=s))
                 for s in GROUPED_SCHEDULERS}
        others = {} if scaling == "blockwise" else {"torch._scaled_grouped_mm fast accum": lambda sa=sa, sb=sb: (
            torch._scaled_grouped_mm(a, b, sa, sb, offs=offs, out_dtype=torch.bfloat16, use_fast_accum=True))}
        for call in calls.values():
            call()
        err = _rel_err(outs["dynamic"], outs["static"])
        found += busy_rows(shape, f"grouped_mm_fp8 {scaling}", calls, others, flops, err, pairs, rep_ms)
    return found


def run(name: str = "grouped-fp8-h200", mode: str = "groups", pairs: int = 3, rep_ms: int = 50,
        out_dir: Path = RESULTS_DIR) -> Path:
    """Every case in every distribution (`mode` "groups"), or the dynamic schedule beside held SMs ("busy"); prints
    the table and writes OUT_DIR/NAME.json."""
    start = time.time()
    bench = bench_busy if mode == "busy" else bench_case
    rows = [row for case in CASES for distribution in DISTRIBUTIONS
            for row in bench(*case, distribution, pairs, rep_ms)]
    record = run_record(name, "e4m3 in, bf16 out", __doc__, pairs, rep_ms, start, rows)
    path = write_results(record, rows, out_dir)
    print(f"\n{record['gpu']}, torch {record['torch']}, triton {record['triton']}: wrote {path}")
    return path


if __name__ == "__main__":
    run(*sys.argv[1:3])
