"""Activations in fp32 registers, the pointwise math the epilogue functions (kernels/epilogue_functions.py) apply: relu,
GELU (erf and tanh forms) and SiLU, each written for the MUFU and FMA pipes an exposed epilogue spends its time on."""

import triton.language as tl
from triton.experimental import gluon
from triton.experimental.gluon import language as gl

LOG2E = gl.constexpr(1.4426950408889634)
SQRT_2_OVER_PI = gl.constexpr(0.7978845608028654)


@gluon.jit
def reciprocal(y):
    """1 / y, y >= 1, by rcp.approx.ftz.f32: div.full.f32 spends ~6 more instructions rescaling a huge or tiny y."""
    return gl.inline_asm_elementwise("rcp.approx.ftz.f32 $0, $1;", "=f,f", [y], gl.float32, True, 1)


@gluon.jit
def relu_of(x):
    """max(x, 0)."""
    return gl.maximum(x, 0.0)


GELU_CLAMP = gl.constexpr(6.0)
GELU_LOG2_TAIL = gl.constexpr((-1.000064730644226, -1.1501742601394653, -0.46127191185951233, -0.05118533596396446,
                               0.007195565849542618, -0.0006111000548116863, 2.29900633712532e-05))
"""log2 Phi(-a) = log2(erfc(a / sqrt 2) / 2) ~ sum c_k a^k on 0 <= a <= GELU_CLAMP: a degree-6 minimax fit (Lawson's
reweighted least squares, 6.6e-5 from log2's value at most), so 2^poly is Phi(-a) within 4.6e-5 relative."""


@gluon.jit
def gelu_of(x):
    """torch's F.gelu: x Phi(x) = max(x, 0) - a Phi(-a), a = |x| clamped at GELU_CLAMP (Phi(-6) < 1e-9), Phi(-a) =
    2^poly(a): one MUFU (ex2) and 9 FMA-pipe instructions an element (A-S 7.1.26's erfc took two MUFU, ex2 and rcp).
    In fp32 within 4.8e-5 relative of float64 on [-6, inf) and 5.9e-9 absolute below; NaN and +inf kept, -inf gives
    about 0 (torch: NaN). docs/epilogues.md."""
    a = gl.minimum(gl.abs(x), GELU_CLAMP)
    c: gl.constexpr = GELU_LOG2_TAIL
    poly = c[0] + a * (c[1] + a * (c[2] + a * (c[3] + a * (c[4] + a * (c[5] + a * c[6])))))
    return gl.maximum(x, 0.0, propagate_nan=gl.constexpr(tl.PropagateNan.ALL)) - a * gl.exp2(poly)


@gluon.jit
def gelu_tanh_of(x):
    """GELU's tanh form, F.gelu(approximate="tanh"): x / 2 * (1 + tanh z) = x * sigmoid(2z), z = sqrt(2 / pi) * (x +
    0.044715 x^3)."""
    z = SQRT_2_OVER_PI * (x + 0.044715 * x * x * x)
    return x * reciprocal(1.0 + gl.exp2(-2.0 * LOG2E * z))


@gluon.jit
def silu_of(x):
    """x * sigmoid(x) (F.silu)."""
    return x * reciprocal(1.0 + gl.exp2(-LOG2E * x))
