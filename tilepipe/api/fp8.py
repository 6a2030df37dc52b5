"""FP8 GEMMs with torch._scaled_mm's semantics: per-tensor, per-row and DeepSeek-style blockwise scales (on sm_100:
compiled for sm_100a on the CPU, never run), and the block-scaled MXFP8/MXFP4/NVFP4 GEMM (sm_100 only; likewise).

`matmul_fp8(a, b, scale_a, scale_b)` computes (a * scale_a) @ (b * scale_b) with the scales broadcast as
torch._scaled_mm does:

| scaling      | scale_a                  | scale_b                          | accumulation                        |
|--------------|--------------------------|----------------------------------|-------------------------------------|
| per-tensor   | 1 element                | 1 element                        | wgmma's fp8 precision over all of K |
| per-row      | (M, 1)                   | (1, N)                           | wgmma's fp8 precision over all of K |
| blockwise    | (M, ceil(K/128)): 1x128  | (ceil(K/128), ceil(N/128)): 128x128 | promoted to fp32 every 128 of K  |

Per-tensor and per-row accumulate like torch's `use_fast_accum=True` (Hopper's fp8 wgmma keeps fewer mantissa bits
than fp32); blockwise promotes each 128-wide K block's partial sum into an fp32 accumulator, as DeepGEMM does.
`matmul_block_scaled` takes torch._scaled_mm's MX/NV block scales (docs/block-scaled.md).
"""

import torch

from tilepipe.host.checks import (check_block_scaled, check_no_overlap, check_out, check_out_dtype, elements_per_byte,
                                  validate_matmul_fp8)
from tilepipe.host.choose import choose_matmul_fp8
from tilepipe.host.configs import MatmulConfig, sm100_block_scaled_config
from tilepipe.host.device import GL_DTYPES, block_scaled_target, device_index, sm_count
from tilepipe.host.launch import TMA_ALIGN_BYTES, launch_fp8
from tilepipe.host.plans import Fp8Plan, PlanCache, plan_fp8_kernel, plan_matmul_fp8
from tilepipe.host.staging import stage_matmul_fp8, tma_ready, tma_target
from tilepipe.kernels.sm100_block_scaled import FORMATS, block_scaled_blocks


def matmul_fp8(a: torch.Tensor, b: torch.Tensor, scale_a: torch.Tensor, scale_b: torch.Tensor, *,
               out_dtype: torch.dtype = torch.bfloat16, out: torch.Tensor | None = None,
               config: MatmulConfig | None = None, scheduler: str | None = None) -> torch.Tensor:
    """(a * scale_a) @ (b * scale_b) on a Hopper GPU, as torch._scaled_mm(a, b, scale_a, scale_b, out_dtype=...). On an
    sm_100/sm_103 GPU (B200, B300) per-tensor and per-row scaling launch the sm_100a kernel
    (kernels/sm100_matmul.py: sm100_scaled_matmul_kernel) and blockwise scaling kernels/sm100_blockwise.py's, both
    compiled and checked on the CPU only, never run.

    a is (M, K) row-major and b is (K, N) column-major (`w.t()` of a row-major (N, K) weight): fp8 wgmma reads both
    operands K-major from shared memory, so other layouts are refused rather than transposed behind your back (a
    transpose is a full extra pass over the operand: pass `b.t().contiguous().t()` to pay it explicitly).
    Dtypes: float8_e4m3fn, or float8_e5m2 for one of the two. Scales are float32 (see the module table); D is
    bf16, fp16 or fp32, written into `out` when given. Rows that TMA cannot address (K not a multiple of 16) are
    staged through an aligned copy. Raises TypeError / ValueError naming the argument for bad input. `config`
    overrides the tile configuration (on sm_90a also a 2x1 or 1x2 cluster, static schedule); `scheduler` ("static",
    "streamk" or "splitk", sm_90a only) the schedule fp8_schedule_for picks.
    """
    if torch.compiler.is_compiling():  # an opaque custom op for the compiler (tilepipe.api.library)
        if config is not None or scheduler is not None:
            raise ValueError("config= and scheduler= are not supported under torch.compile")
        if out is None:
            return torch.ops.tilepipe.matmul_fp8(a, b, scale_a, scale_b, out_dtype=out_dtype)
        torch.ops.tilepipe.matmul_fp8_out(out, a, b, scale_a, scale_b, out_dtype=out_dtype)
        return out
    try:  # a repeated call geometry skips every step below: its launch, memoized (host/plans.py: Fp8Plan)
        key = (a.shape, a.stride(), a.dtype, a.device, b.shape, b.stride(), b.dtype, b.device, scale_a.shape,
               scale_a.stride(), scale_a.dtype, scale_a.device, scale_b.shape, scale_b.stride(), scale_b.dtype,
               scale_b.device, out_dtype, None if out is None else (out.shape, out.stride(), out.dtype, out.device),
               config, scheduler)
        plan = _PLANS.get(key)
    except (AttributeError, TypeError):  # not tensors, or unhashable: the checks say which
        key = plan = None
    if plan is not None:
        result = plan.run((a, b, scale_a, scale_b), out)
        if result is not None:
            return result
    return _matmul_fp8(a, b, scale_a, scale_b, out_dtype, out, key, config, scheduler)


def _matmul_fp8(a: torch.Tensor, b: torch.Tensor, scale_a: torch.Tensor, scale_b: torch.Tensor,
                out_dtype: torch.dtype, out: torch.Tensor | None, key: tuple | None,
                config: MatmulConfig | None = None, scheduler: str | None = None) -> torch.Tensor:
    """matmul_fp8's one pass down the host layers: validate, choose, stage, plan, launch; then an Fp8Plan for the
    call's geometry `key` where the launch read the call's own tensors."""
    problem = validate_matmul_fp8(a, b, scale_a, scale_b, out_dtype, out, config, scheduler)
    if out is None:
        out = torch.empty((problem.M, problem.N), device=a.device, dtype=problem.out_dtype)
    if problem.M == 0 or problem.N == 0:
        return out
    if problem.K == 0:
        return out.zero_()
    choice = choose_matmul_fp8(problem)
    staged = stage_matmul_fp8(problem, out)
    plan = plan_matmul_fp8(staged, problem.mode, problem.device, choice.cfg, choice.schedule, choice.arch)
    launcher = launch_fp8(plan)
    if staged.out is not out:
        out.copy_(staged.out)
    elif launcher is not None and key is not None and all(
            t.data_ptr() == given.data_ptr() for t, given in zip(staged[:4], (a, b, scale_a, scale_b))):
        _PLANS.remember(key, Fp8Plan(plan, launcher, out))
    return out


_PLANS = PlanCache()


def matmul_block_scaled(a: torch.Tensor, b: torch.Tensor, scale_a: torch.Tensor, scale_b: torch.Tensor, *,
                        format: str = "mxfp8", out_dtype: torch.dtype = torch.bfloat16,
                        out: torch.Tensor | None = None) -> torch.Tensor:
    """(a * scale_a) @ (b * scale_b) with block scales along K, as torch._scaled_mm(a, b, scale_a, scale_b,
    out_dtype=...) takes MX and NV operands, on an sm_100/sm_103 GPU (B200, B300) only: the sm_100a kernel
    (kernels/sm100_block_scaled.py, tcgen05_mma_scaled) has been compiled and checked on the CPU, never run.

    `format` "mxfp8": a and b float8_e4m3fn or float8_e5m2, scales float8_e8m0fnu, one per 32 elements of K;
    "mxfp4": a and b float4_e2m1fn_x2 (two elements a byte along K: a is (M, K/2), b (K/2, N)), scales
    float8_e8m0fnu, one per 32; "nvfp4": a and b float4_e2m1fn_x2, scales float8_e4m3fn, one per 16. a is row-major,
    b column-major (`w.t()` of a row-major weight); each scale is a contiguous tensor in the packed 32x4x4 block order
    (rows padded to 128, scales along K to 4: torch's SWIZZLE_32_4_4). D is bf16, fp16 or fp32, written into `out`
    when given. Raises TypeError / ValueError naming the argument for bad input, RuntimeError on a GPU without
    block-scaled MMA (Hopper) naming it."""
    out_dtype = check_out_dtype(out_dtype if out is None else None, out, out_dtype)
    M, N, K = check_block_scaled(a, b, scale_a, scale_b, format)
    if out is None:
        out = torch.empty((M, N), device=a.device, dtype=out_dtype)
    else:
        check_out(out, (M, N), a.device)
        check_no_overlap(out, a, b, None)
    if M == 0 or N == 0:
        return out
    if K == 0:
        return out.zero_()
    device = device_index(a)
    block_scaled_target(torch.cuda.get_device_capability(device), torch.cuda.get_device_name(device))
    as_bytes = (lambda t: t.view(torch.uint8)) if elements_per_byte(a.dtype) == 2 else (lambda t: t)
    operands = tma_ready(as_bytes(a)), tma_ready(as_bytes(b.t()))
    cfg = sm100_block_scaled_config(M, N, format, GL_DTYPES[operands[0].dtype], out_dtype, sm_count(device))
    blocks, k_blocks = block_scaled_blocks(cfg, format), -(-K // (4 * FORMATS[format].vec))
    scales = [_packed_scales(s, k_blocks) for s in (scale_a, scale_b)]
    target = tma_target(out)
    tma = ((operands[0], *blocks["a"]), (operands[1], *blocks["b"]), (scales[0], blocks["sfa"], (), "scales"),
           (scales[1], blocks["sfb"], (), "scales"), (target, *blocks["c"]))
    launch_fp8(plan_fp8_kernel("sm100_block_scaled_kernel", tma, (), (), format, device, cfg, "static"))
    if target is not out:
        out.copy_(target)
    return out


def _packed_scales(scale: torch.Tensor, k_blocks: int) -> torch.Tensor:
    """A checked scale tensor as the kernel's TMA reads it, [1, rows / 128, k_blocks, 2, 256] (a 512-byte block per 128
    rows and 4 scales; e8m0 as bytes), at a 16-byte aligned address."""
    view = (scale.view(torch.uint8) if scale.dtype == torch.float8_e8m0fnu else scale).reshape(1, -1, k_blocks, 2, 256)
    return view if view.data_ptr() % TMA_ALIGN_BYTES == 0 else view.clone()
