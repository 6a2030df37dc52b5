"""tilepipe.grouped_mm_fp8: grouped_mm's 2D x 3D grouped GEMM (Mixture-of-Experts, groups' row ends read on the GPU)
with FP8 operands and matmul_fp8's finer scalings, per group's expert (kernels/grouped_fp8.py):

| scaling   | scale_a                            | scale_b                                        | accumulation   |
|-----------|------------------------------------|------------------------------------------------|----------------|
| per-row   | (M,) or (M, 1)                     | (G, N): an expert's column scales              | fp8 wgmma's    |
| blockwise | (M, K/128): 1x128, as matmul_fp8's | (G, K/128, N/128): 128x128, matmul_fp8's each  | fp32 every 128 |

The scale_b kind follows from its rank (2-D per-row, 3-D blockwise). Blockwise, scale_b is read in place as a
transposed (G, N/128, K/128) tensor (DeepSeek-V3's weight scales, per expert), like b, other layouts copied first;
scale_a, of any layout, is copied into four shifted copies (host/staging.py shifted_scale_rows: a group may start on
any row).
"""

import torch

from tilepipe.api.grouped import empty_k_result
from tilepipe.host.checks import validate_grouped_fp8
from tilepipe.host.choose import choose_grouped_fp8, grouped_fp8_config
from tilepipe.host.configs import SCALE_BLOCK, MatmulConfig
from tilepipe.host.device import device_index
from tilepipe.host.launch import launch_grouped
from tilepipe.host.plans import plan_grouped_fp8
from tilepipe.host.staging import shifted_scale_rows, tma_ready
from tilepipe.kernels.spec import KernelSpec


def grouped_mm_fp8(a: torch.Tensor, b: torch.Tensor, scale_a: torch.Tensor, scale_b: torch.Tensor,
                   offs: torch.Tensor, *, out_dtype: torch.dtype = torch.bfloat16,
                   out: torch.Tensor | None = None, scheduler: str | None = None) -> torch.Tensor:
    """out[offs[g-1]:offs[g]] = (a * scale_a) @ (b[g] * scale_b[g]) over the rows of each group g (offs[-1] taken as
    0), on a Hopper GPU without a host sync or a padding copy; the scales as the module's table says (per-row or
    DeepSeek-V3 blockwise).

    a is (M, K) float8_e4m3fn row-major; b is (G, K, N) float8_e4m3fn, a transposed (G, N, K) tensor (K-major: fp8
    wgmma reads B K-major; other layouts are refused rather than copied behind your back), its experts packed; K a
    multiple of 16 (128 blockwise, where N is a multiple of 128 too). offs holds G int32 cumulative row ends on a's
    GPU, as grouped_mm takes them (groups may be empty and of any size; decreasing or too large ends are clamped,
    never read on the host). D is bf16, fp16 or fp32 (`out_dtype`), or written into `out` (of its own dtype) when
    given; rows of D from offs[-1] on are left untouched. `scheduler` is grouped_mm's ("static" or "dynamic": for a
    GEMM beside kernels that hold SMs). Raises TypeError / ValueError naming the argument for bad input, before
    anything is written. Under torch.compile this calls the custom op tilepipe::grouped_mm_fp8; it records into CUDA
    graphs, and a replay reads offs' (and the scales') new values.
    """
    if torch.compiler.is_compiling():
        if out is None:
            return torch.ops.tilepipe.grouped_mm_fp8(a, b, scale_a, scale_b, offs, out_dtype=out_dtype,
                                                     scheduler=scheduler)
        torch.ops.tilepipe.grouped_mm_fp8_out(out, a, b, scale_a, scale_b, offs, out_dtype=out_dtype,
                                              scheduler=scheduler)
        return out
    G, M, N, K, blockwise, out_dtype = validate_grouped_fp8(a, b, scale_a, scale_b, offs, out, out_dtype, scheduler)
    if out is None:
        out = torch.empty((M, N), device=a.device, dtype=out_dtype)
    if M == 0 or N == 0 or G == 0:
        return out
    if K == 0:  # zero in the groups' rows, the rest untouched: no launch, offs stays on the GPU
        return out.copy_(empty_k_result(out, offs, None, None))
    device = device_index(a)
    choice = choose_grouped_fp8(blockwise, out_dtype, device, scheduler)
    if blockwise:  # the kernel reads scale_a^T in shifted copies and the experts' scale_b^T stacked, by TMA
        b_scales = scale_b.transpose(1, 2).reshape(G * N // SCALE_BLOCK, -1)
        scales = (shifted_scale_rows(scale_a, device), tma_ready(b_scales))
    else:
        scales = (scale_a.reshape(M).contiguous(), scale_b.contiguous())
    launch_grouped(plan_grouped_fp8(a, b, scales, out, offs, G, N, K, blockwise, device, choice.cfg, choice.schedule))
    return out


def fp8_variant_spec(options: dict) -> tuple[MatmulConfig, KernelSpec]:
    """A grouped FP8 catalogue variant (kernels/catalogue.py GROUPED_FP8: blockwise, c_dtype, optional schedule) as
    grouped_mm_fp8 launches it: its configuration and its KernelSpec."""
    from tilepipe.kernels.grouped_fp8 import grouped_fp8_spec

    cfg = grouped_fp8_config(options["blockwise"], torch.float32 if options["c_dtype"] == "fp32" else torch.bfloat16)
    return cfg, grouped_fp8_spec(cfg, options["c_dtype"], options["blockwise"], options.get("schedule", "static"))
