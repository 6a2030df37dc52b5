"""Epilogue inputs: source tiles for D = alpha * acc + beta * C, and the order of main-loop and epilogue loads.

`EpiLoadPipeline` (the seed's): an epilogue-load role TMA-loads each tile's C into a stage buffer; the role
that computes the epilogue waits for it without signalling, and the role that is last to touch the buffer
(the store role, when C lands in the output stage it will be stored from) frees it. `LoadOrderBarrier`:
the load role signals once a tile's main-loop loads were issued, and the epilogue-load role waits for that
before loading the tile's C, so C loads do not take bandwidth from A and B. All counts come from the
declared storages (`EpiLoadPipelineStorage`, `LoadOrderBarrierStorage`).
"""

from triton.experimental import gluon
from triton.experimental.gluon import aggregate
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language._core import builtin

from tilepipe.pipeline import _trace
from tilepipe.pipeline.pieces import PiecedTile, tile_boxes, tile_load
from tilepipe.pipeline.ring import GuardedTiles, ProducerConsumerPipeline


@aggregate
class EpiLoadPipeline(GuardedTiles):
    """Source (C) tiles loaded into `tiles` stages by an epilogue-load role (a PiecedTile where D's tile is pieced:
    C lands in the output stage it is stored from)."""
    pipeline: ProducerConsumerPipeline
    tiles: gl.shared_memory_descriptor | PiecedTile

    @gluon.must_use_result("Rebind it: `sources = sources.load(c_desc, coords)`.")
    @gluon.jit
    def load(self, c_desc, coords, into=None):
        """Epilogue-load role: wait for a free stage, TMA-load the box at `coords` into it (a pieced stage box by box;
        into the same stage of `into` when given: stream-K's partial sums, pipeline/partials.py)."""
        stage = self.pipeline.acquire_producer()
        tiles = self.tiles if into is None else into
        stage.expect_bytes(tile_boxes(tiles, c_desc) * c_desc.nbytes_per_cta)
        tile_load(c_desc, coords, stage.mbar(), tiles.index(stage.index()))
        return EpiLoadPipeline(stage.release(), self.tiles)

    @gluon.must_use_result("Rebind it: `sources = sources.skip()`.")
    @gluon.jit
    def skip(self):
        """Epilogue-load role: a use of the stage with nothing to load (an empty fill), keeping the ring in lockstep
        with the output ring it shares its stages with (stream-K, pipeline/partials.py)."""
        stage = self.pipeline.acquire_producer()
        stage.arrive()
        return EpiLoadPipeline(stage.release(), self.tiles)

    @gluon.jit
    def wait(self):
        """Epilogue role: wait until the current stage's C has landed; returns (tile, advanced pipeline).

        This role does not free the stage: the role that touches the buffer last does, with release().
        """
        self.pipeline.wait_producer()
        return self.tiles.index(self.pipeline.consumer_stage()), EpiLoadPipeline(self.pipeline.consumer_step(),
                                                                               self.tiles)

    @builtin
    def consume(self, _semantic=None):
        """`with sources.consume() as stage:` for an epilogue role that reads C (`sources.tiles.index(stage.index())`)
        and is also the last to touch it (sm_100a): waits until C landed; on exit frees the stage and `sources`
        advances."""
        return _trace.StageContext("consume", lambda: self.pipeline.acquire_consumer(_semantic=_semantic),
                                   lambda stage: EpiLoadPipeline(stage.release(_semantic=_semantic), self.tiles),
                                   _semantic)

    @gluon.must_use_result("Rebind it: `sources = sources.release()`.")
    @gluon.jit
    def release(self):
        """The role that touches the buffer last: the current stage may be refilled."""
        stage = self.pipeline.acquire_consumer()
        return EpiLoadPipeline(stage.release(), self.tiles)

    @gluon.jit
    def drain(self):
        """Epilogue-load role tail: wait until every stage it filled was released."""
        self.pipeline.drain()


@aggregate
class LoadOrderBarrier:
    """Main-loop loads of a tile were issued -> its epilogue loads may start."""
    pipeline: ProducerConsumerPipeline

    @gluon.must_use_result("Rebind it: `load_order = load_order.signal()`.")
    @gluon.jit
    def signal(self):
        """Load role, after issuing a tile's main-loop loads."""
        stage = self.pipeline.acquire_producer()
        stage.arrive()
        return LoadOrderBarrier(stage.release())

    @gluon.must_use_result("Rebind it: `load_order = load_order.wait()`.")
    @gluon.jit
    def wait(self):
        """Epilogue-load role, before loading a tile's C."""
        stage = self.pipeline.acquire_consumer()
        return LoadOrderBarrier(stage.release())

    @gluon.jit
    def drain(self):
        """Load role tail: wait until the epilogue-load role saw every signal."""
        self.pipeline.drain()
