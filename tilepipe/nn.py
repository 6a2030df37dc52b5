"""Modules a model drops in for its linear layers and gated MLPs, on tilepipe.linear and tilepipe.gated_linear (the
bias and activation, or act(gate) * up, fused into the GEMM's epilogue on Hopper; under torch.compile, custom ops).

`Linear.from_linear(layer)` and `GatedMLP.from_linears(gate_proj, up_proj, down_proj)` take a model's trained
weights (Llama's MLP: `GatedMLP.from_linears(mlp.gate_proj, mlp.up_proj, mlp.down_proj)`); `load_gate_up` loads a
[Wg; Wu] pair into an existing GatedMLP. The gate-up weight is held packed (api/linear.py: pack_gate_up).
`swap_linears(model)` does both over a whole model (a transformers Llama, Mistral, Qwen2...) in one call.
`GroupedExperts` runs a Mixture-of-Experts layer's experts on tilepipe.grouped_gated_mm and grouped_mm;
`swap_experts(model)` puts it in place of a model's experts modules (transformers' Mixtral, Qwen2-MoE, Qwen3-MoE).
"""

from collections.abc import Callable
from functools import partial

import torch

from tilepipe.api.grouped import grouped_gated_mm, grouped_mm
from tilepipe.api.linear import ACTIVATIONS, GATE_COLUMNS, GATED, gated_linear, linear, pack_gate_up
from tilepipe.host.checks import INPUT_DTYPES, check_activation, check_grouped_scheduler


class Linear(torch.nn.Module):
    """torch.nn.Linear with an optional activation fused: activation(x @ weight^T + bias), weight [out, in]."""

    def __init__(self, in_features: int, out_features: int, bias: bool = True, activation: str | None = None,
                 device: torch.device | str | None = None, dtype: torch.dtype | None = None) -> None:
        super().__init__()
        self._adopt(torch.nn.Linear(in_features, out_features, bias, device=device, dtype=dtype), activation)

    @classmethod
    def from_linear(cls, layer: torch.nn.Linear, activation: str | None = None) -> "Linear":
        """A Linear sharing `layer`'s weight and bias parameters (no copy), with `activation` fused after it."""
        if not isinstance(layer, torch.nn.Linear):
            raise TypeError(f"layer must be a torch.nn.Linear, got {type(layer).__name__}")
        module = cls.__new__(cls)
        torch.nn.Module.__init__(module)
        module._adopt(layer, activation)
        return module

    def _adopt(self, layer: torch.nn.Linear, activation: str | None) -> None:
        """Take `layer`'s sizes and parameters (nn.Linear's initialisation where __init__ made it)."""
        check_activation(activation, ACTIVATIONS, optional=True)
        self.in_features, self.out_features, self.activation = layer.in_features, layer.out_features, activation
        self.weight, self.bias = layer.weight, layer.bias

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return linear(x, self.weight, self.bias, activation=self.activation)

    def extra_repr(self) -> str:
        return (f"in_features={self.in_features}, out_features={self.out_features}, bias={self.bias is not None}, "
                f"activation={self.activation}")


class GatedMLP(torch.nn.Module):
    """A gated MLP, down(act(x @ Wg^T) * (x @ Wu^T)) (SwiGLU with activation="silu", as Llama's; GeGLU with "gelu" or
    "gelu_tanh"): the gate-up projection is one GEMM writing H columns (gated_linear over `gate_up_weight`, [Wg; Wu]
    packed by pack_gate_up), the down projection a Linear. H must be a multiple of 64."""

    def __init__(self, hidden_size: int, intermediate_size: int, activation: str = "silu", bias: bool = False,
                 device: torch.device | str | None = None, dtype: torch.dtype | None = None) -> None:
        super().__init__()
        gate_up = torch.nn.Linear(hidden_size, 2 * intermediate_size, False, device=device, dtype=dtype)
        self._adopt(gate_up.weight.detach(), None, Linear(intermediate_size, hidden_size, bias, device=device,
                                                          dtype=dtype), activation, True)

    @classmethod
    def from_linears(cls, gate_proj: torch.nn.Linear, up_proj: torch.nn.Linear, down_proj: torch.nn.Linear,
                     activation: str = "silu") -> "GatedMLP":
        """A GatedMLP of a model's gate, up and down projections (gate and up without bias); the gate-up weight is
        packed into a new tensor, the down projection's parameters shared."""
        for name, layer in (("gate_proj", gate_proj), ("up_proj", up_proj), ("down_proj", down_proj)):
            if not isinstance(layer, torch.nn.Linear):
                raise TypeError(f"{name} must be a torch.nn.Linear, got {type(layer).__name__}")
        if gate_proj.bias is not None or up_proj.bias is not None:
            raise ValueError("gate_proj and up_proj must have no bias (gated_linear takes none)")
        module = cls.__new__(cls)
        torch.nn.Module.__init__(module)
        module._adopt(gate_proj.weight.detach(), up_proj.weight.detach(), Linear.from_linear(down_proj), activation,
                      gate_proj.weight.requires_grad)
        return module

    def _adopt(self, w_gate: torch.Tensor, w_up: torch.Tensor | None, down: Linear, activation: str,
               requires_grad: bool) -> None:
        """Hold pack_gate_up(w_gate, w_up) as the gate-up parameter, `down` as the down projection."""
        check_activation(activation, GATED, optional=False)
        self.activation = activation
        self.gate_up_weight = torch.nn.Parameter(pack_gate_up(w_gate, w_up), requires_grad=requires_grad)
        self.down = down

    @torch.no_grad()
    def load_gate_up(self, w_gate: torch.Tensor, w_up: torch.Tensor | None = None) -> None:
        """Load the gate and up weights ([H, D] each, or one [2H, D] [Wg; Wu] tensor as `w_gate`), packed."""
        self.gate_up_weight.copy_(pack_gate_up(w_gate, w_up))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down(gated_linear(x, self.gate_up_weight, self.activation))

    def extra_repr(self) -> str:
        return f"gate_up_weight={tuple(self.gate_up_weight.shape)} (packed), activation={self.activation}"


class GroupedExperts(torch.nn.Module):
    """A Mixture-of-Experts layer's experts on tilepipe's grouped GEMMs, from transformers' stacked weights:
    gate_up_proj (E, 2I, H), each expert's [Wg; Wu], and down_proj (E, H, I). forward takes a model's routing as
    transformers' experts modules do and returns sum_j w[t, j] * down(act(x_t Wg^T) * x_t Wu^T) of expert
    top_k_index[t, j] for each token t: the routed (token, expert) pairs sorted by expert on the GPU (no host sync),
    grouped_gated_mm then grouped_mm over them, each row scaled by its weight and added into its token's row.
    The gate-up weight is held packed (pack_gate_up, a new tensor: I a multiple of 64), down_proj shared; `scheduler`
    is the grouped GEMMs' ("dynamic" where the layer runs beside an all-to-all that holds SMs). It needs a Hopper GPU:
    on other devices grouped_gated_mm's error is raised (under torch.compile, custom ops)."""

    def __init__(self, gate_up_proj: torch.Tensor, down_proj: torch.Tensor, activation: str = "silu",
                 scheduler: str | None = None) -> None:
        super().__init__()
        check_activation(activation, GATED, optional=False)
        check_grouped_scheduler(scheduler)
        for name, weight in (("gate_up_proj", gate_up_proj), ("down_proj", down_proj)):
            if not isinstance(weight, torch.Tensor):
                raise TypeError(f"{name} must be a torch.Tensor, got {type(weight).__name__}")
        if gate_up_proj.dim() != 3 or gate_up_proj.shape[1] % 2:
            raise ValueError(f"gate_up_proj must be (E, 2I, H) ([Wg; Wu] per expert), got {tuple(gate_up_proj.shape)}")
        E, I2, H = gate_up_proj.shape
        if down_proj.shape != (E, H, I2 // 2):
            raise ValueError(f"down_proj must be (E, H, I) = {(E, H, I2 // 2)} for gate_up_proj "
                             f"{tuple(gate_up_proj.shape)}, got {tuple(down_proj.shape)}")
        self.activation, self.scheduler = activation, scheduler
        self.gate_up_weight = torch.nn.Parameter(pack_gate_up(gate_up_proj.detach()),
                                                 requires_grad=gate_up_proj.requires_grad)
        self.down_proj = (down_proj if isinstance(down_proj, torch.nn.Parameter) else
                          torch.nn.Parameter(down_proj, requires_grad=False))

    def forward(self, hidden_states: torch.Tensor, top_k_index: torch.Tensor, top_k_weights: torch.Tensor
                ) -> torch.Tensor:
        """hidden_states (T, H); top_k_index (T, k) expert ids in [0, E); top_k_weights (T, k): the experts' output
        (T, H) in hidden_states' dtype (each row scaled in the weights' dtype, rounded, then added, as Mixtral's)."""
        top_k = top_k_index.shape[-1]
        expert, pair = torch.sort(top_k_index.reshape(-1), stable=True)  # the (token, expert) pairs by expert
        token = pair // top_k
        ids = torch.arange(self.gate_up_weight.shape[0], device=expert.device, dtype=expert.dtype)
        offs = torch.searchsorted(expert, ids, right=True, out_int32=True)  # each expert's row end: cumsum(bincount)
        gated = grouped_gated_mm(hidden_states.index_select(0, token), self.gate_up_weight.transpose(1, 2), offs,
                                 self.activation, scheduler=self.scheduler)
        rows = grouped_mm(gated, self.down_proj.transpose(1, 2), offs, scheduler=self.scheduler)
        rows = (rows * top_k_weights.reshape(-1).index_select(0, pair).unsqueeze(1)).to(hidden_states.dtype)
        return torch.zeros_like(hidden_states).index_add_(0, token, rows)

    def extra_repr(self) -> str:
        return (f"gate_up_weight={tuple(self.gate_up_weight.shape)} (packed), "
                f"down_proj={tuple(self.down_proj.shape)}, activation={self.activation}"
                + (f", scheduler={self.scheduler}" if self.scheduler else ""))


GATE_ACTIVATIONS = {"SiLU": "silu", "SiLUActivation": "silu", "ReLU": "relu", "GELUActivation": "gelu",
                    "GELUTanh": "gelu_tanh", "PytorchGELUTanh": "gelu_tanh", "NewGELUActivation": "gelu_tanh",
                    "GELUPytorchTanh": "gelu_tanh"}
"""An MLP's `act_fn` by class name (torch.nn's and transformers' activations; nn.GELU by its `approximate`): the
gated activation GatedMLP runs for it."""


def swap_linears(model: torch.nn.Module) -> torch.nn.Module:
    """Swap a model's layers for tilepipe.nn's, in place, sharing their parameters where the layer is kept whole:

    - a gated MLP (a module with `gate_proj`, `up_proj` and `down_proj` nn.Linear children, gate and up without bias,
      and an `act_fn` of SiLU, GELU (erf or tanh) or ReLU, as transformers' Llama, Mistral and Qwen2 MLPs are) becomes
      a GatedMLP: `down(act(x Wg^T) * x Wu^T)` in two GEMMs, its gate-up weight packed into a new tensor (H must be
      a multiple of 64, else its three projections are swapped one by one);
    - every other torch.nn.Linear of bf16 or fp16 weights (attention projections, lm_head) becomes a Linear sharing
      its weight and bias (tied weights stay tied).

    Other modules, and Linears of other dtypes, are left as they are. The model must run on a Hopper GPU afterwards
    (the modules call tilepipe.linear and gated_linear; under torch.compile custom ops). Returns the model (a
    replacement where `model` itself is swapped)."""
    return _swap(model, _swapped)


def _swap(module: torch.nn.Module, replacement_of: Callable[[torch.nn.Module], torch.nn.Module | None]
          ) -> torch.nn.Module:
    """`replacement_of(module)`, or where that is None module itself with its children swapped alike (in place)."""
    replacement = replacement_of(module)
    if replacement is not None:
        return replacement
    for name, child in module.named_children():
        setattr(module, name, _swap(child, replacement_of))
    return module


def _swapped(module: torch.nn.Module) -> torch.nn.Module | None:
    """module's tilepipe.nn replacement (swap_linears' rules), or None to keep it and look inside."""
    if isinstance(module, torch.nn.Linear):
        return Linear.from_linear(module) if module.weight.dtype in INPUT_DTYPES else None
    activation = gated_activation(module)
    if activation is None:
        return None
    return GatedMLP.from_linears(module.gate_proj, module.up_proj, module.down_proj, activation)


def gated_activation(module: torch.nn.Module) -> str | None:
    """GatedMLP's activation name for a module that is a gated MLP GatedMLP can run (swap_linears' rule), else None."""
    layers = [getattr(module, name, None) for name in ("gate_proj", "up_proj", "down_proj")]
    if not all(isinstance(layer, torch.nn.Linear) and layer.weight.dtype in INPUT_DTYPES for layer in layers):
        return None
    gate, up, _ = layers
    if gate.bias is not None or up.bias is not None or gate.out_features % GATE_COLUMNS:
        return None
    return act_fn_activation(getattr(module, "act_fn", None))


def act_fn_activation(act: object) -> str | None:
    """The gated activation name for an MLP's or experts module's `act_fn` (GATE_ACTIVATIONS), else None."""
    if isinstance(act, torch.nn.GELU):
        return "gelu_tanh" if act.approximate == "tanh" else "gelu"
    return GATE_ACTIVATIONS.get(type(act).__name__)


def swap_experts(model: torch.nn.Module, scheduler: str | None = None) -> torch.nn.Module:
    """Swap a model's Mixture-of-Experts experts modules (experts_activation's rule: transformers' Mixtral,
    Qwen2-MoE, Qwen3-MoE experts) for GroupedExperts (with `scheduler`), in place: the gate-up weights packed into new
    tensors, down_proj shared. The router and everything else are kept (swap_linears swaps the other layers). The
    model must run on a Hopper GPU afterwards. Returns the model (a replacement where `model` itself is swapped)."""
    check_grouped_scheduler(scheduler)
    return _swap(model, partial(_swapped_experts, scheduler=scheduler))


def _swapped_experts(module: torch.nn.Module, scheduler: str | None) -> GroupedExperts | None:
    """module's GroupedExperts (swap_experts' rule), or None to keep it and look inside."""
    activation = experts_activation(module)
    return None if activation is None else GroupedExperts(module.gate_up_proj, module.down_proj, activation, scheduler)


def experts_activation(module: torch.nn.Module) -> str | None:
    """GroupedExperts' activation for a module holding experts as transformers' MoE models do, else None: gate_up_proj
    (E, 2I, H) and down_proj (E, H, I) tensors of bf16 or fp16 (I a multiple of 64, H of 8), no biases, not
    transposed, gate and up concatenated, the default gate act_fn(gate) * up (a class overriding `_apply_gate`, as
    gpt-oss's clamped SwiGLU, is kept) and an act_fn of SiLU, GELU (erf or tanh) or ReLU."""
    gate_up, down = getattr(module, "gate_up_proj", None), getattr(module, "down_proj", None)
    if not isinstance(gate_up, torch.Tensor) or not isinstance(down, torch.Tensor) or gate_up.dim() != 3:
        return None
    E, I2, H = gate_up.shape
    if (gate_up.dtype not in INPUT_DTYPES or down.dtype != gate_up.dtype or down.shape != (E, H, I2 // 2)
            or I2 % (2 * GATE_COLUMNS) or H % 8):
        return None
    layout = tuple(getattr(module, name, default) for name, default in
                   (("has_gate", True), ("has_bias", False), ("is_transposed", False), ("is_concatenated", True)))
    apply_gate = getattr(type(module), "_apply_gate", None)
    if layout != (True, False, False, True) or getattr(apply_gate, "__name__", "_default_apply_gate") != \
            "_default_apply_gate":
        return None
    return act_fn_activation(getattr(module, "act_fn", None))
