"""Benchmark tilepipe.matmul against cuBLAS (torch.matmul) in one process, on the same random inputs.

Timings are `triton.testing.do_bench` medians taken in interleaved pairs (ours, cuBLAS, ours, ...): an H100
drops from about 795 to 690 TFLOP/s within seconds as it reaches its power limit, so blocks of one kernel
then the other would be unfair. The ratio reported is the median of the per-pair ratios.
"""

import json
import statistics
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import torch

import tilepipe

RESULTS_DIR = Path(__file__).resolve().parent.parent / "bench" / "results"
SHAPES = [(8192, 8192, 8192), (4096, 4096, 4096), (8192, 8192, 1024), (2048, 2048, 2048), (1024, 1024, 1024),
          (16384, 4096, 4096), (16384, 14336, 4096), (16384, 4096, 14336), (7919, 4133, 3000)]


@dataclass
class Row:
    shape: str
    b_layout: str
    tilepipe_tflops: float
    cublas_tflops: float
    ratio: float  # median over pairs of cublas_time / tilepipe_time: > 1 means tilepipe is faster
    rel_err: float  # ||tilepipe - cublas|| / ||cublas||
    pair_ratios: list[float]


def bench_shape(M: int, N: int, K: int, b_layout: str, pairs: int, rep_ms: int) -> Row:
    from triton.testing import do_bench

    a = torch.randn(M, K, device="cuda", dtype=torch.bfloat16)
    b = (torch.randn(N, K, device="cuda", dtype=torch.bfloat16).t() if b_layout == "kmajor"
         else torch.randn(K, N, device="cuda", dtype=torch.bfloat16))
    ours = torch.full((M, N), float("nan"), device="cuda", dtype=torch.bfloat16)
    theirs = torch.empty((M, N), device="cuda", dtype=torch.bfloat16)
    tilepipe.matmul(a, b, out=ours)
    torch.matmul(a, b, out=theirs)
    rel_err = float((ours.float() - theirs.float()).norm() / theirs.float().norm())
    t_ours, t_theirs = [], []
    for _ in range(pairs):
        t_ours.append(do_bench(lambda: tilepipe.matmul(a, b, out=ours), warmup=25, rep=rep_ms, return_mode="median"))
        t_theirs.append(do_bench(lambda: torch.matmul(a, b, out=theirs), warmup=25, rep=rep_ms,
                                 return_mode="median"))
    flops = 2.0 * M * N * K
    ratios = [c / o for o, c in zip(t_ours, t_theirs)]
    return Row(f"{M}x{N}x{K}", b_layout, flops / statistics.median(t_ours) * 1e-9,
               flops / statistics.median(t_theirs) * 1e-9, statistics.median(ratios), rel_err,
               [round(r, 4) for r in ratios])


def run(name: str, pairs: int = 5, rep_ms: int = 100, out_dir: Path = RESULTS_DIR) -> Path:
    """Benchmark every shape (B K-major, plus B row-major at 8192^3), print a table, write bench/results/NAME.json."""
    import triton

    cases = [(M, N, K, "kmajor") for M, N, K in SHAPES] + [(8192, 8192, 8192, "rowmajor")]
    start = time.time()
    rows = [bench_shape(M, N, K, layout, pairs, rep_ms) for M, N, K, layout in cases]
    record = {
        "name": name, "command": " ".join([Path(sys.executable).name, "-m", "tilepipe", *sys.argv[1:]]),
        "gpu": torch.cuda.get_device_name(), "torch": torch.__version__, "triton": triton.__version__,
        "cuda": torch.version.cuda, "dtype": "bf16 in, bf16 out", "method": __doc__.strip(),
        "pairs": pairs, "rep_ms": rep_ms, "seconds": round(time.time() - start, 1),
        "rows": [asdict(row) for row in rows],
    }
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / f"{name}.json"
    path.write_text(json.dumps(record, indent=1) + "\n")
    print_table(rows)
    print(f"\n{record['gpu']}, torch {record['torch']}, triton {record['triton']}: wrote {path}")
    return path


def print_table(rows: list[Row]) -> None:
    table = [("shape", "B", "tilepipe TFLOP/s", "cuBLAS TFLOP/s", "ratio", "rel err")]
    table += [(r.shape, r.b_layout, f"{r.tilepipe_tflops:.0f}", f"{r.cublas_tflops:.0f}", f"{r.ratio:.3f}",
               f"{r.rel_err:.1e}") for r in rows]
    widths = [max(len(row[i]) for row in table) for i in range(len(table[0]))]
    for row in table:
        print("  ".join(cell.ljust(width) for cell, width in zip(row, widths)).rstrip())
