"""Benchmark tilepipe.matmul_fp8 against torch._scaled_mm (cuBLASLt) in one process, on the same fp8 inputs.

Same method as tilepipe.tools.bench (interleaved do_bench pairs, median of per-pair ratios). Baselines:
per-tensor and per-row against torch._scaled_mm with use_fast_accum=True (the same accumulation as ours) and,
at 8192^3 per-tensor, also False (cuBLAS then promotes partial sums, which costs it time); blockwise (1x128 A,
128x128 B scales) against cuBLASLt's blockwise path through torch._scaled_mm on the DeepSeek-V3 shapes. Where this
torch cannot run blockwise scales, the row compares with DeepGEMM's published H800 figure instead, labelled so.
"""

import argparse
import json
import statistics
import time
from pathlib import Path

import torch

import tilepipe
from tilepipe.host.configs import SCALE_BLOCK
from tilepipe.tools.bench import RESULTS_DIR, Row, _rel_err, compare, print_table, run_record

PER_TENSOR_SHAPES = [(8192, 8192, 8192), (4096, 4096, 4096), (16384, 4096, 14336)]
DEEPSEEK_SHAPES = [(M, N, K) for M in (4096, 16384) for N, K in ((7168, 16384), (4096, 7168), (7168, 2048))]
DEEPGEMM_H800_TFLOPS = {(4096, 7168, 16384): 1520.0, (4096, 4096, 7168): 1410.0}
"""deepseek-ai/DeepGEMM README @989c9e3 (H800 SXM, same compute as H100 SXM): the two shapes it lists of ours."""
SCALINGS = ("tensor", "row", "blockwise")


def _fp8_operands(M: int, N: int, K: int) -> tuple[torch.Tensor, torch.Tensor]:
    """a (M, K) row-major and b = w.t() of a row-major (N, K) w, both e4m3 from randn."""
    a = torch.randn(M, K, device="cuda").to(torch.float8_e4m3fn)
    w = torch.randn(N, K, device="cuda").to(torch.float8_e4m3fn)
    return a, w.t()


def _scales(M: int, N: int, K: int, scaling: str) -> tuple[torch.Tensor, torch.Tensor]:
    """Random positive scales in torch._scaled_mm's layouts for the scaling."""
    if scaling == "tensor":
        return torch.rand((), device="cuda") + 0.5, torch.rand((), device="cuda") + 0.5
    if scaling == "row":
        return torch.rand(M, 1, device="cuda") + 0.5, torch.rand(1, N, device="cuda") + 0.5
    kb = -(-K // SCALE_BLOCK)
    return (torch.rand(kb, M, device="cuda").t() + 0.5,
            torch.rand(-(-N // SCALE_BLOCK), kb, device="cuda").t() + 0.5)


def bench_fp8(M: int, N: int, K: int, scaling: str, fast_accum: bool, pairs: int, rep_ms: int) -> Row:
    """One row: tilepipe.matmul_fp8 against torch._scaled_mm (or DeepGEMM's figure when torch cannot run it)."""
    a, b = _fp8_operands(M, N, K)
    sa, sb = _scales(M, N, K, scaling)
    ours = torch.full((M, N), float("nan"), device="cuda", dtype=torch.bfloat16)
    tilepipe.matmul_fp8(a, b, sa, sb, out=ours)

    def theirs() -> torch.Tensor:
        return torch._scaled_mm(a, b, sa, sb, out_dtype=torch.bfloat16, use_fast_accum=fast_accum)

    flops = 2.0 * M * N * K
    shape, variant = f"{M}x{N}x{K}", f"matmul_fp8 {scaling} e4m3"
    try:
        reference = theirs()
    except RuntimeError as error:  # this torch/cuBLAS has no such scaling on this GPU
        if (M, N, K) not in DEEPGEMM_H800_TFLOPS:
            raise RuntimeError(f"torch._scaled_mm cannot run {scaling} scaling here and DeepGEMM lists no figure "
                               f"for {shape}: {error}") from None
        from triton.testing import do_bench

        times = [do_bench(lambda: tilepipe.matmul_fp8(a, b, sa, sb, out=ours), warmup=25, rep=rep_ms,
                          return_mode="median") for _ in range(pairs)]
        mine = flops / statistics.median(times) * 1e-9
        published = DEEPGEMM_H800_TFLOPS[(M, N, K)]
        return Row(shape, variant, "DeepGEMM README figure (H800, published, not measured here)", mine, published,
                   mine / published, float("nan"), [])
    result = compare(lambda: tilepipe.matmul_fp8(a, b, sa, sb, out=ours), theirs, flops, pairs, rep_ms)
    baseline = f"cuBLASLt (torch._scaled_mm, use_fast_accum={fast_accum})"
    return Row(shape, variant, baseline, *result[:3], _rel_err(ours, reference), result[3])


def run(name: str, pairs: int = 5, rep_ms: int = 100, out_dir: Path = RESULTS_DIR,
        scalings: tuple[str, ...] = SCALINGS) -> Path:
    """Every FP8 row of the given scalings; prints a table and writes OUT_DIR/NAME.json (rewritten after each row, so
    a failure keeps the rows measured before it)."""
    start = time.time()
    cases = [(*shape, "tensor", True) for shape in PER_TENSOR_SHAPES]
    cases += [(8192, 8192, 8192, "tensor", False), (8192, 8192, 8192, "row", True)]
    cases += [(*shape, "blockwise", False) for shape in DEEPSEEK_SHAPES]
    cases = [case for case in cases if case[3] in scalings]
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / f"{name}.json"
    rows: list[Row] = []
    for case in cases:
        rows.append(bench_fp8(*case, pairs, rep_ms))
        record = run_record(name, "e4m3 x e4m3 in, bf16 out, fp32 scales", __doc__, pairs, rep_ms, start, rows,
                            complete=len(rows) == len(cases))
        path.write_text(json.dumps(record, indent=1) + "\n")
        print_table(rows[-1:])
    print_table(rows)
    print(f"\n{record['gpu']}, torch {record['torch']}, triton {record['triton']}: wrote {path}")
    return path


if __name__ == "__main__":
    parser = argparse.ArgumentParser(prog="python -m tilepipe.tools.bench_fp8", description=__doc__)
    parser.add_argument("--name", default="matmul-fp8")
    parser.add_argument("--pairs", type=int, default=5)
    parser.add_argument("--rep-ms", type=int, default=100)
    parser.add_argument("--out-dir", type=Path, default=RESULTS_DIR)
    parser.add_argument("--scaling", choices=SCALINGS, action="append",
                        help="only the rows of this scaling (repeatable; default: every row)")
    args = parser.parse_args()
    run(args.name, args.pairs, args.rep_ms, args.out_dir, tuple(args.scaling or SCALINGS))
