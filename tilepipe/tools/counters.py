"""Hardware counters of tilepipe's kernels and cuBLAS's on the same inputs, read with Nsight Compute (ncu).

`python -m tilepipe.tools.counters --name NAME` runs itself again under `ncu` (clocks left alone; ncu flushes the caches
before each kernel) and writes bench/results/NAME.json and a table. For each kernel: its time, the SM clock it ran
at, how busy the tensor pipe and L2 were, the L2 sectors and DRAM bytes it moved, and the kernel's name (cuBLAS's
names its tile and cluster shape). bench.py says how fast; this says why: compute-bound at a power-capped clock,
or L2-bound.
"""

import argparse
import csv
import io
import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import torch

from tilepipe.host.configs import MatmulConfig
from tilepipe.tools.bench import RESULTS_DIR

METRICS = {"time_us": "gpu__time_duration.sum", "sm_ghz": "sm__cycles_elapsed.avg.per_second",
           "tensor_pct": "sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_elapsed",
           "l2_pct": "lts__throughput.avg.pct_of_peak_sustained_elapsed", "l2_sectors": "lts__t_sectors.sum",
           "dram_bytes": "dram__bytes.sum", "l1_pct": "l1tex__throughput.avg.pct_of_peak_sustained_elapsed",
           "dram_pct": "dram__throughput.avg.pct_of_peak_sustained_elapsed",
           "smem_read_pct": "l1tex__data_bank_reads.avg.pct_of_peak_sustained_elapsed",
           "smem_write_pct": "l1tex__data_bank_writes.avg.pct_of_peak_sustained_elapsed"}
"""Our column name -> ncu metric. Units are normalised in `_value` (ncu picks ns/us/ms, Hz/GHz, byte/Gbyte). Shared
memory's bank reads (wgmma's operands, the epilogue's) and writes (TMA's fills) show a tile bound by shared-memory
bandwidth rather than by its tensor pipe."""
BF16_SHAPES = [(1536, 2816, 4096), (896, 4864, 4096), (8192, 8192, 8192), (7168, 5120, 3000), (7168, 5120, 3072)]
"""One exact wave of 128x256 tiles; SMs + 1 tiles (stream-K by default); the large square; K = 3000 (rows 6000 bytes
apart, off 128-byte lines) against K = 3072."""
CLUSTER_SHAPES = [(8192, 8192, 8192), (7168, 5120, 3000)]
"""Shapes of BF16_SHAPES (and the per-tensor FP8 one) also run with their tile in a 2x1 cluster (B multicast), to
see the L2 traffic it saves."""
FP8_SHAPES = [(8192, 8192, 8192, "tensor"), (4096, 7168, 16384, "blockwise")]
_SCALES = {"second": 1e6, "msecond": 1e3, "usecond": 1.0, "nsecond": 1e-3, "s": 1e6, "ms": 1e3, "us": 1.0, "ns": 1e-3,
           "hz": 1e-9, "khz": 1e-6, "mhz": 1e-3, "ghz": 1.0, "cycle/nsecond": 1.0, "cycle/usecond": 1e-3,
           "cycle/second": 1e-9, "byte": 1.0, "kbyte": 1e3, "mbyte": 1e6, "gbyte": 1e9, "tbyte": 1e12}


def tile_options() -> dict[str, object]:
    """The tiles `--shapes` may force beside matmul's choice, by name: bf16 tiles, and FORMS of the chosen tile."""
    from tilepipe.host.configs import LARGE_16BIT, LARGE_SUBTILED_16BIT, MEDIUM, PIECED_16BIT, PINGPONG_16BIT

    return {"pingpong": PINGPONG_16BIT, "128x128": MEDIUM, "128x256": LARGE_16BIT, "128x256-d64": LARGE_SUBTILED_16BIT,
            "128x256-2x1": replace(LARGE_16BIT, cluster_m=2),
            **{f"{cfg.block_m}x{cfg.block_n}": cfg for cfg in PIECED_16BIT}, **FORMS}


FORMS = {"2x1": {"cluster_m": 2}, "2x1-split": {"cluster_m": 2, "split_multicast": True}}
"""`--tiles` names that recast the op's own choice (bf16 or FP8; as the cluster GEMMs build it, bench_clusters.
cluster_tile) rather than force a bf16 tile: in a 2x1 cluster with B multicast, issued by the leader or split between
the two CTAs (issue 42's before and after)."""


def shape_cases(shapes: list[tuple], tiles: list[str]) -> list[tuple[str, Callable[[], object], Callable[[], object]]]:
    """(label, ours, theirs) for `shapes`: bf16 (M, N, K) with B K-major, matmul's choice and each of `tiles`
    (tile_options, static) against torch.matmul on the same inputs; FP8 (M, N, K, scaling) as fp8_case."""
    import tilepipe
    from tilepipe.host.configs import config_for, fp8_config_for
    from tilepipe.host.gpus import device_model
    from tilepipe.tools.bench import _operands

    options = tile_options()
    found = []
    for shape in shapes:
        if len(shape) == 4:
            found.append(fp8_case(*shape))
            recast = recast_tiles(tiles, lambda: fp8_config_for(*shape[:3], shape[3] == "blockwise", torch.bfloat16,
                                                                device_model(torch.cuda.current_device())))
            found += [fp8_case(*shape, recast[name], name) for name in tiles if name in FORMS]
            continue
        M, N, K = shape
        a, b = _operands(M, N, K, "kmajor")
        out = torch.empty(M, N, device="cuda", dtype=torch.bfloat16)
        theirs = lambda a=a, b=b, out=out: torch.matmul(a, b, out=out)  # noqa: E731
        found.append((f"bf16 {M}x{N}x{K}", lambda a=a, b=b, out=out: tilepipe.matmul(a, b, out=out), theirs))
        recast = recast_tiles(tiles, lambda: config_for(M, N, K, torch.bfloat16, torch.bfloat16, True,
                                                        torch.cuda.current_device()))
        for name in tiles:
            cfg = recast[name] if name in FORMS else options[name]
            found.append((f"bf16 {M}x{N}x{K} {name}", lambda a=a, b=b, out=out, cfg=cfg: tilepipe.matmul(
                a, b, out=out, config=cfg, scheduler="static"), theirs))
    return found


def recast_tiles(tiles: list[str], choose: Callable[[], MatmulConfig]) -> dict[str, MatmulConfig]:
    """The FORMS named in `tiles`, by name, each the op's chosen tile (`choose()`, asked only where a form is named)
    recast as the cluster GEMMs build it."""
    from tilepipe.tools.bench_clusters import cluster_tile

    forms = [name for name in tiles if name in FORMS]
    chosen = cluster_tile(choose()) if forms else None
    return {name: replace(chosen, **FORMS[name]) for name in forms}


def fp8_case(M: int, N: int, K: int, scaling: str, config: MatmulConfig | None = None, form: str = "cluster 2x1"
             ) -> tuple[str, Callable[[], object], Callable[[], object]]:
    """(label, ours, theirs): matmul_fp8 (with `config`, named `form` in the label, else its choice) against
    torch._scaled_mm, bf16 out, `scaling` "tensor" (fast accumulation, as the bench) or "blockwise"."""
    import tilepipe
    from tilepipe.tools.bench_fp8 import _fp8_operands, _scales

    a, b = _fp8_operands(M, N, K)
    sa, sb = _scales(M, N, K, scaling)
    theirs = lambda: torch._scaled_mm(a, b, sa, sb, out_dtype=torch.bfloat16,  # noqa: E731
                                      use_fast_accum=scaling == "tensor")
    label = f"fp8 {scaling} {M}x{N}x{K}" + (f" {form}" if config is not None else "")
    return label, lambda: tilepipe.matmul_fp8(a, b, sa, sb, config=config), theirs


def cases() -> list[tuple[str, Callable[[], object], Callable[[], object]]]:
    """(label, ours, theirs) on fresh random inputs: bf16 matmul against torch.matmul, FP8 against torch._scaled_mm."""
    import tilepipe
    from tilepipe.host.configs import config_for, fp8_config_for
    from tilepipe.host.gpus import device_model
    from tilepipe.tools.bench import _operands

    found = []
    for M, N, K in BF16_SHAPES:
        found += shape_cases([(M, N, K)], [])
        if (M, N, K) in CLUSTER_SHAPES:
            a, b = _operands(M, N, K, "kmajor")
            out = torch.empty(M, N, device="cuda", dtype=torch.bfloat16)
            tile = config_for(M, N, K, torch.bfloat16, torch.bfloat16, True, torch.cuda.current_device())
            pair = replace(tile, cluster_m=2)
            found.append((f"bf16 {M}x{N}x{K} cluster 2x1", lambda a=a, b=b, out=out, c=pair: tilepipe.matmul(
                a, b, out=out, config=c), lambda a=a, b=b, out=out: torch.matmul(a, b, out=out)))
    for M, N, K, scaling in FP8_SHAPES:
        found.append(fp8_case(M, N, K, scaling))
        if scaling == "tensor" and (M, N, K) in CLUSTER_SHAPES:
            tile = fp8_config_for(M, N, K, False, torch.bfloat16, device_model(torch.cuda.current_device()))
            found.append(fp8_case(M, N, K, scaling, replace(tile, cluster_m=2)))
    return found


def profiled_child(shapes: list[tuple] | None = None, tiles: list[str] = ()) -> None:
    """Under ncu: warm every callable up, then run each once inside the profiled range, in `cases()` order (or
    `shape_cases(shapes, tiles)`'s)."""
    found = cases() if shapes is None else shape_cases(shapes, list(tiles))
    for _, ours, theirs in found:
        for _ in range(3):
            ours(), theirs()
    torch.cuda.synchronize()
    torch.cuda.profiler.start()
    for _, ours, theirs in found:
        ours()
        theirs()
    torch.cuda.synchronize()
    torch.cuda.profiler.stop()
    print(json.dumps([label for label, _, _ in found]), file=sys.stderr)


def _value(text: str, unit: str) -> float:
    scale = _SCALES.get(unit.strip().lower(), 1.0)  # "%", "sector" and counts stay as they are
    return float(text.replace(",", "")) * scale


def parse(ncu_csv: str) -> list[dict]:
    """ncu's --csv rows (one per kernel and metric) as one dict per kernel, in launch order."""
    kernels: dict[str, dict] = {}
    names = {value: key for key, value in METRICS.items()}
    lines = [line for line in ncu_csv.splitlines() if line.startswith('"')]
    for row in csv.DictReader(io.StringIO("\n".join(lines))):
        kernel = kernels.setdefault(row["ID"], {"kernel": row["Kernel Name"].split("(")[0].strip(),
                                                "grid": row["Grid Size"], "block": row["Block Size"]})
        if row["Metric Name"] in names:
            kernel[names[row["Metric Name"]]] = _value(row["Metric Value"], row["Metric Unit"])
    return [kernels[key] for key in sorted(kernels, key=int)]


def run(name: str, out_dir: Path = RESULTS_DIR, shapes: str | None = None, tiles: str | None = None) -> Path:
    """Profile every case under ncu (`cases()`, or given `shapes` and `tiles` as on the command line:
    `shape_cases`), pair our kernel with theirs, print the table and write OUT_DIR/NAME.json."""
    from tilepipe.tools.bench import run_environment

    ncu = shutil.which("ncu")
    if ncu is None:
        raise RuntimeError("ncu (Nsight Compute) is not on PATH")
    start = time.time()
    command = [ncu, "--csv", "--clock-control", "none", "--profile-from-start", "off", "--metrics",
               ",".join(METRICS.values()), sys.executable, "-m", "tilepipe.tools.counters", "--child"]
    command += ["--shapes", shapes] if shapes else []
    command += ["--tiles", tiles] if tiles else []
    done = subprocess.run(command, capture_output=True, text=True, timeout=900, env=os.environ)
    if done.returncode != 0:
        raise RuntimeError(f"ncu exited with {done.returncode}:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}")
    # the child's last stderr line that is a JSON list: Triton's extensions may print more at interpreter exit
    labels = json.loads(next(line for line in reversed(done.stderr.splitlines()) if line.startswith("[")))
    kernels = parse(done.stdout)
    # operands whose rows sit off L2 sectors are restaged by a copy before the GEMM (host/staging.py): kept apart
    staging = [kernel for kernel in kernels if kernel["kernel"].startswith("restage_rows_kernel")]
    kernels = [kernel for kernel in kernels if kernel not in staging]
    if len(kernels) != 2 * len(labels):
        names = [kernel["kernel"] for kernel in kernels]
        raise RuntimeError(f"expected one kernel per call ({2 * len(labels)}), ncu saw {len(kernels)}: {names}")
    rows = [{"case": label, "ours": kernels[2 * i], "theirs": kernels[2 * i + 1]} for i, label in enumerate(labels)]
    record = {**run_environment(name), "ncu": " ".join(command[:9]), "child": " ".join(command[9:]),
              "method": __doc__.strip(),
              "seconds": round(time.time() - start, 1), "metrics": METRICS, "rows": rows, "staging_kernels": staging}
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / f"{name}.json"
    path.write_text(json.dumps(record, indent=1) + "\n")
    print(table(rows))
    print(f"\n{record['gpu']}, torch {record['torch']}, triton {record['triton']}: wrote {path}")
    return path


def table(rows: list[dict]) -> str:
    """One line per kernel: the case, who, time, clock, tensor pipe, L2 throughput, L2 sectors, DRAM, L1, shared
    memory's bank reads and writes, and the kernel name."""
    from tilepipe._text import format_table

    lines = [[row["case"] if who == "ours" else "", "tilepipe" if who == "ours" else "cuBLAS",
              f"{k['time_us']:.1f}", f"{k['sm_ghz']:.2f}", f"{k['tensor_pct']:.1f}", f"{k['l2_pct']:.1f}",
              f"{k['l2_sectors'] / 1e6:.1f}", f"{k['dram_bytes'] / 1e9:.2f}", f"{k.get('l1_pct', 0):.1f}",
              f"{k.get('dram_pct', 0):.1f}", f"{k.get('smem_read_pct', 0):.1f}", f"{k.get('smem_write_pct', 0):.1f}",
              k["kernel"][:48]]
             for row in rows for who, k in (("ours", row["ours"]), ("theirs", row["theirs"]))]
    return format_table([["case", "who", "us", "SM GHz", "tensor %", "L2 %", "L2 Msect", "DRAM GB", "L1 %", "DRAM %",
                          "smem rd %", "smem wr %", "kernel"], *lines])


def parse_shapes(text: str) -> list[tuple]:
    """'768x4096x4096,2048x14336x4096:tensor' -> [(768, 4096, 4096), (2048, 14336, 4096, "tensor")]: bf16 shapes, and
    FP8 ones with their scaling ("tensor" or "blockwise") after a colon."""
    shapes = []
    for item in text.split(","):
        dims, _, scaling = item.strip().lower().partition(":")
        dims = dims.split("x")
        if len(dims) != 3 or not all(d.isdigit() and int(d) > 0 for d in dims):
            raise ValueError(f"--shapes: expected MxNxK with positive integers, got {item!r}")
        if scaling not in ("", "tensor", "blockwise"):
            raise ValueError(f"--shapes: an FP8 shape's scaling is 'tensor' or 'blockwise', got {item!r}")
        shapes.append(tuple(int(d) for d in dims) + ((scaling, ) if scaling else ()))
    return shapes


if __name__ == "__main__":
    parser = argparse.ArgumentParser(prog="python -m tilepipe.tools.counters", description=__doc__)
    parser.add_argument("--name", default="counters")
    parser.add_argument("--out-dir", type=Path, default=RESULTS_DIR)
    parser.add_argument("--shapes", help="shapes MxNxK,... instead of the built-in cases: bf16 (B K-major), or FP8 "
                        "with its scaling, MxNxK:tensor or MxNxK:blockwise")
    parser.add_argument("--tiles", help="with --shapes: tiles to force (static) beside matmul's choice, from "
                        "tile_options(), comma-separated")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    tiles = [t for t in (args.tiles or "").split(",") if t]
    unknown = sorted(set(tiles) - set(tile_options()))
    if unknown or (tiles and not args.shapes):
        parser.error(f"--tiles: unknown {unknown}" if unknown else "--tiles needs --shapes")
    try:
        shapes = parse_shapes(args.shapes) if args.shapes else None
    except ValueError as exc:
        parser.error(str(exc))
    if args.child:
        profiled_child(shapes, tiles)
    else:
        run(args.name, args.out_dir, args.shapes, args.tiles)
