"""tilepipe.grouped_mm: torch._grouped_mm's 2D x 3D grouped GEMM (Mixture-of-Experts) on Hopper, with the groups'
row ends read on the GPU (kernels/grouped_matmul.py), its 3D x 3D (batched) form and the masked decode form
(grouped_mm_masked: a fixed capacity of rows per expert, each one's count on the GPU), and linear's epilogues on
them: a per-expert bias and an activation (grouped_mm), or a gated activation over packed gate-up experts
(grouped_gated_mm), so a MoE expert MLP is grouped_gated_mm then grouped_mm."""

import torch

from tilepipe.api.grouped_wgrad import grouped_mm_wgrad
from tilepipe.api.linear import ACTIVATIONS, GATED, TORCH_ACTIVATIONS
from tilepipe.host.checks import BATCHED, CONTIGUOUS, MASKED, check_activation, check_expected_m, validate_grouped
from tilepipe.host.choose import choose_grouped, grouped_config
from tilepipe.host.configs import MatmulConfig
from tilepipe.host.launch import launch_grouped
from tilepipe.host.plans import plan_grouped
from tilepipe.kernels.spec import KernelSpec


def grouped_mm(a: torch.Tensor, b: torch.Tensor, offs: torch.Tensor | None = None, *,
               out: torch.Tensor | None = None, out_dtype: torch.dtype | None = None, bias: torch.Tensor | None = None,
               activation: str | None = None, scheduler: str | None = None) -> torch.Tensor:
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
    decreasing or too large offs never write outside D, but those rows' values are not torch's. `scheduler`: "static"
    (the default: each of one program per SM takes its share of the tiles) or "dynamic" (programs draw tiles from a
    counter as they go, for a GEMM that shares the GPU with kernels that hold SMs, such as a MoE layer's all-to-all:
    a program that starts late takes fewer tiles). Raises TypeError /
    ValueError naming the argument for bad input, before anything is written. Under torch.compile this calls the
    custom op tilepipe::grouped_mm; it records into CUDA graphs, and a replay reads offs' new values.

    The other forms of torch._grouped_mm: a (K, M_sum) and b (K_sum, N) 2-D, offs splitting K, give the weight
    gradient (G, M, N) (grouped_mm_wgrad); a (G, M, K) and b (G, K, N) 3-D with offs None give the batched
    (G, M, N), each group's rows of a following the last's (a (G * M, K) view), with the same bias and activation;
    both run the static schedule only.
    """
    if scheduler not in (None, "static") and isinstance(a, torch.Tensor) and (a.dim() == 3 or (
            isinstance(b, torch.Tensor) and a.dim() == b.dim() == 2)):
        raise ValueError(f"scheduler: grouped_mm's 2D x 2D and 3D x 3D forms run the static schedule only, got "
                         f"{scheduler!r}")
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
        options = dict(out_dtype=out_dtype, activation=activation, scheduler=scheduler)
        if out is None:
            return torch.ops.tilepipe.grouped_mm(a, b, offs, bias, **options)
        torch.ops.tilepipe.grouped_mm_out(out, a, b, offs, bias, **options)
        return out
    check_activation(activation, ACTIVATIONS, optional=True)
    return _grouped(a, b, offs, bias, out, out_dtype, activation, ACTIVATIONS.get(activation), 1, scheduler=scheduler)


def grouped_mm_masked(a: torch.Tensor, b: torch.Tensor, masked_m: torch.Tensor, *, out: torch.Tensor | None = None,
                      out_dtype: torch.dtype | None = None, bias: torch.Tensor | None = None,
                      activation: str | None = None, expected_m: int | None = None) -> torch.Tensor:
    """The masked (decode) form of grouped_mm: out[g, :masked_m[g]] = a[g, :masked_m[g]] @ b[g] for each group g.

    a is (G, C, K): a capacity of C rows per expert, each group's rows following the last's (a (G * C, K) view, as
    a contiguous (G, C, K) tensor has); masked_m holds G int32 valid-row counts on a's GPU, read there only (counts
    are clamped to [0, C]), so a CUDA graph captured once serves every replay's new counts. b, bias, activation,
    out_dtype are grouped_mm's; D is (G, C, N), written into `out` when given, its rows from masked_m[g] on left
    untouched. `expected_m`: the rows a group is expected to hold (default C), which chooses the tile (up to
    SWAP_GROUP_ROWS swap-AB's, without bias or activation and b K-major; up to SMALL_GROUP_ROWS a 64-row one): counts
    are not read on the host. The custom op is tilepipe::grouped_mm_masked."""
    check_expected_m(expected_m)
    return _layout_call(a, b, masked_m, bias, out, out_dtype, activation, MASKED, expected_m)


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
                     out: torch.Tensor | None = None, out_dtype: torch.dtype | None = None,
                     scheduler: str | None = None) -> torch.Tensor:
    """A Mixture-of-Experts gate-up projection with its gated activation fused: for each group g, rows
    offs[g-1]:offs[g] of D are act(a @ Wg[g]^T) * (a @ Wu[g]^T) (SwiGLU with "silu"; "gelu", "gelu_tanh": GeGLU;
    "relu": ReGLU), in one grouped GEMM that writes only D's H columns.

    b_gate_up is (G, K, 2H) as grouped_mm takes b, each expert's 2H columns packed by pack_gate_up (gate and up
    interleaved in blocks of 64: `pack_gate_up(w)` of the experts' (G, 2H, K) [Wg; Wu] weights, `.transpose(1, 2)`
    for the K-major layout); H a multiple of 64. D is (M, H) of a's dtype or fp32. Everything else (offs, rows past
    offs[-1], scheduler, errors, torch.compile and CUDA graphs) is grouped_mm's; the custom op is
    tilepipe::grouped_gated_mm."""
    if torch.compiler.is_compiling():
        options = dict(activation=activation, out_dtype=out_dtype, scheduler=scheduler)
        if out is None:
            return torch.ops.tilepipe.grouped_gated_mm(a, b_gate_up, offs, **options)
        torch.ops.tilepipe.grouped_gated_mm_out(out, a, b_gate_up, offs, **options)
        return out
    check_activation(activation, GATED, optional=False)
    return _grouped(a, b_gate_up, offs, None, out, out_dtype, activation, GATED[activation], 2, scheduler=scheduler)


def _grouped(a: torch.Tensor, b: torch.Tensor, offs: torch.Tensor | None, bias: torch.Tensor | None,
             out: torch.Tensor | None, out_dtype: torch.dtype | None, activation: str | None, epilogue: object,
             columns_in: int, layout: str = CONTIGUOUS, expected_m: int | None = None,
             scheduler: str | None = None) -> torch.Tensor:
    """grouped_mm, grouped_gated_mm and the masked and batched forms (`layout`, offs their counts) after their
    activation check, one pass down the host layers: validate, K = 0 without a launch, else choose (the tile by the
    rows a group holds: `expected_m`, else the mean; the schedule: `scheduler`'s, else the layout's), plan and launch
    the kernel with `epilogue` (None: D = A @ B, no epilogue function) over the groups' rows."""
    problem = validate_grouped(a, b, offs, bias, out, out_dtype, columns_in, layout, scheduler)
    if out is None:
        out = torch.empty((*a.shape[:-1], problem.N // columns_in), device=a.device, dtype=problem.out_dtype)
    out_rows = problem.out if problem.out is not None else out.view(problem.M, problem.N // columns_in)
    if problem.M == 0 or problem.N == 0 or problem.G == 0:
        return out
    if problem.K == 0:  # the epilogue of a zero accumulator in the groups' rows, the rest untouched: no launch, offs
        out_rows.copy_(empty_k_result(out_rows, offs, bias, activation, layout=layout, G=problem.G))  # stays on the GPU
        return out
    choice = choose_grouped(problem, expected_m, plain=epilogue is None and bias is None)
    launch_grouped(plan_grouped(problem, choice.cfg, out_rows, epilogue, choice.schedule))
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


def variant_spec(options: dict) -> tuple[MatmulConfig, KernelSpec]:
    """A grouped catalogue variant (kernels/catalogue.py GROUPED: dtype, c_dtype, optional schedule, bias, epilogue
    and rows_per_group) as grouped_mm, grouped_mm_masked or grouped_gated_mm launches it with B K-major: its
    configuration and its KernelSpec."""
    from tilepipe.kernels.epilogue_functions import columns_in
    from tilepipe.kernels.grouped_matmul import grouped_spec

    epilogue = options.get("epilogue")
    cfg = grouped_config(4096, torch.float32 if options["c_dtype"] == "fp32" else torch.bfloat16, True,
                         columns_in(epilogue) == 2, options.get("rows_per_group", float("inf")),
                         plain=epilogue is None and not options.get("bias"))  # B K-major
    return cfg, grouped_spec(cfg, options["dtype"], options["c_dtype"], True, options.get("schedule", CONTIGUOUS),
                             bias=options.get("bias", False), epilogue=epilogue)
