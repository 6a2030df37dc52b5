"""Consumer-side masking of an input stage along K: a k-step whose box reaches outside its unit's K (a k-grouped GEMM's
first step, rounded down to 16 bytes, holds the previous group's columns: schedulers/kgrouped.py) has those elements of
A and B zeroed in shared memory before the wgmmas read the stage. Both operands: the other side's rows may hold Inf or
NaN, and Inf * 0 is NaN."""

from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import fence_async_shared


@gluon.jit
def _zero_outside(tile, lo, hi, K_DIM: gl.constexpr):
    """Zero the elements of a 2-D shared-memory `tile` whose index along dimension K_DIM is outside [lo, hi)."""
    layout: gl.constexpr = gl.BlockedLayout([1, 8], [4, 8], [gl.num_warps(), 1], [1, 0])
    x = tile.load(layout)
    ks = gl.arange(0, tile.shape[K_DIM], gl.SliceLayout(1 - K_DIM, layout))
    inside = (ks >= lo) & (ks < hi)
    if K_DIM == 0:
        keep = gl.expand_dims(inside, 1)
    else:
        keep = gl.expand_dims(inside, 0)
    tile.store(gl.where(keep, x, gl.zeros_like(x)))


@gluon.jit
def zero_outside_k(tiles, lo, hi, A_KMAJOR: gl.constexpr, B_KMAJOR: gl.constexpr):
    """Zero input stage `tiles`' A and B at k-offsets outside [lo, hi) (A: BM x BK K-major, else BK x BM; B: BN x BK
    K-major, else BK x BN), by every thread of the MMA role (generic-proxy stores); then the proxy fence and the
    role's barrier, so every warpgroup's wgmma (async proxy) reads the zeros and the load role's next TMA write to
    the slot comes after them."""
    _zero_outside(tiles.a_tile(), lo, hi, 1 if A_KMAJOR else 0)
    _zero_outside(tiles.b_tile(), lo, hi, 1 if B_KMAJOR else 0)
    fence_async_shared()
    gl.barrier()
