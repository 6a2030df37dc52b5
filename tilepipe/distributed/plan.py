"""When the overlapped forms pay: they hide the smaller of the GEMM and the transfer under the other, and cost a few
fixed steps more than NCCL's sequence (the epoch add, the flags, the closing barrier). Where what they can hide is
below that cost, or the all-gather kernel cannot tile the chunks, the op runs the sequence instead."""

from tilepipe.host.configs import floor_us
from tilepipe.host.gpus import GpuModel

LINK_BYTES_PER_US = 190_000.0
"""Bytes a rank receives per microsecond over NVLink on 2 H200s: NCCL's all-gather of 64 MB in 0.360 ms and 32 MB in
0.205 ms (../shared/reference/grouped-and-tp-anchors.md); to refit from bench/results/tp-h200x2.json."""
SYNC_US = 20.0
"""What the overlapped forms add to a call (an estimate until measured: a barrier kernel and the flag copies)."""
CHUNK_MIN_ROWS = 128
"""The all-gather kernel's tiles lie inside one chunk: a chunk needs a tile's rows (its BM)."""


def transfer_us(rows: int, cols: int, world: int, in_bytes: int = 2) -> float:
    """Time to receive the other ranks' chunks of `rows` x `cols` each."""
    return (world - 1) * rows * cols * in_bytes / LINK_BYTES_PER_US


def overlap_pays(M: int, N: int, K: int, chunk_rows: int, chunk_cols: int, world: int, gpu: GpuModel) -> bool:
    """Whether overlapping the transfer of W - 1 chunks of chunk_rows x chunk_cols with the M x N x K GEMM beats
    running them in sequence: the time hidden (the smaller of the two) must exceed SYNC_US."""
    return min(floor_us(M, N, K, gpu), transfer_us(chunk_rows, chunk_cols, world)) > SYNC_US
