"""The FP8-output epilogues (tilepipe.linear_fp8, api/linear_fp8.py): epilogue functions (kernels/epilogue_functions.py)
that return the fp32 part scaled for e4m3, which the store converts with saturation: `quantize_1x128` (DeepSeek-style
per-row 1x128 scales, written beside D through the kernel's bias pointer) and `quantize_tensor` (a given per-tensor
scale, read there)."""

from triton.experimental import gluon
from triton.experimental.gluon import language as gl

from tilepipe.kernels.epilogue_functions import EpilogueArgs
from tilepipe.pipeline.output import column_join, column_parts
FP8_MAX = gl.constexpr(448.0)
"""e4m3's largest finite value: a quantized group's largest magnitude maps onto it."""
SCALE_GROUP = gl.constexpr(128)
"""The columns of D one 1x128 scale covers (DeepSeek-V3's activation groups; matmul_fp8's blockwise K block)."""
AMAX_FLOOR = gl.constexpr(1e-4)
"""The smallest amax a group is scaled by (an all-zero group gets scale AMAX_FLOOR / FP8_MAX, not a division by 0)."""


@gluon.jit
def quantize_1x128(acc, c, args: EpilogueArgs, first_row, first_col):
    """D in e4m3 with DeepSeek-style 1x128 scales: each row's SCALE_GROUP-column group x is stored as x * (FP8_MAX /
    amax) and its scale amax / FP8_MAX (amax = max |x|, at least AMAX_FLOOR) is written beside it. The kernel's bias
    pointer is the scales' base (fp32, [N / 128, ld]: group-major, a row's scale at group * ld + row, so the next
    matmul_fp8 reads scale_a^T by TMA without a copy) and its beta is ld (a float, exact below 2^24); groups from
    N on are not written, rows past D's are (api/linear_fp8.py pads ld past every tile's rows). The part's columns
    must be whole groups from a multiple of SCALE_GROUP."""
    GROUPS: gl.constexpr = acc.shape[1] // SCALE_GROUP
    gl.static_assert(GROUPS >= 1 and acc.shape[1] == GROUPS * SCALE_GROUP,
                     "quantize_1x128 takes parts of whole 128-column groups (D in sub-tiles of 128 columns or more)")
    rows = first_row + gl.arange(0, acc.shape[0], layout=gl.SliceLayout(1, acc.type.layout))
    ld = args.beta.to(gl.int64)
    parts = column_parts(acc, GROUPS)
    outs = ()
    for g in gl.static_range(GROUPS):
        amax = gl.maximum(gl.max(gl.abs(parts[g]), axis=1), AMAX_FLOOR)
        group = first_col // SCALE_GROUP + g
        gl.store(args.bias_ptr + group * ld + rows, amax / FP8_MAX, mask=(rows >= 0) & (group * SCALE_GROUP < args.N))
        outs = outs + (parts[g] * (FP8_MAX / amax)[:, None], )
    return column_join(outs)


@gluon.jit
def quantize_tensor(acc, c, args: EpilogueArgs, first_row, first_col):
    """D in e4m3 with a given per-tensor scale s (fp32, one element at the kernel's bias pointer): acc / s, saturated
    to +-FP8_MAX by the conversion, so D * s approximates acc as matmul_fp8's per-tensor scale reads it."""
    return acc * (1.0 / gl.load(args.bias_ptr))
