"""tilepipe.grouped_mm: torch._grouped_mm's 2D x 3D grouped GEMM (Mixture-of-Experts) on Hopper, with the groups'
row ends read on the GPU (kernels/grouped_matmul.py), and linear's epilogues on it: a per-expert bias and an
activation (grouped_mm), or a gated activation over packed gate-up experts (grouped_gated_mm), so a MoE expert MLP is
grouped_gated_mm then grouped_mm."""

from dataclasses import replace

import torch

from tilepipe.api.grouped_wgrad import grouped_mm_wgrad
from tilepipe.api.linear import ACTIVATIONS, GATE_COLUMNS, GATED, TORCH_ACTIVATIONS, check_activation
from tilepipe.host.checks import check_grouped_mm, check_no_overlap, check_out, check_out_dtype, overlaps
from tilepipe.host.configs import LARGE_SUBTILED_16BIT, LARGE_SUBTILED_FP32, MatmulConfig
from tilepipe.host.device import device_index, device_target, sm_count
from tilepipe.host.launch import LauncherCache, TmaOperand, check_tma_starts, tensor_descriptor
from tilepipe.kernels.spec import BUILD_OPTIONS, KernelSpec

GROUPED_SCHEDULE = "static"


def grouped_mm(a: torch.Tensor, b: torch.Tensor, offs: torch.Tensor, *, out: torch.Tensor | None = None,
               out_dtype: torch.dtype | None = None, bias: torch.Tensor | None = None,
               activation: str | None = None) -> torch.Tensor:
    """out[offs[g-1]:offs[g]] = a[offs[g-1]:offs[g]] @ b[g] for each group g (offs[-1] taken as 0), as
    torch._grouped_mm(a, b, offs) computes it, on a Hopper GPU without a host sync or a padding copy; with `bias`
    (G, N) of a's dtype each group's row added, and `activation` (None, "relu", "gelu", "gelu_tanh", "silu") applied
    after it, both in fp32 in the GEMM's epilogue before D's one rounding.

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
    if isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor) and a.dim() == b.dim() == 2:  # the weight gradient
        if bias is not None or activation is not None:
            raise ValueError("grouped_mm's 2D x 2D (weight-gradient) form takes no bias or activation")
        return grouped_mm_wgrad(a, b, offs, out=out, out_dtype=out_dtype)
    if torch.compiler.is_compiling():
        if out is None:
            return torch.ops.tilepipe.grouped_mm(a, b, offs, bias, out_dtype=out_dtype, activation=activation)
        torch.ops.tilepipe.grouped_mm_out(out, a, b, offs, bias, out_dtype=out_dtype, activation=activation)
        return out
    check_activation(activation, ACTIVATIONS, optional=True)
    return _grouped(a, b, offs, bias, out, out_dtype, activation, ACTIVATIONS.get(activation), 1)


def grouped_gated_mm(a: torch.Tensor, b_gate_up: torch.Tensor, offs: torch.Tensor, activation: str = "silu", *,
                     out: torch.Tensor | None = None, out_dtype: torch.dtype | None = None) -> torch.Tensor:
    """A Mixture-of-Experts gate-up projection with its gated activation fused: for each group g, rows
    offs[g-1]:offs[g] of D are act(a @ Wg[g]^T) * (a @ Wu[g]^T) (SwiGLU with "silu"; "gelu", "gelu_tanh": GeGLU;
    "relu": ReGLU), in one grouped GEMM that writes only D's H columns.

    b_gate_up is (G, K, 2H) as grouped_mm takes b, each expert's 2H columns packed by pack_gate_up (gate and up
    interleaved in blocks of 64: `pack_gate_up(w)` of the experts' (G, 2H, K) [Wg; Wu] weights, `.transpose(1, 2)`
    for the K-major layout); H a multiple of 64. D is (M, H) of a's dtype or fp32. Everything else (offs, rows past
    offs[-1], errors, torch.compile and CUDA graphs) is grouped_mm's; the custom op is tilepipe::grouped_gated_mm."""
    if torch.compiler.is_compiling():
        if out is None:
            return torch.ops.tilepipe.grouped_gated_mm(a, b_gate_up, offs, activation=activation, out_dtype=out_dtype)
        torch.ops.tilepipe.grouped_gated_mm_out(out, a, b_gate_up, offs, activation=activation, out_dtype=out_dtype)
        return out
    check_activation(activation, GATED, optional=False)
    return _grouped(a, b_gate_up, offs, None, out, out_dtype, activation, GATED[activation], 2)


def check_grouped(a: torch.Tensor, b: torch.Tensor, offs: torch.Tensor, bias: torch.Tensor | None,
                  out: torch.Tensor | None, out_dtype: torch.dtype | None, columns_in: int
                  ) -> tuple[int, int, int, int, torch.dtype, bool]:
    """grouped_mm's (columns_in = 2: grouped_gated_mm's, whose b is named b_gate_up and whose D has half b's
    columns) checks that need no memory address: (G, M, N of the GEMM, K, out dtype, b K-major)."""
    gated, requested = columns_in == 2, out_dtype
    G, M, N, K, out_dtype, b_kmajor = check_grouped_mm(a, b, offs, None if gated else out,
                                                       None if gated and out is not None else out_dtype)
    if gated and N % (2 * GATE_COLUMNS):
        raise ValueError(f"b_gate_up must have a multiple of {2 * GATE_COLUMNS} columns per expert (gate and up "
                         f"interleaved in blocks of {GATE_COLUMNS}: pack it with tilepipe.pack_gate_up), got {N}")
    if gated and out is not None:  # D has H = N / 2 columns
        out_dtype = check_out_dtype(requested, out, a.dtype)  # out's dtype where none was asked for
        check_out(out, (M, N // 2), a.device)
        if out.stride(1) != 1 or out.stride(0) * out.element_size() % 16 and M > 1:
            raise ValueError(f"out must be row-major with rows on 16 bytes (TMA writes it), got strides "
                             f"{out.stride()}")
    if bias is not None:
        if not isinstance(bias, torch.Tensor):
            raise TypeError(f"bias must be a torch.Tensor or None, got {type(bias).__name__}")
        if bias.shape != (G, N) or bias.stride(-1) != 1 or G > 1 and bias.stride(0) != N:
            raise ValueError(f"bias must be a contiguous ({G}, {N}) tensor (an expert's row of N), got shape "
                             f"{tuple(bias.shape)} strides {bias.stride()}")
        if bias.dtype != a.dtype:
            raise TypeError(f"bias must have a's dtype {a.dtype}, got {bias.dtype}")
        if bias.device != a.device:
            raise ValueError(f"bias must be on a's device {a.device}, got {bias.device}")
    grouped_config(K, out_dtype, b_kmajor, gated)
    return G, M, N, K, out_dtype, b_kmajor


def _grouped(a: torch.Tensor, b: torch.Tensor, offs: torch.Tensor, bias: torch.Tensor | None,
             out: torch.Tensor | None, out_dtype: torch.dtype | None, activation: str | None, epilogue: object,
             columns_in: int) -> torch.Tensor:
    """grouped_mm and grouped_gated_mm after their activation check: every check, K = 0 without a launch, else the
    kernel with `epilogue` (None: D = A @ B, no epilogue function)."""
    G, M, N, K, out_dtype, b_kmajor = check_grouped(a, b, offs, bias, out, out_dtype, columns_in)
    cfg = grouped_config(K, out_dtype, b_kmajor, columns_in == 2)
    if out is None:
        out = torch.empty((M, N // columns_in), device=a.device, dtype=out_dtype)
    b_rows = stacked_experts(b, b_kmajor)
    check_no_overlap(out, a, b_rows, None)
    if bias is not None and overlaps(out, bias):
        raise ValueError("out must not share memory with bias")
    check_tma_starts({"a": a, "b": b, "out": out})
    if M == 0 or N == 0 or G == 0:
        return out
    if K == 0:  # the epilogue of a zero accumulator in the groups' rows, the rest untouched: no launch, offs stays on
        return out.copy_(empty_k_result(out, offs, bias, activation, columns_in))  # the GPU
    device = device_index(a)
    if device_target(device) != "sm_90a":
        raise RuntimeError(f"grouped_mm is built for sm_90a (Hopper); this GPU is {device_target(device)}")
    _launch(a, b_rows, out, offs, bias, G, N, K, b_kmajor, cfg, device, epilogue)
    return out


def empty_k_result(out: torch.Tensor, offs: torch.Tensor, bias: torch.Tensor | None, activation: str | None,
                   columns_in: int) -> torch.Tensor:
    """What a K = 0 call writes: in the groups' rows the epilogue of a zero accumulator (activation(bias[g]), or
    zero: every shipped activation and gated product is zero at zero), `out`'s rows past offs[-1]."""
    M = out.shape[0]
    rows = torch.arange(M, device=out.device, dtype=torch.int32)
    value = out.new_zeros(())
    if bias is not None:
        group = torch.searchsorted(offs, rows, right=True).clamp(max=offs.shape[0] - 1)
        value = bias.float()[group]
        value = (TORCH_ACTIVATIONS[activation](value) if activation else value).to(out.dtype)
    return torch.where((rows < offs[-1])[:, None], value, out)


def grouped_config(K: int, out_dtype: torch.dtype, b_kmajor: bool, gated: bool = False) -> MatmulConfig:
    """The 128x256 tile with D in sub-tiles (matmul's LARGE_SUBTILED forms), its BK halved where a row-major b's K
    is not a multiple of it (B's experts are stacked along K there, so a k-step must not reach into the next one).
    A gated fp32 D takes 64-column sub-tiles (a gate-up pair: 128 accumulator columns) beside three operand stages."""
    cfg = LARGE_SUBTILED_FP32 if out_dtype == torch.float32 else LARGE_SUBTILED_16BIT
    if gated and cfg.epilogue_n != GATE_COLUMNS:
        cfg = replace(cfg, epilogue_n=GATE_COLUMNS, stages=3)
    if b_kmajor or K % cfg.block_k == 0:
        return cfg
    block_k = next((bk for bk in (32, 16) if K % bk == 0), None)
    if block_k is None:
        raise ValueError(f"b: a row-major b needs K a multiple of 16, got K = {K}; pass b as a transposed (G, N, K) "
                         "tensor")
    return replace(cfg, block_k=block_k)


def variant_spec(options: dict) -> tuple[MatmulConfig, KernelSpec]:
    """A grouped catalogue variant (kernels/catalogue.py GROUPED: dtype, c_dtype, optional bias and epilogue) as
    grouped_mm or grouped_gated_mm launches it with B K-major: its configuration and its KernelSpec."""
    from tilepipe.kernels.epilogue_functions import columns_in
    from tilepipe.kernels.grouped_matmul import grouped_spec

    epilogue = options.get("epilogue")
    cfg = grouped_config(4096, torch.float32 if options["c_dtype"] == "fp32" else torch.bfloat16, True,
                         columns_in(epilogue) == 2)  # B K-major: the same tile at every K
    return cfg, grouped_spec(cfg, options["dtype"], options["c_dtype"], True, bias=options.get("bias", False),
                             epilogue=epilogue)


def stacked_experts(b: torch.Tensor, b_kmajor: bool) -> torch.Tensor:
    """b's G experts as one 2-D tensor the kernel's B descriptor covers: (G * N, K) K-major, else (G * K, N)."""
    G, K, N = b.shape
    if b_kmajor:
        return b.as_strided((G * N, K), (b.stride(2), 1))
    return b.as_strided((G * K, N), (b.stride(1), 1))


def _launch(a: torch.Tensor, b_rows: torch.Tensor, out: torch.Tensor, offs: torch.Tensor, bias: torch.Tensor | None,
            G: int, N: int, K: int, b_kmajor: bool, cfg: MatmulConfig, device: int, epilogue: object) -> None:
    """Launch grouped_matmul_kernel (N: the GEMM's columns, D's times the epilogue's COLUMNS_IN) on a persistent grid
    (one program per SM, or per tile where a bound on the tile count is smaller): the first call per configuration
    through Triton's JIT, later ones FastLauncher."""
    M = out.shape[0]
    num_pid_n = -(-N // cfg.block_n)
    most_tiles = (-(-M // cfg.block_m) + G) * num_pid_n  # each group adds at most one row of tiles
    grid = (min(sm_count(device), most_tiles), 1, 1)
    stream = torch._C._cuda_getCurrentRawStream(device)
    scalars = (G, M, N, K, out.stride(0), cfg.stages, cfg.c_stages, cfg.group_m, b_kmajor, GROUPED_SCHEDULE,
               (cfg.block_m, cfg.block_n))
    fused = (bias is not None, epilogue)  # HAS_BIAS, EPILOGUE: after the bias pointer (D's address where unread)
    args = (TmaOperand.of(a), TmaOperand.of(b_rows), TmaOperand.of(out), out.data_ptr(), offs.data_ptr(), *scalars,
            (out if bias is None else bias).data_ptr(), *fused)
    key = (cfg, a.dtype, out.dtype, b_kmajor, device, *fused)
    if _LAUNCHERS.launch(key, grid, stream, args) is not None:
        return
    from tilepipe.kernels.grouped_matmul import grouped_blocks, grouped_matmul_kernel

    blocks = grouped_blocks(cfg, b_kmajor)
    kernel = grouped_matmul_kernel[grid](tensor_descriptor(a, blocks["a"]), tensor_descriptor(b_rows, blocks["b"]),
                                         tensor_descriptor(out, blocks["d"]), out, offs, *scalars,
                                         out if bias is None else bias, *fused, num_warps=cfg.num_warps,
                                         **BUILD_OPTIONS)
    _LAUNCHERS.remember(key, kernel)


_LAUNCHERS = LauncherCache()
"""grouped_mm's launchers by (config, dtypes, B layout, device, bias, epilogue): the kernel is not specialized on
sizes or offs."""
