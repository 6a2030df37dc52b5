"""`GroupedTileScheduler`: the tiles of a grouped GEMM (MoE experts), walked on the GPU from the groups' rows.

Group g owns rows [start_g, end_g) of A and D. Three layouts of those rows, in two scheduler classes (`rows`):
- contiguous (`GroupedTileScheduler`, SCHEDULE "static"): end_g is offs[g] clamped to [start_g, M] and start_g is the
  largest end before it (offs decreasing or past M never sends a tile outside D or two groups onto the same rows);
- capacity (`CapacityTileScheduler`): each group has a fixed capacity of C = M / G rows from start_g = g * C; in the
  masked form ("masked": the decode form) its first counts[g] (clamped to [0, C]) hold tokens, in the batched form
  ("batched": 3D x 3D, no counts pointer) every row does.
Its tiles are its own TileGrid (GROUP_M raster over cdiv(rows, BM) x cdiv(N, BN)), numbered after the tiles of the
groups before it; program p takes tiles p, p + P, ... as the static scheduler does, or (`DynamicGroupedScheduler`,
SCHEDULE "dynamic", the contiguous layout) the ids the dynamic schedule's scheduler role draws from a counter
(schedulers/dynamic.py), so a program that starts late, its SM held by another kernel (a MoE layer's all-to-all),
takes fewer tiles instead of delaying its static share. Each role walks the groups forward once per program (one
load of offs per group: a program's ids only grow), so no host sync and no table of tile counts are needed.
A group with at least BM rows has its last row of tiles moved up inside it (TileGrid INWARD: the overlapped rows
are written twice with the same values), so only groups smaller than BM leave a tile that reaches past their end:
`work.spills` says so, and the kernel masks that tile's store.
SWAP (swap-AB, for groups of a few rows): the kernel computes each group's D^T = B_g^T A_g^T, so a tile is BM of
B's N columns by BN of the group's rows (its TileGrid over N x rows), A's operand the expert's rows of B and B's
the group's rows of A; every tile's store is masked (it lands transposed).
"""

from triton.experimental import gluon
from triton.experimental.gluon import aggregate
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language._core import builtin
from triton.language.core import _unwrap_if_constexpr

from tilepipe.pipeline.ring import ProducerConsumerPipeline, _trace
from tilepipe.schedulers.dynamic import take_tile_id
from tilepipe.schedulers.grid import TileGrid, TileWork
from tilepipe.schedulers.ringfed import paced


@aggregate
class GroupedTileScheduler:
    """Persistent static schedule over every group's tiles: `offs` (int32, G row ends on the GPU), M rows of A and D,
    N columns of D, K (B's rows per expert when row-major), BM x BN tiles in GROUP_M raster within each group."""
    offs: gl.tensor | gl.constexpr  # a constexpr None where a layout reads none (CapacityTileScheduler's batched)
    G: gl.tensor
    M: gl.tensor
    N: gl.tensor
    K: gl.tensor
    BM: gl.constexpr
    BN: gl.constexpr
    GROUP_M: gl.constexpr
    SWAP: gl.constexpr

    @gluon.constexpr_function
    def __init__(self, offs, G, M, N, K, BM, BN, GROUP_M, SWAP=False):
        self.offs = gl.constexpr(None) if offs is None else offs
        self.G = G
        self.M = M
        self.N = N
        self.K = K
        self.BM = gl.constexpr(BM)
        self.BN = gl.constexpr(BN)
        self.GROUP_M = gl.constexpr(GROUP_M)
        self.SWAP = gl.constexpr(SWAP)

    @gluon.jit
    def create(offs, G, M, N, K, BM: gl.constexpr, BN: gl.constexpr, GROUP_M: gl.constexpr, pipelines=None,
               workspace=None, SWAP: gl.constexpr = False):
        """`pipelines` and `workspace`: the kernel's (DynamicGroupedScheduler's ring and counter; unused here)."""
        return GroupedTileScheduler(offs, G, M, N, K, BM, BN, GROUP_M, SWAP)

    @gluon.jit
    def grid(self, rows):
        """The TileGrid of a group of `rows` rows: rows x N, or N x rows under SWAP."""
        if self.SWAP:
            return TileGrid.create(self.N, rows, self.BM, self.BN, self.GROUP_M, True)
        return TileGrid.create(rows, self.N, self.BM, self.BN, self.GROUP_M, True)

    @gluon.jit
    def rows(self, group, end):
        """Group `group`'s rows [start, end), given `end`, the previous group's end: the contiguous layout."""
        return end, gl.maximum(gl.minimum(gl.load(self.offs + group), self.M), end)

    @gluon.jit
    def cursor(self, tile_id):
        """The work of `tile_id`, the groups walked from the first."""
        none = gl.to_tensor(0)
        return GroupedWork.seek(tile_id, none - 1, none, none, none, self.grid(none), self)

    @gluon.jit
    def work(self, paces: gl.constexpr = False):
        """This program's first tile (`paces`: the GEMM roles' signature; a static schedule paces nothing)."""
        return self.cursor(gl.program_id(0))


@aggregate
class CapacityTileScheduler(GroupedTileScheduler):
    """The capacity layouts: each group has a capacity of M / G rows; `offs` holds each one's token count in it (the
    masked form, grouped_mm_masked), or is None (the batched 3D x 3D form: every row, no load)."""

    @gluon.jit
    def create(offs, G, M, N, K, BM: gl.constexpr, BN: gl.constexpr, GROUP_M: gl.constexpr, pipelines=None,
               workspace=None, SWAP: gl.constexpr = False):
        return CapacityTileScheduler(offs, G, M, N, K, BM, BN, GROUP_M, SWAP)

    @gluon.jit
    def rows(self, group, end):
        """Group `group`'s rows: the first counts[group] of its capacity, or all of it without counts (`end`
        unused)."""
        capacity = self.M // self.G
        start = group * capacity
        count = capacity
        if self.offs is not None:
            count = gl.minimum(gl.maximum(gl.load(self.offs + group), 0), capacity)
        return start, start + count


@aggregate
class DynamicGroupedScheduler(GroupedTileScheduler):
    """The contiguous layout's tiles in the dynamic schedule: scheduler_role (schedulers/dynamic.py) publishes each tile
    id through the kernel's ring (`pipelines.clc`), drawing tickets from the counter at `workspace` (left at zero by
    every launch: the drawer of the last ticket walked every group, so it knows the tile count), and each role
    walks the groups forward to the ids it takes (DynamicGroupedWork)."""
    ring: ProducerConsumerPipeline
    throttle: ProducerConsumerPipeline
    response: gl.shared_memory_descriptor
    counter: gl.tensor

    @gluon.jit
    def create(offs, G, M, N, K, BM: gl.constexpr, BN: gl.constexpr, GROUP_M: gl.constexpr, pipelines=None,
               workspace=None, SWAP: gl.constexpr = False):
        clc = pipelines.clc
        return DynamicGroupedScheduler(offs, G, M, N, K, BM, BN, GROUP_M, SWAP, clc.pipeline, clc.throttle,
                                       clc.response, workspace)

    @builtin
    def work(self, paces=False, _semantic=None, _generator=None):
        """This role's first tile; the role created with `paces=True` (the load role) paces the scheduler, and each
        role's work carries its name (as DynamicTileScheduler's)."""
        args = [self, gl.constexpr(_unwrap_if_constexpr(paces)), gl.constexpr(_trace.current_role())]
        return _generator.call_JitFunction(DynamicGroupedWork.first, args, {})


@aggregate
class GroupedWork(TileWork):
    """One role's current tile: its id among all groups' tiles (`tile_id`), its group (`group`, whose tiles start at
    `base` and whose rows are [start, end)) and the group's TileGrid (`grid`, over the group's rows only)."""
    tile_id: gl.tensor
    valid: gl.tensor
    group: gl.tensor
    base: gl.tensor
    start: gl.tensor
    end: gl.tensor
    grid: TileGrid
    sched: GroupedTileScheduler | CapacityTileScheduler | DynamicGroupedScheduler
    finishes: gl.constexpr

    @gluon.constexpr_function
    def __init__(self, tile_id, valid, group, base, start, end, grid, sched):
        self.tile_id = tile_id
        self.valid = valid
        self.group = group
        self.base = base
        self.start = start
        self.end = end
        self.grid = grid
        self.sched = sched
        self.finishes = gl.constexpr(True)

    @gluon.jit
    def seek(tile_id, group, base, start, end, grid: TileGrid, sched):
        """The work of `tile_id`, walking the groups forward from `group` (-1: before the first) until one holds it."""
        while (tile_id >= base + grid.num_tiles) & (group + 1 < sched.G):
            group += 1
            base += grid.num_tiles
            start, end = sched.rows(group, end)
            grid = sched.grid(end - start)
        return GroupedWork(tile_id, tile_id < base + grid.num_tiles, group, base, start, end, grid, sched)

    @gluon.must_use_result("Rebind it: `work = work.next()`.")
    @gluon.jit
    def next(self):
        return self.moved(self.tile_id + gl.num_programs(0))

    @gluon.jit
    def moved(self, tile_id):
        """The work of `tile_id` (this one's or a later id), the groups walked on from this one's."""
        return GroupedWork.seek(tile_id, self.group, self.base, self.start, self.end, self.grid, self.sched)

    @gluon.jit
    def counted(self):
        """The tiles of the groups walked so far: all of them once an id is past the last (the dynamic scheduler
        role's end of the counter)."""
        return self.base + self.grid.num_tiles

    @gluon.jit
    def coords(self):
        """(pid_m, pid_n) of the current tile within its group."""
        return self.grid.coords(self.tile_id - self.base)

    @gluon.jit
    def origin(self, BM: gl.constexpr, BN: gl.constexpr):
        """(row, col) of D where the current BM x BN tile starts: inside its group's rows where the group has BM;
        under SWAP (row, col) of D^T (a column of B's N, a row of the group's)."""
        row, col = self.grid.origin(self.tile_id - self.base, BM, BN)
        if self.sched.SWAP:
            return row, self.start + col
        return self.start + row, col

    @gluon.jit
    def a_coords(self, row, k, A_KMAJOR: gl.constexpr = True):
        """Where the tile's A operand starts: A's [row, k] (TileWork's), or under SWAP the expert's rows of B [G * N,
        K]."""
        if self.sched.SWAP:
            return self.group * self.sched.N + row, k
        if A_KMAJOR:
            return row, k
        return k, row

    @gluon.jit
    def b_coords(self, col, k, B_KMAJOR: gl.constexpr):
        """Where the group's B tile starts in B's descriptor over the G experts stacked: [G * N, K] K-major (columns
        past N read the next expert's, which only D's clipped columns see), else [G * K, N] (K a multiple of BK);
        under SWAP the group's rows of A, [col, k]."""
        if self.sched.SWAP:
            return col, k
        if B_KMAJOR:
            return self.group * self.sched.N + col, k
        return self.group * self.sched.K + k, col

    @gluon.jit
    def spills(self):
        """Whether the tile's rows reach past its group's end (a group of fewer than BM rows, or any tile under
        SWAP): its store is masked."""
        return (self.end - self.start < self.sched.BM) | self.sched.SWAP


@aggregate
class DynamicGroupedWork(GroupedWork):
    """A role's current tile under DynamicGroupedScheduler, and its cursor into the scheduler ring and throttle (PACES,
    ROLE: as RingWork's)."""
    ring: ProducerConsumerPipeline
    throttle: ProducerConsumerPipeline
    response: gl.shared_memory_descriptor
    PACES: gl.constexpr
    ROLE: gl.constexpr

    @gluon.constexpr_function
    def __init__(self, work, ring, throttle, response, PACES, ROLE):
        self.tile_id = work.tile_id
        self.valid = work.valid
        self.group = work.group
        self.base = work.base
        self.start = work.start
        self.end = work.end
        self.grid = work.grid
        self.sched = work.sched
        self.finishes = gl.constexpr(True)
        self.ring = ring
        self.throttle = throttle
        self.response = response
        self.PACES = gl.constexpr(PACES)
        self.ROLE = gl.constexpr(ROLE)

    @gluon.jit
    def first(sched: DynamicGroupedScheduler, PACES: gl.constexpr, ROLE: gl.constexpr):
        """The role's first tile: the first id published, the groups walked from the first."""
        before = sched.cursor(gl.to_tensor(-1))
        return DynamicGroupedWork.take(before, sched.ring, sched.throttle, sched.response, PACES, ROLE)

    @gluon.jit
    def take(walked, ring: ProducerConsumerPipeline, throttle: ProducerConsumerPipeline, response, PACES: gl.constexpr,
             ROLE: gl.constexpr):
        """The next published id's work, the groups walked on from `walked` (a GroupedWork, or the role's last
        DynamicGroupedWork); a pacing role then lets the scheduler draw on."""
        tile_id, ring = take_tile_id(ring, response, ROLE)
        work = walked.moved(tile_id)
        return DynamicGroupedWork(work, ring, paced(throttle, work.valid, PACES), response, PACES, ROLE)

    @gluon.must_use_result("Rebind it: `work = work.next()`.")
    @gluon.jit
    def next(self):
        return DynamicGroupedWork.take(self, self.ring, self.throttle, self.response, self.PACES, self.ROLE)


GROUPED_SCHEDULER_CLASSES = {"static": GroupedTileScheduler, "dynamic": DynamicGroupedScheduler,
                             "masked": CapacityTileScheduler, "batched": CapacityTileScheduler}
"""The grouped GEMM's SCHEDULE names: one per layout of the groups' rows, and the contiguous layout's dynamic form."""


@gluon.constexpr_function
def grouped_scheduler_class(name):
    """The scheduler class a grouped kernel's SCHEDULE names."""
    if name not in GROUPED_SCHEDULER_CLASSES:
        raise ValueError(f"the grouped GEMM takes SCHEDULE in {tuple(GROUPED_SCHEDULER_CLASSES)}, got {name!r}")
    return GROUPED_SCHEDULER_CLASSES[name]
