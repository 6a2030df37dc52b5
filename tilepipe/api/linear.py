"""tilepipe.linear and tilepipe.gated_linear: torch.nn.functional.linear with the bias and an activation fused into the
GEMM's epilogue, and the gated MLP's gate-up projection (SwiGLU, GeGLU) writing act(gate) * up directly, on Hopper.

The epilogues are kernels/epilogue_functions.py's, passed to the sm_90a GEMM as its EPILOGUE constexpr. A gated
linear reads a gate-up weight packed by `pack_gate_up`: gate and up rows interleaved in blocks of GATE_COLUMNS, so
each tile's accumulator holds whole (gate, up) pairs and the epilogue writes H columns, not 2H.
"""

import torch

from tilepipe.api.matmul import _PLANS, _matmul
from tilepipe.host.checks import check_activation, check_linear
from tilepipe.kernels import epilogue_functions as epilogues

ACTIVATIONS = {"relu": epilogues.relu, "gelu": epilogues.gelu, "gelu_tanh": epilogues.gelu_tanh,
               "silu": epilogues.silu}
"""linear's `activation` names and their epilogue functions (None: the bias alone, matmul's epilogue)."""
GATED = {"silu": epilogues.swiglu, "gelu": epilogues.geglu, "gelu_tanh": epilogues.geglu_tanh, "relu": epilogues.reglu}
"""gated_linear's `activation` names (applied to the gate: SwiGLU, GeGLU, GeGLU's tanh form, ReGLU): epilogues."""
TORCH_ACTIVATIONS = {"relu": torch.relu, "gelu": torch.nn.functional.gelu, "silu": torch.nn.functional.silu,
                     "gelu_tanh": lambda x: torch.nn.functional.gelu(x, approximate="tanh")}
"""The same activations in torch: the K = 0 results (no launch) and the GPU tests' references."""
GATE_COLUMNS = epilogues.GATE_COLUMNS.value


def linear(x: torch.Tensor, w: torch.Tensor, bias: torch.Tensor | None = None, activation: str | None = None, *,
           out: torch.Tensor | None = None) -> torch.Tensor:
    """activation(F.linear(x, w, bias)) in one GEMM on Hopper: x is [..., K] (bf16 or fp16), w [N, K] of x's dtype (an
    nn.Linear's weight), bias [N] or None; activation None, "relu", "gelu", "gelu_tanh" or "silu" (F.gelu's erf and
    tanh forms, F.silu), applied in fp32 to the accumulator plus the bias before the one rounding to x's dtype.
    Returns [..., N] (written into `out` when given). Raises TypeError / ValueError naming the argument for bad input.
    Under torch.compile this calls the custom op tilepipe::linear."""
    if torch.compiler.is_compiling():
        if out is None:
            return torch.ops.tilepipe.linear(x, w, bias, activation=activation)
        torch.ops.tilepipe.linear_out(out, x, w, bias, activation=activation)
        return out
    check_activation(activation, ACTIVATIONS, optional=True)
    return _fused(x, w, bias, out, activation, ACTIVATIONS.get(activation), 1)


def gated_linear(x: torch.Tensor, w_gate_up: torch.Tensor, activation: str = "silu", *,
                 out: torch.Tensor | None = None) -> torch.Tensor:
    """act(x @ Wg^T) * (x @ Wu^T) in one GEMM on Hopper, writing only its H columns: x is [..., K] (bf16 or fp16),
    w_gate_up the [2H, K] weight pack_gate_up makes of [Wg; Wu]; activation "silu" (SwiGLU), "gelu" (GeGLU, erf),
    "gelu_tanh" or "relu" (ReGLU). Returns [..., H] (into `out` when given). Raises TypeError / ValueError naming the
    argument for bad input. Under torch.compile this calls the custom op tilepipe::gated_linear."""
    if torch.compiler.is_compiling():
        if out is None:
            return torch.ops.tilepipe.gated_linear(x, w_gate_up, activation=activation)
        torch.ops.tilepipe.gated_linear_out(out, x, w_gate_up, activation=activation)
        return out
    check_activation(activation, GATED, optional=False)
    return _fused(x, w_gate_up, None, out, activation, GATED[activation], 2)


def _fused(x: torch.Tensor, w: torch.Tensor, bias: torch.Tensor | None, out: torch.Tensor | None,
           activation: str | None, epilogue: object, rows_per_column: int) -> torch.Tensor:
    """linear and gated_linear after their activation check: the call's plan where its geometry has one, else every
    check, K = 0 without a launch, and matmul's pass with the epilogue (host/choose.py: fused_config chooses its
    configuration; the pass remembers the plan)."""
    try:
        key = ("linear", rows_per_column, activation, x.shape, x.stride(), x.dtype, x.device, w.shape, w.stride(),
               w.dtype, w.device, None if bias is None else (bias.shape, bias.stride(), bias.dtype, bias.device))
        plan = _PLANS.get(key)
    except (AttributeError, TypeError):  # not tensors: the checks say which
        key = plan = None
    if plan is not None and out is None:  # a plan is kept only where x's rows are a view of x
        result = plan.run((x.reshape(-1, x.shape[-1]), w.t(), bias), None)
        if result is not None:
            return result.view(*x.shape[:-1], -1)
    M, N, K, shape = check_linear(x, w, bias, activation, out, rows_per_column)
    if M == 0 or N == 0 or K == 0:  # no GEMM: the epilogue of a zero accumulator
        d = torch.zeros(shape, dtype=x.dtype, device=x.device)
        if bias is not None:
            d = TORCH_ACTIVATIONS[activation](bias.expand(shape)) if activation else bias.expand(shape).clone()
        return d if out is None else out.copy_(d)
    a = x.reshape(M, K)
    gated = rows_per_column == 2
    d = None if out is None or gated else out.view(M, N)  # matmul's out is the GEMM's M x N: a gated D is copied
    c = None if bias is None else bias.expand(M, N)
    result = _matmul(a, w.t(), d, None, c, 1.0, 1.0 if bias is not None else 0.0, None, None,
                     key if out is None and a.data_ptr() == x.data_ptr() else None, None, epilogue)
    if out is None:
        return result.view(shape)
    return out.copy_(result.view(shape)) if gated else out


def pack_gate_up(w_gate_up: torch.Tensor, w_up: torch.Tensor | None = None) -> torch.Tensor:
    """The gate-up weight gated_linear reads, from [Wg; Wu] (one [2H, K] tensor, a gated MLP's fused gate_up_proj
    weight) or from Wg and Wu ([H, K] each, e.g. Llama's gate_proj and up_proj weights): rows interleaved in blocks
    of GATE_COLUMNS (Wg's rows 0-63, Wu's rows 0-63, Wg's rows 64-127, ...), so every GEMM tile holds whole gate-up
    pairs. H must be a multiple of GATE_COLUMNS (64). Leading dimensions are experts, each packed alone ([G, 2H, K]
    for grouped_gated_mm, or [G, H, K] each). A new contiguous tensor; unpack_gate_up undoes it."""
    if w_up is not None:
        if not isinstance(w_gate_up, torch.Tensor) or not isinstance(w_up, torch.Tensor):
            raise TypeError("w_gate_up (the gate weight Wg here) and w_up must be torch.Tensors")
        if w_gate_up.shape != w_up.shape or w_gate_up.dim() < 2:
            raise ValueError(f"the gate and up weights must be [..., H, K] of the same shape, got "
                             f"{tuple(w_gate_up.shape)} and {tuple(w_up.shape)}")
        gate, up = w_gate_up, w_up
    else:
        if not isinstance(w_gate_up, torch.Tensor):
            raise TypeError(f"w_gate_up must be a torch.Tensor, got {type(w_gate_up).__name__}")
        if w_gate_up.dim() < 2 or w_gate_up.shape[-2] % 2:
            raise ValueError(f"w_gate_up must be [..., 2H, K] ([Wg; Wu]) with an even row count, got "
                             f"{tuple(w_gate_up.shape)}")
        gate, up = w_gate_up.chunk(2, dim=-2)
    *experts, H, K = gate.shape
    if H % GATE_COLUMNS:
        raise ValueError(f"H = {H} rows of the gate weight: gated_linear takes H a multiple of {GATE_COLUMNS}")
    blocks = (*experts, H // GATE_COLUMNS, GATE_COLUMNS, K)  # counted, not -1: a K = 0 weight has none to infer from
    return torch.stack((gate.reshape(blocks), up.reshape(blocks)), -3).reshape(*experts, 2 * H, K)


def unpack_gate_up(w_packed: torch.Tensor) -> torch.Tensor:
    """[Wg; Wu] from pack_gate_up's layout (its inverse; leading dimensions are experts)."""
    *experts, rows, K = w_packed.shape
    pairs = w_packed.reshape(*experts, rows // (2 * GATE_COLUMNS), 2, GATE_COLUMNS, K)
    half = (*experts, rows // 2, K)
    return torch.cat((pairs[..., 0, :, :].reshape(half), pairs[..., 1, :, :].reshape(half)), -2)
