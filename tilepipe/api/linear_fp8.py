"""tilepipe.linear_fp8: torch.nn.functional.linear on Hopper with its result quantized to float8_e4m3fn in the GEMM's
epilogue, for an FP8 layer after it. DeepSeek-style 1x128 scales (one per row and 128 columns, written beside D in the
layout matmul_fp8's blockwise scale_a reads without a copy), or a given per-tensor scale. One pass over D replaces a
16-bit D, an amax pass and a cast (kernels/quantize_epilogues.py: quantize_1x128, quantize_tensor)."""

from dataclasses import replace
from functools import lru_cache

import torch

from tilepipe.api.linear import check_linear
from tilepipe.host.configs import MEDIUM, SMALL, MatmulConfig, config_for
from tilepipe.host.device import device_index, device_target
from tilepipe.host.launch import launch_gemm
from tilepipe.host.plans import plan_gemm
from tilepipe.host.staging import StagedGemm, tma_ready
from tilepipe.kernels import quantize_epilogues as epilogues

FP8_MAX = epilogues.FP8_MAX.value
SCALE_GROUP = epilogues.SCALE_GROUP.value
AMAX_FLOOR = epilogues.AMAX_FLOOR.value
FP8 = torch.float8_e4m3fn
LARGEST_TILE_ROWS = 128
"""The most rows of a tile fp8_output_config chooses: a 1x128 scale tensor's rows are padded to it (an edge tile of
fewer rows than one tile writes its scales past M)."""


def linear_fp8(x: torch.Tensor, w: torch.Tensor, *, scale: torch.Tensor | None = None
               ) -> tuple[torch.Tensor, torch.Tensor]:
    """F.linear(x, w) quantized to float8_e4m3fn in one GEMM on Hopper: x is [..., K] (bf16 or fp16), w [N, K] of x's
    dtype. Returns (D, scales), D [..., N] e4m3, so that D * scales approximates x @ w^T:

    - `scale` None: DeepSeek-style 1x128 scales, fp32 [M, N / 128] (M = x's rows): each row's group of 128 columns
      is scaled so its largest magnitude is 448 (scale = amax / 448, amax at least 1e-4). N must be a multiple of
      128. The scales are a column-major view (rows padded to 16 bytes), the layout matmul_fp8's blockwise scale_a
      reads directly: `matmul_fp8(D.reshape(M, N), w2_fp8.t(), scales, w2_scales)` is the next layer.
    - `scale` a one-element fp32 tensor on x's GPU (read there, no host sync): D = x @ w^T / scale, saturated at
      +-448; returns (D, scale) (matmul_fp8's per-tensor scale_a). N must be a multiple of 16.

    Raises TypeError / ValueError naming the argument for bad input. Under torch.compile this calls the custom ops
    tilepipe::linear_fp8 (1x128) and tilepipe::linear_fp8_tensor."""
    if torch.compiler.is_compiling():
        if scale is None:
            return torch.ops.tilepipe.linear_fp8(x, w)
        return torch.ops.tilepipe.linear_fp8_tensor(x, w, scale), scale
    M, N, K, shape = check_linear_fp8(x, w, scale)
    out = torch.empty(shape, dtype=FP8, device=x.device)
    if scale is None:
        storage = torch.empty((N // SCALE_GROUP, padded_rows(M)), dtype=torch.float32, device=x.device)
        _quantize(x, w, out, storage, float(storage.stride(0)), epilogues.quantize_1x128, M, N, K)
        return out, group_scales(storage, M)
    _quantize(x, w, out, scale, 0.0, epilogues.quantize_tensor, M, N, K)
    return out, scale


def check_linear_fp8(x: torch.Tensor, w: torch.Tensor, scale: torch.Tensor | None
                     ) -> tuple[int, int, int, tuple[int, ...]]:
    """Every check of linear_fp8's arguments that needs no memory address: linear's on x and w, N a multiple of 128
    (1x128 scales) or 16 (`scale`: D's rows on 16 bytes), and `scale` one fp32 element on x's device. (M, N, K, D's
    shape)."""
    M, N, K, shape = check_linear(x, w, None, None, None)
    if scale is None and N % SCALE_GROUP:
        raise ValueError(f"w must have a multiple of {SCALE_GROUP} rows for 1x128 scales (N = {N}: D's columns, one "
                         f"scale per {SCALE_GROUP}); pass scale= for a per-tensor scale")
    if scale is not None:
        if not isinstance(scale, torch.Tensor):
            raise TypeError(f"scale must be a torch.Tensor or None, got {type(scale).__name__}")
        if scale.numel() != 1 or scale.dtype != torch.float32:
            raise ValueError(f"scale must be a one-element float32 tensor (a per-tensor scale), got {scale.dtype} "
                             f"of shape {tuple(scale.shape)}")
        if scale.device != x.device:
            raise ValueError(f"scale must be on x's device {x.device}, got {scale.device}")
        if N % 16:
            raise ValueError(f"w must have a multiple of 16 rows (N = {N}: D's rows of e4m3 bytes, which TMA writes)")
    return M, N, K, shape


def padded_rows(M: int) -> int:
    """The row stride of 1x128 scales stored group-major: M rounded up to 4 (16 bytes, TMA's), at least one tile."""
    return max(-(-M // 4) * 4, LARGEST_TILE_ROWS)


def group_scales(storage: torch.Tensor, M: int) -> torch.Tensor:
    """The [M, N / 128] scales of a group-major [N / 128, padded_rows(M)] storage (a column-major view)."""
    return storage[:, :M].t()


@lru_cache(maxsize=256)
def fp8_output_config(M: int, N: int, K: int, dtype: torch.dtype, device: int) -> MatmulConfig:
    """matmul's tile where it is a 128- or 256-column one without swap-AB, pieces, a cluster or ping-pong (whose D
    is 16-bit), else 64x128 (M <= 64) or 128x128; D in 128-column sub-tiles where the tile has 256, so each epilogue
    part holds whole 1x128 groups. Kept per shape (a decode call would otherwise pay the cost model each time; a
    later tilepipe.autotune is not seen by shapes already called)."""
    cfg = config_for(M, N, K, dtype, dtype, True, device, False, "static", False)
    if cfg.swap_ab or cfg.pieced or cfg.cluster.num_ctas > 1 or cfg.pingpong or cfg.tile_n not in (128, 256):
        cfg = SMALL if M <= 64 else MEDIUM
    return replace(cfg, epilogue_n=SCALE_GROUP if cfg.tile_n == 256 else None)


def _quantize(x: torch.Tensor, w: torch.Tensor, out: torch.Tensor, side: torch.Tensor, beta: float, epilogue: object,
              M: int, N: int, K: int) -> None:
    """The GEMM into the e4m3 `out` through a quantizing epilogue, which reads or writes `side` through the kernel's
    bias pointer (beta: the 1x128 scales' row stride); without a K the epilogue of a zero accumulator."""
    if M == 0 or N == 0:
        return
    if K == 0:
        out.zero_()
        if epilogue is epilogues.quantize_1x128:
            side.fill_(AMAX_FLOOR / FP8_MAX)
        return
    device = device_index(x)
    arch = device_target(device)
    if arch != "sm_90a":
        raise RuntimeError(f"linear_fp8 is built for sm_90a (Hopper); this GPU is {arch}")
    cfg = fp8_output_config(M, N, K, x.dtype, device)
    staged = StagedGemm(tma_ready(x.reshape(M, K)), tma_ready(w), out.view(M, N), None)
    launch_gemm(plan_gemm(staged, side, 1.0, beta, True, device, cfg, "static", arch, epilogue))
