"""Modules a model drops in for its linear layers and gated MLPs, on tilepipe.linear and tilepipe.gated_linear (the
bias and activation, or act(gate) * up, fused into the GEMM's epilogue on Hopper; under torch.compile, custom ops).

`Linear.from_linear(layer)` and `GatedMLP.from_linears(gate_proj, up_proj, down_proj)` take a model's trained
weights (Llama's MLP: `GatedMLP.from_linears(mlp.gate_proj, mlp.up_proj, mlp.down_proj)`); `load_gate_up` loads a
[Wg; Wu] pair into an existing GatedMLP. The gate-up weight is held packed (api/linear.py: pack_gate_up).
"""

import torch

from tilepipe.api.linear import ACTIVATIONS, GATED, check_activation, gated_linear, linear, pack_gate_up


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
