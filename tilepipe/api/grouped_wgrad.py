"""tilepipe.grouped_mm's 2D x 2D form, the Mixture-of-Experts weight gradient (torch._grouped_mm's meaning): offs
splits K into G groups and D[g] = a[:, k_{g-1}:k_g] @ b[k_{g-1}:k_g, :], on Hopper, with the K ends read on the GPU
(kernels/grouped_wgrad.py, schedulers/kgrouped.py)."""

import torch

from tilepipe.host.checks import validate_grouped_wgrad
from tilepipe.host.choose import choose_grouped_wgrad, wgrad_config
from tilepipe.host.configs import MatmulConfig
from tilepipe.host.device import device_index
from tilepipe.host.launch import launch_grouped
from tilepipe.host.plans import plan_grouped_wgrad
from tilepipe.kernels.spec import KernelSpec


def grouped_mm_wgrad(a: torch.Tensor, b: torch.Tensor, offs: torch.Tensor, *, out: torch.Tensor | None = None,
                     out_dtype: torch.dtype | None = None) -> torch.Tensor:
    """out[g] = a[:, offs[g-1]:offs[g]] @ b[offs[g-1]:offs[g], :] for each group g (offs[-1] taken as 0), as
    torch._grouped_mm(a, b, offs) computes it for 2-D a and b (a MoE layer's weight gradient: a = X.t(), b = dY), on
    a Hopper GPU without a host sync or a padding copy. tilepipe.grouped_mm(a, b, offs) with 2-D a and b calls it.

    a is (M, K) bf16 or fp16, K-major (row-major) or M-major (a transposed (K, M) tensor, as X.t() is); b is (K, N) of
    a's dtype, N-major (row-major) or K-major; offs holds G int32 cumulative K ends on a's GPU (groups may be empty,
    of any size, and need not be aligned: an empty group's out[g] is zeros; K from offs[-1] on is not read). D is
    (G, M, N) of a's dtype or fp32 (`out_dtype`), written into `out` when given (row-major, its groups packed). Row
    strides must be multiples of 16 bytes, and M a multiple of 8 where a is M-major. offs is not read on the host:
    ends are clamped to [0, K] and a group ending before it starts is empty, so decreasing or too large offs never
    read or write outside the tensors, but those groups' values are not torch's. Raises TypeError / ValueError naming
    the argument for bad input, before anything is written. Under torch.compile this calls the custom op
    tilepipe::grouped_mm_wgrad; it records into CUDA graphs, and a replay reads offs' new values."""
    if torch.compiler.is_compiling():
        if out is None:
            return torch.ops.tilepipe.grouped_mm_wgrad(a, b, offs, out_dtype=out_dtype)
        torch.ops.tilepipe.grouped_mm_wgrad_out(out, a, b, offs, out_dtype=out_dtype)
        return out
    G, M, N, K, out_dtype, a_kmajor, b_kmajor = validate_grouped_wgrad(a, b, offs, out, out_dtype)
    if out is None:
        out = torch.empty((G, M, N), device=a.device, dtype=out_dtype)
    if G == 0 or M == 0 or N == 0:
        return out
    if K == 0:  # every group empty: zeros, no launch
        return out.zero_()
    device = device_index(a)
    choice = choose_grouped_wgrad(out_dtype, b_kmajor, device)
    d_rows = out.as_strided((G * M, N), (out.stride(1), 1))  # the groups stacked, as TMA writes them
    launch_grouped(plan_grouped_wgrad(a if a_kmajor else a.t(), b.t() if b_kmajor else b, d_rows, offs, G, M, N, K,
                                      a_kmajor, b_kmajor, choice.cfg, device))
    return out


def wgrad_variant_spec(options: dict) -> tuple[MatmulConfig, KernelSpec]:
    """A catalogue variant of the weight-gradient kernel (kernels/catalogue.py GROUPED_WGRAD: dtype, c_dtype, a_kmajor,
    b_kmajor) as grouped_mm launches it: its configuration and its KernelSpec."""
    from tilepipe.kernels.grouped_wgrad import wgrad_spec

    cfg = wgrad_config(torch.float32 if options["c_dtype"] == "fp32" else torch.bfloat16)
    return cfg, wgrad_spec(cfg, options["dtype"], options["c_dtype"], options["a_kmajor"], options["b_kmajor"])
