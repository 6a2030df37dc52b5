"""What the ring-fed schedules share (dynamic, and sm_100a's cluster launch control): a scheduler role hands tile ids
to every other role through the ClcPipelineStorage ring, and the load role paces it through the throttle pair."""

from triton.experimental import gluon
from triton.experimental.gluon import aggregate
from triton.experimental.gluon import language as gl

from tilepipe.pipeline.ring import ProducerConsumerPipeline
from tilepipe.schedulers.grid import TileGrid, TileWork


@aggregate
class RingWork(TileWork):
    """One role's current tile under a ring-fed schedule, and its cursor into the scheduler ring and the throttle.
    PACES: this role paces the scheduler; ROLE: its name, so each role traces its own ring handling
    (_trace.current_role). A unit is a whole tile, which its program finishes."""
    tile_id: gl.tensor
    valid: gl.tensor
    grid: TileGrid
    ring: ProducerConsumerPipeline
    throttle: ProducerConsumerPipeline
    response: gl.shared_memory_descriptor
    PACES: gl.constexpr
    ROLE: gl.constexpr
    finishes: gl.constexpr = gl.constexpr(True)


@gluon.jit
def paced(throttle: ProducerConsumerPipeline, valid, PACES: gl.constexpr):
    """The pacing role (the load role) starting a valid tile lets the scheduler fetch the next one; returns the
    throttle, advanced where it signalled."""
    if PACES:
        if valid:
            with throttle.produce() as taken:
                taken.arrive()
    return throttle
