"""tilepipe.grouped_mm: torch._grouped_mm's 2D x 3D grouped GEMM (Mixture-of-Experts) on Hopper, with the groups'
row ends read on the GPU (kernels/grouped_matmul.py), its 3D x 3D (batched) form and the masked decode form
(grouped_mm_masked: a fixed capacity of rows per expert, each one's count on the GPU), and linear's epilogues on
them: a per-expert bias and an activation (grouped_mm), or a gated activation over packed gate-up experts
(grouped_gated_mm), so a MoE expert MLP is grouped_gated_mm then grouped_mm."""

from dataclasses import replace

import torch

from tilepipe.api.grouped_wgrad import grouped_mm_wgrad
from tilepipe.api.linear import ACTIVATIONS, GATE_COLUMNS, GATED, TORCH_ACTIVATIONS, check_activation
from tilepipe.host.checks import (check_grouped_3d, check_grouped_mm, check_no_overlap, check_out, check_out_dtype,
                                  overlaps)
from tilepipe.host.configs import LARGE_SUBTILED_16BIT, LARGE_SUBTILED_FP32, MatmulConfig
from tilepipe.host.device import device_index, device_target, sm_count
from tilepipe.host.launch import LauncherCache, TmaOperand, check_tma_starts, tensor_descriptor
from tilepipe.kernels.spec import BUILD_OPTIONS, KernelSpec

CONTIGUOUS, MASKED, BATCHED = "static", "masked", "batched"
"""The layouts of the groups' rows, each the SCHEDULE of its grouped scheduler (schedulers/grouped.py): rows between
cumulative ends (offs), the first masked_m[g] rows of each group's capacity, every row of every capacity."""


def grouped_mm(a: torch.Tensor, b: torch.Tensor, offs: torch.Tensor | None = None, *,
               out: torch.Tensor | None = None, out_dtype: torch.dtype | None = None, bias: torch.Tensor | None = None,
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

    The other forms of torch._grouped_mm: a (K, M_sum) and b (K_sum, N) 2-D, offs splitting K, give the weight
    gradient (G, M, N) (grouped_mm_wgrad); a (G, M, K) and b (G, K, N) 3-D with offs None give the batched
    (G, M, N), each group's rows of a following the last's (a (G * M, K) view), with the same bias and activation.
    """
    if isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor) and a.dim() == b.dim() == 2:  # the weight gradient
        if bias is not None or activation is not None:
            raise ValueError("grouped_mm's 2D x 2D (weight-gradient) form takes no bias or activation")
        return grouped_mm_wgrad(a, b, offs, out=out, out_dtype=out_dtype)
    if isinstance(a, torch.Tensor) and a.dim() == 3:  # 3D x 3D
        if offs is not None:
            raise ValueError(f"offs must be None for grouped_mm's 3D x 3D (batched) form, got "
                             f"{type(offs).__name__}; masked groups are grouped_mm_masked's")
        return _layout_call(a, b, None, bias, out, out_dtype, activation, BATCHED, None)
    if torch.compiler.is_compiling():
        if out is None:
            return torch.ops.tilepipe.grouped_mm(a, b, offs, bias, out_dtype=out_dtype, activation=activation)
        torch.ops.tilepipe.grouped_mm_out(out, a, b, offs, bias, out_dtype=out_dtype, activation=activation)
        return out
    check_activation(activation, ACTIVATIONS, optional=True)
    return _grouped(a, b, offs, bias, out, out_dtype, activation, ACTIVATIONS.get(activation), 1)


def grouped_mm_masked(a: torch.Tensor, b: torch.Tensor, masked_m: torch.Tensor, *, out: torch.Tensor | None = None,
                      out_dtype: torch.dtype | None = None, bias: torch.Tensor | None = None,
                      activation: str | None = None, expected_m: int | None = None) -> torch.Tensor:
    """The masked (decode) form of grouped_mm: out[g, :masked_m[g]] = a[g, :masked_m[g]] @ b[g] for each group g.

    a is (G, C, K): a capacity of C rows per expert, each group's rows following the last's (a (G * C, K) view, as
    a contiguous (G, C, K) tensor has); masked_m holds G int32 valid-row counts on a's GPU, read there only (counts
    are clamped to [0, C]), so a CUDA graph captured once serves every replay's new counts. b, bias, activation,
    out_dtype are grouped_mm's; D is (G, C, N), written into `out` when given, its rows from masked_m[g] on left
    untouched. `expected_m`: the rows a group is expected to hold (default C), which chooses the tile (up to
    SMALL_GROUP_ROWS a 64-row one): counts are not read on the host. The custom op is tilepipe::grouped_mm_masked."""
    check_expected_m(expected_m)
    return _layout_call(a, b, masked_m, bias, out, out_dtype, activation, MASKED, expected_m)


def check_expected_m(expected_m: int | None) -> None:
    """grouped_mm_masked's tile hint: None or a non-negative int (TypeError / ValueError naming it)."""
    if expected_m is not None and (not isinstance(expected_m, int) or isinstance(expected_m, bool)):
        raise TypeError(f"expected_m must be an int or None, got {type(expected_m).__name__}")
    if expected_m is not None and expected_m < 0:
        raise ValueError(f"expected_m must be >= 0, got {expected_m}")


def _layout_call(a: torch.Tensor, b: torch.Tensor, counts: torch.Tensor | None, bias: torch.Tensor | None,
                 out: torch.Tensor | None, out_dtype: torch.dtype | None, activation: str | None, layout: str,
                 expected_m: int | None) -> torch.Tensor:
    """grouped_mm's masked or batched form: its custom op tilepipe::grouped_mm_LAYOUT while torch.compile traces,
    else the kernel over the groups' rows flattened (`expected_m`: the masked form's rows a group, else None)."""
    if torch.compiler.is_compiling():
        name, tensors = f"grouped_mm_{layout}", (a, b, bias) if counts is None else (a, b, counts, bias)
        options = dict(out_dtype=out_dtype, activation=activation) | ({} if counts is None else
                                                                      dict(expected_m=expected_m))
        if out is None:
            return getattr(torch.ops.tilepipe, name)(*tensors, **options)
        getattr(torch.ops.tilepipe, f"{name}_out")(out, *tensors, **options)
        return out
    check_activation(activation, ACTIVATIONS, optional=True)
    return _grouped(a, b, counts, bias, out, out_dtype, activation, ACTIVATIONS.get(activation), 1, layout,
                    expected_m)


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


def group_rows(a: torch.Tensor, b: torch.Tensor, counts: torch.Tensor | None, out: torch.Tensor | None,
               columns_in: int, layout: str) -> tuple[torch.Tensor, torch.Tensor | None]:
    """a and out as the kernel reads and writes them, (rows, K) and (rows, D's columns): themselves in the contiguous
    layout; the masked and batched layouts' (G, C, ...) tensors as their G * C rows, after check_grouped_3d."""
    if layout == CONTIGUOUS:
        return a, out
    check_grouped_3d(a, b, counts, out, b.shape[-1] // columns_in if isinstance(b, torch.Tensor) else 0)
    G, C, K = a.shape
    return a.view(G * C, K), None if out is None else out.view(G * C, out.shape[2])


def check_grouped(a: torch.Tensor, b: torch.Tensor, offs: torch.Tensor | None, bias: torch.Tensor | None,
                  out: torch.Tensor | None, out_dtype: torch.dtype | None, columns_in: int, layout: str = CONTIGUOUS
                  ) -> tuple[int, int, int, int, torch.dtype, bool]:
    """grouped_mm's (columns_in = 2: grouped_gated_mm's, whose b is named b_gate_up and whose D has half b's
    columns) checks that need no memory address, of a and out as group_rows gives them (offs: the contiguous
    layout's; the others' counts are group_rows'): (G, M, N of the GEMM, K, out dtype, b K-major)."""
    gated, requested = columns_in == 2, out_dtype
    ends = "row" if layout == CONTIGUOUS else None
    G, M, N, K, out_dtype, b_kmajor = check_grouped_mm(a, b, offs, None if gated else out,
                                                       None if gated and out is not None else out_dtype, ends)
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
    grouped_config(K, out_dtype, b_kmajor, gated)  # K's check
    return G, M, N, K, out_dtype, b_kmajor


def _grouped(a: torch.Tensor, b: torch.Tensor, offs: torch.Tensor | None, bias: torch.Tensor | None,
             out: torch.Tensor | None, out_dtype: torch.dtype | None, activation: str | None, epilogue: object,
             columns_in: int, layout: str = CONTIGUOUS, expected_m: int | None = None) -> torch.Tensor:
    """grouped_mm, grouped_gated_mm and the masked and batched forms (`layout`, offs their counts) after their
    activation check: every check, K = 0 without a launch, else the kernel with `epilogue` (None: D = A @ B, no
    epilogue function) over the groups' rows, its tile chosen by the rows a group holds (`expected_m`, else the
    mean: M / G)."""
    rows, out_rows = group_rows(a, b, offs, out, columns_in, layout)
    G, M, N, K, out_dtype, b_kmajor = check_grouped(rows, b, offs, bias, out_rows, out_dtype, columns_in, layout)
    per_group = expected_m if expected_m is not None else M / max(G, 1)
    cfg = grouped_config(K, out_dtype, b_kmajor, columns_in == 2, per_group)
    if out is None:
        out = torch.empty((*a.shape[:-1], N // columns_in), device=a.device, dtype=out_dtype)
        out_rows = out.view(M, N // columns_in)
    b_rows = stacked_experts(b, b_kmajor)
    check_no_overlap(out_rows, rows, b_rows, None)
    if bias is not None and overlaps(out, bias):
        raise ValueError("out must not share memory with bias")
    check_tma_starts({"a": a, "b": b, "out": out})
    if M == 0 or N == 0 or G == 0:
        return out
    if K == 0:  # the epilogue of a zero accumulator in the groups' rows, the rest untouched: no launch, offs stays on
        out_rows.copy_(empty_k_result(out_rows, offs, bias, activation, layout=layout, G=G))  # the GPU
        return out
    device = device_index(a)
    if device_target(device) != "sm_90a":
        raise RuntimeError(f"grouped_mm is built for sm_90a (Hopper); this GPU is {device_target(device)}")
    counts = offs if offs is not None else torch.empty(1, device=a.device, dtype=torch.int32)  # batched: unread
    _launch(rows, b_rows, out_rows, counts, bias, G, N, K, b_kmajor, cfg, device, epilogue, layout)
    return out


def empty_k_result(out: torch.Tensor, offs: torch.Tensor | None, bias: torch.Tensor | None, activation: str | None,
                   *, layout: str = CONTIGUOUS, G: int | None = None) -> torch.Tensor:
    """What a K = 0 call writes into D's rows `out`: in the groups' rows (offs: the layout's ends or counts, G groups)
    the epilogue of a zero accumulator (activation(bias[g]), or zero: every shipped activation and gated product is
    zero at zero), `out`'s other rows."""
    M = out.shape[0]
    rows = torch.arange(M, device=out.device, dtype=torch.int32)
    if layout == CONTIGUOUS:
        G = offs.shape[0]
        group = torch.searchsorted(offs, rows, right=True).clamp(max=G - 1)
        inside = rows < offs[-1]
    else:
        capacity = M // G
        group = rows // capacity
        inside = rows % capacity < (offs[group] if layout == MASKED else capacity)
    value = out.new_zeros(())
    if bias is not None:
        value = bias.float()[group]
        value = (TORCH_ACTIVATIONS[activation](value) if activation else value).to(out.dtype)
    return torch.where(inside[:, None], value, out)


GROUPED_GROUP_M = 16
"""Rows of tiles a grouped GEMM's raster walks together (a group's last band is shorter: each band reads its expert's B
once). On the H200 16 ran 1.000-1.044x the dense GEMM's 8 on the 12 rows of bench_grouped (uniform, Zipf, quarter-empty;
Zipf and quarter-empty +1-4%), 4 and 32 lost on some: docs/perf-log.md row 111."""
GROUPED_SMALL = MatmulConfig(64, 128, 64, stages=8, c_stages=2, epilogue_n=64, num_warps=4, group_m=GROUPED_GROUP_M)
"""The tile of groups of few rows (decode): one MMA warpgroup on 64 rows, so a k-step loads half the A rows that the
128-row tile loads past its group, and twice the tiles share the experts' B stream. On 12 decode rows on the H200
(512 tokens over 32 experts of 4096x7168 and 7168x2048, 256 over 8 of 28672x4096, 1024 over 64 of 2048x7168; uniform,
Zipf, quarter-empty) it ran 1.024-1.175x the 128x256 tile (perf-log row 112)."""
SMALL_GROUP_ROWS = 64
"""Rows per group (mean, or grouped_mm_masked's expected_m) up to which the grouped GEMM takes GROUPED_SMALL: the
measured decode rows had 16-32; above 64 a group fills a 128-row tile's rows on average."""


def grouped_config(K: int, out_dtype: torch.dtype, b_kmajor: bool, gated: bool = False,
                   rows_per_group: float = float("inf")) -> MatmulConfig:
    """GROUPED_SMALL where groups hold at most SMALL_GROUP_ROWS rows on average (`rows_per_group`), else the 128x256
    tile with D in sub-tiles (matmul's LARGE_SUBTILED forms), both in bands of GROUPED_GROUP_M rows of tiles; its BK
    halved where a row-major b's K is not a multiple of it (B's experts are stacked along K there, so a k-step must
    not reach into the next one). A gated fp32 D takes 64-column sub-tiles (a gate-up pair: 128 accumulator
    columns) beside three operand stages."""
    if rows_per_group <= SMALL_GROUP_ROWS:
        cfg = GROUPED_SMALL
    else:
        cfg = replace(LARGE_SUBTILED_FP32 if out_dtype == torch.float32 else LARGE_SUBTILED_16BIT,
                      group_m=GROUPED_GROUP_M)
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
    """A grouped catalogue variant (kernels/catalogue.py GROUPED: dtype, c_dtype, optional schedule, bias, epilogue
    and rows_per_group) as grouped_mm, grouped_mm_masked or grouped_gated_mm launches it with B K-major: its
    configuration and its KernelSpec."""
    from tilepipe.kernels.epilogue_functions import columns_in
    from tilepipe.kernels.grouped_matmul import grouped_spec

    epilogue = options.get("epilogue")
    cfg = grouped_config(4096, torch.float32 if options["c_dtype"] == "fp32" else torch.bfloat16, True,
                         columns_in(epilogue) == 2, options.get("rows_per_group", float("inf")))  # B K-major
    return cfg, grouped_spec(cfg, options["dtype"], options["c_dtype"], True, options.get("schedule", CONTIGUOUS),
                             bias=options.get("bias", False), epilogue=epilogue)


def stacked_experts(b: torch.Tensor, b_kmajor: bool) -> torch.Tensor:
    """b's G experts as one 2-D tensor the kernel's B descriptor covers: (G * N, K) K-major, else (G * K, N)."""
    G, K, N = b.shape
    if b_kmajor:
        return b.as_strided((G * N, K), (b.stride(2), 1))
    return b.as_strided((G * K, N), (b.stride(1), 1))


def _launch(a: torch.Tensor, b_rows: torch.Tensor, out: torch.Tensor, offs: torch.Tensor, bias: torch.Tensor | None,
            G: int, N: int, K: int, b_kmajor: bool, cfg: MatmulConfig, device: int, epilogue: object, layout: str
            ) -> None:
    """Launch grouped_matmul_kernel (N: the GEMM's columns, D's times the epilogue's COLUMNS_IN; `layout`: its
    SCHEDULE, offs its ends or counts) on a persistent grid (one program per SM, or per tile where a bound on the
    tile count is smaller): the first call per configuration through Triton's JIT, later ones FastLauncher."""
    M = out.shape[0]
    num_pid_n = -(-N // cfg.block_n)
    most_tiles = (-(-M // cfg.block_m) + G) * num_pid_n  # each group adds at most one row of tiles
    grid = (min(sm_count(device), most_tiles), 1, 1)
    stream = torch._C._cuda_getCurrentRawStream(device)
    scalars = (G, M, N, K, out.stride(0), cfg.stages, cfg.c_stages, cfg.group_m, b_kmajor, layout,
               (cfg.block_m, cfg.block_n))
    fused = (bias is not None, epilogue)  # HAS_BIAS, EPILOGUE: after the bias pointer (D's address where unread)
    args = (TmaOperand.of(a), TmaOperand.of(b_rows), TmaOperand.of(out), out.data_ptr(), offs.data_ptr(), *scalars,
            (out if bias is None else bias).data_ptr(), *fused)
    key = (cfg, a.dtype, out.dtype, b_kmajor, device, layout, *fused)
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
"""grouped_mm's launchers by (config, dtypes, B layout, device, rows' layout, bias, epilogue): the kernel is not
specialized on sizes or offs."""
