"""`ClcTileScheduler` (sm_100a only; compiled, never run): cluster launch control. The grid has one CTA per tile, and
a running CTA takes over the tiles of CTAs the hardware has not launched yet.

Each CTA starts on its own tile (its program id). Its scheduler role (one warp, `clc_scheduler_role`) then asks the
hardware to cancel a pending CTA (`try_cancel`): the 16-byte response lands in a ClcPipelineStorage slot and
completes the slot's full barrier (its 16 bytes are the producer's one arrival, as a TMA load's are). Every other
role reads the response from the ring and frees the slot; a response that cancelled nothing ends every role's loop,
and the scheduler, which reads each response too, stops asking (a failed try_cancel must not be repeated) and drains
the ring. The load role paces the scheduler through the throttle pair, as with the dynamic scheduler: one try_cancel
per tile the load role started, so a CTA never takes work long before it can start it.
"""

from triton.experimental import gluon
from triton.experimental.gluon import aggregate
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language._core import builtin
from triton.experimental.gluon.language.nvidia.blackwell import clc
from triton.language.core import _unwrap_if_constexpr

from tilepipe.pipeline.ring import ProducerConsumerPipeline, _trace
from tilepipe.schedulers.grid import TileGrid
from tilepipe.schedulers.ringfed import RingWork, paced

RESPONSE_BYTES = gl.constexpr(16)  # a CLC response: its bytes complete the slot's full barrier


@gluon.jit
def _response(response, index):
    """Slot `index` of the ring's response words, as the int64 x 2 buffer CLC writes and reads."""
    return response.index(index).reinterpret(gl.int64, [2], gl.SwizzledSharedLayout(1, 1, 1, [0]))


@aggregate
class ClcWork(RingWork):
    """One role's current tile under cluster launch control, and its cursor into the scheduler ring."""

    @gluon.jit
    def first(grid: TileGrid, ring: ProducerConsumerPipeline, throttle: ProducerConsumerPipeline, response,
              PACES: gl.constexpr, ROLE: gl.constexpr):
        """This CTA's own tile: its program id."""
        tile_id = gl.program_id(0)
        return ClcWork.started(tile_id, tile_id < grid.num_tiles, grid, ring, throttle, response, PACES, ROLE)

    @gluon.jit
    def started(tile_id, valid, grid: TileGrid, ring: ProducerConsumerPipeline, throttle: ProducerConsumerPipeline,
                response, PACES: gl.constexpr, ROLE: gl.constexpr):
        """A role starts `tile_id`; the pacing role lets the scheduler ask for the next tile."""
        return ClcWork(tile_id, valid, grid, ring, paced(throttle, valid, PACES), response, PACES, ROLE)

    @gluon.must_use_result("Rebind it: `work = work.next()`.")
    @gluon.jit
    def next(self):
        """The tile of the next cancelled CTA, from the ring (invalid once a try_cancel cancelled nothing)."""
        ring = self.ring
        with ring.consume() as slot:
            result = clc.load_result(_response(self.response, slot.index()))
        valid = result.is_canceled()
        tile_id = result.program_id(0)
        return ClcWork.started(tile_id, valid, self.grid, ring, self.throttle, self.response, self.PACES, self.ROLE)


@aggregate
class ClcTileScheduler:
    """One CTA per tile; running CTAs take over pending CTAs' tiles through `clc_scheduler_role`."""
    grid: TileGrid
    ring: ProducerConsumerPipeline
    throttle: ProducerConsumerPipeline
    response: gl.shared_memory_descriptor

    @gluon.jit
    def from_kernel(M, N, k_tiles, BM: gl.constexpr, BN: gl.constexpr, GROUP_M: gl.constexpr, pipelines, workspace,
                    partials=None):
        """The scheduler a GEMM kernel builds from its problem and its allocated pipelines (the `clc` ring); it needs
        no workspace."""
        clc_ring = pipelines.clc
        return ClcTileScheduler(TileGrid.create(M, N, BM, BN, GROUP_M), clc_ring.pipeline, clc_ring.throttle,
                                clc_ring.response)

    @builtin
    def work(self, paces=False, _semantic=None, _generator=None):
        """This role's first tile, its CTA's own. The one role created with `paces=True` (the load role) paces the
        scheduler; the work carries the role's name, so each role traces its own ring handling (as DynamicWork)."""
        args = [self.grid, self.ring, self.throttle, self.response, gl.constexpr(_unwrap_if_constexpr(paces)),
                gl.constexpr(_trace.current_role())]
        return _generator.call_JitFunction(ClcWork.first, args, {})


@gluon.jit
def clc_scheduler_role(sched: ClcTileScheduler):
    """The producer of the ring: once the load role started the current tile, one try_cancel into the next slot; it
    reads the response itself and stops after the first that cancelled nothing."""
    ring = sched.ring
    throttle = sched.throttle
    cancelled = gl.to_tensor(True)
    while cancelled:
        with throttle.consume() as taken:  # the load role started the tile taken last
            pass
        slot = ring.acquire_producer()  # every role has read the response this slot held
        slot.expect_bytes(RESPONSE_BYTES)
        clc.try_cancel(_response(sched.response, slot.index()), slot.mbar())
        slot.wait_filled()
        cancelled = clc.load_result(_response(sched.response, slot.index())).is_canceled()
        ring = slot.release()
    ring.drain()
