"""When the overlapped forms pay: they hide the smaller of the GEMM and the transfer under the other, and cost a few
fixed steps more than NCCL's sequence (the epoch add, the flags, the all-gather's closing barrier). Where what they
can hide is below that cost, or the kernels cannot tile the chunks, the op runs the sequence instead, as the FP8
all-gather does by default (measured slower overlapped)."""

from dataclasses import replace
from functools import cache

import torch

from tilepipe.host.configs import LARGE_SUBTILED_16BIT, MEDIUM, MatmulConfig, floor_us, with_stages_that_fit
from tilepipe.host.device import device_target
from tilepipe.host.gpus import GpuModel, device_model

LINK_BYTES_PER_US = 190_000.0
"""Bytes a rank receives per microsecond over NVLink on 2 H200s: NCCL's all-gather of 64 MB in 0.360 ms and 32 MB in
0.205 ms (../shared/reference/grouped-and-tp-anchors.md); to refit from bench/results/tp-h200x2.json."""
SYNC_US = 20.0
"""What the overlapped forms add to a call (an estimate until measured: a barrier kernel and the flag copies)."""
CHUNK_MIN_ROWS = 128
"""The overlapped kernels' tiles lie inside one chunk: a chunk needs a tile's rows (its BM)."""


def transfer_us(rows: int, cols: int, world: int, in_bytes: int = 2) -> float:
    """Time to receive the other ranks' chunks of `rows` x `cols` each."""
    return (world - 1) * rows * cols * in_bytes / LINK_BYTES_PER_US


def overlap_pays(M: int, N: int, K: int, chunk_rows: int, chunk_cols: int, world: int, gpu: GpuModel,
                 in_bytes: int = 2) -> bool:
    """Whether overlapping the transfer of W - 1 chunks of chunk_rows x chunk_cols (of `in_bytes` an element) with the
    M x N x K GEMM beats running them in sequence: the time hidden (the smaller of the two) must exceed SYNC_US."""
    return min(floor_us(M, N, K, gpu), transfer_us(chunk_rows, chunk_cols, world, in_bytes)) > SYNC_US


def chunks_fit(rows: int, device: int) -> bool:
    """Whether the overlapped kernels run for chunks of `rows` rows on CUDA device `device`: a Hopper GPU and chunks
    of at least CHUNK_MIN_ROWS rows."""
    return rows >= CHUNK_MIN_ROWS and device_target(device) == "sm_90a"


def gather_overlaps(rows: int, N: int, K: int, world: int, device: int, fp8: bool) -> bool:
    """all_gather_matmul's form where the caller leaves `overlap` None: overlapped where it fits and overlap_pays, but
    never for FP8 operands, though the model says it pays there: at 4096x8192x8192 on 2 H200s the overlapped FP8
    kernel took 0.412 ms, 2.1x the FP8 GEMM alone and slower than NCCL's sequence (0.304 ms;
    bench/results/tp-h200x2.json)."""
    return not fp8 and chunks_fit(rows, device) and overlap_pays(rows * world, N, K, rows, K, world,
                                                                  device_model(device))


def tile_config(N: int) -> MatmulConfig:
    """The tensor-parallel kernels' tile: matmul's 128x256 (D in 64-column sub-tiles) where N fills it, else 128x128."""
    return LARGE_SUBTILED_16BIT if N >= LARGE_SUBTILED_16BIT.block_n else medium()


@cache
def ring_config(N: int) -> MatmulConfig:
    """matmul_reduce_scatter's tile: tile_config's, and where that is the 128x256 tile in 64-column sub-tiles, an
    output stage per sub-tile (three operand stages, so both fit): a tile's epilogue then writes all four at once and
    their stores over NVLink drain under the next main loop. On 2 H200s 1-2.5% faster than two output stages and four
    operand stages, in two processes each (8192x8192x28672, 4096x8192x8192 bf16 and FP8; perf-log row 135)."""
    cfg = tile_config(N)
    if cfg is not LARGE_SUBTILED_16BIT:
        return cfg
    return replace(cfg, stages=3, c_stages=cfg.block_n // cfg.epilogue_n)


@cache
def for_operands(cfg: MatmulConfig, fp8: bool) -> MatmulConfig:
    """`cfg` for FP8 operands: a k-step of 128 (the same 128 bytes a row as 16-bit operands' 64: the same stages);
    once per config (dataclasses.replace takes ~8 us, which every FP8 launch paid)."""
    return replace(cfg, block_k=128) if fp8 else cfg


@cache
def medium() -> MatmulConfig:
    """The cooperative 128x128 tile with as many operand stages as fit (as matmul runs it; 16-bit D)."""
    return with_stages_that_fit(MEDIUM, torch.bfloat16)


@cache
def gather_config(rows: int, N: int, world: int, gpu: GpuModel) -> MatmulConfig:
    """all_gather_matmul's tile over `world` chunks of `rows` x N: tile_config's, or 128x128 where its persistent
    waves take less time. A wave of 128x128 tiles costs half of one of 128x256 times gpu.pingpong_step_cost (the
    cooperative 128x128's k-step against half a 128x256 one). It moves 1024x28672x8192 on 2 ranks (448 tiles of
    128x256 on 132 SMs: 4 waves, the last 39% full; 896 of 128x128: 7 waves, 7.5 of the 8 half-waves): predicted
    6% faster, where the 128x256 tiles ran 1.087x their ideal (bench/results/tp-h200x2.json). Once per geometry
    (~4.5 us of every call's host time otherwise)."""
    large, small = tile_config(N), medium()
    if large is small:
        return small
    waves = {cfg: -(-world * -(-rows // cfg.block_m) * -(-N // cfg.block_n) // gpu.sms) for cfg in (large, small)}
    return small if waves[small] * gpu.pingpong_step_cost < 2 * waves[large] else large


def catalogue_spec(kernel: str) -> tuple[MatmulConfig, object]:
    """The catalogue's form of a tensor-parallel kernel (kernels/catalogue.py TENSOR_PARALLEL), as (config,
    KernelSpec): "ag_matmul_kernel" or "rs_matmul_kernel", bf16, 128x256 with D in 64-column sub-tiles (the ring's
    with ring_config's stages), B row-major, 2 ranks."""
    from tilepipe.kernels.ag_matmul import ag_matmul_spec
    from tilepipe.kernels.rs_matmul import rs_matmul_spec

    if kernel == "ag_matmul_kernel":
        return LARGE_SUBTILED_16BIT, ag_matmul_spec(LARGE_SUBTILED_16BIT, "bf16", False, 2)
    cfg = ring_config(LARGE_SUBTILED_16BIT.block_n)
    return cfg, rs_matmul_spec(cfg, "bf16", False, 2)
