"""tilepipe.grouped_mm: torch._grouped_mm's 2D x 3D grouped GEMM (Mixture-of-Experts) on Hopper, with the groups'
row ends read on the GPU (kernels/grouped_matmul.py)."""

from dataclasses import replace

import torch

from tilepipe.host.checks import check_grouped_mm, check_no_overlap
from tilepipe.host.configs import LARGE_SUBTILED_16BIT, LARGE_SUBTILED_FP32, MatmulConfig
from tilepipe.host.device import device_index, device_target, sm_count
from tilepipe.host.launch import TMA_ALIGN_BYTES, LauncherCache, TmaOperand, tensor_descriptor
from tilepipe.kernels.spec import BUILD_OPTIONS

GROUPED_SCHEDULE = "static"


def grouped_mm(a: torch.Tensor, b: torch.Tensor, offs: torch.Tensor, *, out: torch.Tensor | None = None,
               out_dtype: torch.dtype | None = None) -> torch.Tensor:
    """out[offs[g-1]:offs[g]] = a[offs[g-1]:offs[g]] @ b[g] for each group g (offs[-1] taken as 0), as
    torch._grouped_mm(a, b, offs) computes it, on a Hopper GPU without a host sync or a padding copy.

    a is (M, K) bf16 or fp16; b is (G, K, N) of a's dtype, a transposed (G, N, K) tensor (K-major, as MoE weights
    are held) or row-major, its experts packed; offs holds G int32 cumulative row ends on a's GPU (groups may be
    empty and of any size). D is a's dtype or fp32 (`out_dtype`), written into `out` when given. Rows of D from
    offs[-1] on are left untouched (a new D holds whatever torch.empty gave them). Row strides must be multiples of
    16 bytes (K and N multiples of 8 for 16-bit tensors); a row-major b needs K a multiple of 16.
    offs is not read on the host: a group whose end is below an earlier end is empty, and ends past M count as M, so
    decreasing or too large offs never write outside D, but those rows' values are not torch's. Raises TypeError /
    ValueError naming the argument for bad input, before anything is written. Under torch.compile this calls the
    custom op tilepipe::grouped_mm; it records into CUDA graphs, and a replay reads offs' new values.
    """
    if torch.compiler.is_compiling():
        if out is None:
            return torch.ops.tilepipe.grouped_mm(a, b, offs, out_dtype=out_dtype)
        torch.ops.tilepipe.grouped_mm_out(out, a, b, offs, out_dtype=out_dtype)
        return out
    G, M, N, K, out_dtype, b_kmajor = check_grouped_mm(a, b, offs, out, out_dtype)
    cfg = grouped_config(K, out_dtype, b_kmajor)
    if out is None:
        out = torch.empty((M, N), device=a.device, dtype=out_dtype)
    b_rows = stacked_experts(b, b_kmajor)
    check_no_overlap(out, a, b_rows, None)
    for name, t in (("a", a), ("b", b), ("out", out)):
        if t.data_ptr() % TMA_ALIGN_BYTES:
            raise ValueError(f"{name} must start on {TMA_ALIGN_BYTES} bytes (TMA reads and writes it), got address "
                             f"{t.data_ptr():#x}")
    if M == 0 or N == 0 or G == 0:
        return out
    if K == 0:  # the groups' rows are zeros, the rest untouched: no launch, offs stays on the GPU
        grouped = (torch.arange(M, device=a.device) < offs[-1])[:, None]
        return out.copy_(torch.where(grouped, out.new_zeros(()), out))
    device = device_index(a)
    if device_target(device) != "sm_90a":
        raise RuntimeError(f"grouped_mm is built for sm_90a (Hopper); this GPU is {device_target(device)}")
    _launch(a, b_rows, out, offs, G, K, b_kmajor, cfg, device)
    return out


def grouped_config(K: int, out_dtype: torch.dtype, b_kmajor: bool) -> MatmulConfig:
    """The 128x256 tile with D in sub-tiles (matmul's LARGE_SUBTILED forms), its BK halved where a row-major b's K
    is not a multiple of it (B's experts are stacked along K there, so a k-step must not reach into the next one)."""
    cfg = LARGE_SUBTILED_FP32 if out_dtype == torch.float32 else LARGE_SUBTILED_16BIT
    if b_kmajor or K % cfg.block_k == 0:
        return cfg
    block_k = next((bk for bk in (32, 16) if K % bk == 0), None)
    if block_k is None:
        raise ValueError(f"b: a row-major b needs K a multiple of 16, got K = {K}; pass b as a transposed (G, N, K) "
                         "tensor")
    return replace(cfg, block_k=block_k)


def stacked_experts(b: torch.Tensor, b_kmajor: bool) -> torch.Tensor:
    """b's G experts as one 2-D tensor the kernel's B descriptor covers: (G * N, K) K-major, else (G * K, N)."""
    G, K, N = b.shape
    if b_kmajor:
        return b.as_strided((G * N, K), (b.stride(2), 1))
    return b.as_strided((G * K, N), (b.stride(1), 1))


def _launch(a: torch.Tensor, b_rows: torch.Tensor, out: torch.Tensor, offs: torch.Tensor, G: int, K: int,
            b_kmajor: bool, cfg: MatmulConfig, device: int) -> None:
    """Launch grouped_matmul_kernel on a persistent grid (one program per SM, or per tile where a bound on the
    tile count is smaller): the first call per configuration through Triton's JIT, later ones FastLauncher."""
    M, N = out.shape
    num_pid_n = -(-N // cfg.block_n)
    most_tiles = (-(-M // cfg.block_m) + G) * num_pid_n  # each group adds at most one row of tiles
    grid = (min(sm_count(device), most_tiles), 1, 1)
    stream = torch._C._cuda_getCurrentRawStream(device)
    scalars = (G, M, N, K, out.stride(0), cfg.stages, cfg.c_stages, cfg.group_m, b_kmajor, GROUPED_SCHEDULE,
               (cfg.block_m, cfg.block_n))
    args = (TmaOperand.of(a), TmaOperand.of(b_rows), TmaOperand.of(out), out.data_ptr(), offs.data_ptr(), *scalars)
    key = (cfg, a.dtype, out.dtype, b_kmajor, device)
    if _LAUNCHERS.launch(key, grid, stream, args) is not None:
        return
    from tilepipe.kernels.grouped_matmul import grouped_blocks, grouped_matmul_kernel

    blocks = grouped_blocks(cfg, b_kmajor)
    kernel = grouped_matmul_kernel[grid](tensor_descriptor(a, blocks["a"]), tensor_descriptor(b_rows, blocks["b"]),
                                         tensor_descriptor(out, blocks["d"]), out, offs, *scalars,
                                         num_warps=cfg.num_warps, **BUILD_OPTIONS)
    _LAUNCHERS.remember(key, kernel)


_LAUNCHERS = LauncherCache()
"""grouped_mm's launchers by (config, dtypes, B layout, device): the kernel is not specialized on sizes or offs."""
