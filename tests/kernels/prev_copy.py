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


def run() -> dict:
    """On a GPU: the unfixed kernel stores 0 where Python semantics (and the fixed kernel) give n - 1."""
    import torch

    n = 5
    got = {}
    for fixed in (False, True):
        out = torch.full((1, ), -7, dtype=torch.int32, device="cuda")
        prev_copy[(1, )](out, n, fixed)
        got["fixed" if fixed else "unfixed"] = int(out.item())
    return {"case": "prev = x copy in a loop", "ok": got == {"unfixed": 0, "fixed": n - 1}, **got}


if __name__ == "__main__":
    import json

    result = run()
    print(json.dumps(result))
    raise SystemExit(0 if result["ok"] else 1)
