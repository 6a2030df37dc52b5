"""Smallest reproducer of the `prev = s` hang cause: a loop copy whose pre-loop value aliases its source.

Python semantics give out = n - 1 (for n >= 1). Triton 3.6.0 stores 0: its frontend (shared by Triton
and Gluon) finds loop-carried names by comparing IR values after a dry run of the body, and the body's
`prev = x` yields exactly the values `prev` already had before the loop (`prev = x`), so `prev` is not
carried. `FIXED` differs only in giving `prev` its own initial value. See docs/hang-prev-copy.md.
"""

from triton.experimental import gluon
from triton.experimental.gluon import language as gl


@gluon.jit
def prev_copy(out_ptr, n, FIXED: gl.constexpr):
    x = gl.to_tensor(0)
    if FIXED:
        prev = gl.to_tensor(-1)  # any value that is not x's own IR value
    else:
        prev = x
    for _ in range(n):
        prev = x
        x = x + 1
    gl.store(out_ptr, prev)
