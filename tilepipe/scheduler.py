"""Tile schedulers: which output tiles each persistent program computes, and in which order.

Every role walks its tiles through the same loop, whichever scheduler the kernel was built with:

    work = sched.work()                  # the load role: sched.work(paces=True)
    while work.valid:
        pid_m, pid_n = work.coords()
        ...
        work = work.next()

* `StaticTileScheduler`: program p takes tiles p, p + P, p + 2P, ... (P = grid size). No shared state.
* `DynamicTileScheduler`: a scheduler role (one warp, `scheduler_role`) takes tile ids from a global
  atomic counter and hands them to every other role through the ClcPipelineStorage ring: one slot per
  tile id (16 bytes, the size of sm_100a's CLC response), full/empty barriers whose empty side counts
  every consuming role. The load role paces the scheduler through the throttle pair: the scheduler
  takes the next tile only once the load role started the previous one, so a CTA never reserves work
  long before it can start it (reserving earlier measured slower, docs/scheduler.md). A tile id >= num_tiles is the
  sentinel that ends every role's loop; the scheduler drains the ring before it exits.

The counter needs no reset from the host: program p's first tile is p, later ones are
`grid + atomic_add(counter, 1)`, and a scheduler whose first tile is valid draws tickets up to its first
one past the end. A launch therefore hands out exactly num_tiles tickets (num_tiles - grid that land,
one per program that misses), and the scheduler that draws ticket num_tiles - 1 sets the counter back to 0,
so the next launch (or CUDA-graph replay) on the stream starts from 0.
Two launches that share a counter must not run concurrently (ops.py keeps one counter per stream).
"""

from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language._core import builtin
from triton.experimental.gluon import aggregate
from triton.language.core import _unwrap_if_constexpr

from tilepipe import _trace
from tilepipe.pipeline import ProducerConsumerPipeline


# A TMA box's innermost coordinate must start on 16 bytes.
COLUMN_STEP = gl.constexpr(16)


@aggregate
class TileGrid:
    """The output tiles of an M x N problem in grouped order: GROUP_M rows of tiles are walked column by
    column, so consecutive tiles reuse the same B columns and A rows from L2."""
    num_pid_m: gl.tensor
    num_pid_n: gl.tensor
    num_tiles: gl.tensor
    M: gl.tensor | gl.constexpr
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
        pid_m, pid_n = self.coords(tile_id)
        row = pid_m * BM
        col = pid_n * BN
        if self.INWARD:
            row = gl.minimum(row, gl.maximum(self.M - BM, 0))
            col = gl.minimum(col, gl.cdiv(gl.maximum(self.N - BN, 0), COLUMN_STEP) * COLUMN_STEP)
        return row, col


@aggregate
class _Work:
    """What both work types share: a tile id (`tile_id`) in a TileGrid (`grid`)."""

    @gluon.jit
    def coords(self):
        """(pid_m, pid_n) of the current tile."""
        return self.grid.coords(self.tile_id)

    @gluon.jit
    def origin(self, BM: gl.constexpr, BN: gl.constexpr):
        return self.grid.origin(self.tile_id, BM, BN)


# ---- static ----------------------------------------------------------------------------------------


@aggregate
class StaticWork(_Work):
    """One role's current tile under the static schedule."""
    tile_id: gl.tensor
    valid: gl.tensor
    grid: TileGrid

    @gluon.constexpr_function
    def __init__(self, tile_id, valid, grid):
        self.tile_id = tile_id
        self.valid = valid
        self.grid = grid

    @gluon.jit
    def at(tile_id, grid: TileGrid):
        return StaticWork(tile_id, tile_id < grid.num_tiles, grid)

    @gluon.must_use_result("Rebind it: `work = work.next()`.")
    @gluon.jit
    def next(self):
        return StaticWork.at(self.tile_id + gl.num_programs(0), self.grid)


@aggregate
class StaticTileScheduler:
    """Persistent grid over the output tiles: program p takes tiles p, p + P, p + 2P, ... in grouped order."""
    grid: TileGrid

    @gluon.constexpr_function
    def __init__(self, grid):
        self.grid = grid

    @gluon.jit
    def create(M, N, BM: gl.constexpr, BN: gl.constexpr, GROUP_M: gl.constexpr, INWARD: gl.constexpr = False):
        return StaticTileScheduler(TileGrid.create(M, N, BM, BN, GROUP_M, INWARD))

    @gluon.jit
    def work(self, paces: gl.constexpr = False):
        """This program's first tile (`paces` matters only to the dynamic scheduler)."""
        return StaticWork.at(gl.program_id(0), self.grid)


# ---- dynamic ---------------------------------------------------------------------------------------


@gluon.constexpr_function
def _response_layout(num_warps):
    """Every thread holds the whole 1 x 4-word response: reading the tile id needs no shuffle."""
    return gl.BlockedLayout([1, 4], [1, 32], [1, num_warps], [1, 0])


@aggregate
class DynamicWork(_Work):
    """One role's current tile under the dynamic schedule, and its cursor into the scheduler ring."""
    tile_id: gl.tensor
    valid: gl.tensor
    grid: TileGrid
    ring: ProducerConsumerPipeline
    throttle: ProducerConsumerPipeline
    response: gl.shared_memory_descriptor
    PACES: gl.constexpr
    ROLE: gl.constexpr

    @gluon.constexpr_function
    def __init__(self, tile_id, valid, grid, ring, throttle, response, PACES, ROLE):
        self.tile_id = tile_id
        self.valid = valid
        self.grid = grid
        self.ring = ring
        self.throttle = throttle
        self.response = response
        self.PACES = gl.constexpr(PACES)
        self.ROLE = gl.constexpr(ROLE)

    @gluon.jit
    def take(grid: TileGrid, ring: ProducerConsumerPipeline, throttle: ProducerConsumerPipeline, response,
             PACES: gl.constexpr, ROLE: gl.constexpr):
        """Wait for the next tile id in the ring, free its slot; a pacing role then lets the scheduler fetch on."""
        with ring.consume() as slot:
            words = response.index(slot.index()).load(_response_layout(gl.num_warps()))
            tile_id = gl.max(gl.max(words, axis=1), axis=0)
        valid = tile_id < grid.num_tiles
        if PACES:
            if valid:
                with throttle.produce() as taken:
                    taken.arrive()
        return DynamicWork(tile_id, valid, grid, ring, throttle, response, PACES, ROLE)

    @gluon.must_use_result("Rebind it: `work = work.next()`.")
    @gluon.jit
    def next(self):
        return DynamicWork.take(self.grid, self.ring, self.throttle, self.response, self.PACES, self.ROLE)


@aggregate
class DynamicTileScheduler:
    """Tiles handed out at run time by `scheduler_role` from a global counter (int32, zero before the first
    launch, left at zero by every launch)."""
    grid: TileGrid
    ring: ProducerConsumerPipeline
    throttle: ProducerConsumerPipeline
    response: gl.shared_memory_descriptor
    counter: gl.tensor

    @gluon.constexpr_function
    def __init__(self, grid, ring, throttle, response, counter):
        self.grid = grid
        self.ring = ring
        self.throttle = throttle
        self.response = response
        self.counter = counter

    @gluon.jit
    def create(M, N, BM: gl.constexpr, BN: gl.constexpr, GROUP_M: gl.constexpr, clc, counter):
        """From the ClcPipelines that ClcPipelineStorage.allocate() gave."""
        return DynamicTileScheduler(TileGrid.create(M, N, BM, BN, GROUP_M), clc.pipeline, clc.throttle,
                                    clc.response, counter)

    @builtin
    def work(self, paces=False, _semantic=None, _generator=None):
        """This role's first tile. The one role created with `paces=True` (the load role) paces the scheduler.

        The work carries the role's name as a constexpr, so each role traces its own copy of the ring handling
        and the protocol check sees every consuming role (_trace.current_role)."""
        args = [self.grid, self.ring, self.throttle, self.response, gl.constexpr(_unwrap_if_constexpr(paces)),
                gl.constexpr(_trace.current_role())]
        return _generator.call_JitFunction(DynamicWork.take, args, {})


@gluon.jit
def _publish(ring: ProducerConsumerPipeline, response, tile_id):
    """Write a tile id into the next free ring slot and signal it to every consuming role."""
    with ring.produce() as slot:
        response.index(slot.index()).store(gl.full([1, 4], tile_id, gl.int32, _response_layout(gl.num_warps())))
        slot.arrive()
    return ring


@gluon.jit
def scheduler_role(sched: DynamicTileScheduler):
    """The producer of the ring: this program's own tile first, then one counter ticket each time the load role
    took the previous tile, until a ticket past the end (published as the sentinel)."""
    ring = sched.ring
    throttle = sched.throttle
    programs = gl.num_programs(0)
    tile_id = gl.program_id(0)
    ring = _publish(ring, sched.response, tile_id)
    last_ticket = sched.grid.num_tiles - 1
    while tile_id < sched.grid.num_tiles:
        with throttle.consume() as taken:  # the load role started the tile published last
            ticket = gl.atomic_add(sched.counter, 1)
        if ticket == last_ticket:  # every other ticket of this launch was drawn: leave the counter at 0
            gl.atomic_xchg(sched.counter, 0)
        tile_id = ticket + programs
        ring = _publish(ring, sched.response, tile_id)
    ring.drain()
