"""Benchmark the fused epilogues against the torch sequence a user would write, eager, in one process on the same inputs.

`python -m tilepipe.tools.bench_epilogues NAME [OUT_DIR]` times, interleaved (tools/bench.py: compare), at M = 16, 512
and 8192 of Llama-3-8B's MLP (H = 14336, D = 4096): tilepipe.gated_linear (SwiGLU) against
`silu(g) * u` over `g, u = F.linear(x, [Wg; Wu]).chunk(2, -1)`, and tilepipe.linear with a bias and GELU against
`F.gelu(F.linear(x, w, b))`; writes OUT_DIR/NAME.json (default bench/results/) with the GPU, versions and command.
"""

import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

import tilepipe
from tilepipe.tools.bench import RESULTS_DIR, Row, _rel_err, compare, run_record, write_results

LLAMA_MLP = (14336, 4096)
"""Llama-3-8B's MLP: H, D."""
ROWS_M = (16, 512, 8192)


def bench_gated(M: int, pairs: int, rep_ms: int) -> Row:
    """SwiGLU gate-up: tilepipe.gated_linear against torch's GEMM over [Wg; Wu], chunk, silu and product."""
    H, D = LLAMA_MLP
    x = torch.randn(M, D, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(2 * H, D, device="cuda", dtype=torch.bfloat16) / D ** 0.5
    packed = tilepipe.pack_gate_up(w)

    def theirs() -> torch.Tensor:
        gate, up = F.linear(x, w).chunk(2, -1)
        return F.silu(gate) * up

    ours = lambda: tilepipe.gated_linear(x, packed)  # noqa: E731
    err = _rel_err(ours(), theirs())
    tp, base, ratio, ratios = compare(ours, theirs, 2 * M * 2 * H * D, pairs, rep_ms, settle=1)
    return Row(f"{M}x{2 * H}x{D}", "gated_linear silu", "silu(g) * u of F.linear(x, [Wg; Wu]) eager", tp, base,
               ratio, err, ratios)


def bench_gelu(M: int, pairs: int, rep_ms: int) -> Row:
    """linear + bias + GELU: tilepipe.linear against F.gelu(F.linear(x, w, b))."""
    H, D = LLAMA_MLP
    x = torch.randn(M, D, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(H, D, device="cuda", dtype=torch.bfloat16) / D ** 0.5
    b = torch.randn(H, device="cuda", dtype=torch.bfloat16)
    ours = lambda: tilepipe.linear(x, w, b, activation="gelu")  # noqa: E731
    theirs = lambda: F.gelu(F.linear(x, w, b))  # noqa: E731
    err = _rel_err(ours(), theirs())
    tp, base, ratio, ratios = compare(ours, theirs, 2 * M * H * D, pairs, rep_ms, settle=1)
    return Row(f"{M}x{H}x{D}", "linear +bias gelu", "F.gelu(F.linear(x, w, b)) eager", tp, base, ratio, err, ratios)


def run(name: str, out_dir: Path = RESULTS_DIR, pairs: int = 5, rep_ms: int = 50) -> Path:
    """Every row, into out_dir/name.json."""
    start = time.time()
    rows = [bench(M, pairs, rep_ms) for bench in (bench_gated, bench_gelu) for M in ROWS_M]
    record = run_record(name, "bf16 in, bf16 out", __doc__, pairs, rep_ms, start, rows)
    path = write_results(record, rows, out_dir)
    print(f"{record['gpu']}, torch {record['torch']}, triton {record['triton']}: wrote {path}")
    return path


if __name__ == "__main__":
    run(sys.argv[1], Path(sys.argv[2]) if len(sys.argv) > 2 else RESULTS_DIR)
