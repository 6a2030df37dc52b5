"""tilepipe.linear_fp8: torch.nn.functional.linear on Hopper with its result quantized to float8_e4m3fn in the GEMM's
epilogue, for an FP8 layer after it. DeepSeek-style 1x128 scales (one per row and 128 columns, written beside D in the
layout matmul_fp8's blockwise scale_a reads without a copy), or a given per-tensor scale. One pass over D replaces a
16-bit D, an amax pass and a cast (kernels/quantize_epilogues.py: quantize_1x128, quantize_tensor)."""

import torch

from tilepipe.host.checks import check_linear_fp8
from tilepipe.host.choose import choose_linear_fp8
from tilepipe.host.device import device_index
from tilepipe.host.launch import launch_gemm
from tilepipe.host.plans import plan_gemm
from tilepipe.host.staging import StagedGemm, tma_ready
from tilepipe.kernels import quantize_epilogues as epilogues

FP8_MAX = epilogues.FP8_MAX.value
SCALE_GROUP = epilogues.SCALE_GROUP.value
AMAX_FLOOR = epilogues.AMAX_FLOOR.value
FP8 = torch.float8_e4m3fn
LARGEST_TILE_ROWS = 128
"""The most rows of a tile host/choose.py's fp8_output_config chooses: a 1x128 scale tensor's rows are padded to it (an
edge tile of fewer rows than one tile writes its scales past M)."""


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


def padded_rows(M: int) -> int:
    """The row stride of 1x128 scales stored group-major: M rounded up to 4 (16 bytes, TMA's), at least one tile."""
    return max(-(-M // 4) * 4, LARGEST_TILE_ROWS)


def group_scales(storage: torch.Tensor, M: int) -> torch.Tensor:
    """The [M, N / 128] scales of a group-major [N / 128, padded_rows(M)] storage (a column-major view)."""
    return storage[:, :M].t()


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
    choice = choose_linear_fp8(M, N, K, x.dtype, device)
    staged = StagedGemm(tma_ready(x.reshape(M, K)), tma_ready(w), out.view(M, N), None)
    launch_gemm(plan_gemm(staged, side, 1.0, beta, choice.b_kmajor, device, choice.cfg, choice.schedule, choice.arch,
                          epilogue))
