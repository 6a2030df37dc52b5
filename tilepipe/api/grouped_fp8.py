"""tilepipe.grouped_mm_fp8: grouped_mm's 2D x 3D grouped GEMM (Mixture-of-Experts, groups' row ends read on the GPU)
with FP8 operands and matmul_fp8's finer scalings, per group's expert (kernels/grouped_fp8.py):

| scaling   | scale_a                            | scale_b                                        | accumulation   |
|-----------|------------------------------------|------------------------------------------------|----------------|
| per-row   | (M,) or (M, 1)                     | (G, N): an expert's column scales              | fp8 wgmma's    |
| blockwise | (M, K/128): 1x128, as matmul_fp8's | (G, K/128, N/128): 128x128, matmul_fp8's each  | fp32 every 128 |

The scale_b kind follows from its rank (2-D per-row, 3-D blockwise). Blockwise, scale_b is read in place as a
transposed (G, N/128, K/128) tensor (DeepSeek-V3's weight scales, per expert), like b, other layouts copied first;
scale_a, of any layout, is copied into four shifted copies (shifted_scale_rows: a group may start on any row).
"""

from dataclasses import replace

import torch

from tilepipe.api.grouped import empty_k_result, stacked_experts
from tilepipe.host.checks import check_grouped_out, check_no_overlap, check_out_dtype, overlaps
from tilepipe.host.configs import LARGE_SUBTILED_16BIT, LARGE_SUBTILED_FP32, SCALE_BLOCK, MatmulConfig, fp8_configs
from tilepipe.host.device import device_index, device_target, sm_count
from tilepipe.host.launch import LauncherCache, TmaOperand, check_tma_starts, tensor_descriptor
from tilepipe.host.staging import tma_ready
from tilepipe.kernels.blockwise_scales import SCALE_ALIGN as BLOCKWISE_SCALE_ALIGN
from tilepipe.kernels.spec import BUILD_OPTIONS

SCALE_ALIGN = BLOCKWISE_SCALE_ALIGN.value  # fp32 scales in 16 bytes: where TMA may start a row's read

GROUPED_FP8_SCHEDULE = "static"


def grouped_mm_fp8(a: torch.Tensor, b: torch.Tensor, scale_a: torch.Tensor, scale_b: torch.Tensor,
                   offs: torch.Tensor, *, out_dtype: torch.dtype = torch.bfloat16,
                   out: torch.Tensor | None = None) -> torch.Tensor:
    """out[offs[g-1]:offs[g]] = (a * scale_a) @ (b[g] * scale_b[g]) over the rows of each group g (offs[-1] taken as
    0), on a Hopper GPU without a host sync or a padding copy; the scales as the module's table says (per-row or
    DeepSeek-V3 blockwise).

    a is (M, K) float8_e4m3fn row-major; b is (G, K, N) float8_e4m3fn, a transposed (G, N, K) tensor (K-major: fp8
    wgmma reads B K-major; other layouts are refused rather than copied behind your back), its experts packed; K a
    multiple of 16 (128 blockwise, where N is a multiple of 128 too). offs holds G int32 cumulative row ends on a's
    GPU, as grouped_mm takes them (groups may be empty and of any size; decreasing or too large ends are clamped,
    never read on the host). D is bf16, fp16 or fp32 (`out_dtype`), or written into `out` (of its own dtype) when
    given; rows of D from offs[-1] on are left untouched. Raises TypeError / ValueError naming the argument for bad
    input, before anything is written. Under torch.compile this calls the custom op tilepipe::grouped_mm_fp8; it
    records into CUDA graphs, and a replay reads offs' (and the scales') new values.
    """
    if torch.compiler.is_compiling():
        if out is None:
            return torch.ops.tilepipe.grouped_mm_fp8(a, b, scale_a, scale_b, offs, out_dtype=out_dtype)
        torch.ops.tilepipe.grouped_mm_fp8_out(out, a, b, scale_a, scale_b, offs, out_dtype=out_dtype)
        return out
    G, M, N, K, blockwise, out_dtype = check_grouped_mm_fp8(a, b, scale_a, scale_b, offs, out, out_dtype)
    if out is None:
        out = torch.empty((M, N), device=a.device, dtype=out_dtype)
    b_rows = stacked_experts(b, True)
    check_no_overlap(out, a, b_rows, None)
    for name, s in (("scale_a", scale_a), ("scale_b", scale_b)):
        if overlaps(out, s):
            raise ValueError(f"out must not share memory with {name}")
    check_tma_starts({"a": a, "b": b, "out": out})
    if M == 0 or N == 0 or G == 0:
        return out
    if K == 0:  # zero in the groups' rows, the rest untouched: no launch, offs stays on the GPU
        return out.copy_(empty_k_result(out, offs, None, None))
    device = device_index(a)
    if device_target(device) != "sm_90a":
        raise RuntimeError(f"grouped_mm_fp8 is built for sm_90a (Hopper); this GPU is {device_target(device)}")
    if blockwise:  # the kernel reads scale_a^T in shifted copies and the experts' scale_b^T stacked, by TMA
        scales = (shifted_scale_rows(scale_a), tma_ready(scale_b.transpose(1, 2).reshape(G * N // SCALE_BLOCK, -1)))
    else:
        scales = (scale_a.reshape(M).contiguous(), scale_b.contiguous())
    _launch(a, b_rows, scales, out, offs, G, N, K, blockwise, device)
    return out


def shifted_scale_rows(scale_a: torch.Tensor) -> torch.Tensor:
    """scale_a (M, K/128) as grouped_blockwise_kernel reads it by TMA: SCALE_ALIGN copies of scale_a^T stacked, a
    new (SCALE_ALIGN * K/128, M rounded up to SCALE_ALIGN) fp32 tensor whose copy j is shifted up by j rows (its column
    m holds row m + j; zeros past M). A group's tiles start at any row, and TMA reads a row of scale_a^T only from a
    16-byte start: the kernel reads the rows from `row` at row rounded down to a multiple of SCALE_ALIGN in copy
    row % SCALE_ALIGN (kernels/blockwise_scales.py shifted_a_scales_at). Two kernels, 4x scale_a's bytes."""
    M, k_blocks = scale_a.shape
    width = -(-M // SCALE_ALIGN) * SCALE_ALIGN
    padded = torch.nn.functional.pad(scale_a.t(), (0, width + SCALE_ALIGN - 1 - M)).contiguous()
    copies = padded.as_strided((SCALE_ALIGN, k_blocks, width), (1, padded.stride(0), 1))
    return copies.contiguous().view(SCALE_ALIGN * k_blocks, width)


def check_grouped_mm_fp8(a: torch.Tensor, b: torch.Tensor, scale_a: torch.Tensor, scale_b: torch.Tensor,
                         offs: torch.Tensor, out: torch.Tensor | None, out_dtype: torch.dtype | None
                         ) -> tuple[int, int, int, int, bool, torch.dtype]:
    """Every check of grouped_mm_fp8's arguments that needs no memory address (fake tensors pass through it too):
    (G, M, N, K, blockwise, out dtype)."""
    names = (("a", a), ("b", b), ("scale_a", scale_a), ("scale_b", scale_b), ("offs", offs))
    for name, t in names:
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
    for name, t, dims in (("a", a, 2), ("b", b, 3), ("offs", offs, 1)):
        if t.dim() != dims:
            raise ValueError(f"{name} must be {dims}-D, got shape {tuple(t.shape)}")
    for name, t, dtype in (("a", a, torch.float8_e4m3fn), ("b", b, torch.float8_e4m3fn), ("scale_a", scale_a,
                           torch.float32), ("scale_b", scale_b, torch.float32), ("offs", offs, torch.int32)):
        if t.dtype != dtype:
            raise TypeError(f"{name} must be {str(dtype).removeprefix('torch.')}"
                            f"{' (cumulative row ends)' if name == 'offs' else ''}, got {t.dtype}")
    if a.device.type != "cuda":
        raise ValueError(f"a must be on a CUDA device, got {a.device}")
    for name, t in names[1:]:
        if t.device != a.device:
            raise ValueError(f"{name} must be on a's device {a.device}, got {t.device}")
    out_dtype = check_out_dtype(out_dtype if out is None else None, out, out_dtype)  # as matmul_fp8: out's wins
    (M, K), (G, KB, N) = a.shape, b.shape
    if KB != K:
        raise ValueError(f"a is {tuple(a.shape)} and b is {tuple(b.shape)}: b.shape[1] must equal a.shape[1] (K)")
    if offs.shape[0] != G:
        raise ValueError(f"offs has {offs.shape[0]} group ends but b has {G} groups (b.shape[0])")
    if offs.stride(0) != 1 and G > 1:
        raise ValueError(f"offs must be contiguous, got stride {offs.stride(0)}")
    if a.stride(1) != 1 and K > 1 or a.stride(0) % 16 and M > 1:
        raise ValueError(f"a must be row-major with rows on 16 bytes (K a multiple of 16; TMA reads it), got strides "
                         f"{a.stride()} for K = {K}")
    if b.stride(1) != 1 and K > 1 or b.stride(2) % 16 and N > 1 or G > 1 and b.stride(0) != N * b.stride(2):
        raise ValueError(f"b must be a transposed (G, N, K) tensor (K-major: fp8 wgmma reads B K-major) with its "
                         f"experts packed and rows on 16 bytes (K a multiple of 16), got strides {b.stride()} for "
                         f"shape {tuple(b.shape)}; pass b.transpose(1, 2).contiguous().transpose(1, 2) to copy it")
    blockwise = scale_b.dim() == 3
    check_scales(scale_a, scale_b, G, M, N, K, blockwise)
    check_grouped_out(out, M, N, out_dtype, a.device)
    return G, M, N, K, blockwise, out_dtype


def check_scales(scale_a: torch.Tensor, scale_b: torch.Tensor, G: int, M: int, N: int, K: int,
                 blockwise: bool) -> None:
    """The scales' shapes for the kind scale_b's rank names (the module's table), and blockwise's K and N multiples
    of 128."""
    if scale_b.shape[0] != G:
        raise ValueError(f"scale_b has {scale_b.shape[0]} experts (scale_b.shape[0]) but b has {G} groups "
                         "(b.shape[0])")
    if not blockwise:
        if tuple(scale_a.shape) not in ((M, ), (M, 1)) or tuple(scale_b.shape) != (G, N):
            raise ValueError(f"scale_a {tuple(scale_a.shape)} and scale_b {tuple(scale_b.shape)} match no scaling for "
                             f"G={G}, M={M}, N={N}, K={K}: per-row takes ({M},) or ({M}, 1) and ({G}, {N}), blockwise "
                             f"({M}, K/128) and a 3-D ({G}, K/128, N/128)")
        return
    for name, size in (("K", K), ("N", N)):
        if size % SCALE_BLOCK:
            raise ValueError(f"b: blockwise scales need {name} a multiple of {SCALE_BLOCK}, got {name} = {size}")
    kb, nb = K // SCALE_BLOCK, N // SCALE_BLOCK
    if tuple(scale_a.shape) != (M, kb) or tuple(scale_b.shape) != (G, kb, nb):
        raise ValueError(f"blockwise scale_a must be ({M}, {kb}) and scale_b ({G}, {kb}, {nb}) (1x128 and 128x128 "
                         f"blocks per expert), got {tuple(scale_a.shape)} and {tuple(scale_b.shape)}")


def grouped_fp8_config(blockwise: bool, out_dtype: torch.dtype) -> MatmulConfig:
    """Blockwise: matmul_fp8's blockwise 128x128 tile (BN = BK = 128: one B scale a K tile) with as many stages as
    fit; per-row: grouped_mm's 128x256 tile with D in sub-tiles, BK = 128 (128 bytes of fp8)."""
    if blockwise:
        return fp8_configs(True, out_dtype)[0]
    return replace(LARGE_SUBTILED_FP32 if out_dtype == torch.float32 else LARGE_SUBTILED_16BIT, block_k=SCALE_BLOCK)


def fp8_variant_spec(options: dict) -> tuple[MatmulConfig, "KernelSpec"]:
    """A grouped FP8 catalogue variant (kernels/catalogue.py GROUPED_FP8: blockwise, c_dtype) as grouped_mm_fp8
    launches it: its configuration and its KernelSpec."""
    from tilepipe.kernels.grouped_fp8 import grouped_fp8_spec

    cfg = grouped_fp8_config(options["blockwise"], torch.float32 if options["c_dtype"] == "fp32" else torch.bfloat16)
    return cfg, grouped_fp8_spec(cfg, options["c_dtype"], options["blockwise"])


def _launch(a: torch.Tensor, b_rows: torch.Tensor, scales: tuple[torch.Tensor, torch.Tensor], out: torch.Tensor,
            offs: torch.Tensor, G: int, N: int, K: int, blockwise: bool, device: int) -> None:
    """Launch grouped_blockwise_kernel (the scales as TMA operands) or grouped_scaled_kernel (by pointer) on a
    persistent grid (one program per SM, or per tile where a bound on the tile count is smaller): the first call per
    configuration through Triton's JIT, later ones FastLauncher."""
    cfg = grouped_fp8_config(blockwise, out.dtype)
    M = out.shape[0]
    most_tiles = (-(-M // cfg.block_m) + G) * -(-N // cfg.block_n)  # each group adds at most one row of tiles
    grid = (min(sm_count(device), most_tiles), 1, 1)
    stream = torch._C._cuda_getCurrentRawStream(device)
    scalars = (G, M, N, K, out.stride(0), cfg.stages, cfg.c_stages, cfg.group_m, GROUPED_FP8_SCHEDULE)
    tma = (a, b_rows, *scales, out) if blockwise else (a, b_rows, out)
    pointers = (out, offs) if blockwise else (out, offs, *scales)
    args = (*(TmaOperand.of(t) for t in tma), *(t.data_ptr() for t in pointers), *scalars)
    key = (cfg, blockwise, out.dtype, device)
    if _LAUNCHERS.launch(key, grid, stream, args) is not None:
        return
    from tilepipe.kernels.grouped_fp8 import grouped_blockwise_kernel, grouped_fp8_blocks, grouped_scaled_kernel

    blocks = grouped_fp8_blocks(cfg, blockwise)
    names = ("a", "b", "sa", "sb", "c") if blockwise else ("a", "b", "c")
    kernel = (grouped_blockwise_kernel if blockwise else grouped_scaled_kernel)[grid](
        *(tensor_descriptor(t, *blocks[name]) for t, name in zip(tma, names)), *pointers, *scalars,
        num_warps=cfg.num_warps, **BUILD_OPTIONS)
    _LAUNCHERS.remember(key, kernel)


_LAUNCHERS = LauncherCache()
"""grouped_mm_fp8's launchers by (config, scaling, D's dtype, device): not specialized on sizes, offs or scales."""
