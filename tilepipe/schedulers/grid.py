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


# A TMA box's innermost coordinate must start on 16 bytes (off them the copy faults: an illegal instruction on an
# H100); 16 elements are 16 bytes or more for every dtype a kernel stores or loads along N.
COLUMN_STEP = gl.constexpr(16)


@aggregate
class TileGrid:
    """The output tiles of an M x N problem in grouped order: GROUP_M rows of tiles are walked column by column, so
    consecutive tiles reuse the same B columns and A rows from L2. INWARD: a tile that would reach past the
    problem's last row or column starts that much earlier (`origin`), overlapping the tile before it, which writes
    the same values there, so no TMA box of A, B or D reaches past their edges: a box mostly out of bounds loads
    slowly (416 of 512 rows at K = 14336 ran 1.4x the whole rows' time: docs/perf-log.md row 77). A moved column is
    rounded up to COLUMN_STEP elements (its box may reach up to COLUMN_STEP - 1 columns past the edge). Only for a
    kernel whose D tiles are each written once from A and B alone (under stream-K by the tile's finisher; no C,
    which may be D itself)."""
    num_pid_m: gl.tensor
    num_pid_n: gl.tensor
    num_tiles: gl.tensor
    M: gl.tensor | gl.constexpr  # a constexpr where a kernel specializes it
    N: gl.tensor | gl.constexpr
    GROUP_M: gl.constexpr
    INWARD: gl.constexpr

    @gluon.constexpr_function
    def __init__(self, num_pid_m, num_pid_n, num_tiles, M, N, GROUP_M, INWARD=False):
        self.num_pid_m = num_pid_m
        self.num_pid_n = num_pid_n
        self.num_tiles = num_tiles
        self.M = M
        self.N = N
        self.GROUP_M = gl.constexpr(GROUP_M)
        self.INWARD = gl.constexpr(INWARD)

    @gluon.jit
    def create(M, N, BM: gl.constexpr, BN: gl.constexpr, GROUP_M: gl.constexpr, INWARD: gl.constexpr = False):
        num_pid_m = gl.cdiv(M, BM)
        num_pid_n = gl.cdiv(N, BN)
        return TileGrid(num_pid_m, num_pid_n, num_pid_m * num_pid_n, M, N, GROUP_M, INWARD)

    @gluon.jit
    def coords(self, tile_id):
        """(pid_m, pid_n) of a tile id in grouped order."""
        per_group = self.GROUP_M * self.num_pid_n
        first_m = (tile_id // per_group) * self.GROUP_M
        group_rows = gl.minimum(self.num_pid_m - first_m, self.GROUP_M)
        pid_m = first_m + (tile_id % per_group) % group_rows
        pid_n = (tile_id % per_group) // group_rows
        return pid_m, pid_n

    @gluon.jit
    def origin(self, tile_id, BM: gl.constexpr, BN: gl.constexpr):
        """(row, col) where the BM x BN tile of a tile id starts: (pid_m * BM, pid_n * BN), moved inside the
        problem's last row and column under INWARD."""
        pid_m, pid_n = self.coords(tile_id)
        row = pid_m * BM
        col = pid_n * BN
        if self.INWARD:
            row = gl.minimum(row, gl.maximum(self.M - BM, 0))
            col = gl.minimum(col, gl.cdiv(gl.maximum(self.N - BN, 0), COLUMN_STEP) * COLUMN_STEP)
        return row, col


@aggregate
class TileWork:
    """What every work type shares: a tile id (`tile_id`) in a TileGrid (`grid`). A unit of the static and the
    dynamic schedules is a whole tile: all k-steps, and its program `finishes` it (runs its epilogue)."""

    @gluon.jit
    def coords(self):
        """(pid_m, pid_n) of the current tile."""
        return self.grid.coords(self.tile_id)

    @gluon.jit
    def origin(self, BM: gl.constexpr, BN: gl.constexpr):
        """(row, col) where the current BM x BN tile starts (TileGrid.origin)."""
        return self.grid.origin(self.tile_id, BM, BN)

    @gluon.jit
    def b_coords(self, col, k, B_KMAJOR: gl.constexpr):
        """Where B's tile of columns from `col` and K from `k` starts in B's descriptor: [col, k] K-major, else [k,
        col] (a grouped GEMM's work adds its group's offset: schedulers/grouped.py)."""
        if B_KMAJOR:
            return col, k
        return k, col

    @gluon.jit
    def a_coords(self, row, k, A_KMAJOR: gl.constexpr = True):
        """Where A's tile of rows from `row` and K from `k` starts in A's descriptor: [row, k] K-major, else [k, row]
        (A M-major, a transposed (K, M) tensor; a k-grouped work adds its group's K offset: schedulers/kgrouped.py)."""
        if A_KMAJOR:
            return row, k
        return k, row

    @gluon.jit
    def mask_k(self, tiles, k, A_KMAJOR: gl.constexpr, B_KMAJOR: gl.constexpr):
        """Zero what input stage `tiles` of k-step k holds outside the unit's K: nothing here, every k-step lies inside
        it (a k-grouped work's first step may hold the previous group's columns: schedulers/kgrouped.py)."""
        pass

    @gluon.jit
    def operands(self, a_from, b_from, a_desc, b_desc, A_KMAJOR: gl.constexpr, B_KMAJOR: gl.constexpr):
        """The descriptors the tile's loads read A and B through, given the previous tile's (a_from, b_from): the
        kernel's own here (a k-grouped work re-cuts them at its group's K end: schedulers/kgrouped.py)."""
        return a_desc, b_desc

    @gluon.jit
    def adds_c(self):
        """Whether the tile's C holds values to add: every tile's here (the reduce-scatter ring's first chunk's holds
        none: schedulers/chunked.py)."""
        return True

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
