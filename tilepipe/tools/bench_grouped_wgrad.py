"""Benchmark grouped_mm's weight-gradient form (2D x 2D, issue 39's goal: >= 1.0x torch._grouped_mm) against
torch._grouped_mm on the same inputs, in one process, interleaved (tilepipe.tools.bench.compare).

`python -m tilepipe.tools.bench_grouped_wgrad [NAME]` writes bench/results/NAME.json (default grouped-wgrad-h200):
Mixtral-8x7B's experts (G = 8, 16384 routed tokens, D = 4096, H = 14336), the gradients of the up projection
dW_up[g] = dY_g^T X_g (H x D, a = dY.t(), b = X) and of the down projection dW_down[g] = dH_g^T Y_g (D x H), as a MoE
backward holds them (token-major, row-major: a M-major, b N-major), for expert sizes uniform, Zipf-skewed (s = 1.1) and
with a quarter of the experts empty; D bf16.
"""

import sys
import time
from pathlib import Path

import torch

import tilepipe
from tilepipe.tools.bench import RESULTS_DIR, Row, _rel_err, compare, run_record, write_results
from tilepipe.tools.bench_grouped import DISTRIBUTIONS, expert_sizes

CASES = [("Mixtral-8x7B dW_up", 8, 14336, 4096, 16384), ("Mixtral-8x7B dW_down", 8, 4096, 14336, 16384)]
"""(name, experts G, M (rows of each expert's gradient), N, routed tokens K)."""


def bench_case(name: str, G: int, M: int, N: int, K: int, distribution: str, pairs: int, rep_ms: int) -> Row:
    """One case and distribution: grouped_mm(a, b, offs) with a = (K, M).t() and b (K, N) against torch._grouped_mm."""
    sizes = expert_sizes(K, G, distribution)
    offs = torch.tensor(sizes, device="cuda").cumsum(0).to(torch.int32)
    a = torch.randn(K, M, device="cuda", dtype=torch.bfloat16).t()
    b = torch.randn(K, N, device="cuda", dtype=torch.bfloat16)
    ours = torch.full((G, M, N), float("nan"), device="cuda", dtype=torch.bfloat16)
    tilepipe.grouped_mm(a, b, offs, out=ours)
    err = _rel_err(ours, torch._grouped_mm(a, b, offs=offs))
    shape = f"{name}: G={G} {M}x{N}x{K} {distribution} (largest {max(sizes)}, empty {sizes.count(0)})"
    result = compare(lambda: tilepipe.grouped_mm(a, b, offs, out=ours), lambda: torch._grouped_mm(a, b, offs=offs),
                     2.0 * M * N * K, pairs, rep_ms, settle=1)
    return Row(shape, "grouped_mm 2Dx2D a M-major", "torch._grouped_mm", *result[:3], err, result[3])


def run(name: str = "grouped-wgrad-h200", pairs: int = 3, rep_ms: int = 50, out_dir: Path = RESULTS_DIR) -> Path:
    """Every case in every distribution; prints the table and writes OUT_DIR/NAME.json."""
    start = time.time()
    rows = [bench_case(*case, distribution, pairs, rep_ms) for case in CASES for distribution in DISTRIBUTIONS]
    record = run_record(name, "bf16 in, bf16 out", __doc__, pairs, rep_ms, start, rows)
    path = write_results(record, rows, out_dir)
    print(f"\n{record['gpu']}, torch {record['torch']}, triton {record['triton']}: wrote {path}")
    return path


if __name__ == "__main__":
    run(*sys.argv[1:2])
