"""Operands as TMA can read them: aligned copies of tensors a descriptor cannot address, rows restaged onto 32-byte
sectors where the cost model (host/configs.py) says the GEMM repays the copy, and the grouped blockwise GEMM's shifted
copies of its A scales (kernels/restage.py has the copies' kernels)."""

from typing import NamedTuple

import torch

from tilepipe.host.checks import Fp8Problem, MatmulProblem
from tilepipe.host.configs import LINE_BYTES, SECTOR_BYTES, MatmulConfig, tile_count, tile_us
from tilepipe.host.gpus import device_model
from tilepipe.host.launch import TMA_ALIGN_BYTES, LauncherCache
from tilepipe.kernels.spec import BUILD_OPTIONS


def tma_addressable(t: torch.Tensor) -> bool:
    """Unit inner stride, 16-byte aligned row stride and base address: what a TMA descriptor needs."""
    size = t.element_size()
    return (t.stride(1) == 1 and (t.stride(0) * size) % TMA_ALIGN_BYTES == 0
            and t.data_ptr() % TMA_ALIGN_BYTES == 0)


def tma_target(out: torch.Tensor) -> torch.Tensor:
    """`out` where TMA can write it, else an aligned stand-in of its shape (copied back after the launch)."""
    return out if tma_addressable(out) else aligned_empty(out.shape, out.dtype, out.device)


def aligned_empty(shape: torch.Size, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """An uninitialised (rows, cols) view whose rows start on 128-byte lines (TMA needs 16 bytes; whole lines also
    keep its loads off partial sectors)."""
    rows, cols = shape
    per_line = LINE_BYTES // dtype.itemsize
    return torch.empty((rows, -(-cols // per_line) * per_line), dtype=dtype, device=device)[:, :cols]


def tma_ready(t: torch.Tensor) -> torch.Tensor:
    """`t` itself when TMA can address it, else an aligned copy (tma_target's stand-in, filled)."""
    staged = tma_target(t)
    return t if staged is t else staged.copy_(t)


def off_sectors(t: torch.Tensor) -> bool:
    """Rows that start off 32-byte L2 sectors (TMA then pulls about twice the sectors: docs/perf-log.md rows 17-18),
    of a tensor the restaging copy can take (16-bit, at least its BLOCK_C columns, whole 16-byte vectors per row: its
    last block is moved back to end at the last column, which must stay on a vector boundary)."""
    from tilepipe.kernels.restage import BLOCK_C, VEC

    return (((t.stride(0) * t.element_size()) % SECTOR_BYTES != 0 or t.data_ptr() % SECTOR_BYTES != 0)
            and t.element_size() == 2 and t.shape[1] >= BLOCK_C and t.shape[1] % VEC.value == 0 and t.shape[0] > 0)


def sector_aligned(a: torch.Tensor, b: torch.Tensor, M: int, N: int, K: int, cfg: MatmulConfig,
                    device: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The GEMM's A and B (as TMA reads them), with those whose rows start off sectors copied to 128-byte aligned
    rows where the device's model says the GEMM saves more than the copy costs: restage_gain of its predicted time (in
    waves of full-rate tiles), scaled by the share of the tile loads those operands make, against copy_bytes_per_us
    for reading and writing them (host/gpus)."""
    off = [off_sectors(a), off_sectors(b)]
    if not any(off):
        return a, b
    a_rows, b_rows = (cfg.block_n, cfg.block_m) if cfg.swap_ab else (cfg.block_m, cfg.block_n)  # a tile's, per k
    share = (a_rows * off[0] + b_rows * off[1]) / (a_rows + b_rows)
    gpu = device_model(device)
    gemm_us = -(-tile_count(M, N, cfg) // gpu.sms) * tile_us(cfg, K, gpu)
    copy_us = sum(2 * t.numel() * t.element_size() for t, o in zip((a, b), off) if o) / gpu.copy_bytes_per_us
    if gpu.restage_gain * share * gemm_us <= copy_us:
        return a, b
    return restaged(a, device) if off[0] else a, restaged(b, device) if off[1] else b


class StagedGemm(NamedTuple):
    """A GEMM's tensors as its kernel reads and writes them: A and B (B as an N x K tensor when read K-major), D (the
    call's `out`, or an aligned stand-in copied back after the launch) and C (None without one)."""
    a: torch.Tensor
    b: torch.Tensor
    out: torch.Tensor
    c: torch.Tensor | None


def stage_matmul(problem: MatmulProblem, cfg: MatmulConfig, b_kmajor: bool, out: torch.Tensor) -> StagedGemm:
    """A checked problem's tensors as TMA reads them for `cfg`: aligned copies where TMA cannot address one, A and B
    restaged onto sectors where that pays (sector_aligned), and a C that is `out` itself staged with it."""
    target = tma_target(out)
    c = None if problem.c is None else (target if problem.c is out else tma_ready(problem.c))
    if c is target and target is not out:
        target.copy_(out)
    a, b = sector_aligned(tma_ready(problem.a), tma_ready(problem.b.t() if b_kmajor else problem.b), problem.M,
                          problem.N, problem.K, cfg, problem.device)
    return StagedGemm(a, b, target, c)


class StagedFp8(NamedTuple):
    """An FP8 GEMM's tensors as its kernel reads and writes them: A, B^T (N x K), the scales (per-tensor and per-row:
    flat vectors read by pointer; blockwise: scale_a^T and scale_b^T, TMA operands) and D (`out`, or an aligned
    stand-in copied back after the launch)."""
    a: torch.Tensor
    b: torch.Tensor
    scale_a: torch.Tensor
    scale_b: torch.Tensor
    out: torch.Tensor


def stage_matmul_fp8(problem: Fp8Problem, out: torch.Tensor) -> StagedFp8:
    """A checked FP8 problem's tensors as its kernel reads them: aligned copies where TMA cannot address one (the
    operands, D, blockwise scales), per-tensor and per-row scales as contiguous vectors."""
    target = tma_target(out)
    a, b = tma_ready(problem.a), tma_ready(problem.b.t())
    if problem.mode == "blockwise":  # the kernel reads scale_a^T (K blocks x M) and scale_b^T (N x K blocks) by TMA
        scale_a, scale_b = tma_ready(problem.scale_a.t()), tma_ready(problem.scale_b.t())
    else:
        scale_a, scale_b = problem.scale_a.reshape(-1).contiguous(), problem.scale_b.reshape(-1).contiguous()
    return StagedFp8(a, b, scale_a, scale_b, target)


def reads_b_kmajor(b: torch.Tensor, cfg: MatmulConfig) -> bool:
    """Whether a B that reads as K-major and row-major at once (both strides 1: a (K, 1) or (1, N) one, which the
    stride test calls row-major) is read K-major: where `cfg` needs B K-major (swap-AB, split multicast in 2x1)."""
    return b.stride(0) == 1 and (cfg.swap_ab or cfg.split_multicast and cfg.cluster.m > 1)


def restaged(t: torch.Tensor, device: int) -> torch.Tensor:
    """A copy of `t` (on `device`) whose rows start on 128-byte lines (tilepipe/kernels/restage.py)."""
    from tilepipe.kernels.restage import BLOCK_C, BLOCK_R, restage_rows_kernel

    rows, cols = t.shape
    staged = aligned_empty(t.shape, t.dtype, t.device)
    grid = (-(-rows // BLOCK_R), -(-cols // BLOCK_C), 1)
    launch_copy(restage_rows_kernel, (t.dtype, device), grid, device, (t, staged),
                (rows, cols, t.stride(0), staged.stride(0), BLOCK_R, BLOCK_C))
    return staged


def shifted_scale_rows(scale_a: torch.Tensor, device: int) -> torch.Tensor:
    """scale_a (M, K/128, any strides) as grouped_blockwise_kernel reads it by TMA: SCALE_ALIGN copies of scale_a^T
    stacked, a new (SCALE_ALIGN * K/128, M rounded up to SCALE_ALIGN) fp32 tensor whose copy j is shifted up by j rows
    (its column m holds row m + j; zeros past M). A group's tiles start at any row, and TMA reads a row of scale_a^T
    only from a 16-byte start: the kernel reads the rows from `row` at row rounded down to a multiple of SCALE_ALIGN
    in copy row % SCALE_ALIGN (kernels/blockwise_scales.py shifted_a_scales_at). One kernel (shift_scale_rows_kernel),
    4x scale_a's bytes written."""
    from tilepipe.kernels.blockwise_scales import SCALE_ALIGN
    from tilepipe.kernels.restage import SHIFT_BLOCK_K, SHIFT_BLOCK_M, shift_scale_rows_kernel

    copies = SCALE_ALIGN.value
    M, k_blocks = scale_a.shape
    width = -(-M // copies) * copies
    shifted = torch.empty((copies * k_blocks, width), dtype=torch.float32, device=scale_a.device)
    grid = (-(-(width + copies - 1) // SHIFT_BLOCK_M), -(-k_blocks // SHIFT_BLOCK_K), 1)
    m_major = scale_a.stride(0) == 1
    scalars = (M, k_blocks, scale_a.stride(0), scale_a.stride(1), width, copies, SHIFT_BLOCK_M, SHIFT_BLOCK_K, m_major)
    launch_copy(shift_scale_rows_kernel, (m_major, device), grid, device, (scale_a, shifted), scalars)
    return shifted


def launch_copy(kernel, key: tuple, grid: tuple[int, int, int], device: int, tensors: tuple[torch.Tensor, ...],
                scalars: tuple) -> None:
    """Launch one of kernels/restage.py's copies (4 warps) on the current stream: the tensors' addresses then the
    scalars, through the launcher cached for (kernel, `key`: what its binary is specialized on), else Triton's JIT."""
    cache_key = (kernel.fn.__name__, *key)
    args = (*(t.data_ptr() for t in tensors), *scalars)
    if _COPIES.launch(cache_key, grid, torch._C._cuda_getCurrentRawStream(device), args) is None:
        _COPIES.remember(cache_key, kernel[grid](*tensors, *scalars, num_warps=4, **BUILD_OPTIONS))


_COPIES = LauncherCache()
"""The copies' launchers by kernel and what its binary is specialized on (dtype or layout, and device; never sizes
or strides)."""
