"""What an MMA consumer needs beyond the ring: a wgmma wait that stays inside its own warpgroup."""

from triton.experimental.gluon.language._core import builtin
from triton.experimental.gluon.language.nvidia.hopper import warpgroup_mma_wait


@builtin
def warpgroup_local_wait(num_outstanding, deps, _semantic=None):
    """warpgroup_mma_wait marked warp-group-local. Without the mark, triton 3.9 puts a bar.sync across the whole
    partition after every wgmma wait of a partition of more than 4 warps, before its next shared-memory access; a
    consumer whose warpgroups then read only their own results and a slot they acquired needs none, since every
    release of a slot already syncs the partition before its one arrive (ring.py). The barrier cost the blockwise
    FP8 GEMM at K = 2048 under 3.9 (docs/perf-log.md)."""
    result = warpgroup_mma_wait(num_outstanding, deps, _semantic=_semantic)
    first = result[0] if isinstance(result, tuple) else result
    first.handle.set_attr("warpGroupLocal", _semantic.builder.get_unit_attr())
    return result
