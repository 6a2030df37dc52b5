"""tilepipe's public kernels as torch.library custom ops (namespace `tilepipe`), each with a fake implementation.

torch.compile traces a custom op as one opaque node whose output shape and dtype come from the fake
implementation, so a model calling `tilepipe.matmul` compiles with fullgraph=True (matmul routes itself here
while compiling). Each public function gets two ops from one argument schema: `tilepipe::NAME` returns a new
tensor, and `tilepipe::NAME_out` writes its `out` argument (declared as mutated, so functionalization and CUDA
graphs see the write; `out` is its first argument). A new kernel is one `register` call; see the two at the bottom.
"""

from collections.abc import Callable
from typing import NamedTuple

import torch

from tilepipe.api.fp8 import matmul_fp8
from tilepipe.api.grouped import grouped_gated_mm, grouped_mm, grouped_mm_masked
from tilepipe.api.grouped_fp8 import grouped_mm_fp8
from tilepipe.api.grouped_wgrad import grouped_mm_wgrad
from tilepipe.api.linear import ACTIVATIONS, GATED, gated_linear, linear
from tilepipe.api.linear_fp8 import FP8, SCALE_GROUP, linear_fp8, padded_rows
from tilepipe.api.matmul import addmm, addmm_residual, matmul
from tilepipe.host.checks import (BATCHED, MASKED, check_activation, check_expected_m, check_grouped,
                                  check_grouped_mm_fp8, check_grouped_scheduler, check_grouped_wgrad, check_linear,
                                  check_linear_fp8, check_matmul, check_matmul_fp8, group_rows)


LIBRARY = torch.library.Library("tilepipe", "FRAGMENT")
"""The ops' registrations: defined here rather than by torch.library.custom_op, whose own Python layers (its autograd
wrapper, redispatch and aliasing check) cost host time on every call: 21.0 against 9.2 us on an H200 machine
(docs/perf-log.md row 148), which decides a compiled decode step."""


class PublicOp(NamedTuple):
    """The pair of custom ops of one public function."""
    functional: torch._ops.OpOverload  # tilepipe::NAME(...) -> Tensor
    out: torch._ops.OpOverload  # tilepipe::NAME_out(..., out) -> (): writes out


def register(name: str, tensors: str, options: str, impl: Callable[..., torch.Tensor],
             result_like: Callable[..., torch.Tensor]) -> PublicOp:
    """Register tilepipe::NAME and tilepipe::NAME_out for a public function.

    `tensors` and `options` are the schema's positional and keyword-only arguments (custom ops take tensors
    positionally only), without `out`: e.g. "Tensor a, Tensor b, Tensor? c=None" and "float alpha=1.0".
    impl(**arguments, out=None) is the public function; result_like(**arguments, out=None) runs every check that
    needs no memory address and returns `out`, or an empty tensor of the result's shape, dtype and device.
    """
    arguments = f"{tensors}, *, {options}"
    out_arguments = f"Tensor(a!) out, {arguments}"  # out first: it has no default
    names = [arg.name for arg in torch._C.parse_schema(f"f({out_arguments}) -> ()").arguments]

    def by_name(fn: Callable[..., torch.Tensor], names: list[str]) -> Callable[..., torch.Tensor]:
        return lambda *args, **kwargs: fn(**dict(zip(names, args)), **kwargs)

    def returning_none(fn: Callable[..., torch.Tensor]) -> Callable[..., None]:
        def call(*args, **kwargs) -> None:
            fn(**dict(zip(names, args)), **kwargs)

        return call

    return PublicOp(define(name, f"({arguments}) -> Tensor", by_name(impl, names[1:]), by_name(result_like, names[1:])),
                    define(f"{name}_out", f"({out_arguments}) -> ()", returning_none(impl),
                           returning_none(result_like), mutated=0))


def define(name: str, schema: str, kernel: Callable, fake: Callable, mutated: int | None = None
           ) -> torch._ops.OpOverload:
    """tilepipe::NAME with `schema`, run by `kernel` on every device (the checks name a CPU tensor), traced through
    `fake` (torch.compile, FakeTensorMode), and without a backward: its outputs' backward raises, as custom_op's do
    without a formula. `mutated`: the index of the argument the op writes (an `out`), whose version it bumps."""
    LIBRARY.define(name + schema)
    LIBRARY.impl(name, kernel, "CompositeExplicitAutograd")
    torch.library.register_fake(f"tilepipe::{name}", fake, lib=LIBRARY)
    op = getattr(torch.ops.tilepipe, name).default
    LIBRARY.impl(name, autograd_kernel(op, kernel, mutated), "Autograd", with_keyset=True)
    return op


def autograd_kernel(op: torch._ops.OpOverload, kernel: Callable, mutated: int | None) -> Callable:
    """`op`'s Autograd kernel. Where no input wants a gradient and nothing else sees the call (plain tensors, no
    dispatch mode: not tracing, not fake), `kernel` itself, called directly (a redispatch costs ~3 us a call); else
    the op below autograd, its outputs joined to the inputs by a backward that raises. An op that writes an input
    takes none that wants a gradient (torch's out= functions do the same)."""
    below = torch._C._after_autograd_keyset

    def autograd(keys: torch._C.DispatchKeySet, *args, **kwargs):
        tensors = [t for t in (*args, *kwargs.values()) if isinstance(t, torch.Tensor)]
        wants_grad = torch.is_grad_enabled() and any(t.requires_grad for t in tensors)
        if not wants_grad and not torch._C._len_torch_dispatch_stack() and all(type(t) is torch.Tensor
                                                                                for t in tensors):
            result = kernel(*args, **kwargs)
            if mutated is not None:
                torch.autograd.graph.increment_version(args[mutated])
            return result
        if not wants_grad:
            return op.redispatch(keys & below, *args, **kwargs)
        if mutated is not None:
            raise RuntimeError(f"{op._schema.name}: an op that writes `out` does not support automatic "
                               f"differentiation, but one of its arguments requires grad")
        return NoBackward.apply(op, keys & below, args, kwargs, *tensors)

    return autograd


class NoBackward(torch.autograd.Function):
    """Runs an op below autograd and gives its outputs a backward that raises: tilepipe's ops have no derivative."""

    @staticmethod
    def forward(ctx, op: torch._ops.OpOverload, keys: torch._C.DispatchKeySet, args: tuple, kwargs: dict,
                *tensors: torch.Tensor):
        ctx.name = op._schema.name
        return op.redispatch(keys, *args, **kwargs)

    @staticmethod
    def backward(ctx, *grads: torch.Tensor):
        raise RuntimeError(f"Trying to backward through {ctx.name}, which has no derivative formula: tilepipe's ops "
                           f"are for inference (call them under torch.no_grad(), or on tensors that need no grad)")


def _matmul_like(a: torch.Tensor, b: torch.Tensor, *, out: torch.Tensor | None = None,
                 out_dtype: torch.dtype | None = None, c: torch.Tensor | None = None, alpha: float = 1.0,
                 beta: float = 0.0) -> torch.Tensor:
    M, N, _, out_dtype, *_ = check_matmul(a, b, out, out_dtype, c, alpha, beta)
    return out if out is not None else a.new_empty((M, N), dtype=out_dtype)


def _addmm_like(input: torch.Tensor, mat1: torch.Tensor, mat2: torch.Tensor, *, beta: float = 1.0,
                alpha: float = 1.0, out: torch.Tensor | None = None) -> torch.Tensor:
    return _matmul_like(mat1, mat2, out=out, out_dtype=mat1.dtype, c=addmm_residual(input, mat1, mat2),
                        alpha=alpha, beta=beta)


MATMUL = register("matmul", "Tensor a, Tensor b, Tensor? c=None", "ScalarType? out_dtype=None, float alpha=1.0, "
                  "float beta=0.0", matmul, _matmul_like)
ADDMM = register("addmm", "Tensor input, Tensor mat1, Tensor mat2", "float beta=1.0, float alpha=1.0", addmm,
                 _addmm_like)


def _matmul_fp8_like(a: torch.Tensor, b: torch.Tensor, scale_a: torch.Tensor, scale_b: torch.Tensor, *,
                     out_dtype: torch.dtype = torch.bfloat16, out: torch.Tensor | None = None) -> torch.Tensor:
    M, N, _, _, out_dtype = check_matmul_fp8(a, b, scale_a, scale_b, out_dtype, out)
    return out if out is not None else a.new_empty((M, N), dtype=out_dtype)


MATMUL_FP8 = register("matmul_fp8", "Tensor a, Tensor b, Tensor scale_a, Tensor scale_b",
                      "ScalarType out_dtype=bfloat16", matmul_fp8, _matmul_fp8_like)


def _grouped_mm_like(a: torch.Tensor, b: torch.Tensor, offs: torch.Tensor, bias: torch.Tensor | None = None, *,
                     out_dtype: torch.dtype | None = None, activation: str | None = None,
                     scheduler: str | None = None, out: torch.Tensor | None = None) -> torch.Tensor:
    check_activation(activation, ACTIVATIONS, optional=True)
    check_grouped_scheduler(scheduler)
    _, M, N, _, out_dtype, _ = check_grouped(a, b, offs, bias, out, out_dtype, 1)
    return out if out is not None else a.new_empty((M, N), dtype=out_dtype)


def _grouped_gated_mm_like(a: torch.Tensor, b_gate_up: torch.Tensor, offs: torch.Tensor, *, activation: str = "silu",
                           out_dtype: torch.dtype | None = None, scheduler: str | None = None,
                           out: torch.Tensor | None = None) -> torch.Tensor:
    check_activation(activation, GATED, optional=False)
    check_grouped_scheduler(scheduler)
    _, M, N, _, out_dtype, _ = check_grouped(a, b_gate_up, offs, None, out, out_dtype, 2)
    return out if out is not None else a.new_empty((M, N // 2), dtype=out_dtype)


def _grouped_layout_like(a: torch.Tensor, b: torch.Tensor, counts: torch.Tensor | None, bias: torch.Tensor | None,
                         out: torch.Tensor | None, out_dtype: torch.dtype | None, activation: str | None, layout: str
                         ) -> torch.Tensor:
    """The masked and batched forms' result: (G, C, N)."""
    check_activation(activation, ACTIVATIONS, optional=True)
    rows, out_rows = group_rows(a, b, counts, out, 1, layout)
    _, _, N, _, out_dtype, _ = check_grouped(rows, b, None, bias, out_rows, out_dtype, 1, layout)
    return out if out is not None else a.new_empty((*a.shape[:2], N), dtype=out_dtype)


def _grouped_mm_masked_like(a: torch.Tensor, b: torch.Tensor, masked_m: torch.Tensor,
                            bias: torch.Tensor | None = None, *, out_dtype: torch.dtype | None = None,
                            activation: str | None = None, expected_m: int | None = None,
                            out: torch.Tensor | None = None) -> torch.Tensor:
    check_expected_m(expected_m)
    return _grouped_layout_like(a, b, masked_m, bias, out, out_dtype, activation, MASKED)


def _grouped_mm_batched_like(a: torch.Tensor, b: torch.Tensor, bias: torch.Tensor | None = None, *,
                             out_dtype: torch.dtype | None = None, activation: str | None = None,
                             out: torch.Tensor | None = None) -> torch.Tensor:
    return _grouped_layout_like(a, b, None, bias, out, out_dtype, activation, BATCHED)


def _grouped_mm_batched(a: torch.Tensor, b: torch.Tensor, bias: torch.Tensor | None = None, *,
                        out_dtype: torch.dtype | None = None, activation: str | None = None,
                        out: torch.Tensor | None = None) -> torch.Tensor:
    return grouped_mm(a, b, None, bias=bias, out_dtype=out_dtype, activation=activation, out=out)


GROUPED_MM_MASKED = register("grouped_mm_masked", "Tensor a, Tensor b, Tensor masked_m, Tensor? bias=None",
                             "ScalarType? out_dtype=None, str? activation=None, int? expected_m=None",
                             grouped_mm_masked, _grouped_mm_masked_like)
GROUPED_MM_BATCHED = register("grouped_mm_batched", "Tensor a, Tensor b, Tensor? bias=None",
                              "ScalarType? out_dtype=None, str? activation=None", _grouped_mm_batched,
                              _grouped_mm_batched_like)
GROUPED_MM = register("grouped_mm", "Tensor a, Tensor b, Tensor offs, Tensor? bias=None",
                      "ScalarType? out_dtype=None, str? activation=None, str? scheduler=None", grouped_mm,
                      _grouped_mm_like)
GROUPED_GATED_MM = register("grouped_gated_mm", "Tensor a, Tensor b_gate_up, Tensor offs",
                            'str activation="silu", ScalarType? out_dtype=None, str? scheduler=None', grouped_gated_mm,
                            _grouped_gated_mm_like)


def _grouped_mm_wgrad_like(a: torch.Tensor, b: torch.Tensor, offs: torch.Tensor, *,
                           out_dtype: torch.dtype | None = None, out: torch.Tensor | None = None) -> torch.Tensor:
    G, M, N, _, out_dtype, *_ = check_grouped_wgrad(a, b, offs, out, out_dtype)
    return out if out is not None else a.new_empty((G, M, N), dtype=out_dtype)


GROUPED_MM_WGRAD = register("grouped_mm_wgrad", "Tensor a, Tensor b, Tensor offs", "ScalarType? out_dtype=None",
                            grouped_mm_wgrad, _grouped_mm_wgrad_like)


def _grouped_mm_fp8_like(a: torch.Tensor, b: torch.Tensor, scale_a: torch.Tensor, scale_b: torch.Tensor,
                         offs: torch.Tensor, *, out_dtype: torch.dtype = torch.bfloat16,
                         scheduler: str | None = None, out: torch.Tensor | None = None) -> torch.Tensor:
    check_grouped_scheduler(scheduler)
    _, M, N, _, _, out_dtype = check_grouped_mm_fp8(a, b, scale_a, scale_b, offs, out, out_dtype)
    return out if out is not None else a.new_empty((M, N), dtype=out_dtype)


GROUPED_MM_FP8 = register("grouped_mm_fp8", "Tensor a, Tensor b, Tensor scale_a, Tensor scale_b, Tensor offs",
                          "ScalarType out_dtype=bfloat16, str? scheduler=None", grouped_mm_fp8, _grouped_mm_fp8_like)


def _linear_like(x: torch.Tensor, w: torch.Tensor, bias: torch.Tensor | None = None, *, activation: str | None = None,
                 out: torch.Tensor | None = None) -> torch.Tensor:
    check_activation(activation, ACTIVATIONS, optional=True)
    shape = check_linear(x, w, bias, activation, out)[3]
    return out if out is not None else x.new_empty(shape)


def _gated_linear_like(x: torch.Tensor, w_gate_up: torch.Tensor, *, activation: str = "silu",
                       out: torch.Tensor | None = None) -> torch.Tensor:
    check_activation(activation, GATED, optional=False)
    shape = check_linear(x, w_gate_up, None, activation, out, rows_per_column=2)[3]
    return out if out is not None else x.new_empty(shape)


LINEAR = register("linear", "Tensor x, Tensor w, Tensor? bias=None", "str? activation=None", linear, _linear_like)
GATED_LINEAR = register("gated_linear", "Tensor x, Tensor w_gate_up", 'str activation="silu"', gated_linear,
                        _gated_linear_like)


def _linear_fp8(x: torch.Tensor, w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    return linear_fp8(x, w)


def _linear_fp8_like(x: torch.Tensor, w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    M, N, _, shape = check_linear_fp8(x, w, None)  # the scales: group_scales' strides over a padded storage
    scales = x.new_empty_strided((M, N // SCALE_GROUP), (1, padded_rows(M)), dtype=torch.float32)
    return x.new_empty(shape, dtype=FP8), scales


def _linear_fp8_tensor(x: torch.Tensor, w: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    return linear_fp8(x, w, scale=scale)[0]


def _linear_fp8_tensor_like(x: torch.Tensor, w: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    return x.new_empty(check_linear_fp8(x, w, scale)[3], dtype=FP8)


LINEAR_FP8 = define("linear_fp8", "(Tensor x, Tensor w) -> (Tensor, Tensor)", _linear_fp8, _linear_fp8_like)
LINEAR_FP8_TENSOR = define("linear_fp8_tensor", "(Tensor x, Tensor w, Tensor scale) -> Tensor", _linear_fp8_tensor,
                           _linear_fp8_tensor_like)
"""linear_fp8's two forms (1x128 scales returned beside D; a given per-tensor scale), without an out variant: D's
scales are made with it."""
