"""A kernel author's own epilogue, outside tilepipe: the sm_90a GEMM takes it by "module:name" (tests/test_linear.py
compiles it). It uses the part's coordinates: each row of D is scaled by its row index plus one, then clamped."""

from triton.experimental import gluon
from triton.experimental.gluon import language as gl

from tilepipe.kernels.epilogue_functions import EpilogueArgs, affine


@gluon.jit
def row_scaled_clamp(acc, c, args: EpilogueArgs, first_row, first_col):
    """min((row + 1) * (alpha * acc + beta * (C or bias)), 8)."""
    rows = first_row + gl.arange(0, acc.shape[0], layout=gl.SliceLayout(1, acc.type.layout))
    d = affine(acc, c, args, first_row, first_col) * (rows + 1).to(gl.float32)[:, None]
    return gl.minimum(d, 8.0)
