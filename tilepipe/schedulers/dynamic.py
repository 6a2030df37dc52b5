"""`DynamicTileScheduler`: a scheduler role (one warp, `scheduler_role`) takes tile ids from a global
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
Two launches that share a counter must not run concurrently (host/launch.py keeps one workspace per stream).
"""

from triton.experimental import gluon
from triton.experimental.gluon import aggregate
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language._core import builtin
from triton.language.core import _unwrap_if_constexpr

from tilepipe.pipeline.ring import _trace
from tilepipe.pipeline.ring import ProducerConsumerPipeline
from tilepipe.schedulers.grid import TileGrid
from tilepipe.schedulers.ringfed import RingWork, paced


@gluon.constexpr_function
def _response_layout(num_warps):
    """Every thread holds the whole 1 x 4-word response: reading the tile id needs no shuffle."""
    return gl.BlockedLayout([1, 4], [1, 32], [1, num_warps], [1, 0])


@aggregate
class DynamicWork(RingWork):
    """One role's current tile under the dynamic schedule, and its cursor into the scheduler ring."""

    @gluon.jit
    def take(grid: TileGrid, ring: ProducerConsumerPipeline, throttle: ProducerConsumerPipeline, response,
             PACES: gl.constexpr, ROLE: gl.constexpr):
        """Wait for the next tile id in the ring, free its slot; a pacing role then lets the scheduler fetch on."""
        with ring.consume() as slot:
            words = response.index(slot.index()).load(_response_layout(gl.num_warps()))
            tile_id = gl.max(gl.max(words, axis=1), axis=0)
        valid = tile_id < grid.num_tiles
        return DynamicWork(tile_id, valid, grid, ring, paced(throttle, valid, PACES), response, PACES, ROLE)

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

    @gluon.jit
    def from_kernel(M, N, k_tiles, BM: gl.constexpr, BN: gl.constexpr, GROUP_M: gl.constexpr, pipelines, workspace,
                    partials=None):
        """The scheduler a GEMM kernel builds from its problem, its allocated pipelines (the `clc` ring) and its
        workspace (word 0 is the tile counter)."""
        return DynamicTileScheduler.create(M, N, BM, BN, GROUP_M, pipelines.clc, workspace)

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
