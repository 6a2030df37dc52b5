"""Block scales on the host: torch._scaled_mm's packed-block order for MX/NV scales (SWIZZLE_32_4_4, cuBLAS's
block-scaling-factor layout), and random block-scaled operands with their float64 dequantized product, for the checks
that run matmul_block_scaled (GPU tests, the sanitizer)."""

import torch

from tilepipe.host.checks import BLOCK_SCALED

E2M1_VALUES = (0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0, -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0)
"""The 16 values of an e2m1 nibble (sign, 2 exponent bits, 1 mantissa bit)."""


def pack_block_scales(scales: torch.Tensor) -> torch.Tensor:
    """(rows, K / vec) scales in the packed-block order, flat: rows padded to 128 and scales to 4 (with zero bytes),
    each 128 x 4 block 512 contiguous bytes in which row 32 * i + r, scale c is byte 16 * r + 4 * i + c; blocks
    row-block-major."""
    rows, groups = scales.shape
    rb, cb = -(-rows // 128), -(-groups // 4)
    padded = torch.zeros(rb * 128, cb * 4, dtype=torch.uint8, device=scales.device)
    padded[:rows, :groups] = scales.view(torch.uint8)
    blocks = padded.view(rb, 4, 32, cb, 4).permute(0, 3, 2, 1, 4)  # [row block, K block, r, i, c]
    return blocks.contiguous().view(scales.dtype).flatten()


def scale_values(scales: torch.Tensor) -> torch.Tensor:
    """float64 values of e8m0 (2^(byte - 127)) or e4m3 scales."""
    if scales.dtype == torch.float8_e8m0fnu:
        return torch.pow(2.0, scales.view(torch.uint8).double() - 127)
    return scales.double()


def fp4_values(packed: torch.Tensor) -> torch.Tensor:
    """float64 values of float4_e2m1fn_x2 data (R, C / 2) as (R, C): element 2j in the low nibble of byte j."""
    table = torch.tensor(E2M1_VALUES, dtype=torch.float64, device=packed.device)
    nibbles = packed.view(torch.uint8)
    return torch.stack((table[(nibbles & 15).long()], table[(nibbles >> 4).long()]), dim=-1).flatten(-2)


def block_scaled_operands(M: int, N: int, K: int, fmt: str, a_dtype: torch.dtype = torch.float8_e4m3fn,
                          b_dtype: torch.dtype = torch.float8_e4m3fn, device: str = "cuda"):
    """Random (a, b, scale_a, scale_b, reference) as matmul_block_scaled takes them: a (M, K) row-major and b = w.t()
    of a row-major (N, K) w, fp8 of the given dtypes (MXFP8) or packed e2m1 (MXFP4, NVFP4: K even); scales varying
    over rows and K groups (e8m0 2^-3..2^3, or e4m3 0.25..4), packed; reference = the float64 dequantized product."""
    data, scale_dtype, vec = BLOCK_SCALED[fmt]
    groups = -(-K // vec)
    if data == (torch.float4_e2m1fn_x2, ):
        a = torch.randint(0, 256, (M, K // 2), dtype=torch.uint8, device=device).view(torch.float4_e2m1fn_x2)
        w = torch.randint(0, 256, (N, K // 2), dtype=torch.uint8, device=device).view(torch.float4_e2m1fn_x2)
        a_values, w_values = fp4_values(a), fp4_values(w)
    else:
        a, w = (torch.randn(M, K, device=device) * 2).to(a_dtype), (torch.randn(N, K, device=device) * 2).to(b_dtype)
        a_values, w_values = a.double(), w.double()
    if scale_dtype == torch.float8_e4m3fn:
        sa, sw = ((0.25 + 3.75 * torch.rand(rows, groups, device=device)).to(scale_dtype) for rows in (M, N))
    else:
        sa, sw = (torch.randint(124, 131, (rows, groups), dtype=torch.uint8, device=device).view(scale_dtype)
                  for rows in (M, N))
    full_a = scale_values(sa).repeat_interleave(vec, 1)[:, :K]
    full_w = scale_values(sw).repeat_interleave(vec, 1)[:, :K]
    reference = (a_values * full_a) @ (w_values * full_w).t()
    return a, w.t(), pack_block_scales(sa), pack_block_scales(sw), reference
