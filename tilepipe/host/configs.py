"""Every configuration decision in one place: the tile/stage tables of the bf16/fp16 and FP8 GEMMs, the cost model
(wave efficiency, stream-K, restaging) on a GPU model's figures and fitted constants (host/gpus: GpuModel, passed as
`gpu`), the heuristics that choose per shape, and the autotune cache lookup."""

import json
import os
import sys
from dataclasses import dataclass, replace
from functools import cache, cached_property
from pathlib import Path

import torch

from tilepipe.host.device import GL_DTYPES
from tilepipe.host.gpus import GpuModel, device_model
from tilepipe.kernels.blockwise_scales import SCALE_BLOCK as BLOCKWISE_SCALE_BLOCK
from tilepipe.pipeline.cluster import Cluster
from tilepipe.pipeline.pieces import TilePieces
from tilepipe.schedulers import KERNEL_SCHEDULE


@dataclass(frozen=True)
class MatmulConfig:
    """Tile shape and stage counts of the warp-specialized GEMM (num_warps counts the MMA role's warps). A cluster
    of `cluster_m` x `cluster_n` CTAs (2x1 or 1x2) works on a (cluster_m * block_m) x (cluster_n * block_n) tile,
    each CTA on its own block_m x block_n; the operand the CTAs share is loaded once and multicast. With `swap_ab`
    the kernel computes D^T = B^T A^T (B K-major): its block_m rows run along N, so a small M becomes the wgmma's
    narrow N side, and block_n columns along M. With `epilogue_n` the epilogue writes D's tile in block_m x
    epilogue_n sub-tiles through `c_stages` output stages of that size, which leaves room for more operand stages.
    With `pingpong` two MMA warpgroups of num_warps take turns, each a whole tile with `c_stages` output stages of its
    own (kernels/matmul_pingpong.py): one's epilogue runs while the other's main loop does. With `split_multicast`
    a cluster's CTAs each issue their half of the shared operand's tile to both (pipeline/multicast.py; K-major
    operands), where without it the first CTA issues the whole tile."""
    block_m: int
    block_n: int
    block_k: int
    stages: int
    c_stages: int = 1
    group_m: int = 8
    num_warps: int = 8
    cluster_m: int = 1
    cluster_n: int = 1
    swap_ab: bool = False
    epilogue_n: int | None = None
    pingpong: bool = False
    split_multicast: bool = False

    @cached_property
    def cluster(self) -> Cluster:
        """The cluster shape, built (and checked) once a config: the cost model reads it in every prediction."""
        return Cluster(self.cluster_m, self.cluster_n)

    @property
    def tile_m(self) -> int:
        """Rows of the tile one program (a cluster) computes."""
        return self.block_m * self.cluster_m

    @property
    def tile_n(self) -> int:
        """Columns of the tile one program (a cluster) computes."""
        return self.block_n * self.cluster_n

    @property
    def pieced(self) -> bool:
        """Whether a CTA's tile has a side held as power-of-two pieces (pipeline/pieces.py: 96, 160, 192)."""
        return TilePieces(self.block_m, self.block_n).pieced

    @property
    def epilogue_cols(self) -> int:
        """Columns the epilogue writes at a time, an output stage's: epilogue_n, or the whole tile's."""
        return self.epilogue_n or self.tile_n

    def tiling(self) -> dict[str, tuple[int, int] | int | None]:
        """matmul_kernel's TILE and EPILOGUE_N: the tile where its descriptors' blocks do not give it (a pieced tile,
        or D in sub-tiles), and D's sub-tile columns."""
        tiled = self.pieced or self.epilogue_n is not None
        return {"TILE": (self.tile_m, self.tile_n) if tiled else None, "EPILOGUE_N": self.epilogue_n}


SPLIT_MULTICAST = False
"""Whether the clusters the host picks split their multicast (each CTA issues its half of the shared tile:
pipeline/multicast.py; B K-major in the 2x1 cluster config_for takes), or leave it to the first CTA. Off: on the
H200 the split form runs exact but 0.94-0.98x the leader-issued one (0.84-0.86x blockwise; bench/results/
split-h200-v2.json, docs/perf-log.md row 110)."""
LARGE_16BIT = MatmulConfig(128, 256, 64, stages=3)
LARGE_SUBTILED_16BIT = MatmulConfig(128, 256, 64, stages=4, c_stages=2, epilogue_n=64)
"""LARGE_16BIT's tile with D written in 128x64 sub-tiles through two 16 KiB stages instead of one 64 KiB stage, which
makes room for a fourth operand stage (as cuBLAS's 4-stage 256x128 kernel keeps a ~16 KiB epilogue buffer). Static
and dynamic: 1.6-4.3% faster than LARGE_16BIT on 9 of 10 mid-size shapes, equal at 4096^3; under stream-K within
-2%..+3% (its partial sums travel in eight 16 KiB sub-tiles), so stream-K keeps LARGE_16BIT
(bench/results/archive/subtile-ab-h100.json, subtile-ab-streamk-h100.json; docs/perf-log.md row 62)."""
LARGE_SUBTILED_FP32 = MatmulConfig(128, 256, 64, stages=4, c_stages=2, epilogue_n=32)
"""The 128x256 tile for an fp32 D, which only D in sub-tiles lets fit (the whole fp32 tile is 128 KiB): 128x32
sub-tiles through two 16 KiB stages beside four operand stages; static (static_form)."""
# gpu.wide_fp32_min_k_with_c: With C, LARGE_SUBTILED_FP32 only from this K: at K = 1024 (16 k-steps a tile) its C sub-
# tiles' loads cost more than the wider tile saves (0.92-1.02x the 128x128 tile on 9 grid cases), at 2048 0.98-1.07x,
# from 2560 on 1.01-1.34x (bench/results/archive/fp32-d-large-tile-moves-h100.json).
MEDIUM = MatmulConfig(128, 128, 64, stages=4)
PINGPONG_16BIT = MatmulConfig(128, 128, 64, stages=6, c_stages=1, num_warps=4, epilogue_n=64, pingpong=True)
"""Two MMA warpgroups taking turns at 128x128 tiles (kernels/matmul_pingpong.py), D in 128x64 sub-tiles through one
16 KiB stage a turn beside six operand stages; static, 16-bit D, no C. It hides each tile's epilogue under the other
turn's main loop, at gpu.pingpong_step_cost a k-step: 1.06x the pieced 192x128 tile at 1536x8960x1536 and 1.01-1.15x
matmul's earlier choice on the 19 of 40 grid shapes the ping-pong round takes it for (perf-log row 72)."""
LARGE_FP32 = MEDIUM  # fp32 tiles are twice as large: the largest with a whole output stage is the medium one
MEDIUM_FP32_SOURCE = MEDIUM
"""A 16-bit D with an fp32 C, whose C takes its own 64 KiB stage: the four operand stages still fit (229.5 of 232 KB).
Three, its count before, ran 1.18-1.27x slower on all 14 shapes timed (4096^3 287.4 against 226.9 us;
bench/results/archive/fp32-source-stages-probe-h100.json, docs/perf-log.md row 94)."""
SMALL = MatmulConfig(64, 128, 64, stages=6, num_warps=4)  # one wgmma warpgroup
FP32_SOURCE_CONFIGS = (MEDIUM_FP32_SOURCE, SMALL)
PIECED_SUBTILED_16BIT = MatmulConfig(128, 192, 64, stages=5, c_stages=2, epilogue_n=32)
"""128x192 (a 128 and a 64 column piece) with D in 128x32 sub-tiles through two 8 KiB stages, which makes room for a
fifth operand stage (cuBLAS's 128x192 kernel has five): against four stages beside the whole 48 KiB output tile
1.00-1.09x (768x4096x4096 43.97 -> 40.22 us, 512x11008x4096 80.19 -> 75.94, 384x4096x4096 42.46 -> 39.52;
bench/results/archive/pieced-subtiles-probe-h100.json, docs/perf-log.md row 85)."""
PIECED_WHOLE_16BIT = MatmulConfig(192, 128, 64, stages=4)
"""192x128 (a 128 and a 64 row piece), four operand stages beside the whole output tile; also the stages every pieced
tile's catalogue variant runs with (host: variant_config)."""
NARROW_WIDE_PIECED_16BIT = MatmulConfig(64, 192, 64, stages=6, num_warps=4)
"""64x192 on one wgmma warpgroup (192 columns as a 128 and a 64 piece), six operand stages: for M just over 128, three
rows of 64 where two of 128 compute 256 rows. H200, against matmul's choice before it (128x128 ping-pong) and cuBLAS:
129x8192x8192 50.3 against 53.5 us (cuBLAS 47.2), 160x8192x8192 50.6 against 55.0, 192x8192x8192 51.1 against 54.8
(cuBLAS 52.6); slower where its tiles leave a wave short (N = 4096: 26.5 against 21.8 at 129x4096x4096) or at M = 256
(80.3 against 55.3 at 256x8192x8192): bench/results/archive/wide64-probe-h200.json. 64x256 ran 1.2-1.6x slower than it
on all 20 shapes there."""
PIECED_16BIT = (PIECED_SUBTILED_16BIT, PIECED_WHOLE_16BIT, MatmulConfig(128, 160, 64, stages=5),
                MatmulConfig(128, 96, 64, stages=7), NARROW_WIDE_PIECED_16BIT)
"""Tiles with a side held as power-of-two pieces (pipeline/pieces.py), 16-bit D and C, static or dynamic, as many
operand stages as fit: widths between the powers of two fill waves that those tiles leave short. 128x192 first, which
takes ties (equal waves) up to gpu.subtiled_first_max_m. At 1536x8960x1536 192x128 measured 71.3 us against 72.3 for
128x192 with four stages, 72.9 for 192x192 (whose 64-row tail runs at 0.947 of the full rate) and 76.3 / 74.5 for
128x256 static / stream-K; at 2304x2816x8192 146.0 against 152.6 for 128x256 stream-K
(bench/results/archive/pieced-tiles-h100.json). 128x160 and 128x96 (a 32-wide piece each) as cuBLAS's 128x160 and 128x96 at
mid-size M: 640x4096x14336 117.1 us against 124.4 for 128x192 and 138.8 for the choice before them, 1024x5120x5120
82.3 against 91.4, 384x4096x4096 31.2 against 32.5 (bench/results/archive/tile-widths-probe-h100.json). Last,
NARROW_WIDE_PIECED_16BIT on one warpgroup."""
NARROW_PIECED_16BIT = MatmulConfig(64, 96, 64, stages=10, num_warps=4)
"""64x96 on one wgmma warpgroup (96 columns as a 64 and a 32 piece), ten operand stages: it wins a tie at the DRAM
floor by running more programs in one wave (pieced_candidates, small_m_rounds; on the grid of
bench/results/archive/narrow-pieced-moves-h100.json M 65-384 by N 2048-6144; on the 16 shapes of
bench/results/archive/narrow-pieced-probe-h100.json that rule takes it on four, each faster than matmul's choice then:
192x4096x4096 26.39 -> 24.58 us, 128x6144x4096 31.11 -> 30.27, and leaves it out of the twelve where it was 1-11%
slower), and with B K-major it challenges in the tile round (129x4096x14336 on the H200 52.9 -> 47.9 us)."""
# gpu.subtiled_first_max_m: Up to this M (10 rows of 128-row tiles) PIECED_SUBTILED_16BIT takes the ties with 192x128,
# above it 192x128 does: where it took them on a 192-shape grid it ran 1.002-1.112x at M <= 1280 (20 shapes:
# 768x4096x4096 44.1 -> 41.8 us, 384x7168x2048 30.1 -> 27.0) and 0.969-1.064x above (9 of 14 slower: 2304x4096x11008
# 296.5 -> 305.9). The fifth stage hides the first loads' latency, which counts for less the more waves follow
# (docs/perf-log.md row 85, bench/results/archive/pieced-subtiled-moves-h100.json).
# gpu.pieced_step_cost: What predict_us counts a k-step of a 128-row tile of these widths at, against the 8-warp rate:
# their measured over predicted times beside 128x192's over 15 shapes (tile-widths-probe-h100.json: 128x160 a median
# 1.03x 128x192's, 128x96 1.13-1.15x its prediction on the one-wave shapes where it is fastest). A 32-wide piece reads
# A once more a k-step for a quarter (160) or a third (96) of the width.
PIECED_MIN_GAIN = 1.05
"""A pieced tile's handicap against the incumbent's static waves (pieced_candidates): it must be predicted this much
faster."""
PIECED_OVER_STREAMK_GAIN = 1.0
"""... and against its stream-K: predicted no slower suffices, as stream-K's prediction is the less reliable one (it
ran up to 1.26x its predicted time, the pieced tiles within 0.96-1.04: bench/results/archive/streamk-choice-h100.json,
small-m-survey-h100.json). It moves 9 of 128 shapes of an LLM-like grid, which measured 0.98-1.24x stream-K there
(median 1.04; 512x11008x4096 1.24, 1536x4096x11008 1.22; pieced-vs-streamk-h100.json; docs/perf-log.md row 66)."""
MIN_WAVE_EFFICIENCY = 0.75
STREAMK_MIN_GAIN = 1.05
"""schedule_round's handicap on stream-K: it is picked where the static schedule is predicted at least this much
slower."""

STREAMK_FEW_ROWS = 4
# gpu.streamk_few_rows_cost: Where a large-M grid has at most STREAMK_FEW_ROWS rows of tiles, predict_us counts a
# stream-K split k-step as this many: at M = 512 in 128-row tiles stream-K ran 1.26, 1.19 and 1.05x its predicted time
# (mean 1.17) on all three shapes measured, while static waves ran 0.90-0.94x theirs (bench/results/archive/streamk-
# choice-h100.json, small-m-survey-h100.json). Few rows of tiles share each B panel among few tiles, which the static
# order reads once a wave and split units out of step (the likely cause; not measured apart). It moves config_for's
# choice to a pieced tile at M = 320 and 384 with N = 14336 and 13824 (pieced_candidates), 1.18-1.24x faster
# (streamk-few-rows-h100.json; docs/perf-log.md row 68).

# gpu.streamk_fixup_us: What stream-K's partial tiles add to a launch over an even split of the k-steps: ~8 us with
# the per-warp protocol (H200 A/B: 62.3 against 53.3 us without the fixup at 133 tiles, 36.9 against 29.2 at 2048^3;
# docs/perf-log.md row 14), rounded up; it was 15-21 us on the H100 with the per-thread one (scheduler-h100-v5.json).
# Those launches add one partial a finisher; streamk_fixup_us scales it to other tiles and shares. Measured with the
# partial tiles moved by the mma warps themselves; through shared memory and TMA (docs/perf-log.md row 46) about 2 us
# a launch less was measured (shapes-h100-v9.json): not refit yet, since that moves schedule_for's choices.

# gpu.unit_fill_us: What a unit of work's first k-step costs over a steady one (its pipeline fills): about 2.5 us
# against 0.75 at 128x256x64 in the H100 timelines of 2560^3 (docs/perf-log.md row 36). Stream-K at large M gives a
# program two partial units (a tile's head and another's tail) where whole tiles start once.
SECTOR_BYTES, LINE_BYTES = 32, 128
# gpu.restage_gain: What rows off 32-byte sectors cost a GEMM whose A and B both have them, as a share of its aligned
# time: H100, K = 3000 and 1000, 20-50% (docs/perf-log.md rows 17-18 and 22); the low side, so restaging errs towards
# not copying.
# gpu.copy_bytes_per_us: What the restaging copy moves, reads plus writes (~2.5 TB/s on an H100).

# gpu.sm_flops: One SM's share of the H100's sustained bf16 rate (about 700 TFLOP/s at 8192^3), to turn a tile into
# microseconds.


@cache
def choose_config(M: int, N: int, out_dtype: torch.dtype, sms: int,
                  candidates: tuple[MatmulConfig, ...] | None = None) -> MatmulConfig:
    """The largest tile whose persistent waves keep at least 75% of the SMs busy, else the best-filled one.

    Wave efficiency = tiles / (SMs x waves): 1024^3 has 32 tiles of 128x256 on 132 SMs (24%) but 128 of 64x128.
    `candidates` (largest first) replaces the default tiles: for an fp32 C with a 16-bit D (FP32_SOURCE_CONFIGS),
    or for other kernels (e.g. FP8).
    """
    candidates = candidates or default_configs(out_dtype)
    efficiency = lambda cfg: wave_efficiency(M, N, cfg, sms)  # noqa: E731
    return next((cfg for cfg in candidates if efficiency(cfg) >= MIN_WAVE_EFFICIENCY), max(candidates, key=efficiency))


def wave_efficiency(M: int, N: int, cfg: MatmulConfig, sms: int) -> float:
    """How full `cfg`'s persistent waves keep the SMs: tiles / (SMs x waves)."""
    tiles = tile_count(M, N, cfg)
    return tiles / (-(-tiles // sms) * sms)


def default_configs(out_dtype: torch.dtype) -> tuple[MatmulConfig, ...]:
    """The tiles matmul chooses from, largest first."""
    return (MEDIUM, SMALL) if out_dtype == torch.float32 else (LARGE_16BIT, MEDIUM, SMALL)


# gpu.epilogue_steps: How long a cooperative tile's epilogue holds its SM's tensor core, in the tile's own k-steps
# (about 1.3 us at 128x256): fitted with gpu.pingpong_step_cost to the ping-pong tile's time over matmul's choice on 40
# grid shapes of equal waves (bench/results/archive/pingpong-survey-h100.json: 1.03x at K = 1024, 0.98x at 2048, 0.96x
# at 4096). predict_us leaves it out (every cooperative tile pays it); the wave and ping-pong rounds count it
# (cooperative_us).
# gpu.pingpong_step_cost: A k-step of a 128x128 tile against half of one of 128x256 (the same fit): a 128-row wgmma
# pair reads B once per 64 rows and lands 33% more TMA bytes per flop, which shared memory's bandwidth feels; the
# cooperative 128x128's too.
PINGPONG_MIN_GAIN = 1.02
"""The ping-pong tile's handicap in its round: it must be predicted this much faster (the fit's residuals are 1-3%)."""
# gpu.large_few_rows_rate: What 128x256 (D in sub-tiles) ran against its predict_us time on grids of at most
# STREAMK_FEW_ROWS rows of tiles (M <= 512): the median of bench/results/archive/tile-rates-h100.json (perf-log row
# 71). Without this term the ping-pong round took the ping-pong tile over 128x256 at M = 320-512, 3-5% slower there
# (pingpong-moves-h100.json).


def mma_step_cost(cfg: MatmulConfig, gpu: GpuModel, in_bytes: int = 2) -> float:
    """What predict_us counts a k-step of `cfg` at against its full-rate flops: gpu.pingpong_step_cost for the ping-pong
    tile, else the reciprocal of its MMA warps' gpu.mma_efficiency, times gpu.pieced_step_cost for a pieced width and,
    for the cooperative 128x128 tile of 16-bit operands, gpu.pingpong_step_cost (fitted for both 128x128 tiles)."""
    if cfg.pingpong:
        return gpu.pingpong_step_cost
    cost = gpu.pieced_step_cost.get(cfg.block_n, 1.0) / gpu.mma_efficiency[cfg.num_warps]
    return cost * gpu.pingpong_step_cost if _cooperative_128(cfg) and in_bytes == 2 else cost


def _cooperative_128(cfg: MatmulConfig) -> bool:
    """Whether `cfg` is the cooperative 128x128 tile (two warpgroups of 64 rows, one CTA)."""
    return (cfg.block_m, cfg.block_n, cfg.num_warps, cfg.cluster.num_ctas) == (128, 128, 8, 1)


# ---- the one rule: candidates, their predicted times, the fastest ----------------------------------------


@dataclass(frozen=True)
class Candidate:
    """One choice the cost model weighs: `config` under `schedule`, its predicted time in us (predict_us plus the terms
    its round counts) and the margin it must win by (`handicap`, a factor on its time); `why` says what offered it."""
    config: MatmulConfig
    schedule: str
    time_us: float
    handicap: float = 1.0
    why: str = ""

    @property
    def cost_us(self) -> float:
        """What fastest compares: the predicted time times the handicap."""
        return self.time_us * self.handicap


@dataclass(frozen=True)
class Round:
    """One question the model answers by fastest: its candidates, in tie order (a tie goes to the first listed)."""
    question: str
    candidates: tuple[Candidate, ...]

    @property
    def winner(self) -> Candidate:
        return fastest(self.candidates)


def fastest(candidates: tuple[Candidate, ...] | list[Candidate]) -> Candidate:
    """The chooser of every round: the candidate of least handicapped time, the first listed on a tie."""
    return min(candidates, key=lambda candidate: candidate.cost_us)


def predicted(M: int, N: int, K: int, cfg: MatmulConfig, schedule: str, gpu: GpuModel, handicap: float = 1.0,
              why: str = "", in_bytes: int = 2, out_bytes: int = 2) -> Candidate:
    """`cfg` under `schedule` as a candidate at its predict_us time."""
    return Candidate(cfg, schedule, predict_us(M, N, K, cfg, schedule, gpu, in_bytes, out_bytes), handicap, why)


def pingpong_round(M: int, N: int, K: int, gpu: GpuModel, incumbent: Candidate) -> Round:
    """Two MMA warpgroups taking turns (PINGPONG_16BIT, static) against the tile round's winner, handicapped by
    PINGPONG_MIN_GAIN; the winner then counts what predict_us leaves out of a cooperative tile (cooperative_us). The
    predicted rule moved 66 of 400 grid shapes, each measured 1.00-1.19x faster (pingpong-moves-h100.json; perf-log row
    72). Where the winner is the cooperative 128x128 tile run static, it is not offered: the same tiles and waves with
    six stages and hidden epilogues (20 of 22 grid shapes 1.08-1.18x, two at M = 448 0.92-0.95x:
    pingpong-same-tile-moves-h100.json; perf-log row 76). On two rows of 128-row tiles or fewer the ping-pong tile is
    weighed against that tile only (the other tiles' errors there exceed the gain)."""
    cfg, schedule = incumbent.config, incumbent.schedule
    same_tile = _cooperative_128(cfg)
    pingpong = predicted(M, N, K, PINGPONG_16BIT, "static", gpu, PINGPONG_MIN_GAIN, "ping-pong")
    if same_tile and schedule == "static":
        candidates = (pingpong, )
    elif -(-M // PINGPONG_16BIT.block_m) <= 2 and not same_tile:
        candidates = (incumbent, )
    else:
        candidates = (pingpong, replace(incumbent, time_us=cooperative_us(M, N, K, cfg, schedule, gpu), handicap=1.0,
                                        why="cooperative: + exposed epilogues"))
    return Round("ping-pong", candidates)


def cooperative_us(M: int, N: int, K: int, cfg: MatmulConfig, schedule: str, gpu: GpuModel) -> float:
    """A cooperative tile's time as the wave and ping-pong rounds weigh it: predict_us plus its exposed epilogues
    (gpu.epilogue_steps of its k-steps a tile); on few rows of 128x256 tiles, times their measured rate there
    (gpu.large_few_rows_rate)."""
    parts = predicted_parts(M, N, K, cfg, schedule, gpu)
    tiles = -(-tile_count(M, N, cfg) // schedule_programs(M, N, K, cfg, gpu.sms, schedule))
    cooperative = (sum(parts.values())
                   + tiles * gpu.epilogue_steps * tile_us(cfg, cfg.block_k, gpu) * mma_step_cost(cfg, gpu))
    if -(-M // cfg.block_m) <= STREAMK_FEW_ROWS and (cfg.block_m, cfg.block_n) == (128, 256):
        cooperative *= gpu.large_few_rows_rate
    return cooperative


def schedule_for(M: int, N: int, K: int, cfg: MatmulConfig, gpu: GpuModel) -> str:
    """The tile scheduler matmul uses when not told (tilepipe/schedulers/): schedule_round's winner."""
    return schedule_round(M, N, K, cfg, gpu).winner.schedule


def schedule_round(M: int, N: int, K: int, cfg: MatmulConfig, gpu: GpuModel) -> Round:
    """`cfg`'s schedule as a round: stream-K with `cfg`'s tiles, at an even split of the k-steps plus its fixup
    (gpu.streamk_fixup_us) and two more pipeline fills (gpu.unit_fill_us), handicapped STREAMK_MIN_GAIN and listed
    first (it takes a tie), against `cfg`'s whole tiles in waves, static, both at predict_us (its k-steps' rate, loads
    and stream-K's split and fixup: with full-rate tile times instead the cooperative 128x128 tile never ran stream-K,
    which measured 1.03-1.12x its static waves and 1.04-1.12x the static 128x256 at M 768-3072 on the H200:
    bench/results/choices-streamk-round-h200.json, perf-log row 118). Tiles of another size are the wave round's
    question, not this one's.

    Stream-K is not a candidate for a partial wave of fewer tiles than SMs (smaller tiles fill it without a fixup) or
    whole waves, nor for a pieced tile (PIECED_16BIT: stream-K is not built for it), D in sub-tiles
    (LARGE_SUBTILED_16BIT: under stream-K it gains nothing over the whole output stage; docs/perf-log.md rows 62, 67)
    or the ping-pong tile. The dynamic scheduler never is: with equal tiles it cannot beat the static order
    (docs/scheduler.md), nor the 64-row tile's one warpgroup: under stream-K it ran 0.72-1.08x its static waves or the
    128-row tiles it replaced (geomean 0.93 on the 24 grid calls it took: choices-streamk-round-h200.json). Small M (M
    <= DECODE_M) weighs timed_schedules instead (schedule_by_time), split-K included.
    A cluster config's programs are its clusters: the same arithmetic over cluster tiles and sms / num_ctas programs."""
    static_only = cfg.pieced or cfg.epilogue_n is not None or cfg.pingpong
    if M <= DECODE_M and not static_only:
        return Round("schedule", timed_schedules(M, N, K, cfg, gpu))
    sms = gpu.sms // cfg.cluster.num_ctas
    tiles = tile_count(M, N, cfg)
    whole = predicted(M, N, K, cfg, "static", gpu, why="whole tiles in waves")
    if static_only or cfg.num_warps == 4 or tiles <= sms or tiles % sms == 0:
        return Round("schedule", (whole, ))
    streamk = predicted(M, N, K, cfg, "streamk", gpu, STREAMK_MIN_GAIN, "an even split + fixup + two fills")
    return Round("schedule", (replace(streamk, time_us=streamk.time_us + 2 * gpu.unit_fill_us), whole))


def streamk_step_cost(M: int, N: int, cfg: MatmulConfig, gpu: GpuModel) -> float:
    """What predict_us counts a stream-K k-step against a static one on a large-M grid (gpu.streamk_few_rows_cost where
    it has few rows of tiles, else 1); small M keeps its own calibration (gpu.swap_floor_us, split-K's fixup)."""
    rows = -(-(N if cfg.swap_ab else M) // cfg.tile_m)
    return gpu.streamk_few_rows_cost if M > DECODE_M and rows <= STREAMK_FEW_ROWS else 1.0


def config_for(M: int, N: int, K: int, dtype: torch.dtype, out_dtype: torch.dtype, b_kmajor: bool,
               device: int, own_source: bool = False, scheduler: str | None = None, has_c: bool = False
               ) -> MatmulConfig:
    """The configuration matmul uses on CUDA device `device`: the one tilepipe.autotune cached for this problem on
    this GPU, else modelled_config's for its model (device_model: its figures, fitted constants and SM count)."""
    cached = None if own_source else cached_config(M, N, K, dtype, out_dtype, b_kmajor, device)
    if cached is not None and not (cached.pingpong and has_c):  # the ping-pong kernel takes no C
        return cached
    return modelled_config(M, N, K, dtype, out_dtype, b_kmajor, device_model(device), own_source, scheduler,
                           has_c)


def modelled_config(M: int, N: int, K: int, dtype: torch.dtype, out_dtype: torch.dtype, b_kmajor: bool,
                    gpu: GpuModel, own_source: bool = False, scheduler: str | None = None, has_c: bool = False
                    ) -> MatmulConfig:
    """The configuration the cost model gives GPU model `gpu` (its SM count and fitted constants): the last round's
    fastest candidate (modelled_rounds), where that is the 64-row or the cooperative 128x128 table tile (SMALL,
    MEDIUM) with as many operand stages as fit. Those are predicted at the table's stages: eight for the 64-row tile
    against six ran 0.97-1.20x on the 71 grid shapes where that is the only change (geomean ~1.07), while predicting
    the fitted tile cost 256x11008x4096 its pieced 128x192 (50.4 -> 54.8 us): small-m-stages-moves-h100.json; 128x128
    with five stages (fp32 D; six with a C) against four 1.00-1.16x on all 72 grid cases where it moves (geomean 1.059:
    medium-stages-moves-h100.json; perf-log rows 88-89). An fp32 C (`own_source`) keeps its own stages."""
    cfg = modelled_rounds(M, N, K, dtype, out_dtype, b_kmajor, gpu, own_source, scheduler, has_c)[-1].winner.config
    fill = cfg in (SMALL, MEDIUM) and not own_source
    return with_stages_that_fit(cfg, out_dtype) if fill else cfg


def modelled_rounds(M: int, N: int, K: int, dtype: torch.dtype, out_dtype: torch.dtype, b_kmajor: bool,
                    gpu: GpuModel, own_source: bool = False, scheduler: str | None = None, has_c: bool = False
                    ) -> list[Round]:
    """matmul's choice as rounds of candidates, each round's winner the next one's incumbent: small M's (small_m_rounds)
    for M <= DECODE_M without an fp32 C, else the wave round (wave_round: the table tiles, each static or under
    stream-K), the schedule round of its winner (schedule_round), the tile round (that tile under the winning
    schedule, the incumbent, against the pieced tiles, pieced_candidates) and the ping-pong round (pingpong_round).
    Filters: the pieced and ping-pong tiles need a 16-bit D and C (`own_source`: an fp32 C needs its own smaller tiles)
    and rows on 32-byte sectors; a `scheduler` the caller asked for is the schedule round's one candidate (the tile
    round weighs what will run), and other than static or dynamic rules the pieced tiles out (stream-K and split-K are
    not built for them), other than static the ping-pong tile too, and so does a C (`has_c`: the ping-pong kernel
    takes none)."""
    if M <= DECODE_M and not own_source:
        return small_m_rounds(M, N, K, out_dtype, gpu, b_kmajor, has_c)
    tiles = FP32_SOURCE_CONFIGS if own_source else default_configs(out_dtype)
    aligned = K * dtype.itemsize % SECTOR_BYTES == 0
    wave = wave_round(M, N, K, out_dtype, tiles, aligned, b_kmajor, has_c, gpu, scheduler)
    if scheduler is None:
        schedule = schedule_round(M, N, K, wave.winner.config, gpu)
        incumbent = predicted(M, N, K, wave.winner.config, schedule.winner.schedule, gpu,
                              why="incumbent: the wave round")
    else:  # the caller's scheduler is the schedule round's one candidate: one prediction for both
        incumbent = predicted(M, N, K, wave.winner.config, scheduler, gpu, why="incumbent: the wave round")
        schedule = Round("schedule", (replace(incumbent, why="the caller's"), ))
    others = aligned and LARGE_16BIT in tiles
    pieced = pieced_candidates(M, N, K, gpu, incumbent, b_kmajor, has_c) if others and scheduler in (
        None, "static", "dynamic") else ()
    rounds = [wave, schedule, Round("tile", (*pieced, incumbent))]
    if others and not has_c and scheduler in (None, "static"):
        rounds.append(pingpong_round(M, N, K, gpu, rounds[-1].winner))
    return rounds


def wave_round(M: int, N: int, K: int, out_dtype: torch.dtype, tiles: tuple[MatmulConfig, ...], aligned: bool,
               b_kmajor: bool, has_c: bool, gpu: GpuModel, scheduler: str | None = None) -> Round:
    """The tile round's incumbent as a round: each of `tiles` under its schedule round's winner (stream-K with its
    handicap, or in the form it runs static: static_form; under the `scheduler` a caller names, which then runs it) at
    cooperative_us: its waves, its k-steps' rate
    (gpu.mma_efficiency of its MMA warps; the cooperative 128x128's gpu.pingpong_step_cost), its loads and its exposed
    epilogues. A tie goes to the tile that keeps more SMs busy (more programs stream the operands at the DRAM floor),
    then to the larger. It replaced a wave heuristic (the largest tile whose waves keep 75% of the SMs busy; 96 grid
    calls moved, archive/choices-wave-round-h200.json, perf-log row 117) and then took the 128x128 tile's stream-K too (63
    more, choices-streamk-round-h200.json, row 118)."""
    candidates = []
    for tile in tiles:
        schedule = schedule_round(M, N, K, tile, gpu).winner if scheduler is None else Candidate(tile, scheduler, 0.0)
        form = tile if schedule.schedule == "streamk" else static_form(tile, M, N, K, out_dtype, aligned, b_kmajor,
                                                                        has_c, gpu)
        candidates.append(Candidate(form, schedule.schedule, cooperative_us(M, N, K, form, schedule.schedule, gpu),
                                    schedule.handicap, f"{schedule.schedule} + exposed epilogues"))
    return Round("wave", tuple(sorted(candidates, key=lambda candidate: -busy_sms(M, N, candidate.config, gpu))))


def busy_sms(M: int, N: int, cfg: MatmulConfig, gpu: GpuModel) -> int:
    """The SMs `cfg`'s first wave keeps busy: its tiles (cluster tiles), at most its programs' CTAs."""
    return min(tile_count(M, N, cfg), gpu.sms // cfg.cluster.num_ctas) * cfg.cluster.num_ctas


def static_form(cfg: MatmulConfig, M: int, N: int, K: int, out_dtype: torch.dtype, aligned: bool, b_kmajor: bool,
                has_c: bool, gpu: GpuModel) -> MatmulConfig:
    """The form a table tile runs in static waves. The 128x256 tile: in a 2x1 cluster (B multicast) where A's rows are
    off 32-byte sectors and the clusters fill two waves (the one class where the cluster measured faster in every run:
    perf-log rows 33, 47, 49, 50), else with D in sub-tiles (LARGE_SUBTILED_16BIT). An fp32 D's 128x128 tile:
    LARGE_SUBTILED_FP32 where its waves are as full (half the tiles, each a k-step ~7% less time a flop) and, with C,
    K reaches gpu.wide_fp32_min_k_with_c: 1.06x the 128x128 tile on the 97 H100 grid cases it moves (0.99-1.34x),
    0.88-1.2x where its waves are emptier (fp32-d-large-tile-moves-h100.json; perf-log row 93). Offered as a candidate
    of its own instead, the wave round took it on fuller grids of 128x128 tiles, 0.96-1.0x on the H200 (row 117)."""
    if cfg == LARGE_16BIT:
        pair = replace(cfg, cluster_m=2, split_multicast=SPLIT_MULTICAST and b_kmajor)
        return pair if not aligned and tile_count(M, N, pair) >= 2 * (gpu.sms // 2) else LARGE_SUBTILED_16BIT
    wide = (out_dtype == torch.float32 and cfg == MEDIUM and not (has_c and K < gpu.wide_fp32_min_k_with_c)
            and wave_efficiency(M, N, LARGE_SUBTILED_FP32, gpu.sms) >= wave_efficiency(M, N, MEDIUM, gpu.sms))
    return LARGE_SUBTILED_FP32 if wide else cfg


def pieced_candidates(M: int, N: int, K: int, gpu: GpuModel, incumbent: Candidate, b_kmajor: bool, has_c: bool
                      ) -> tuple[Candidate, ...]:
    """The tile round's challengers, static (PIECED_16BIT; ties in list order: 128x192 up to gpu.subtiled_first_max_m,
    then 192x128). Against static waves (or the dynamic scheduler's, where the caller names it) each is handicapped
    PIECED_MIN_GAIN; against 128x128 and 64x128 they ran 1.13-1.73x faster on all 23 grid shapes they moved (perf-log
    row 70). Against stream-K only by PIECED_OVER_STREAMK_GAIN, with 128x256's own static waves with D in sub-tiles
    beside them. With B K-major, a tile that wins a tie with the static or dynamic incumbent at the DRAM floor
    (dram_tie_pays, which weighs both static; NARROW_PIECED_16BIT too) comes first, unhandicapped, the one on the most
    programs first: on the 366 cases of a 3840-case grid (M 65-512) where this moves matmul's choice 1.038x faster
    (geomean; 0.943-1.23): narrow-pieced-moves-h100.json, perf-log row 103; under a caller-named dynamic scheduler
    it keeps 192x4096x4096 K-major on 64x96 (64x128 ran 0.901x: scheduler-moves-h200.json, perf-log row 126).
    NARROW_PIECED_16BIT is a challenger too, handicapped, with B K-major (row-major B's 32-column boxes load slowly)
    and not over a half-empty last row with C (c_past_edge): on the 34 H200 grid calls that moves, 1.050x faster
    (geomean; 0.948-1.125, the lows on launch-bound 1024x1024), and on the 23 it leaves out 0.82-1.10
    (choices-narrow-round-ab-h200.json, perf-log row 147). None taller than M: it cannot move inside D (TileGrid
    INWARD), so its last row piece loads boxes mostly past A's last row, which run slowly (perf-log row 77); 192x128
    at 129x14336x4096 ran 55.4 us where the model said 44, the 64x192 tile 49.7 (archive/wide64-probe-h200.json;
    perf-log row 146)."""
    cfg, schedule = incumbent.config, incumbent.schedule
    fits = tuple(tile for tile in (*PIECED_16BIT, NARROW_PIECED_16BIT) if tile.block_m <= M)  # none taller than M
    order = PIECED_16BIT if M <= gpu.subtiled_first_max_m else (PIECED_WHOLE_16BIT, PIECED_SUBTILED_16BIT,
                                                                *PIECED_16BIT[2:])
    narrow = (NARROW_PIECED_16BIT, ) if b_kmajor and not c_past_edge(M, NARROW_PIECED_16BIT, has_c) else ()
    order = tuple(tile for tile in (*order, *narrow) if tile in fits)
    static = lambda tile, handicap, why: predicted(M, N, K, tile, "static", gpu, handicap, why)  # noqa: E731
    if schedule == "streamk":
        sub_tiled = (LARGE_SUBTILED_16BIT, ) if cfg == LARGE_16BIT else ()
        return tuple(static(tile, PIECED_OVER_STREAMK_GAIN, "pieced vs stream-K") for tile in order + sub_tiled)
    tied = () if not (b_kmajor and schedule in ("static", "dynamic")) else tuple(sorted(
        (tile for tile in fits if dram_tie_pays(M, N, K, gpu, cfg, tile, has_c)),
        key=lambda tile: -tile_count(M, N, tile)))
    return (*(static(tile, 1.0, "tie at the DRAM floor") for tile in tied),
            *(static(tile, PIECED_MIN_GAIN, "pieced") for tile in order if tile not in tied))


def dram_tie_pays(M: int, N: int, K: int, gpu: GpuModel, cfg: MatmulConfig, pieced: MatmulConfig, has_c: bool
                  ) -> bool:
    """Whether the static `pieced` tile wins a tie with static `cfg` at the DRAM floor (predict_us's "dram" bound for
    both: the same time) by running more programs in one wave, each streaming fewer operand bytes: the model's one-SM
    rate where B comes from DRAM (gpu.sm_dram_bytes_per_us) is above what these programs streamed, so it misses their
    difference. With C, not where the last row of tiles is half empty or less. On the 112 cases of a 3640-case grid
    (M 129-1024) that the tie alone moved, 128x96 against the 128x128 tile: the 81 this keeps 1.006-1.086x faster
    (geomean 1.048; 256x5120x4096 33.62 -> 31.47 us); the 31 it drops 0.85-1.06x (27 with C over a last row at most
    half full, 0.89-1.06; 4 whose pieced tiles exceed one wave, 0.85-1.00): bench/results/archive/dram-tie-moves-h100.json,
    docs/perf-log.md row 95."""
    at_floor = all(loop_bound(predicted_parts(M, N, K, tile, "static", gpu)) == "dram" for tile in (cfg, pieced))
    one_wave = tile_count(M, N, pieced) <= gpu.sms
    return (at_floor and one_wave and tile_count(M, N, pieced) > tile_count(M, N, cfg)
            and not c_past_edge(M, pieced, has_c))


def c_past_edge(M: int, tile: MatmulConfig, has_c: bool) -> bool:
    """With C, whether the last row of `tile`'s tiles is half empty or less: with C an edge tile stays where it is
    (TileGrid INWARD is for kernels without C), so its C boxes lie mostly past C's last row and load slowly (perf-log
    rows 77, 95)."""
    last_rows = M % tile.tile_m
    return has_c and 0 < last_rows <= tile.tile_m // 2


def tile_count(M: int, N: int, cfg: MatmulConfig) -> int:
    """The tiles of the programs (clusters) of `cfg` (of D^T, N x M, under swap-AB)."""
    rows, cols = (N, M) if cfg.swap_ab else (M, N)
    return -(-rows // cfg.tile_m) * -(-cols // cfg.tile_n)


def tile_us(cfg: MatmulConfig, K: int, gpu: GpuModel) -> float:
    """One tile's time at the full 16-bit rate of one of `gpu`'s SMs."""
    return 2.0 * cfg.block_m * cfg.block_n * K / gpu.sm_flops * 1e6


# ---- predicted time, and small M (decode) plans: 64-row tiles, split-K (issue 20) -------------------------

# gpu.dram_bytes_per_us: What a streaming GEMM gets from the H100's HBM3 (3.35 TB/s peak): the slope of the static
# decode rows of bench/results/archive/shapes-h100.json whose time is their bytes (the 64-row tile at N x K = 4096 x
# 4096, 6144 x 4096 and 14336 x 4096, M = 1 to 96: 24.4-57.6 us for 34-121 MB; least squares 2.62 TB/s,
# gpu.l2_dirty_bytes the intercept).
# gpu.l2_dirty_bytes: What a GEMM at the DRAM floor moves besides its operands and output, up to its operand bytes
# (the same fit's intercept: 7.6 us at gpu.dram_bytes_per_us, 19.8 MB; cuBLAS's rows give 9.3 us with its launch): the
# dirty lines do_bench's 256 MB write leaves in the 50 MB L2, written back as the operands' reads evict them (a likely
# cause, not measured apart: docs/perf-log.md row 21). A compute-bound GEMM hides it under its k-steps.
# gpu.load_latency_us: From a TMA load's issue to its landing, loaded: one SM keeps its stages' bytes in flight once
# per this long.
# gpu.sm_bytes_per_us: The most one SM's TMA loads bring in from L2 (about 64 bytes a clock at 1.75 GHz).
# gpu.sm_dram_bytes_per_us: The most one SM's TMA loads bring in where B comes from DRAM: at most two rows of tiles
# (small M), whose programs read each B panel at about the same time, so none finds its lines in L2. The 64-row tile's
# 24 KiB k-steps took 0.28-0.29 us (84-88 KB/us) at N x K = 4096 x 14336, M = 1 to 32, static on 32 SMs
# (bench/results/archive/shapes-h100.json), where its 8 stages at gpu.load_latency_us would allow 0.19; at M = 96 (two
# rows, 64 SMs) 0.26.
# gpu.launch_us: What a launch adds to its main loops: the launch, the prologue, the first loads' latency, the last
# epilogue.
# gpu.mma_efficiency: Share of gpu.sm_flops a tile's wgmma reaches, by MMA warps: a 4-warp 64-row tile measured 0.83
# (schedule_for).
# gpu.fp8_sm_flops: One SM's share of the H100's sustained fp8 rate (about 1300 TFLOP/s per-tensor at 8192^3, bench
# v10).
DECODE_M = 128
"""M up to this is small M: one or two rows of tiles, whose count the split of K must make up for."""
SPLIT_MIN_STEPS = 4
"""Split-K leaves each program at least this many k-steps, so its operand pipeline fills."""
SCHEDULES_BY_TIME = ("static", "splitk", "streamk")
"""The schedules schedule_by_time compares, preferred in this order on a tie (dynamic: never faster than static
with equal tiles; split-K before stream-K: one unit a program)."""


def predict_us(M: int, N: int, K: int, cfg: MatmulConfig, schedule: str, gpu: GpuModel, in_bytes: int = 2,
               out_bytes: int = 2) -> float:
    """Predicted kernel time of one GEMM on GPU model `gpu`: the sum of predicted_parts."""
    return sum(predicted_parts(M, N, K, cfg, schedule, gpu, in_bytes, out_bytes).values())


def predicted_parts(M: int, N: int, K: int, cfg: MatmulConfig, schedule: str, gpu: GpuModel, in_bytes: int = 2,
                    out_bytes: int = 2) -> dict[str, float]:
    """predict_us's terms, each in us: the main loops as their limit ("mma": the busiest program's k-steps at its wgmma
    rate, gpu.flops_per_sm of `in_bytes` operands (1: fp8); "stream": the same k-steps at its operand loads' rate,
    at most gpu.sm_dram_bytes_per_us where one or two rows of tiles read B from DRAM; "dram": every operand and
    output byte once at DRAM speed plus gpu.l2_dirty_bytes), whichever is longest, then "fixup" (streamk_fixup_us),
    "launch" (gpu.launch_us) and "swap" (a 64-row swap-AB tile's gpu.swap_floor_us). A padded tile (M below its
    rows) costs its full wgmma. A cluster config runs its cluster tiles on sms / num_ctas programs, each CTA its own
    block's k-steps."""
    bm, bn, bk = cfg.block_m, cfg.block_n, cfg.block_k
    tiles, k_tiles = tile_count(M, N, cfg), -(-K // bk)
    programs = schedule_programs(M, N, K, cfg, gpu.sms, schedule)
    if KERNEL_SCHEDULE.get(schedule, schedule) == "streamk":
        dp_tiles, ragged = streamk_split(tiles, programs)
        split = -(-(tiles - dp_tiles) * k_tiles // programs)
        if schedule == "streamk":  # split-K (small M) keeps its own calibration
            split *= streamk_step_cost(M, N, cfg, gpu)
        steps = dp_tiles // programs * k_tiles + split
        fixup = streamk_fixup_us(cfg, tiles - dp_tiles, programs, gpu) if ragged else 0.0
    else:
        steps, fixup = -(-tiles // programs) * k_tiles, 0.0
    stage_bytes = (bm + bn) * bk * in_bytes
    sm_bytes = gpu.sm_dram_bytes_per_us if M <= 2 * (cfg.tile_n if cfg.swap_ab else cfg.tile_m) else gpu.sm_bytes_per_us
    stream = min(sm_bytes, cfg.stages * stage_bytes / gpu.load_latency_us)
    loops = {"mma": steps * 2.0 * bm * bn * bk * mma_step_cost(cfg, gpu, in_bytes) / gpu.flops_per_sm(in_bytes) * 1e6,
             "stream": steps * stage_bytes / stream,
             "dram": dram_us(M, N, K, gpu, in_bytes, out_bytes)}
    bound = max(loops, key=loops.__getitem__)
    swap_us = gpu.swap_floor_us[cfg.block_n] if cfg.swap_ab and cfg.block_m == 64 else 0.0
    return {bound: loops[bound], "fixup": fixup, "launch": gpu.launch_us, "swap": swap_us}


LOOP_BOUNDS = ("mma", "stream", "dram")
"""The main-loop terms of predicted_parts, one of which it keeps: the kernel's bound."""


def loop_bound(parts: dict[str, float]) -> str:
    """Which of LOOP_BOUNDS limits the main loops in predicted_parts' `parts`."""
    return next(name for name in LOOP_BOUNDS if name in parts)


def dram_us(M: int, N: int, K: int, gpu: GpuModel, in_bytes: int = 2, out_bytes: int = 2) -> float:
    """predicted_parts' "dram" term: every operand and output byte once at DRAM speed, plus gpu.l2_dirty_bytes (at
    most the operands' bytes)."""
    reads = (M + N) * K * in_bytes
    return (reads + M * N * out_bytes + min(reads, gpu.l2_dirty_bytes)) / gpu.dram_bytes_per_us


def floor_us(M: int, N: int, K: int, gpu: GpuModel, in_bytes: int = 2, out_bytes: int = 2) -> float:
    """What no kernel beats at the model's rates: every FLOP on every SM, or every operand and output byte once."""
    dram = ((M + N) * K * in_bytes + M * N * out_bytes) / gpu.dram_bytes_per_us
    return max(2.0 * M * N * K / (gpu.sms * gpu.flops_per_sm(in_bytes)) * 1e6, dram)


# gpu.partial_trip_us: The least a partial tile's trip through memory takes, however small the tile: its store, the
# ticket, the finisher's load. Fitted on the H200's A/B of the calls its refit rates moved (split-K of a 64x8 swap-AB
# tile lost 0.68-0.83x where the area-scaled trip said it would win); 0 on the H100, whose choices were measured so.
def streamk_fixup_us(cfg: MatmulConfig, split_tiles: int, programs: int, gpu: GpuModel) -> float:
    """What the partial tiles add to a stream-K (or split-K) launch: one fp32 tile's trip through memory (half of
    gpu.streamk_fixup_us at 128x256, by area) for the contributors' stores (made at once), and one for each partial its
    finisher then loads and adds, one after another. The finisher adds programs / split_tiles partials on average,
    one fewer where the programs' ranges end on tile boundaries (split-K: splits - 1), at least one where they do
    not. At 64x128, where the split schedules share static's DRAM time (the K = 4096 decode rows of
    bench/results/archive/shapes-h100.json), split-K over 2 or 4 programs a tile measured 0.4-3.6 us over static and
    stream-K 3.6-6.7, against 2.5-5.0 and 2.7-6.4 here (4 splits cost less than modelled: 2.4-3.6 us, not 5.0);
    blockwise FP8 split 8 ways at 64x2048x7168 measured 25.6 us in all, 25.7 predicted. A trip takes at least
    gpu.partial_trip_us however small the tile (a store, then a load once the ticket says it landed)."""
    share = programs / split_tiles - 1 if programs % split_tiles == 0 else max(1.0, programs / split_tiles)
    trip = max(gpu.streamk_fixup_us / 2 * cfg.block_m * cfg.block_n / (128 * 256), gpu.partial_trip_us)
    return trip * (1 + share)


def streamk_split(tiles: int, programs: int) -> tuple[int, bool]:
    """(tiles run whole, whether the rest are split): the stream-K scheduler's split (schedulers/streamk.py): the full
    waves whole, less the last one where the partial wave is under half the programs."""
    waves, rest = divmod(tiles, programs)
    if not rest:
        return tiles, False
    return (waves if 2 * rest >= programs else max(waves - 1, 0)) * programs, True


def schedule_programs(M: int, N: int, K: int, cfg: MatmulConfig, sms: int, schedule: str) -> int:
    """The persistent grid of a schedule on `sms` SMs: one program per SM under stream-K; tiles x splits under
    split-K (each tile's k-steps split evenly over `splits` programs, at most the SMs, each at least SPLIT_MIN_STEPS
    k-steps); one per tile under cluster launch control (sm_100a: running programs take over pending ones' tiles);
    else one per tile, at most one per SM. A cluster config's program is a cluster: "SM" reads "cluster of SMs"."""
    sms //= cfg.cluster.num_ctas
    tiles = tile_count(M, N, cfg)
    if schedule == "clc":
        return tiles
    if schedule == "streamk":
        return sms
    if schedule == "splitk":
        return min(tiles * k_splits(M, N, K, cfg, sms), sms)
    return min(tiles, sms)


def k_splits(M: int, N: int, K: int, cfg: MatmulConfig, sms: int) -> int:
    """How many programs split-K gives each tile: as many as the SMs hold, each with SPLIT_MIN_STEPS k-steps."""
    return max(1, min(sms // tile_count(M, N, cfg), -(-K // cfg.block_k) // SPLIT_MIN_STEPS))


def schedule_candidates(M: int, N: int, K: int, cfg: MatmulConfig, sms: int) -> tuple[str, ...]:
    """The schedules schedule_by_time compares for `cfg`: SCHEDULES_BY_TIME, split-K only where it splits (tiles
    at most half the SMs: else it is stream-K under another name); static alone for a pieced or ping-pong tile."""
    if cfg.pieced or cfg.pingpong:
        return ("static", )
    return tuple(s for s in SCHEDULES_BY_TIME if s != "splitk" or k_splits(M, N, K, cfg, sms) > 1)


NARROW = MatmulConfig(64, 64, 128, stages=6, num_warps=4)
"""Small M's narrow tile, for two rows of 64-row tiles (64 < M <= DECODE_M) where its tiles fit one wave: twice the
programs of the 64x128 tile, each streaming half a B panel. H100 (BK = 64, 10 stages): 22.8 against 25.6 us at
96x4096x4096 (128 programs against 64), 62.0 against 61.6 (the 64x128 tile's split-K) at 96x4096x14336; with more
tiles than SMs 70.6 against 57.3 at 96x14336x4096 and 35.3 against 30.6 at 96x6144x4096
(bench/results/archive/issue20-clusters-probe-h100.json), where the two row tiles of a B panel run in different waves
(docs/perf-log.md row 45). The cost model puts both tiles at the DRAM floor, so narrow_configs offers this one only
within one wave, and first, to take the tie. BK = 128 with six stages (the bytes in flight of BK = 64 with twelve,
half the barrier hand-offs) ran 1-5% faster than BK = 64 with ten on all four such rows of
bench/results/archive/small-m-block-k-probe-h100.json (96x4096x4096 23.17 -> 22.58 us, 128x4096x4096 23.34 -> 22.21) and
0.97-1.08x (geomean 1.02) on the 24 grid shapes that take it (small-m-stages-moves-h100.json; perf-log row 88)."""


def narrow_configs(M: int, N: int, sms: int) -> tuple[MatmulConfig, ...]:
    """NARROW where small_m_config may take it: M over one 64-row tile, at most one wave of its tiles."""
    return (NARROW, ) if NARROW.block_m < M <= DECODE_M and tile_count(M, N, NARROW) <= sms else ()


@cache
def small_m_configs(out_dtype: torch.dtype) -> tuple[MatmulConfig, ...]:
    """The tiles small M chooses from: 64 rows with as many stages as fit beside the output tile (the loads of a
    memory-bound GEMM want bytes in flight), and MEDIUM."""
    return with_stages_that_fit(SMALL, out_dtype), MEDIUM


@cache
def with_stages_that_fit(cfg: MatmulConfig, out_dtype: torch.dtype) -> MatmulConfig:
    """`cfg` with as many operand stages as fit beside its output tile (fitted_stages, from its own count up), once per
    configuration and D dtype: sizing the plans takes ~0.8 ms, which a new call geometry would pay each time."""
    return replace(cfg, stages=fitted_stages(cfg, out_dtype, cfg.stages))


SWAP_BLOCK_N = (8, 16, 32, 64, 128)
"""Swap-AB tile widths along M (the wgmma's N): the narrowest that holds M is used."""
SWAP_MAX_STAGES = 12


@cache
def swap_config(M: int, out_dtype: torch.dtype, block_m: int = 64, kernel: str = "matmul") -> MatmulConfig:
    """Swap-AB's tile for M <= DECODE_M: block_m rows of N (64: one wgmma warpgroup, 128: two), the narrowest
    SWAP_BLOCK_N that holds M, BK = 128, as many stages of `kernel`'s operands ("matmul": 16-bit, "scaled": FP8) as
    fit (up to SWAP_MAX_STAGES)."""
    block_n = next(n for n in SWAP_BLOCK_N if n >= min(M, DECODE_M))
    cfg = MatmulConfig(block_m, block_n, 128, stages=2, num_warps=block_m // 16, swap_ab=True)
    return replace(cfg, stages=fitted_stages(cfg, out_dtype, 2, SWAP_MAX_STAGES, kernel))


def variant_config(options: dict, out_dtype: torch.dtype, default: MatmulConfig | None) -> MatmulConfig | None:
    """The configuration a catalogue matmul variant (kernels/catalogue.py) runs in where its options name one:
    swap-AB's tile at M = 32, a pieced tile in PIECED_WHOLE_16BIT's stages (PIECED_SUBTILED_16BIT's with D in
    sub-tiles; the 64-row ones are NARROW_PIECED_16BIT and NARROW_WIDE_PIECED_16BIT), D in sub-tiles in
    LARGE_SUBTILED_16BIT's, the ping-pong tile; else `default`. The report compiles it, the sanitizer launches it."""
    if options.get("swap_ab"):  # 64 rows of N, or its tile's (gated_linear's 128: a gate-up pair), D in sub-tiles
        return replace(swap_config(32, out_dtype, options.get("tile", (64, ))[0]), epilogue_n=options.get("epilogue_n"))
    if options.get("tile"):
        one_warpgroup = {(cfg.block_m, cfg.block_n): cfg for cfg in (NARROW_PIECED_16BIT, NARROW_WIDE_PIECED_16BIT)}
        if tuple(options["tile"]) in one_warpgroup:
            return one_warpgroup[tuple(options["tile"])]  # its own warps and stages
        base = PIECED_SUBTILED_16BIT if options.get("epilogue_n") else PIECED_WHOLE_16BIT
        return replace(base, block_m=options["tile"][0], block_n=options["tile"][1],
                       epilogue_n=options.get("epilogue_n"))
    if options.get("epilogue_n"):
        return replace(LARGE_SUBTILED_16BIT, epilogue_n=options["epilogue_n"])
    if options.get("pingpong"):
        return PINGPONG_16BIT
    return default


def fitted_stages(cfg: MatmulConfig, out_dtype: torch.dtype, low: int, high: int | None = None,
                  kernel: str = "matmul") -> int:
    """The most operand stages from `low` to `high` (default MAX_STAGES) that fit beside `cfg`'s output tile in
    `kernel`'s plan: "matmul" (16-bit operands, with a C of D's dtype), "scaled" or "blockwise" (FP8)."""
    from tilepipe.kernels.matmul import matmul_plan
    from tilepipe.kernels.matmul_fp8 import fp8_plan

    c_dtype = GL_DTYPES[out_dtype]

    def fits(stages: int) -> bool:
        tile = (cfg.block_m, cfg.block_n, cfg.block_k, stages, cfg.c_stages)
        plan = (matmul_plan.fn(*tile, "bf16", c_dtype, True, True, swap_ab=cfg.swap_ab, epilogue_n=cfg.epilogue_n)
                if kernel == "matmul" else
                fp8_plan.fn(*tile, "fp8e4nv", "fp8e4nv", c_dtype, kernel == "blockwise", swap_ab=cfg.swap_ab))
        return plan.total_bytes + WS_SCRATCH_BYTES + VECTOR_SCRATCH_BYTES <= plan.limit_bytes

    return max(s for s in range(low, (high or MAX_STAGES) + 1) if fits(s))


# gpu.swap_floor_us: What predict_us adds to a 64-row swap-AB tile's time, by its width (block_n, M's side): the mean
# of measured minus predicted time over its static decode rows less the plain 64x128 tile's (+0.2 us over its 35 rows
# at K = 4096), from bench/results/archive/decode-swap-h100.json, decode-mid-m-h100.json and shapes-h100-v8.json
# (H100; width 8: 24 rows, 32: 12, 64: 8, 128: 16; 16 is width 8's, timed only for FP8 at M = 16: -1.7 and 0.0 against
# the plain tile's -0.6 and +1.9). Narrow swap tiles reach the DRAM floor about 2 us sooner than the plain tile (the
# cause is not measured apart); the 128-wide one, whose program reads all of M's rows of A (the kernel's B) a k-step,
# about as soon (0.6 +- 2.2 us), so the model keeps the plain tile at 64 < M <= 128 (docs/perf-log.md row 42).


@cache
def small_m_config(M: int, N: int, K: int, out_dtype: torch.dtype, gpu: GpuModel, b_kmajor: bool = False,
                   has_c: bool = False) -> MatmulConfig:
    """Small M's tile: the last of small_m_rounds' winners."""
    return small_m_rounds(M, N, K, out_dtype, gpu, b_kmajor, has_c)[-1].winner.config


def small_m_rounds(M: int, N: int, K: int, out_dtype: torch.dtype, gpu: GpuModel, b_kmajor: bool = False,
                   has_c: bool = False) -> list[Round]:
    """Small M's rounds. The tile round: swap-AB's tile (with B K-major, `b_kmajor`), NARROW's (narrow_configs) and
    small_m_configs, each under the schedule schedule_by_time gives it, in that tie order. Past one row of 64-row
    tiles with B K-major and a 16-bit D (where the grid ran), a static plain winner then meets NARROW_PIECED_16BIT where
    that wins the tie at the DRAM floor (dram_tie_pays; with C, `has_c`), listed first: the tie round."""
    tiles = (((swap_config(M, out_dtype), ) if b_kmajor else ()) + narrow_configs(M, N, gpu.sms)
             + small_m_configs(out_dtype))
    rounds = [Round("tile", tuple(predicted(M, N, K, cfg, schedule_by_time(M, N, K, cfg, gpu), gpu,
                                            out_bytes=out_dtype.itemsize) for cfg in tiles))]
    chosen, narrow = rounds[-1].winner, NARROW_PIECED_16BIT
    measured = b_kmajor and M > narrow.block_m and out_dtype != torch.float32
    if (measured and chosen.schedule == "static" and not chosen.config.swap_ab
            and dram_tie_pays(M, N, K, gpu, chosen.config, narrow, has_c)):
        tie = predicted(M, N, K, narrow, "static", gpu, why="tie at the DRAM floor", out_bytes=out_dtype.itemsize)
        rounds.append(Round("DRAM-floor tie", (tie, chosen)))
    return rounds


def schedule_by_time(M: int, N: int, K: int, cfg: MatmulConfig, gpu: GpuModel, in_bytes: int = 2) -> str:
    """The schedule of least predicted time for `cfg` (operands of `in_bytes`): the fastest of its timed_schedules."""
    return fastest(timed_schedules(M, N, K, cfg, gpu, in_bytes)).schedule


def timed_schedules(M: int, N: int, K: int, cfg: MatmulConfig, gpu: GpuModel, in_bytes: int = 2
                    ) -> tuple[Candidate, ...]:
    """`cfg` under each of its schedule_candidates at its predict_us time, each split schedule handicapped
    STREAMK_MIN_GAIN against static, static last."""
    split = [s for s in schedule_candidates(M, N, K, cfg, gpu.sms) if s != "static"]
    return (*(predicted(M, N, K, cfg, s, gpu, STREAMK_MIN_GAIN, in_bytes=in_bytes) for s in split),
            predicted(M, N, K, cfg, "static", gpu, in_bytes=in_bytes))


def fp8_schedule_for(M: int, N: int, K: int, cfg: MatmulConfig, blockwise: bool, gpu: GpuModel) -> str:
    """matmul_fp8's schedule: fp8_schedule_round's winner."""
    return fp8_schedule_round(M, N, K, cfg, blockwise, gpu).winner.schedule


def fp8_schedule_round(M: int, N: int, K: int, cfg: MatmulConfig, blockwise: bool, gpu: GpuModel) -> Round:
    """`cfg`'s matmul_fp8 schedule as a round at the fp8 rate: its timed_schedules (split schedules handicapped
    STREAMK_MIN_GAIN, static last); for the blockwise kernel's 128-row tile its static waves and, first, its stream-K
    (blockwise_candidates). The blockwise 64-row tile splits K only up to one row of tiles
    (gpu.blockwise_streamk_max_m): past it static is its one candidate."""
    if blockwise and cfg.block_m == 128:
        return Round("schedule", blockwise_candidates(M, N, K, (cfg, ), gpu))
    if blockwise and M > gpu.blockwise_streamk_max_m:
        return Round("schedule", (predicted(M, N, K, cfg, "static", gpu, why="64 rows past blockwise_streamk_max_m",
                                            in_bytes=1), ))
    return Round("schedule", timed_schedules(M, N, K, cfg, gpu, in_bytes=1))


# ---- sm_100a (Blackwell): compiled for sm_100a on the CPU, never run ----

SM100_CONFIGS = (MatmulConfig(128, 256, 64, stages=4, c_stages=2, num_warps=4),
                 MatmulConfig(128, 128, 64, stages=6, c_stages=2, num_warps=4))
"""The sm_100a GEMM's tiles, largest first (kernels/sm100_matmul.py): c_stages counts the epilogue's D sub-tile
buffers, num_warps its warps. 4 stages of 128x256x64 take 192 KB beside 16 KB of sub-tile buffers (32 KB for an fp32
D); two 256-column fp32 accumulators fill TMEM's 512 columns. A tuple, not names: the sm_90a tables and the checker's
configurations (verify/protocols.py: matmul_configs) do not take them."""


SM100_PAIR_CONFIGS = (MatmulConfig(128, 256, 64, stages=6, c_stages=2, num_warps=4, cluster_m=2), )
"""The sm_100a GEMM's two-CTA form (the seed's default): a 2x1 cluster computes 256 x 256 with cta_group::2 MMAs, each
CTA holding 128 rows of A and 128 of B's 256 columns a stage (32 KB), so 6 stages take 192 KB of each CTA beside its
16 KB of sub-tile buffers; each CTA's two 256-column accumulators (its 128 rows) fill its TMEM. Chosen by config=
only (compiled, never run: nothing measured it). A tuple, like SM100_CONFIGS: the sm_90a tables do not take it."""


SM100_FP8_CONFIGS = (MatmulConfig(128, 256, 128, stages=4, c_stages=2, num_warps=4),
                     MatmulConfig(128, 128, 128, stages=6, c_stages=2, num_warps=4))
"""The sm_100a FP8 GEMM's tiles (kernels/sm100_matmul.py: sm100_scaled_matmul_kernel), largest first: SM100_CONFIGS
with BK = 128 (128 bytes of fp8, as on sm_90a), the same bytes a stage."""


def sm100_fp8_config(M: int, N: int, out_dtype: torch.dtype, sms: int) -> MatmulConfig:
    """The sm_100a FP8 GEMM's configuration: the wave-efficiency choice among SM100_FP8_CONFIGS, with as many operand
    stages as fit beside D's sub-tile buffers (sm100_fitted)."""
    return sm100_fitted(choose_config(M, N, out_dtype, sms, SM100_FP8_CONFIGS), "fp8e4nv", GL_DTYPES[out_dtype])


SM100_BLOCKWISE_CONFIGS = (MatmulConfig(128, 128, 128, stages=6, c_stages=1, num_warps=8), )
"""The sm_100a blockwise FP8 GEMM's tile (kernels/sm100_blockwise.py; stages at most this, fitted): BN = BK = 128, one
B scale a K tile; 8 epilogue warps, so each thread holds 64 of the fp32 total and 64 of a partial; c_stages is its one
BM x BN D buffer. Two 128-column TMEM partial buffers. A tuple, like SM100_CONFIGS: the checker's matmul
configurations (verify/protocols.py: matmul_configs) take every bare MatmulConfig here."""


@cache
def sm100_blockwise_config(out_dtype: torch.dtype) -> MatmulConfig:
    """SM100_BLOCKWISE_CONFIGS' one tile with as many stages as fit beside the scale ring and D's buffer (fp8e4nv
    operands)."""
    from tilepipe.kernels.sm100_blockwise import sm100_blockwise_plan
    from tilepipe.pipeline.storage import SmemBudgetError

    def fits(stages: int) -> bool:
        try:
            plan = sm100_blockwise_plan.fn(128, 128, stages, "fp8e4nv", "fp8e4nv", GL_DTYPES[out_dtype])
        except SmemBudgetError:
            return False
        return plan.total_bytes + WS_SCRATCH_BYTES <= plan.limit_bytes

    cfg = SM100_BLOCKWISE_CONFIGS[0]
    return replace(cfg, stages=max(s for s in range(1, cfg.stages + 1) if fits(s)))


SM100_BLOCK_SCALED_CONFIGS = (MatmulConfig(128, 256, 128, stages=4, c_stages=2, num_warps=4),
                              MatmulConfig(128, 128, 128, stages=6, c_stages=2, num_warps=4))
"""The sm_100a block-scaled GEMM's tiles (kernels/sm100_block_scaled.py), largest first, stages at most these (fitted:
as many as fit). block_k counts stored elements, 128 bytes a row in every format: 128 e4m3 (MXFP8: one packed
scale block a stage) or 256 e2m1 (MXFP4: two; NVFP4: four). 128x256 keeps one TMEM accumulator (two 256-column ones
and the two 32-column scale buffers pass 512), 128x128 two."""


def sm100_block_scaled_config(M: int, N: int, fmt: str, dtype: str, out_dtype: torch.dtype, sms: int) -> MatmulConfig:
    """The block-scaled GEMM's configuration for format `fmt` ("mxfp8", "mxfp4", "nvfp4") and data of Gluon dtype
    `dtype`: the wave-efficiency choice among SM100_BLOCK_SCALED_CONFIGS, fitted (sm100_block_scaled_fitted)."""
    cfg = choose_config(M, N, out_dtype, sms, SM100_BLOCK_SCALED_CONFIGS)
    return sm100_block_scaled_fitted(cfg, fmt, dtype, GL_DTYPES[out_dtype])


def sm100_block_scaled_fitted(cfg: MatmulConfig, fmt: str, dtype: str, c_dtype: str) -> MatmulConfig:
    """`cfg` with as many stages as fit with format `fmt`'s scale boxes beside A and B (sm100_fitted); Gluon dtypes."""
    from tilepipe.kernels.sm100_block_scaled import FORMATS

    return sm100_fitted(cfg, dtype, c_dtype, scales=FORMATS[fmt].scales(cfg.block_k))


def sm100_config(M: int, N: int, dtype: torch.dtype, out_dtype: torch.dtype, sms: int,
                 source_dtype: torch.dtype | None = None, schedule: str = "static") -> MatmulConfig:
    """The sm_100a GEMM's configuration: the wave-efficiency choice among SM100_CONFIGS (no autotune cache or stream-K
    on sm_100a yet), fitted to the epilogue and scheduler (sm100_fitted) with a C of `source_dtype` when given."""
    cfg = choose_config(M, N, out_dtype, sms, SM100_CONFIGS)
    return sm100_fitted(cfg, GL_DTYPES[dtype], GL_DTYPES[out_dtype], source_dtype is not None,
                        GL_DTYPES.get(source_dtype), schedule == "clc")


def sm100_fitted(cfg: MatmulConfig, dtype: str, c_dtype: str, has_c: bool = False,
                 source_dtype: str | None = None, clc: bool = False,
                 scales: tuple[str, int] | None = None) -> MatmulConfig:
    """`cfg` with as many of its operand stages as fit beside the D sub-tile buffers and, with C (`has_c`, of
    `source_dtype`, default D's), the C sub-tile stages (and, with `clc`, the scheduler ring; with `scales`, a
    block-scaled payload's scale boxes, as sm100_plan takes them; a 2x1 cluster: the two-CTA form's per-CTA bytes);
    dtypes by Gluon name, as sm100_matmul_spec takes them."""
    from tilepipe.kernels.sm100_matmul import sm100_plan
    from tilepipe.pipeline.storage import SmemBudgetError

    source = (source_dtype or c_dtype) if has_c else None

    def fits(stages: int) -> bool:
        try:
            plan = sm100_plan.fn(cfg.tile_m, cfg.block_n, cfg.block_k, stages, cfg.c_stages, dtype, c_dtype, True,
                                 src_dtype=source, clc=clc, scales=scales, cluster_m=cfg.cluster_m)
        except SmemBudgetError:
            return False
        return plan.total_bytes + WS_SCRATCH_BYTES <= plan.limit_bytes

    return replace(cfg, stages=max(s for s in range(1, cfg.stages + 1) if fits(s)))


# ---- FP8 ----------------------------------------------------------------------------------------------

SCALE_BLOCK = BLOCKWISE_SCALE_BLOCK.value  # blockwise scales cover 1 x 128 of A and 128 x 128 of B
MAX_STAGES = 8
WS_SCRATCH_BYTES = 512  # shared memory warp_specialize adds to the plan (its captured arguments: 260 B for blockwise)
VECTOR_SCRATCH_BYTES = 1024
"""What the sm_90a GEMMs add besides: the layout conversion of the vectors a tile reads ahead of its main loop (a bias or
FP8 scales, up to 256 fp32 values: kernels/read_ahead.py tile_bias, tile_scales)."""
# BK = 128: 128 bytes of fp8, one swizzle row and one blockwise scale block. Stages: as many as fit (configs()).
SCALED_LARGE = MatmulConfig(128, 256, 128, stages=1)
SCALED_MEDIUM = MatmulConfig(128, 128, 128, stages=1)
SCALED_SMALL = MatmulConfig(64, 128, 128, stages=1, num_warps=4)
BLOCKWISE = MatmulConfig(128, 128, 128, stages=1)  # 3 fp32 64x128 tiles per thread: total and two partial sums
BLOCKWISE_SMALL = MatmulConfig(64, 128, 128, stages=1, num_warps=4)
FP8_TILES = (SCALED_LARGE, SCALED_MEDIUM, SCALED_SMALL, BLOCKWISE, BLOCKWISE_SMALL)


@cache
def fp8_configs(blockwise: bool, out_dtype: torch.dtype) -> tuple[MatmulConfig, ...]:
    """The tiles a call may use, largest first, each with as many stages as fit beside its output tile (fp32
    output tiles are twice the bytes: the 128x256 one is not offered then)."""
    tiles = (BLOCKWISE, BLOCKWISE_SMALL) if blockwise else (SCALED_LARGE, SCALED_MEDIUM, SCALED_SMALL)
    if out_dtype == torch.float32:
        tiles = tiles[1:] if not blockwise else tiles
    kernel = "blockwise" if blockwise else "scaled"
    return tuple(replace(cfg, stages=fitted_stages(cfg, out_dtype, 1, kernel=kernel)) for cfg in tiles)


# gpu.blockwise_streamk_max_m: The blockwise FP8 kernel's 64-row tile splits K (stream-K, split-K) only up to this M:
# at 1024x4608x7168 it ran 1.21x its predicted time under stream-K (84.1 against 69.4 us,
# bench/results/archive/shapes-h100-v7.json; 84.4 in row 31's run), while the 128-row tile's static waves ran at 0.99
# of theirs (74.8 against 75.5 us).
# gpu.blockwise_streamk_min_gain: The blockwise kernel's 128-row tile runs stream-K where the best static tile is
# predicted this much slower. Its stream-K ran 1.06-1.28x its predicted time (median ~1.15) against 0.99-1.14x for its
# static waves, on 21 shapes of bench/results/archive/blockwise-streamk-probe-h100.json (docs/perf-log.md row 87): the
# four predicted 1.18-1.33x faster measured 1.08-1.17x the default (1024x4608x7168 75.7 -> 68.7 us, 1536x1536x7168
# 46.1 -> 39.3), those predicted 1.06-1.14x measured 0.92-1.01x.


def blockwise_candidates(M: int, N: int, K: int, tiles: tuple[MatmulConfig, ...], gpu: GpuModel, out_bytes: int = 2
                         ) -> tuple[Candidate, ...]:
    """The blockwise kernel's `tiles` static and, first, its largest (128-row) tile under stream-K where its tiles
    outnumber the SMs (a partial single wave: smaller tiles fill it without a fixup), handicapped
    gpu.blockwise_streamk_min_gain."""
    fp8 = dict(in_bytes=1, out_bytes=out_bytes)
    big = tiles[0]
    streamk = (predicted(M, N, K, big, "streamk", gpu, gpu.blockwise_streamk_min_gain, "blockwise stream-K", **fp8),
               ) if tile_count(M, N, big) > gpu.sms else ()
    return (*streamk, *(predicted(M, N, K, tile, "static", gpu, **fp8) for tile in tiles))


def fp8_config_for(M: int, N: int, K: int, blockwise: bool, out_dtype: torch.dtype, gpu: GpuModel) -> MatmulConfig:
    """The configuration matmul_fp8 uses: fp8_round's winner."""
    return fp8_round(M, N, K, blockwise, out_dtype, gpu).winner.config


def fp8_round(M: int, N: int, K: int, blockwise: bool, out_dtype: torch.dtype, gpu: GpuModel) -> Round:
    """matmul_fp8's tile round: for M up to 64 per-tensor and per-row scales swap-AB's tile and the 64-row tile, each
    under its schedule_by_time schedule, blockwise scales the 64-row tile alone (no padded wgmma rows; split-K makes up
    its tile count); past that blockwise scales blockwise_candidates, per-tensor and per-row the wave heuristic's tile
    over fp8_configs alone. A single tile's round is its fp8_schedule_round (at a 16-bit D's bytes, as fp8_schedule_for
    weighs it)."""
    tiles = fp8_configs(blockwise, out_dtype)
    fp8 = dict(in_bytes=1, out_bytes=out_dtype.itemsize)
    if M <= tiles[-1].block_m and not blockwise:
        return Round("tile", tuple(predicted(M, N, K, cfg, schedule_by_time(M, N, K, cfg, gpu, 1), gpu, **fp8)
                                   for cfg in (swap_config(M, out_dtype, kernel="scaled"), tiles[-1])))
    if blockwise and M > tiles[-1].block_m:
        return Round("tile", blockwise_candidates(M, N, K, tiles, gpu, out_dtype.itemsize))
    cfg = tiles[-1] if blockwise else choose_config(M, N, out_dtype, gpu.sms, tiles)
    return fp8_schedule_round(M, N, K, cfg, blockwise, gpu)


# ---- the autotune cache (tilepipe.tools.autotune fills it) ---------------------------------------------

CACHE_FILE = "autotune.json"


def cache_path() -> Path:
    return _cache_path(os.environ.get("TILEPIPE_CACHE_DIR"), os.environ.get("HOME"))


@cache
def _cache_path(directory: str | None, home: str | None) -> Path:
    """Built once per (TILEPIPE_CACHE_DIR, HOME): pathlib's home lookup costs ~30 us, and matmul's uncached path
    asks for the cache on every call."""
    return Path(directory or Path.home() / ".cache" / "tilepipe") / CACHE_FILE


def cached_config(M: int, N: int, K: int, dtype: torch.dtype, out_dtype: torch.dtype, b_kmajor: bool,
                  device: int) -> MatmulConfig | None:
    """The autotuned configuration for this problem, if the cache holds one."""
    entries = autotune_entries()
    if not entries:
        return None
    entry = entries.get(problem_key(M, N, K, dtype, out_dtype, b_kmajor, device))
    return MatmulConfig(**entry["config"]) if entry else None


def problem_key(M: int, N: int, K: int, dtype: torch.dtype, out_dtype: torch.dtype, b_kmajor: bool,
                device: int) -> str:
    """The cache key: GPU and software versions, then the problem."""
    dt = lambda d: str(d).removeprefix("torch.")  # noqa: E731
    return (f"{_environment(device)} | {M}x{N}x{K} {dt(dtype)}->{dt(out_dtype)} "
            f"B {'kmajor' if b_kmajor else 'rowmajor'}")


@cache
def _environment(device: int) -> str:
    import triton

    from tilepipe._version import __version__

    return (f"{torch.cuda.get_device_name(device)} cuda {torch.version.cuda} torch {torch.__version__} "
            f"triton {triton.__version__} tilepipe {__version__}")


_ENTRIES: dict[Path, dict[str, dict]] = {}


def autotune_entries() -> dict[str, dict]:
    """The cache file's entries, read once per process and per cache path."""
    path = cache_path()
    if path not in _ENTRIES:
        _ENTRIES[path] = _read(path)
    return _ENTRIES[path]


def _read(path: Path) -> dict[str, dict]:
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        return {}
    except (OSError, ValueError) as exc:
        print(f"tilepipe: ignoring unreadable autotune cache {path}: {exc}", file=sys.stderr)
        return {}
    return data if isinstance(data, dict) else {}


def store_config(key: str, entry: dict) -> None:
    """Add one entry to the cache file, keeping what other processes wrote since we read it (atomic replace)."""
    path = cache_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    entries = _read(path)
    entries[key] = entry
    tmp = path.with_suffix(f".{os.getpid()}.tmp")
    tmp.write_text(json.dumps(entries, indent=1, sort_keys=True) + "\n")
    os.replace(tmp, path)
