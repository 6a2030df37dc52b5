"""tilepipe.grouped_mm's 2D x 2D form, the Mixture-of-Experts weight gradient (torch._grouped_mm's meaning): offs
splits K into G groups and D[g] = a[:, k_{g-1}:k_g] @ b[k_{g-1}:k_g, :], on Hopper, with the K ends read on the GPU
(kernels/grouped_wgrad.py, schedulers/kgrouped.py)."""

import torch

from tilepipe.host.checks import check_grouped_operands, check_no_overlap, check_out_dtype
from tilepipe.host.configs import LARGE_SUBTILED_16BIT, LARGE_SUBTILED_FP32, MatmulConfig
from tilepipe.host.device import device_index, device_target, sm_count
from tilepipe.host.launch import LauncherCache, TmaOperand, check_tma_starts, tensor_descriptor
from tilepipe.kernels.spec import BUILD_OPTIONS, KernelSpec


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
    G, M, N, K, out_dtype, a_kmajor, b_kmajor = check_grouped_wgrad(a, b, offs, out, out_dtype)
    if out is None:
        out = torch.empty((G, M, N), device=a.device, dtype=out_dtype)
    if G == 0 or M == 0 or N == 0:
        return out
    d_rows = out.as_strided((G * M, N), (out.stride(1), 1))  # the groups stacked, as TMA writes them
    check_no_overlap(d_rows, a, b, None)
    check_tma_starts({"a": a, "b": b, "out": out})
    if K == 0:  # every group empty: zeros, no launch
        return out.zero_()
    device = device_index(a)
    if device_target(device) != "sm_90a":
        raise RuntimeError(f"grouped_mm's weight-gradient form is built for sm_90a (Hopper); this GPU is "
                           f"{device_target(device)}")
    _launch(a if a_kmajor else a.t(), b.t() if b_kmajor else b, d_rows, offs, G, M, N, K, a_kmajor, b_kmajor,
            wgrad_config(out_dtype), device)
    return out


def _row_major(t: torch.Tensor) -> bool | None:
    """Whether 2-D `t` is held row-major (True), column-major (False) or neither (None), its outer stride on 16 bytes
    (TMA's rule for every stride but the innermost)."""
    rows, cols = t.shape
    size = t.element_size()
    if t.stride(1) == 1 and t.stride(0) >= max(1, cols) and (t.stride(0) * size % 16 == 0 or rows == 1):
        return True
    if t.stride(0) == 1 and t.stride(1) >= max(1, rows) and (t.stride(1) * size % 16 == 0 or cols == 1):
        return False
    return None


def check_grouped_wgrad(a: torch.Tensor, b: torch.Tensor, offs: torch.Tensor, out: torch.Tensor | None,
                        out_dtype: torch.dtype | None) -> tuple[int, int, int, int, torch.dtype, bool, bool]:
    """The weight-gradient form's checks that need no memory address: (G, M, N, K, out dtype, a K-major, b
    K-major)."""
    check_grouped_operands(a, b, offs, 2, "K")
    out_dtype = check_out_dtype(out_dtype, out, a.dtype)
    (M, K), (KB, N), G = a.shape, b.shape, offs.shape[0]
    if KB != K:
        raise ValueError(f"a is {tuple(a.shape)} and b is {tuple(b.shape)}: b.shape[0] must equal a.shape[1] (K, "
                         "which offs splits)")
    if offs.stride(0) != 1 and G > 1:
        raise ValueError(f"offs must be contiguous, got stride {offs.stride(0)}")
    a_rowmajor, b_rowmajor = _row_major(a), _row_major(b)
    step = 16 // a.element_size()
    if a_rowmajor is None or a_rowmajor is False and M % step:
        raise ValueError(f"a must be row-major (K-major) or a transposed (K, M) tensor (M-major, M a multiple of "
                         f"{step}) with rows on 16 bytes (TMA reads it), got strides {a.stride()} for shape "
                         f"{tuple(a.shape)}")
    if b_rowmajor is None:
        raise ValueError(f"b must be row-major (N-major) or a transposed (N, K) tensor (K-major) with rows on 16 bytes "
                         f"(TMA reads it), got strides {b.stride()} for shape {tuple(b.shape)}")
    if out is not None:
        if tuple(out.shape) != (G, M, N):
            raise ValueError(f"out must have shape {(G, M, N)}, got {tuple(out.shape)}")
        if out.device != a.device:
            raise ValueError(f"out must be on {a.device}, got {out.device}")
        rows = out.stride(1)
        if (out.stride(2) != 1 and N > 1 or rows < N or rows * out.element_size() % 16 and G * M > 1
                or G > 1 and out.stride(0) != M * rows):
            raise ValueError(f"out must be row-major with rows on 16 bytes and its groups packed (TMA writes it as "
                             f"({G} * {M}, {N})), got strides {out.stride()}")
    elif N * out_dtype.itemsize % 16:
        raise ValueError(f"N = {N}: D's rows must be a multiple of 16 bytes (TMA writes them), {N} {out_dtype} "
                         "elements are not")
    return G, M, N, K, out_dtype, bool(a_rowmajor), not b_rowmajor


def wgrad_config(out_dtype: torch.dtype) -> MatmulConfig:
    """The 128x256 tile with D in sub-tiles (matmul's LARGE_SUBTILED forms; fp32: 128x32 sub-tiles): each group's M x N
    is a whole GEMM of K_g, and a MoE's (H x D per expert) fills the GPU many times over."""
    return LARGE_SUBTILED_FP32 if out_dtype == torch.float32 else LARGE_SUBTILED_16BIT


def wgrad_variant_spec(options: dict) -> tuple[MatmulConfig, KernelSpec]:
    """A catalogue variant of the weight-gradient kernel (kernels/catalogue.py GROUPED_WGRAD: dtype, c_dtype, a_kmajor,
    b_kmajor) as grouped_mm launches it: its configuration and its KernelSpec."""
    from tilepipe.kernels.grouped_wgrad import wgrad_spec

    cfg = wgrad_config(torch.float32 if options["c_dtype"] == "fp32" else torch.bfloat16)
    return cfg, wgrad_spec(cfg, options["dtype"], options["c_dtype"], options["a_kmajor"], options["b_kmajor"])


def _launch(a_rows: torch.Tensor, b_rows: torch.Tensor, d_rows: torch.Tensor, offs: torch.Tensor, G: int, M: int,
            N: int, K: int, a_kmajor: bool, b_kmajor: bool, cfg: MatmulConfig, device: int) -> None:
    """Launch grouped_wgrad_kernel over A and B as their descriptors read them (a_rows (M, K) or (K, M), b_rows (N, K)
    or (K, N)) and D's groups stacked (G * M, N), one program per SM or per tile: the first call per configuration
    through Triton's JIT, later ones FastLauncher."""
    tiles = G * -(-M // cfg.block_m) * -(-N // cfg.block_n)
    grid = (min(sm_count(device), tiles), 1, 1)
    stream = torch._C._cuda_getCurrentRawStream(device)
    scalars = (G, M, N, K, d_rows.stride(0), cfg.stages, cfg.c_stages, cfg.group_m, a_kmajor, b_kmajor,
               (cfg.block_m, cfg.block_n))
    args = (TmaOperand.of(a_rows), TmaOperand.of(b_rows), TmaOperand.of(d_rows), d_rows.data_ptr(), offs.data_ptr(),
            *scalars)
    key = (cfg, a_rows.dtype, d_rows.dtype, a_kmajor, b_kmajor, device)
    if _LAUNCHERS.launch(key, grid, stream, args) is not None:
        return
    from tilepipe.kernels.grouped_wgrad import grouped_wgrad_kernel, wgrad_blocks

    blocks = wgrad_blocks(cfg, a_kmajor, b_kmajor)
    kernel = grouped_wgrad_kernel[grid](tensor_descriptor(a_rows, blocks["a"]), tensor_descriptor(b_rows, blocks["b"]),
                                        tensor_descriptor(d_rows, blocks["d"]), d_rows, offs, *scalars,
                                        num_warps=cfg.num_warps, **BUILD_OPTIONS)
    _LAUNCHERS.remember(key, kernel)


_LAUNCHERS = LauncherCache()
"""grouped_mm_wgrad's launchers by (config, dtypes, operand layouts, device): the kernel is not specialized on sizes
or offs."""
