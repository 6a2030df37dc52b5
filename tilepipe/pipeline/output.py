"""Output tile pipelines: finished tiles handed from the MMA role to the role that stores them.

On sm_90a the accumulators live in the MMA warpgroups' registers, so an output stage is a shared-memory
tile: the MMA role writes D into it and the store role TMA-stores it while the MMA role already runs the
next tile's main loop; the stage is free again once the store has read it. (The sm_100a form hands TMEM
accumulator stages to an epilogue role; it comes with the Blackwell kernels.)

    with outputs.produce() as out:      # MMA role: waits until the store role freed the stage
        out.tile().store(d)
        out.arrive()                    # fenced first: TMA reads what ordinary stores wrote
    with outputs.consume() as out:      # store role
        out.store(d_desc, coords)       # TMA store, waited for: the stage is free to release once TMA read it
"""

from triton.experimental import gluon
from triton.experimental.gluon import aggregate
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language._core import builtin
from triton.experimental.gluon.language.nvidia.hopper import tma

from tilepipe.pipeline import _trace
from tilepipe.pipeline.ring import ConsumerStage, GuardedTiles, ProducerConsumerPipeline, ProducerStage


@aggregate
class OutputStage:
    """An output stage a role holds: its tile, its signal, and release() returning the advanced pipeline."""
    stage: ProducerStage | ConsumerStage
    tiles: gl.shared_memory_descriptor

    @gluon.jit
    def index(self):
        return self.stage.index()

    @builtin
    def tile(self, _semantic=None):
        return self.tiles.index(self.stage.pipe.index, _semantic=_semantic)

    @builtin
    def arrive(self, _semantic=None):
        self.stage.arrive(_semantic=_semantic)

    @gluon.jit
    def store(self, desc, coords):
        """Store role: TMA-store the tile at `coords` of `desc` and wait until TMA has read it, so the stage may be
        released (and refilled) as soon as this returns."""
        tma.async_store(desc, coords, self.tile())
        tma.store_wait(0)

    @gluon.must_use_result("Rebind the pipeline: `outputs = out.release()`.")
    @builtin
    def release(self, _semantic=None):
        return OutputTilePipeline(self.stage.release(_semantic=_semantic), self.tiles)


@aggregate
class OutputTilePipeline(GuardedTiles):
    """Shared-memory output stages (the `OutputTileStorage` tiles) and the pipeline MMA -> store that guards them."""
    pipeline: ProducerConsumerPipeline
    tiles: gl.shared_memory_descriptor

    @builtin
    def produce(self, _semantic=None):
        """`with outputs.produce() as out:` for the MMA role; on exit `outputs` advances."""
        return _trace.StageContext(
            "produce", lambda: OutputStage(self.pipeline.acquire_producer(_semantic=_semantic), self.tiles),
            lambda out: out.release(_semantic=_semantic), _semantic)

    @builtin
    def consume(self, _semantic=None):
        """`with outputs.consume() as out:` for the store role; on exit the stage is freed and `outputs` advances."""
        return _trace.StageContext(
            "consume", lambda: OutputStage(self.pipeline.acquire_consumer(_semantic=_semantic), self.tiles),
            lambda out: out.release(_semantic=_semantic), _semantic)

    @gluon.jit
    def drain(self):
        """MMA role tail: wait until the store role released every stage."""
        self.pipeline.drain()
