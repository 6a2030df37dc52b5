"""The output tiles of a GEMM and the work loop every scheduler serves.

Every role walks its tiles through the same loop, whichever scheduler the kernel was built with:

    work = sched.work()                  # the load role: sched.work(paces=True)
    while work.valid:
        pid_m, pid_n = work.coords()
        ...
        work = work.next()
"""

from triton.experimental import gluon
from triton.experimental.gluon import aggregate
from triton.experimental.gluon import language as gl


@aggregate
class TileGrid:
    """The output tiles of an M x N problem in grouped order: GROUP_M rows of tiles are walked column by
    column, so consecutive tiles reuse the same B columns and A rows from L2."""
    num_pid_m: gl.tensor
    num_pid_n: gl.tensor
    num_tiles: gl.tensor
    GROUP_M: gl.constexpr

    @gluon.jit
    def create(M, N, BM: gl.constexpr, BN: gl.constexpr, GROUP_M: gl.constexpr):
        num_pid_m = gl.cdiv(M, BM)
        num_pid_n = gl.cdiv(N, BN)
        return TileGrid(num_pid_m, num_pid_n, num_pid_m * num_pid_n, GROUP_M)

    @gluon.jit
    def coords(self, tile_id):
        """(pid_m, pid_n) of a tile id in grouped order."""
        per_group = self.GROUP_M * self.num_pid_n
        first_m = (tile_id // per_group) * self.GROUP_M
        group_rows = gl.minimum(self.num_pid_m - first_m, self.GROUP_M)
        pid_m = first_m + (tile_id % per_group) % group_rows
        pid_n = (tile_id % per_group) // group_rows
        return pid_m, pid_n


@aggregate
class TileWork:
    """What every work type shares: a tile id (`tile_id`) in a TileGrid (`grid`). A unit of the static and the
    dynamic schedules is a whole tile: all k-steps, and its program `finishes` it (runs its epilogue)."""

    @gluon.jit
    def coords(self):
        """(pid_m, pid_n) of the current tile."""
        return self.grid.coords(self.tile_id)

    @gluon.jit
    def k_steps(self, k_tiles):
        """The unit's k-steps [begin, end) of the tile's k_tiles."""
        return 0, k_tiles

    @gluon.jit
    def add_partials(self, acc, outputs, sources):
        """The finisher's mma role: its accumulator plus the other programs' partial sums of the tile (none here),
        and the output and source pipelines, advanced past the stages those used (stream-K: schedulers/streamk.py)."""
        return acc, outputs, sources

    @gluon.jit
    def pass_partials(self, outputs, sources):
        """The finisher's store role: free the stages the partial sums used (none here)."""
        return outputs, sources

    @gluon.jit
    def fetch_partials(self, sources):
        """The finisher's epilogue-load role: load the partial sums into the stages (none here)."""
        return sources
