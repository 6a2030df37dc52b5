"""Activations in fp32 registers, the pointwise math the epilogue functions (kernels/epilogue_functions.py) apply: relu,
GELU (erf and tanh forms) and SiLU, each written for the MUFU and FMA pipes an exposed epilogue spends its time on."""

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


ERFC_P = gl.constexpr(0.3275911 * 0.7071067811865476)
ERFC_A = gl.constexpr(tuple(0.5 * a for a in (0.254829592, -0.284496736, 1.421413741, -1.453152027, 1.061405429)))
"""Abramowitz-Stegun 7.1.26, erfc(z) ~ t (a1 + t (a2 + ... t a5)) exp(-z^2), t = 1 / (1 + p z), z >= 0: p and the a's
pre-scaled for z = |x| / sqrt 2 and erfc / 2, so no multiply is spent on them."""


@gluon.jit
def gelu_of(x):
    """torch's F.gelu, x Phi(x), Phi = 1 - erfc(|x| / sqrt 2) / 2 (x >= 0) or erfc(...) / 2 by A-S 7.1.26: ~13 FMA-pipe
    instructions and 2 MUFU an element (gl.erf: 31), 5.3e-5 of float64 for x >= -3 (docs/epilogues.md)."""
    t = reciprocal(1.0 + ERFC_P * gl.abs(x))
    poly = t * (ERFC_A[0] + t * (ERFC_A[1] + t * (ERFC_A[2] + t * (ERFC_A[3] + t * ERFC_A[4]))))
    half_erfc = poly * gl.exp2((-0.5 * LOG2E) * x * x)
    return x * gl.where(x >= 0, 1.0 - half_erfc, half_erfc)


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
