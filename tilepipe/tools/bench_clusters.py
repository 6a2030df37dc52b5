"""Issue 18's table: each GEMM of the family with and without a two-CTA cluster (TMA multicast) against the baseline
a user would call, on the same inputs (`python -m tilepipe bench --clusters`).

Rows per shape: the op's own configuration ("default"), its tile alone ("1x1": D written whole, as the cluster GEMMs
write it), in a 1x2 cluster (A multicast) and in a 2x1 cluster (B multicast), each against torch (torch.matmul,
torch.addmm, torch._scaled_mm); then each cluster against the tile alone. Same method as tilepipe.tools.bench:
interleaved do_bench pairs, median of per-pair ratios, after one dropped pair (row 47's first pairs lay up to 10% off
the rest: docs/perf-log.md).

Issue 42's table (`python -m tilepipe.tools.bench_clusters NAME [OUT_DIR]`, SPLIT_SHAPES): the same rows plus each
cluster with split multicast ("1x2 split", "2x1 split": each CTA issues its half of the shared tile,
pipeline/multicast.py), timed against torch, the tile alone and the leader-issued form of its cluster.

Every launch runs in a child process (a kernel fault poisons its CUDA context): first each shape's variants are
launched once and checked against torch, the shapes in parallel (which also compiles them); a variant whose process
dies is recorded under `missing` with the reason and the rest of its shape go on in a new process. Then one process
times the variants that passed, shape after shape; if it dies, the shape it was timing is recorded missing and the
next process goes on from the shape after it.
"""

import json
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, replace
from pathlib import Path
from typing import Callable

import torch

import tilepipe
from tilepipe.host.configs import MatmulConfig, config_for, default_configs, fp8_config_for
from tilepipe.host.gpus import device_model
from tilepipe.probes.debug import GuardedRun, run_guarded
from tilepipe.tools.bench import RESULTS_DIR, Row, _operands, _rel_err, compare, print_table, run_environment
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
CLUSTERS = ("1x2", "2x1")
CHECK_PARALLEL = 6
"""Shapes checked (and compiled) at once, a process each."""
CHECK_SHARE = 0.6
"""The share of the time budget after which checks still running are stopped (a hung kernel), so timing has the rest."""

Case = tuple[str, int, int, int]
"""An op ("bf16", "residual": D = A @ B + C, FP8 "tensor" or "blockwise" scales) on a shape M, N, K."""


def cluster_tile(chosen: MatmulConfig) -> MatmulConfig:
    """The chosen block as the cluster GEMMs build it, D written whole: where the choice writes D in sub-tiles or in
    ping-pong turns (built without clusters), the host's own whole-tile configuration of that block."""
    if chosen.epilogue_n is None and not chosen.pingpong:
        return chosen
    return next((c for c in default_configs(torch.bfloat16) if (c.block_m, c.block_n) == (chosen.block_m,
                                                                                            chosen.block_n)), chosen)


def cluster_variants(chosen: MatmulConfig, split: bool = False) -> dict[str, MatmulConfig | None]:
    """The op's own choice (None), its tile alone, and that tile in a 1x2 and a 2x1 cluster (leader-issued
    multicast); with `split` also each cluster with split multicast."""
    tile = replace(cluster_tile(chosen), cluster_m=1, cluster_n=1, split_multicast=False)
    variants = {"default": None, "1x1": tile, "1x2": replace(tile, cluster_n=2), "2x1": replace(tile, cluster_m=2)}
    if split:
        variants.update({f"{name} split": replace(variants[name], split_multicast=True) for name in CLUSTERS})
    return variants


def variant_names(split: bool) -> list[str]:
    return list(cluster_variants(MatmulConfig(128, 128, 64, 4), split))


def op_name(op: str) -> str:
    return {"bf16": "matmul", "residual": "addmm (beta=1)"}.get(op, f"matmul_fp8 {op}")


def label(case: Case) -> str:
    op, M, N, K = case
    return f"{M}x{N}x{K} {op_name(op)}"


def cases(split: bool) -> list[Case]:
    """The table's ops and shapes: issue 42's (`split`) or issue 18's."""
    shapes = SPLIT_SHAPES if split else {"bf16": BF16_SHAPES, "residual": RESIDUAL_SHAPES,
                                         "tensor": FP8_TENSOR_SHAPES, "blockwise": FP8_BLOCKWISE_SHAPES}
    return [(op, *shape) for op, op_shapes in shapes.items() for shape in op_shapes]


def prepare(case: Case) -> tuple[MatmulConfig, Callable, torch.Tensor, str, Callable]:
    """One op on its inputs (B K-major): its chosen config, `launch(cfg)` giving the call that writes `out`, `out`,
    the baseline's name and the baseline call (torch.matmul, torch.addmm, torch._scaled_mm: fast accumulation for
    per-tensor scales, as ours, cuBLASLt's blockwise path for blockwise ones)."""
    op, M, N, K = case
    device = torch.cuda.current_device()
    ours, theirs = (torch.empty((M, N), device="cuda", dtype=torch.bfloat16) for _ in range(2))
    if op in ("bf16", "residual"):
        a, b = _operands(M, N, K, "kmajor")
        chosen = config_for(M, N, K, torch.bfloat16, torch.bfloat16, True, device)
        if op == "bf16":
            return (chosen, lambda cfg: lambda: tilepipe.matmul(a, b, out=ours, config=cfg), ours,
                    "cuBLAS (torch.matmul)", lambda: torch.matmul(a, b, out=theirs))
        c = torch.randn(M, N, device="cuda", dtype=torch.bfloat16)
        return (chosen, lambda cfg: lambda: tilepipe.matmul(a, b, out=ours, c=c, beta=1.0, config=cfg), ours,
                "cuBLAS (torch.addmm)", lambda: torch.addmm(c, a, b, out=theirs))
    a, b = _fp8_operands(M, N, K)
    sa, sb = _scales(M, N, K, op)
    fast = op != "blockwise"
    chosen = fp8_config_for(M, N, K, op == "blockwise", torch.bfloat16, device_model(device))
    return (chosen, lambda cfg: lambda: tilepipe.matmul_fp8(a, b, sa, sb, out=ours, config=cfg), ours,
            f"cuBLASLt (torch._scaled_mm, use_fast_accum={fast})",
            lambda: torch._scaled_mm(a, b, sa, sb, out_dtype=torch.bfloat16, use_fast_accum=fast))


def check_case(case: Case, names: list[str], split: bool) -> None:
    """Child: launch each named variant once on NaN-poisoned `out` and print its error against the baseline (a
    variant the op does not build, ValueError, as missing with the reason), a JSON line each."""
    chosen, launch, out, _, theirs = prepare(case)
    reference = theirs()
    variants = cluster_variants(chosen, split)
    for name in names:
        out.fill_(float("nan"))
        try:
            launch(variants[name])()
        except ValueError as error:  # a variant the op does not build: never timed
            print(json.dumps({"unit": name, "missing": str(error)}))
            continue
        print(json.dumps({"unit": name, "rel_err": _rel_err(out, reference)}))  # synchronises: a fault raises here


def time_case(case: Case, errs: dict[str, float], split: bool, pairs: int, rep_ms: int) -> list[Row]:
    """Child: each variant that passed the check (`errs`) timed against the baseline, then each cluster against
    the tile alone and each split cluster against its leader-issued form."""
    chosen, launch, _, baseline, theirs = prepare(case)
    op, M, N, K = case
    shape, flops, rows = f"{M}x{N}x{K}", 2.0 * M * N * K, []
    variants = cluster_variants(chosen, split)
    runs = {name: launch(variants[name]) for name in variants if name in errs}
    for name, run in runs.items():
        tile = variants[name] or chosen
        result = compare(run, theirs, flops, pairs, rep_ms, settle=1)
        rows.append(Row(shape, f"{op_name(op)} {name} ({tile.block_m}x{tile.block_n} per CTA)", baseline,
                        *result[:3], errs[name], result[3]))
    against = [(n, "1x1") for n in (*CLUSTERS, *(f"{c} split" for c in CLUSTERS))]
    against += [(f"{n} split", n) for n in CLUSTERS]  # split against its leader-issued form
    for name, other in [(n, o) for n, o in against if n in runs and o in runs]:
        result = compare(runs[name], runs[other], flops, pairs, rep_ms, settle=1)
        rows.append(Row(shape, f"{op_name(op)} cluster {name}", f"tilepipe {op_name(op)} {other}", *result[:3],
                        errs[name], result[3]))
    return rows


def _child(request: dict) -> None:
    """A child process's work: check one case's variants, or time cases one after another, a JSON line per unit."""
    if request["mode"] == "check":
        check_case(tuple(request["case"]), request["units"], request["split"])
        return
    for case in map(tuple, request["units"]):
        rows = time_case(case, request["errs"][label(case)], request["split"], request["pairs"], request["rep_ms"])
        print(json.dumps({"unit": label(case), "rows": [asdict(row) for row in rows]}))


def _reported(run: GuardedRun) -> dict[str, dict]:
    """The JSON unit lines a child printed, by unit."""
    lines = [json.loads(line) for line in run.output.splitlines() if line.startswith('{"unit"')]
    return {line["unit"]: line for line in lines}


def _why(run: GuardedRun) -> str:
    """Why a child stopped early: its timeout, or its last line of output (the exception)."""
    if run.returncode is None:
        return f"killed after {run.seconds:.0f} s"
    lines = [line for line in run.output.splitlines() if line.strip()]
    return lines[-1] if lines else f"exit code {run.returncode}"


def guarded(request: dict, units: list, names: list[str], deadline: float, missing: list[str],
            prefix: str = "") -> dict[str, dict]:
    """Child processes over `units` (named `names`, as their JSON lines name them) until each reported: the unit
    a dead child had not reported goes to `missing` (with `prefix` and the reason) and a new child takes the units
    after it. Units left at `deadline` (time.monotonic) are missing too. The reports, by name."""
    done: dict[str, dict] = {}
    left = list(zip(names, units))
    while left:
        remaining = deadline - time.monotonic()
        if remaining < 5:
            missing.extend(f"{prefix}{name}: not run, the bench's time budget ran out" for name, _ in left)
            break
        child = {**request, "units": [unit for _, unit in left]}
        run = run_guarded(["-m", "tilepipe.tools.bench_clusters", "--child", json.dumps(child)], remaining)
        done.update(reported := {name: line for name, line in _reported(run).items() if name in dict(left)})
        left = [(name, unit) for name, unit in left if name not in reported]
        if left:  # the child died in its first unit not reported
            missing.append(f"{prefix}{left[0][0]}: {_why(run)}")
            left = left[1:]
    return done


def run(name: str, pairs: int = 5, rep_ms: int = 100, out_dir: Path = RESULTS_DIR, split: bool = False,
        budget_s: float = 540) -> Path:
    """The whole table (`split`: issue 42's) within about `budget_s` seconds (the checks within CHECK_SHARE of it);
    prints it and writes OUT_DIR/NAME.json (after the checks and at the end: a budget spent keeps what was measured)."""
    start = time.monotonic()
    environment = run_environment(name)
    missing: list[str] = []
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / f"{name}.json"

    def write(rows: list[Row], complete: bool) -> None:
        record = {**environment, "dtype": "bf16 or e4m3 in, bf16 out", "method": __doc__.strip(), "pairs": pairs,
                  "rep_ms": rep_ms, "seconds": round(time.monotonic() - start, 1), "rows": [asdict(r) for r in rows],
                  "missing": missing, "complete": complete}
        path.write_text(json.dumps(record, indent=1) + "\n")

    def check(case: Case) -> dict[str, float]:
        names = variant_names(split)
        found = guarded({"mode": "check", "case": case, "split": split}, names, names, start + CHECK_SHARE * budget_s,
                        missing, f"{label(case)} ")
        missing.extend(f"{label(case)} {unit}: {line['missing']}" for unit, line in found.items() if "missing" in line)
        print(f"checked {label(case)}: " + ", ".join(f"{u} {line['rel_err']:.1e}" for u, line in found.items()
                                                     if "rel_err" in line))
        return {unit: line["rel_err"] for unit, line in found.items() if "rel_err" in line}

    with ThreadPoolExecutor(CHECK_PARALLEL) as pool:
        errs = {label(case): found for case, found in zip(cases(split), pool.map(check, cases(split))) if found}
    write([], False)
    timed = [case for case in cases(split) if label(case) in errs]
    request = {"mode": "time", "split": split, "pairs": pairs, "rep_ms": rep_ms, "errs": errs}
    found = guarded(request, timed, [label(case) for case in timed], start + budget_s, missing)
    rows = [Row(**row) for case in timed for row in found.get(label(case), {}).get("rows", [])]
    write(rows, not any("time budget" in line for line in missing))
    print_table(rows)
    print("\n".join(f"not measured: {line}" for line in missing))
    print(f"\n{environment['gpu']}, torch {environment['torch']}, triton {environment['triton']}: wrote {path}")
    return path


if __name__ == "__main__":  # issue 42's table: python -m tilepipe.tools.bench_clusters NAME [OUT_DIR [BUDGET_S]]
    if sys.argv[1] == "--child":
        _child(json.loads(sys.argv[2]))
    else:
        run(sys.argv[1], pairs=3, rep_ms=50, out_dir=Path(sys.argv[2]) if len(sys.argv) > 2 else RESULTS_DIR,
            split=True, budget_s=float(sys.argv[3]) if len(sys.argv) > 3 else 540)
