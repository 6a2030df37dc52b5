"""`python -m tilepipe bench --shapes`: every shape a model runs (issue 20), each against the baseline a user would
call (torch.matmul, torch._scaled_mm) in the same process on the same inputs, with the configuration matmul chose
and its predicted time (host/configs.py: predict_us) written beside the measurement, plus host time per call at 256^3.

Timing as tilepipe.tools.bench: interleaved do_bench pairs (median of per-pair ratios). Each row also holds the
predicted time of the chosen tile under each schedule the cost model compares, and bf16 rows that tile's measured
time under each (one do_bench median each), to calibrate the model; large-M bf16 rows also time matmul's other
tiles under static and stream-K and the chosen tile in a 2x1 cluster (other_candidates); small-M rows time the
choice before the small-M model (the wave heuristic's tile, static), an A/B in the same process, swap-AB's tiles
(swap_candidates) and the other 64-row tiles (row_tile_candidates); FP8 rows time matmul_fp8's other tiles
(fp8_candidates). Rows may be added to SHAPE_TABLE, never dropped. One JSON under bench/results/, rewritten after
every row (a failure keeps the rows measured before it; `missing` lists the table rows not measured); `cost_model`
holds the GPU model's constants the predictions used (tools/fit_gpu.py fits on them).
"""

import json
import math
import time
from dataclasses import dataclass, replace
from pathlib import Path

import torch

import tilepipe
from tilepipe._text import format_table
from tilepipe.host.configs import (DECODE_M, LARGE_16BIT, LARGE_SUBTILED_16BIT, PIECED_16BIT, PINGPONG_16BIT,
                                   MatmulConfig, choose_config, config_for, default_configs, floor_us, fp8_config_for,
                                   fp8_configs, fp8_schedule_for, loop_bound, narrow_configs, predict_us,
                                   predicted_parts, schedule_candidates, schedule_for, schedule_programs,
                                   small_m_configs, swap_config)
from tilepipe.host.gpus import FITTED_FIELDS, GpuModel, device_model
from tilepipe.tools.bench import (RESULTS_DIR, Row, _operands, _rel_err, compare, host_overhead, run_environment,
                                  run_record)
from tilepipe.tools.bench_fp8 import _fp8_operands, _scales

DECODE_NK = ((4096, 4096), (14336, 4096), (4096, 14336), (6144, 4096))
SHAPE_TABLE: dict[str, list[tuple[int, int, int]]] = {
    "decode bf16": [(M, N, K) for M in (1, 8, 32, 96) for N, K in DECODE_NK],
    "prefill bf16": [(4096, 4096, 4096), (4096, 14336, 4096), (4096, 4096, 14336), (16384, 6144, 4096)],
    "mid-M bf16": [(M, N, K) for M in (256, 768) for N, K in DECODE_NK],
    "mid / ragged bf16": [(2560, 2560, 2560), (3584, 3584, 3584), (5120, 5120, 2560), (4000, 6000, 3500),
                          (1536, 8960, 1536), (2304, 2304, 9216), (2304, 2816, 8192)],
    "ragged edges bf16": [(129, 8192, 8192), (416, 4096, 14336), (448, 4096, 14336), (1000, 4000, 4096)],
    "FP8 per-tensor": [(M, N, K) for M in (16, 2048, 8192) for N, K in ((14336, 4096), (4096, 14336))],
    "FP8 blockwise": [(M, N, K) for M in (64, 1024, 4096) for N, K in ((2048, 7168), (7168, 2048), (4608, 7168))],
}
"""Issue 20's table: group -> (M, N, K) rows (B K-major, bf16 or fp8 e4m3 in, bf16 out). Add rows, never drop one."""


@dataclass
class ShapeRow(Row):
    """A Row of the shape table, with what matmul chose and what the cost model predicted for it."""
    group: str
    config: str  # BMxBNxBK, stages, MMA warps
    schedule: str
    programs: int
    predicted_us: float
    tilepipe_us: float
    baseline_us: float
    schedules: dict  # the chosen tile's {schedule: {"predicted_us"; bf16: "measured_us", "rel_err"}}; small M: "before"
    bound: str = ""  # what limits the chosen kernel's main loops in the cost model: "mma", "stream" or "dram"
    floor_us: float = 0.0  # no kernel beats this at the model's rates: all FLOPs on every SM, or every byte once


def describe(cfg: MatmulConfig) -> str:
    """A configuration in one short word: BMxBNxBK, stages, MMA warps (and "swap-AB", the cluster shape, "dN" for
    D in N-column sub-tiles, "ping-pong" for two MMA warpgroups taking turns)."""
    cluster = f" {cfg.cluster_m}x{cfg.cluster_n}" if cfg.cluster.num_ctas > 1 else ""
    swap = " swap-AB" * cfg.swap_ab
    sub = f" d{cfg.epilogue_n}" if cfg.epilogue_n else ""
    return f"{cfg.block_m}x{cfg.block_n}x{cfg.block_k} s{cfg.stages} w{cfg.num_warps}{swap}{cluster}{sub}" + (
        " ping-pong" * cfg.pingpong)


def plan(group: str, M: int, N: int, K: int, device: int) -> tuple[MatmulConfig, str, dict[str, float]]:
    """What the op chooses for a row on `device` (tile, schedule), and the cost model's predicted time of each
    schedule it compares for that tile."""
    gpu = device_model(device)
    if group.startswith("FP8"):
        blockwise = "blockwise" in group
        cfg = fp8_config_for(M, N, K, blockwise, torch.bfloat16, gpu)
        return cfg, fp8_schedule_for(M, N, K, cfg, blockwise, gpu), {
            s: predict_us(M, N, K, cfg, s, gpu, in_bytes=1) for s in schedule_candidates(M, N, K, cfg, gpu.sms)}
    cfg = config_for(M, N, K, torch.bfloat16, torch.bfloat16, True, device)
    return cfg, schedule_for(M, N, K, cfg, gpu), {
        s: predict_us(M, N, K, cfg, s, gpu) for s in schedule_candidates(M, N, K, cfg, gpu.sms)}


def bench_bf16(group: str, M: int, N: int, K: int, pairs: int, rep_ms: int) -> ShapeRow:
    """tilepipe.matmul (B K-major, its own choice) against torch.matmul; then the chosen tile under each schedule."""
    a, b = _operands(M, N, K, "kmajor")
    ours = torch.full((M, N), float("nan"), device="cuda", dtype=torch.bfloat16)
    theirs = torch.empty_like(ours)
    tilepipe.matmul(a, b, out=ours)
    torch.matmul(a, b, out=theirs)
    err = _rel_err(ours, theirs)
    result = compare(lambda: tilepipe.matmul(a, b, out=ours), lambda: torch.matmul(a, b, out=theirs),
                     2.0 * M * N * K, pairs, rep_ms)
    device = torch.cuda.current_device()
    cfg, schedule, predicted = plan(group, M, N, K, device)

    def timed(config: MatmulConfig, scheduler: str, us: float) -> dict:
        return measured(lambda: tilepipe.matmul(a, b, out=ours, config=config, scheduler=scheduler), ours, theirs,
                        us, rep_ms)

    schedules = {name: timed(cfg, name, us) for name, us in predicted.items()}
    gpu = device_model(device)
    if M > DECODE_M:  # every other tile matmul could take, under each schedule: the data to choose tiles by time
        for tile, name in other_candidates(cfg):
            schedules[f"{describe(tile)} {name}"] = timed(tile, name, predict_us(M, N, K, tile, name, gpu))
    else:  # the choice before issue 20's small-M model (the wave heuristic's tile), swap-AB's and the 64-row tiles
        old = choose_config(M, N, torch.bfloat16, gpu.sms)
        schedules[f"before: {describe(old)} static"] = timed(old, "static", predict_us(M, N, K, old, "static", gpu))
        for tile, name in swap_candidates(M, N, K, gpu.sms) + row_tile_candidates(M, N, K, cfg, gpu):
            schedules[f"{describe(tile)} {name}"] = timed(tile, name, predict_us(M, N, K, tile, name, gpu))
    return _row(group, M, N, K, "matmul bf16 B kmajor", "cuBLAS (torch.matmul)", result, err, cfg, schedule,
                predicted[schedule], schedules)


def measured(run, ours: torch.Tensor, theirs: torch.Tensor, predicted: float, rep_ms: int) -> dict:
    """One candidate's do_bench median beside its predicted time, and the relative error of what it wrote in `ours`
    against the baseline's `theirs`."""
    from triton.testing import do_bench

    run()
    us = do_bench(run, warmup=10, rep=rep_ms // 2, return_mode="median") * 1e3
    return {"predicted_us": round(predicted, 2), "measured_us": round(us, 2), "rel_err": _rel_err(ours, theirs)}


def other_candidates(chosen: MatmulConfig) -> list[tuple[MatmulConfig, str]]:
    """(tile, schedule) pairs beside the chosen tile for a large-M bf16 row: each of matmul's other tiles under
    static and stream-K, the largest tile with D in sub-tiles, the pieced tiles and the ping-pong tile (static), and
    the chosen tile (with a whole output stage) in a 2x1 cluster (static: the only schedule clusters take; not for a
    pieced or ping-pong tile)."""
    others = [(tile, name) for tile in default_configs(torch.bfloat16) if tile != chosen
              for name in ("static", "streamk")]
    others += [(tile, "static") for tile in (LARGE_SUBTILED_16BIT, *PIECED_16BIT, PINGPONG_16BIT) if tile != chosen]
    whole = LARGE_16BIT if chosen == LARGE_SUBTILED_16BIT else chosen
    return others + ([] if chosen.pieced or chosen.pingpong else [(replace(whole, cluster_m=2), "static")])


def swap_candidates(M: int, N: int, K: int, sms: int) -> list[tuple[MatmulConfig, str]]:
    """(tile, schedule) pairs of swap-AB for a small-M bf16 row: its 64-row tile under each schedule the cost model
    compares, and its 128-row tile under static."""
    narrow, wide = swap_config(M, torch.bfloat16), swap_config(M, torch.bfloat16, 128)
    return [(narrow, name) for name in schedule_candidates(M, N, K, narrow, sms)] + [(wide, "static")]


def row_tile_candidates(M: int, N: int, K: int, chosen: MatmulConfig, gpu: GpuModel
                        ) -> list[tuple[MatmulConfig, str]]:
    """Small M's 64-row tiles other than the chosen one (the narrow 64x64 where narrow_configs offers it, and the
    64x128 one), each under the schedule schedule_for would give it: the narrow tile's A/B in the same process."""
    tiles = narrow_configs(M, N, gpu.sms) + small_m_configs(torch.bfloat16)[:1]
    return [(tile, schedule_for(M, N, K, tile, gpu)) for tile in tiles if tile != chosen]


def fp8_candidates(scaling: str, M: int) -> list[MatmulConfig]:
    """The FP8 tiles a row times beside the interleaved comparison: for blockwise scales both blockwise tiles; for
    small-M per-tensor scales the 64-row tile and swap-AB's."""
    if scaling == "blockwise":
        return list(fp8_configs(True, torch.bfloat16))
    if M <= DECODE_M:
        return [fp8_configs(False, torch.bfloat16)[-1], swap_config(M, torch.bfloat16, kernel="scaled")]
    return []


def bench_fp8(group: str, M: int, N: int, K: int, pairs: int, rep_ms: int) -> ShapeRow:
    """tilepipe.matmul_fp8 against torch._scaled_mm: per-tensor with use_fast_accum=True (our accumulation),
    blockwise with False (cuBLASLt's blockwise path)."""
    scaling = "blockwise" if "blockwise" in group else "tensor"
    a, b = _fp8_operands(M, N, K)
    sa, sb = _scales(M, N, K, scaling)
    ours = torch.full((M, N), float("nan"), device="cuda", dtype=torch.bfloat16)
    tilepipe.matmul_fp8(a, b, sa, sb, out=ours)
    fast = scaling == "tensor"

    def theirs() -> torch.Tensor:
        return torch._scaled_mm(a, b, sa, sb, out_dtype=torch.bfloat16, use_fast_accum=fast)

    result = compare(lambda: tilepipe.matmul_fp8(a, b, sa, sb, out=ours), theirs, 2.0 * M * N * K, pairs, rep_ms)
    device = torch.cuda.current_device()
    cfg, schedule, predicted = plan(group, M, N, K, device)
    schedules = {name: {"predicted_us": round(us, 2)} for name, us in predicted.items()}  # matmul_fp8 takes no schedule
    gpu = device_model(device)
    for tile in fp8_candidates(scaling, M):  # each under its own schedule, timed
        tile_schedule = fp8_schedule_for(M, N, K, tile, scaling == "blockwise", gpu)
        schedules[f"{describe(tile)} {tile_schedule}"] = measured(
            lambda tile=tile: tilepipe.matmul_fp8(a, b, sa, sb, out=ours, config=tile), ours, theirs(),
            predict_us(M, N, K, tile, tile_schedule, gpu, in_bytes=1), rep_ms)
    return _row(group, M, N, K, f"matmul_fp8 {scaling} e4m3", f"cuBLASLt (torch._scaled_mm, use_fast_accum={fast})",
                result, _rel_err(ours, theirs()), cfg, schedule, predicted[schedule], schedules)


def _row(group: str, M: int, N: int, K: int, variant: str, baseline: str, result: tuple, err: float,
         cfg: MatmulConfig, schedule: str, predicted: float, schedules: dict) -> ShapeRow:
    """A ShapeRow from compare()'s (our TFLOP/s, their TFLOP/s, ratio, pair ratios), with the cost model's bound and
    floor for the row."""
    us = lambda tflops: round(2.0 * M * N * K / tflops * 1e-6, 2)  # noqa: E731
    gpu = device_model(torch.cuda.current_device())
    programs = schedule_programs(M, N, K, cfg, gpu.sms, schedule)
    in_bytes = 1 if group.startswith("FP8") else 2
    bound = loop_bound(predicted_parts(M, N, K, cfg, schedule, gpu, in_bytes))
    floor = floor_us(M, N, K, gpu, in_bytes)
    return ShapeRow(f"{M}x{N}x{K}", variant, baseline, *result[:3], err, result[3], group, describe(cfg), schedule,
                    programs, round(predicted, 2), us(result[0]), us(result[1]), schedules, bound, round(floor, 2))


def shapes_record(environment: dict, rows: list[ShapeRow], host: dict, pairs: int, rep_ms: int,
                  start: float) -> dict:
    """The results file: the run's environment, the rows, the table rows not measured, and the host time."""
    measured = {(row.group, row.shape) for row in rows}
    missing = [f"{group} {M}x{N}x{K}" for group, shapes in SHAPE_TABLE.items() for M, N, K in shapes
               if (group, f"{M}x{N}x{K}") not in measured]
    return run_record(environment["name"], "bf16 or e4m3 in, bf16 out; B K-major", __doc__, pairs, rep_ms, start,
                      rows, environment, missing=missing, host_overhead=host)


def cost_model(gpu: GpuModel) -> dict:
    """The model's constants as a results file records them (`cost_model`: what its predictions used)."""
    plain = {name: getattr(gpu, name) for name in FITTED_FIELDS}
    return {"key": gpu.key, **{k: {str(i): v for i, v in value.items()} if hasattr(value, "items") else value
                               for k, value in plain.items()}}


def run(name: str, pairs: int = 5, rep_ms: int = 60, out_dir: Path = RESULTS_DIR) -> Path:
    """Host time at 256^3, then every SHAPE_TABLE row; prints the table and writes OUT_DIR/NAME.json."""
    start = time.time()
    environment = {**run_environment(name), "cost_model": cost_model(device_model(torch.cuda.current_device()))}
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / f"{name}.json"
    host = host_overhead()
    rows: list[ShapeRow] = []
    for group, shapes in SHAPE_TABLE.items():
        bench = bench_fp8 if group.startswith("FP8") else bench_bf16
        for M, N, K in shapes:
            try:
                rows.append(bench(group, M, N, K, pairs, rep_ms))
            except Exception as error:  # noqa: BLE001  (the row stays in `missing`; the others still run)
                print(f"{group} {M}x{N}x{K} failed: {type(error).__name__}: {error}")
            path.write_text(json.dumps(shapes_record(environment, rows, host, pairs, rep_ms, start), indent=1) + "\n")
            torch.cuda.empty_cache()
    print(format_shapes(rows, host))
    print(f"\n{environment['gpu']}, torch {environment['torch']}, triton {environment['triton']}: wrote {path}")
    return path


def format_shapes(rows: list[ShapeRow], host: dict) -> str:
    """The printed table: group, shape, chosen config and schedule, the cost model's bound and floor, predicted and
    measured times, ratio; then the geometric mean ratio per group and the host time at 256^3."""
    table = [("group", "shape", "config", "schedule", "bound", "floor us", "predicted us", "tilepipe us",
              "baseline us", "ratio")]
    table += [(r.group, r.shape, r.config, f"{r.schedule} ({r.programs})", r.bound, f"{r.floor_us:.1f}",
               f"{r.predicted_us:.1f}", f"{r.tilepipe_us:.1f}", f"{r.baseline_us:.1f}", f"{r.ratio:.3f}")
              for r in rows]
    lines = [format_table(table), ""]
    for group in SHAPE_TABLE:
        ratios = [r.ratio for r in rows if r.group == group]
        if ratios:
            geo = math.exp(sum(map(math.log, ratios)) / len(ratios))
            lines.append(f"{group}: {len(ratios)} rows, geomean {geo:.3f}, worst {min(ratios):.3f}, "
                         f"{sum(r >= 1.0 for r in ratios)} at >= 1.0x")
    us = host["us_per_call"]
    lines.append(f"host time per call at {host['shape']}: tilepipe {us['tilepipe']} us, torch.matmul {us['torch']} us")
    return "\n".join(lines)
