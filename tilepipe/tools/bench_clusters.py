"""Issue 18's table: each GEMM of the family with and without a two-CTA cluster (TMA multicast) against the baseline
a user would call, in one process on the same inputs (`python -m tilepipe bench --clusters`).

Rows per shape: the op's own configuration ("default"), its tile alone ("1x1"), in a 1x2 cluster (A multicast) and
in a 2x1 cluster (B multicast), each against torch (torch.matmul, torch.addmm, torch._scaled_mm); then each cluster
against the tile alone. Same method as tilepipe.tools.bench: interleaved do_bench pairs, median of per-pair ratios,
after one dropped pair (row 47's first pairs lay up to 10% off the rest: docs/perf-log.md).

Issue 42's table (`python -m tilepipe.tools.bench_clusters NAME [OUT_DIR]`, SPLIT_SHAPES): the same rows plus each
cluster with split multicast ("1x2 split", "2x1 split": each CTA issues its half of the shared tile,
pipeline/multicast.py), timed against torch, the tile alone and the leader-issued form of its cluster.
"""

import json
import time
from dataclasses import replace
from pathlib import Path
from typing import Callable

import torch

import tilepipe
from tilepipe.host.configs import MatmulConfig, config_for, fp8_config_for
from tilepipe.host.gpus import device_model
from tilepipe.tools.bench import RESULTS_DIR, Row, _operands, _rel_err, compare, print_table, run_record
from tilepipe.tools.bench_fp8 import _fp8_operands, _scales

BF16_SHAPES = [(8192, 8192, 8192), (4096, 7168, 16384), (7000, 5000, 3000), (8192, 8192, 3000), (16384, 4096, 4096)]
"""The issue's bf16 goal shapes, and K = 3000 where the kernel was L2-bound under Triton 3.6 (perf-log row 17)."""
RESIDUAL_SHAPES = [(8192, 8192, 8192)]
FP8_TENSOR_SHAPES = [(8192, 8192, 8192), (8192, 28672, 8192)]
FP8_BLOCKWISE_SHAPES = [(M, N, K) for M in (4096, 16384) for N, K in ((7168, 16384), (4096, 7168), (7168, 2048))]
"""DeepSeek-V3's shapes, as tilepipe.tools.bench_fp8 times them."""
SPLIT_SHAPES = {"bf16": [(8192, 8192, 8192), (448, 4096, 14336)], "tensor": [(8192, 8192, 8192), (2048, 14336, 4096)],
                "blockwise": [(1024, 2048, 7168)]}
"""Issue 42's rows: the shapes that trail cuBLAS where it runs the same tile in a two-CTA cluster, and the goals."""

Launch = Callable[[MatmulConfig | None], Callable[[], object]]


def cluster_variants(chosen: MatmulConfig, split: bool = False) -> dict[str, MatmulConfig | None]:
    """The op's own choice (None), its tile alone, and that tile in a 1x2 and a 2x1 cluster (leader-issued
    multicast); with `split` also each cluster with split multicast."""
    tile = replace(chosen, cluster_m=1, cluster_n=1, split_multicast=False)
    variants = {"default": None, "1x1": tile, "1x2": replace(tile, cluster_n=2), "2x1": replace(tile, cluster_m=2)}
    if split:
        variants.update({f"{name} split": replace(variants[name], split_multicast=True) for name in ("1x2", "2x1")})
    return variants


def bench_variants(shape: tuple[int, int, int], op: str, chosen: MatmulConfig, launch: Launch, out: torch.Tensor,
                   baseline: str, theirs: Callable[[], torch.Tensor], pairs: int, rep_ms: int,
                   missing: list[str], split: bool = False) -> list[Row]:
    """Every cluster variant of one op on one shape (`split`: split multicast too): `launch(cfg)` gives the call
    writing `out` (NaN-poisoned before each variant's first call), checked against `theirs()`, then timed against it;
    then each cluster against 1x1, and each split cluster against its leader-issued form. A variant the op rejects
    (ValueError) is appended to `missing` with the reason."""
    M, N, K = shape
    reference, flops, rows, runs, errs = theirs(), 2.0 * M * N * K, [], {}, {}
    for name, cfg in cluster_variants(chosen, split).items():
        out.fill_(float("nan"))
        runs[name] = launch(cfg)
        try:
            runs[name]()
        except ValueError as e:  # a variant the op does not build: recorded as missing, never timed
            missing.append(f"{M}x{N}x{K} {op} {name}: {e}")
            del runs[name]
            continue
        err = errs[name] = _rel_err(out, reference)
        tile = cfg or chosen
        result = compare(runs[name], theirs, flops, pairs, rep_ms, settle=1)
        rows.append(Row(f"{M}x{N}x{K}", f"{op} {name} ({tile.block_m}x{tile.block_n} per CTA)", baseline,
                        *result[:3], err, result[3]))
    against = [(n, "1x1") for n in ("1x2", "2x1", "1x2 split", "2x1 split")]
    against += [(f"{n} split", n) for n in ("1x2", "2x1")]  # split against its leader-issued form
    for name, other in [(n, o) for n, o in against if n in runs and o in runs]:
        result = compare(runs[name], runs[other], flops, pairs, rep_ms, settle=1)
        rows.append(Row(f"{M}x{N}x{K}", f"{op} cluster {name}", f"tilepipe {op} {other}", *result[:3], errs[name],
                        result[3]))
    return rows


def bench_matmul(M: int, N: int, K: int, residual: bool, pairs: int, rep_ms: int, missing: list[str],
                 split: bool = False) -> list[Row]:
    """matmul (B K-major), or with `residual` D = A @ B + C against torch.addmm; `split`: split multicast too."""
    a, b = _operands(M, N, K, "kmajor")
    c = torch.randn(M, N, device="cuda", dtype=torch.bfloat16) if residual else None
    ours, theirs = (torch.empty((M, N), device="cuda", dtype=torch.bfloat16) for _ in range(2))
    chosen = config_for(M, N, K, torch.bfloat16, torch.bfloat16, True, torch.cuda.current_device())
    if residual:
        launch = lambda cfg: lambda: tilepipe.matmul(a, b, out=ours, c=c, beta=1.0, config=cfg)  # noqa: E731
        return bench_variants((M, N, K), "addmm (beta=1)", chosen, launch, ours, "cuBLAS (torch.addmm)",
                              lambda: torch.addmm(c, a, b, out=theirs), pairs, rep_ms, missing, split)
    launch = lambda cfg: lambda: tilepipe.matmul(a, b, out=ours, config=cfg)  # noqa: E731
    return bench_variants((M, N, K), "matmul", chosen, launch, ours, "cuBLAS (torch.matmul)",
                          lambda: torch.matmul(a, b, out=theirs), pairs, rep_ms, missing, split)


def bench_fp8(M: int, N: int, K: int, scaling: str, pairs: int, rep_ms: int, missing: list[str],
              split: bool = False) -> list[Row]:
    """matmul_fp8 (e4m3, bf16 out) against torch._scaled_mm: fast accumulation for per-tensor scales (ours
    accumulates the same way), cuBLASLt's blockwise path for blockwise ones; `split`: split multicast too."""
    a, b = _fp8_operands(M, N, K)
    sa, sb = _scales(M, N, K, scaling)
    ours = torch.empty((M, N), device="cuda", dtype=torch.bfloat16)
    fast = scaling != "blockwise"
    chosen = fp8_config_for(M, N, K, scaling == "blockwise", torch.bfloat16,
                            device_model(torch.cuda.current_device()))
    launch = lambda cfg: lambda: tilepipe.matmul_fp8(a, b, sa, sb, out=ours, config=cfg)  # noqa: E731
    theirs = lambda: torch._scaled_mm(a, b, sa, sb, out_dtype=torch.bfloat16, use_fast_accum=fast)  # noqa: E731
    return bench_variants((M, N, K), f"matmul_fp8 {scaling}", chosen, launch, ours,
                          f"cuBLASLt (torch._scaled_mm, use_fast_accum={fast})", theirs, pairs, rep_ms, missing, split)


def run(name: str, pairs: int = 5, rep_ms: int = 100, out_dir: Path = RESULTS_DIR, split: bool = False) -> Path:
    """The whole table (`split`: issue 42's, SPLIT_SHAPES with split multicast); prints it and writes
    OUT_DIR/NAME.json (rewritten after each shape, so a failure keeps the rows measured before it)."""
    start = time.time()
    missing: list[str] = []
    shapes = SPLIT_SHAPES if split else {"bf16": BF16_SHAPES, "tensor": FP8_TENSOR_SHAPES,
                                         "blockwise": FP8_BLOCKWISE_SHAPES}
    cases = [lambda s=s: bench_matmul(*s, False, pairs, rep_ms, missing, split) for s in shapes["bf16"]]
    cases += [lambda s=s: bench_matmul(*s, True, pairs, rep_ms, missing) for s in ([] if split else RESIDUAL_SHAPES)]
    cases += [lambda s=s, k=k: bench_fp8(*s, k, pairs, rep_ms, missing, split) for k in ("tensor", "blockwise")
              for s in shapes[k]]
    out_dir.mkdir(parents=True, exist_ok=True)
    path, rows = out_dir / f"{name}.json", []
    for index, case in enumerate(cases):
        rows += case()
        record = run_record(name, "bf16 or e4m3 in, bf16 out", __doc__, pairs, rep_ms, start, rows,
                            missing=missing, complete=index == len(cases) - 1)
        path.write_text(json.dumps(record, indent=1) + "\n")
    print_table(rows)
    print("\n".join(f"not built: {line}" for line in missing))
    print(f"\n{record['gpu']}, torch {record['torch']}, triton {record['triton']}: wrote {path}")
    return path


if __name__ == "__main__":  # issue 42's table: python -m tilepipe.tools.bench_clusters NAME [OUT_DIR]
    import sys

    run(sys.argv[1], pairs=3, rep_ms=60, out_dir=Path(sys.argv[2]) if len(sys.argv) > 2 else RESULTS_DIR, split=True)
