"""Modules a model drops in for its linear layers and gated MLPs, on tilepipe.linear and tilepipe.gated_linear (the
bias and activation, or act(gate) * up, fused into the GEMM's epilogue on Hopper; under torch.compile, custom ops).

`Linear.from_linear(layer)` and `GatedMLP.from_linears(gate_proj, up_proj, down_proj)` take a model's trained
weights (Llama's MLP: `GatedMLP.from_linears(mlp.gate_proj, mlp.up_proj, mlp.down_proj)`); `load_gate_up` loads a
[Wg; Wu] pair into an existing GatedMLP. The gate-up weight is held packed (api/linear.py: pack_gate_up).
`swap_linears(model)` does both over a whole model (a transformers Llama, Mistral, Qwen2...) in one call.
"""

import torch

from tilepipe.api.linear import ACTIVATIONS, GATE_COLUMNS, GATED, check_activation, gated_linear, linear, pack_gate_up
from tilepipe.host.checks import INPUT_DTYPES


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
    replacement = _swapped(model)
    if replacement is not None:
        return replacement
    for name, child in model.named_children():
        setattr(model, name, swap_linears(child))
    return model


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
    act = getattr(module, "act_fn", None)
    if isinstance(act, torch.nn.GELU):
        return "gelu_tanh" if act.approximate == "tanh" else "gelu"
    return GATE_ACTIVATIONS.get(type(act).__name__)
