"""The step between checking a call and staging its operands: which GEMM runs a checked problem (the device's target),
in which configuration and schedule (host/configs.py's choice, or the caller's), checked against the problem."""

from dataclasses import replace
from functools import cache, lru_cache
from typing import NamedTuple

import torch

from tilepipe.host.checks import (CONTIGUOUS, Fp8Problem, GroupedProblem, MatmulProblem, check_cluster, check_pieced,
                                  check_pingpong, check_schedule, check_subtiles, check_swap_ab)
from tilepipe.host.configs import (LARGE_SUBTILED_16BIT, LARGE_SUBTILED_FP32, MEDIUM, SCALE_BLOCK,
                                   SM100_BLOCKWISE_CONFIGS, SMALL, MatmulConfig, config_for, fp8_config_for,
                                   fp8_configs, fp8_schedule_for, schedule_for, sm100_blockwise_config, sm100_config,
                                   sm100_fp8_config, swap_config, with_stages_that_fit)
from tilepipe.host.device import device_target, sm_count
from tilepipe.host.gpus import device_model
from tilepipe.host.staging import reads_b_kmajor
from tilepipe.kernels.epilogue_functions import GATE_COLUMNS, columns_in
from tilepipe.kernels.quantize_epilogues import SCALE_GROUP


class GemmChoice(NamedTuple):
    """The GEMM a problem runs: its target (sm_90a or sm_100a), configuration, schedule, and whether it reads B
    K-major (B's layout, or the configuration's need)."""
    arch: str
    cfg: MatmulConfig
    schedule: str
    b_kmajor: bool


def choose_matmul(problem: MatmulProblem) -> GemmChoice:
    """The GEMM for a 16-bit problem with work (M, N, K > 0): the caller's config and scheduler where given, else
    config_for's and schedule_for's (sm100_config and the static schedule on sm_100a). ValueError names a config or
    scheduler that is not built for this problem on this device."""
    M, N, K, device, epilogue = problem.M, problem.N, problem.K, problem.device, problem.epilogue
    has_c = problem.c is not None
    own_c = has_c and problem.c.dtype != problem.out_dtype  # an fp32 C under a 16-bit D
    arch = device_target(device)
    check_schedule(problem.scheduler, arch)
    if arch == "sm_100a" and epilogue is not None:
        raise ValueError("fused epilogues (activations, gated linears) are built for sm_90a (Hopper) only")
    if arch == "sm_100a":
        schedule = problem.scheduler or "static"
        c_dtype = problem.c.dtype if has_c else None
        cfg = problem.config or sm100_config(M, N, problem.a.dtype, problem.out_dtype, sm_count(device), c_dtype,
                                             schedule)
    else:
        gated = epilogue is not None and halves_columns(epilogue)  # a gated GEMM runs the static schedule
        cfg = problem.config or fused_config(problem, gated) or config_for(
            M, N, K, problem.a.dtype, problem.out_dtype, problem.b_kmajor, device, own_c, problem.scheduler, has_c)
        schedule = problem.scheduler or ("static" if gated else schedule_for(M, N, K, cfg, device_model(device)))
    check_cluster(cfg, schedule, arch, has_c)
    b_kmajor = problem.b_kmajor or reads_b_kmajor(problem.b, cfg)
    check_swap_ab(cfg, b_kmajor, arch)
    check_pieced(cfg, schedule, arch, own_c, problem.out_dtype)
    check_subtiles(cfg, arch)
    check_pingpong(cfg, schedule, arch, has_c)
    return GemmChoice(arch, cfg, schedule, b_kmajor)


def fused_config(problem: MatmulProblem, gated: bool) -> MatmulConfig | None:
    """The configuration of a GEMM with a fused epilogue (api/linear.py's ops): gated_config's for a gated one (B
    K-major: the weight's rows unit-strided), else activation_config's (None without an epilogue: matmul's choice)."""
    M, N, K, dtype, device = problem.M, problem.N, problem.K, problem.a.dtype, problem.device
    if gated:
        return gated_config(M, N, K, dtype, device, problem.b.stride(0) == 1)
    return activation_config(M, N, K, dtype, device, problem.epilogue)


@cache
def halves_columns(epilogue: object) -> bool:
    """Whether a fused epilogue function writes half the GEMM's columns (a gated one), kept per function: columns_in,
    a constexpr function, costs several microseconds a call."""
    return columns_in(epilogue) == 2


def activation_config(M: int, N: int, K: int, dtype: torch.dtype, device: int,
                      epilogue: object) -> MatmulConfig | None:
    """linear's configuration: matmul's choice (None: matmul makes it), but with an activation D in 64-column
    sub-tiles where matmul would write more than 96 values a thread at once (the whole stage of the 128x256 tile or
    the ping-pong's 128x128), which spills GELU's erf (a cluster's tile: LARGE_SUBTILED_16BIT, alone)."""
    if epilogue is None:
        return None
    cfg = config_for(M, N, K, dtype, dtype, True, device, False, None, False)
    if cfg.tile_m * cfg.epilogue_cols <= 96 * 32 * cfg.num_warps:
        return cfg
    return LARGE_SUBTILED_16BIT if cfg.cluster.num_ctas > 1 else replace(cfg, epilogue_n=GATE_COLUMNS.value)


def gated_config(M: int, N: int, K: int, dtype: torch.dtype, device: int, b_kmajor: bool = True) -> MatmulConfig:
    """The configuration of a gated GEMM of N = 2H columns: for M <= 32 with B K-major (the packed weight), swap-AB's
    128-row tile (two warpgroups: one gate-up pair of N, into 64 columns of D), which streams the weight as matmul's
    swap-AB does; else matmul's choice where it is a power-of-two tile of 128 or 256 columns without swap-AB or a
    cluster (its own ping-pong form too), else the 64x128 (M <= 64) or 128x128 tile. D always in 64-column
    sub-tiles (a 128-column part of the accumulator: one gate-up pair)."""
    if M <= 32 and b_kmajor:
        return replace(swap_config(M, dtype, 2 * GATE_COLUMNS.value), epilogue_n=GATE_COLUMNS.value)
    cfg = plain_tile(M, N, K, dtype, device, pingpong=True)
    if cfg.tile_n == 256 and cfg.epilogue_n is None:
        return LARGE_SUBTILED_16BIT  # its fourth operand stage in the room the whole D stage took
    return replace(cfg, epilogue_n=GATE_COLUMNS.value)


@lru_cache(maxsize=256)
def choose_linear_fp8(M: int, N: int, K: int, dtype: torch.dtype, device: int) -> GemmChoice:
    """linear_fp8's GEMM (sm_90a only, static schedule, B K-major: the weight's rows): fp8_output_config's tile. Kept
    per shape (a decode call would otherwise pay the cost model each time; a later tilepipe.autotune is not seen by
    shapes already called)."""
    return GemmChoice(hopper_target(device, "linear_fp8"), fp8_output_config(M, N, K, dtype, device), "static", True)


def fp8_output_config(M: int, N: int, K: int, dtype: torch.dtype, device: int) -> MatmulConfig:
    """matmul's tile where it is a 128- or 256-column one without swap-AB, pieces, a cluster or ping-pong (whose D
    is 16-bit), else 64x128 (M <= 64) or 128x128; D in 128-column sub-tiles where the tile has 256, so each epilogue
    part holds whole 1x128 groups."""
    cfg = plain_tile(M, N, K, dtype, device, pingpong=False)
    return replace(cfg, epilogue_n=SCALE_GROUP.value if cfg.tile_n == 256 else None)


def plain_tile(M: int, N: int, K: int, dtype: torch.dtype, device: int, pingpong: bool) -> MatmulConfig:
    """The fused epilogues' tile (gated_config's, fp8_output_config's): matmul's static choice (B K-major) where it is
    one CTA's tile of 128 or 256 columns without swap-AB or pieces (nor ping-pong unless `pingpong`), else 64x128
    (M <= 64) or 128x128 with as many operand stages as fit, as matmul runs them (modelled_config): at MEDIUM's
    table entry's four stages gated_linear 768x6144x4096 ran 0.89 of eager, at six 1.00
    (bench/results/archive/plain-tile-stages-h200.json)."""
    cfg = config_for(M, N, K, dtype, dtype, True, device, False, "static", False)
    if (cfg.swap_ab or cfg.pieced or cfg.cluster.num_ctas > 1 or cfg.pingpong and not pingpong
            or cfg.tile_n not in (128, 256)):
        return with_stages_that_fit(SMALL if M <= 64 else MEDIUM, dtype)
    return cfg


def choose_matmul_fp8(problem: Fp8Problem) -> GemmChoice:
    """The FP8 GEMM for a problem with work (M, N, K > 0): the caller's config and scheduler where given, else
    fp8_config_for's and fp8_schedule_for's (a cluster: static, which the scaled kernel's stream-K takes; on sm_100a
    sm100_fp8_config or the blockwise tile, static). B is always read K-major. ValueError names a config or scheduler
    that is not built for this problem on this device."""
    M, N, K, device, config = problem.M, problem.N, problem.K, problem.device, problem.config
    blockwise = problem.mode == "blockwise"
    arch = device_target(device)
    if problem.scheduler is not None and arch == "sm_100a":
        raise ValueError("scheduler: the sm_100a FP8 GEMMs run the static schedule only")
    if config is not None and config.swap_ab and blockwise:
        raise ValueError("config: the blockwise FP8 kernel has no swap-AB variant (swap_ab=False)")
    if arch == "sm_100a" and blockwise:
        cfg, schedule = config or sm100_blockwise_config(problem.out_dtype), "static"
        tile = SM100_BLOCKWISE_CONFIGS[0]
        if (cfg.block_m, cfg.block_n, cfg.block_k, cfg.c_stages) != (tile.block_m, tile.block_n, tile.block_k, 1):
            raise ValueError(f"config: the sm_100a blockwise FP8 kernel takes {tile.block_m} x {tile.block_n} x "
                             f"{tile.block_k} tiles and c_stages = 1 (one D buffer); got {cfg.block_m} x "
                             f"{cfg.block_n} x {cfg.block_k}, c_stages = {cfg.c_stages}")
    elif arch == "sm_100a":
        cfg, schedule = config or sm100_fp8_config(M, N, problem.out_dtype, sm_count(device)), "static"
    else:
        gpu = device_model(device)
        cfg = config or fp8_config_for(M, N, K, blockwise, problem.out_dtype, gpu)
        schedule = problem.scheduler or ("static" if cfg.cluster.num_ctas > 1 else
                                         fp8_schedule_for(M, N, K, cfg, blockwise, gpu))
    check_cluster(cfg, schedule, arch, pair=False)  # the sm_100a FP8 GEMM has no two-CTA form
    check_swap_ab(cfg, True, arch)  # FP8's B is always K-major
    return GemmChoice(arch, cfg, schedule, True)


GROUPED_GROUP_M = 16
"""Rows of tiles a grouped GEMM's raster walks together (a group's last band is shorter: each band reads its expert's B
once). On the H200 16 ran 1.000-1.044x the dense GEMM's 8 on the 12 rows of bench_grouped (uniform, Zipf, quarter-empty;
Zipf and quarter-empty +1-4%), 4 and 32 lost on some: docs/perf-log.md row 111."""
GROUPED_SMALL = MatmulConfig(64, 128, 64, stages=8, c_stages=2, epilogue_n=64, num_warps=4, group_m=GROUPED_GROUP_M)
"""The tile of groups of few rows (decode): one MMA warpgroup on 64 rows, so a k-step loads half the A rows that the
128-row tile loads past its group, and twice the tiles share the experts' B stream. On 12 decode rows on the H200
(512 tokens over 32 experts of 4096x7168 and 7168x2048, 256 over 8 of 28672x4096, 1024 over 64 of 2048x7168; uniform,
Zipf, quarter-empty) it ran 1.024-1.175x the 128x256 tile (perf-log row 112)."""
SMALL_GROUP_ROWS = 64
"""Rows per group (mean, or grouped_mm_masked's expected_m) up to which the grouped GEMM takes GROUPED_SMALL: the
measured decode rows had 16-32; above 64 a group fills a 128-row tile's rows on average."""
SWAP_GROUP_ROWS = 32
"""Rows per group up to which a grouped GEMM without an epilogue, B K-major, takes swap-AB's tile (grouped_swap_tile),
which holds that many of a group's rows: on perf-log row 112's 12 decode rows (16 and 32 rows a group; uniform, Zipf,
quarter-empty) it ran 0.974-1.035x GROUPED_SMALL, geomean 1.017 (bench/results/archive/grouped-swap-ab-h200.json)."""


def choose_grouped(problem: GroupedProblem, expected_m: int | None, plain: bool = False) -> GemmChoice:
    """The grouped GEMM for a problem with work (grouped_matmul_kernel, sm_90a only): grouped_config's tile for the
    rows a group holds (`expected_m`, the masked form's hint, else the mean M / G; `plain`: D = A @ B, no epilogue),
    the layout's schedule (the dynamic one where the caller asked for it)."""
    arch = hopper_target(problem.device, "grouped_mm")
    per_group = expected_m if expected_m is not None else problem.M / max(problem.G, 1)
    cfg = grouped_config(problem.K, problem.out_dtype, problem.b_kmajor, problem.columns_in == 2, per_group, plain)
    return GemmChoice(arch, cfg, "dynamic" if problem.scheduler == "dynamic" else problem.layout, problem.b_kmajor)


def hopper_target(device: int, op: str) -> str:
    """sm_90a, the grouped GEMMs' only target; RuntimeError naming `op` and the device's target elsewhere."""
    arch = device_target(device)
    if arch != "sm_90a":
        raise RuntimeError(f"{op} is built for sm_90a (Hopper); this GPU is {arch}")
    return arch


def grouped_config(K: int, out_dtype: torch.dtype, b_kmajor: bool, gated: bool = False,
                   rows_per_group: float = float("inf"), plain: bool = False) -> MatmulConfig:
    """Swap-AB's tile (grouped_swap_tile) where groups hold at most SWAP_GROUP_ROWS rows and the call is `plain` (no
    bias or epilogue) with b K-major; else GROUPED_SMALL where they hold at most SMALL_GROUP_ROWS, else the 128x256
    tile with D in sub-tiles (matmul's LARGE_SUBTILED forms), both in bands of GROUPED_GROUP_M rows of tiles; its BK
    halved where a row-major b's K is not a multiple of it (B's experts are stacked along K there, so a k-step must
    not reach into the next one; K is a multiple of 16, checks.py check_grouped). A gated fp32 D takes 64-column
    sub-tiles (a gate-up pair: 128 accumulator columns) beside three operand stages."""
    if plain and b_kmajor and rows_per_group <= SWAP_GROUP_ROWS:
        return grouped_swap_tile(out_dtype)
    return grouped_tile(rows_per_group <= SMALL_GROUP_ROWS, out_dtype, gated, None if b_kmajor else K)


@cache
def grouped_swap_tile(out_dtype: torch.dtype) -> MatmulConfig:
    """Swap-AB's grouped tile: 128 of B's N (two MMA warpgroups) by SWAP_GROUP_ROWS of a group's rows (matmul's
    swap_config), its raster in bands of one row of B's tiles, so the tiles of a group's rows that share a B tile
    have consecutive ids, run side by side and read it once from DRAM. Measured before it: 64 of B's N ran 0.93-0.97x
    the 64-row tile on Zipf sizes (its B tiles taken by twice as many tiles), and bands of 16 rows of B's tiles
    0.67-0.87x wherever a group passed one tile's rows (B read again from DRAM): docs/gpu-runs/
    2026-11-30p-h200-wgrad-bounds.txt, calls 6-9."""
    return replace(swap_config(SWAP_GROUP_ROWS, out_dtype, 128), group_m=1)


@lru_cache(maxsize=256)
def grouped_tile(small: bool, out_dtype: torch.dtype, gated: bool, row_major_k: int | None) -> MatmulConfig:
    """grouped_config's choice, kept per what decides it (a new choice costs ~5 us, paid on every grouped call): the
    small tile or not, D's dtype, a gated epilogue, and K where b is row-major (None: K-major)."""
    if small:
        cfg = GROUPED_SMALL
    else:
        cfg = replace(wgrad_config(out_dtype), group_m=GROUPED_GROUP_M)
    if gated and cfg.epilogue_n != GATE_COLUMNS.value:
        cfg = replace(cfg, epilogue_n=GATE_COLUMNS.value, stages=3)
    if row_major_k is None or row_major_k % cfg.block_k == 0:
        return cfg
    return replace(cfg, block_k=32 if row_major_k % 32 == 0 else 16)


def choose_grouped_fp8(blockwise: bool, out_dtype: torch.dtype, device: int, scheduler: str | None = None
                       ) -> GemmChoice:
    """The grouped FP8 GEMM (sm_90a only, B K-major): grouped_fp8_config's tile, the contiguous rows' schedule (offs'
    row ends, as grouped_mm's), or their dynamic one where the caller asked for it."""
    return GemmChoice(hopper_target(device, "grouped_mm_fp8"), grouped_fp8_config(blockwise, out_dtype),
                      "dynamic" if scheduler == "dynamic" else CONTIGUOUS, True)


@cache
def grouped_fp8_config(blockwise: bool, out_dtype: torch.dtype) -> MatmulConfig:
    """Blockwise: matmul_fp8's blockwise 128x128 tile (BN = BK = 128: one B scale a K tile) with as many stages as
    fit; per-row: grouped_mm's 128x256 tile with D in sub-tiles, BK = 128 (128 bytes of fp8). Kept per argument pair
    (a new choice costs ~5 us, paid on every grouped_mm_fp8 call)."""
    if blockwise:
        return fp8_configs(True, out_dtype)[0]
    return replace(wgrad_config(out_dtype), block_k=SCALE_BLOCK)


def choose_grouped_wgrad(out_dtype: torch.dtype, b_kmajor: bool, device: int) -> GemmChoice:
    """The weight-gradient GEMM (sm_90a only; its k-grouped scheduler, schedulers/kgrouped.py): wgrad_config's tile."""
    return GemmChoice(hopper_target(device, "grouped_mm's weight-gradient form"), wgrad_config(out_dtype), "kgrouped",
                      b_kmajor)


def wgrad_config(out_dtype: torch.dtype) -> MatmulConfig:
    """The 128x256 tile with D in sub-tiles (matmul's LARGE_SUBTILED forms; fp32: 128x32 sub-tiles): each group's M x N
    is a whole GEMM of K_g, and a MoE's (H x D per expert) fills the GPU many times over."""
    return LARGE_SUBTILED_FP32 if out_dtype == torch.float32 else LARGE_SUBTILED_16BIT
