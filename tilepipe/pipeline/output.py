"""Output tile pipelines: finished tiles handed from the MMA role to the role that writes them out.

sm_90a: the accumulators live in the MMA warpgroups' registers, so an output stage is a shared-memory tile: the
MMA role writes D into it and the store role TMA-stores it while the MMA role already runs the next tile's main
loop; the stage is free again once the store has read it.

    with outputs.produce() as out:      # MMA role: waits until the store role freed the stage
        out.tile().store(d)
        out.arrive()                    # fenced first: TMA reads what ordinary stores wrote
    with outputs.consume() as out:      # store role
        out.store(d_desc, coords)       # TMA store, waited for: the stage is free to release once TMA read it

sm_100a (the seed's form): an output stage is a TMEM accumulator (`TmemAccumulatorStorage`). The one-warp MMA role
issues a tile's tcgen05 MMAs into it and signals it with a commit, which arrives once those MMAs completed; the
epilogue role reads it (sub-tiled) and frees it right after its last TMEM load, before its own stores, so the MMA
role may start the tile after next while the epilogue still writes this one.

    with accs.produce() as acc:         # MMA role: waits until the epilogue drained the accumulator
        ... tcgen05 MMAs into acc.tile() ...
        acc.commit()                    # tcgen05.commit: the stage is full once every MMA issued so far completed
    with accs.consume_explicit() as acc:  # epilogue role
        part = acc.tile().slice(j * EPI_N, EPI_N).load(layout)   # for each sub-tile j; after the last one:
        acc.arrive()                    # the accumulator may be overwritten
"""

from triton.experimental import gluon
from triton.experimental.gluon import aggregate
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language._core import builtin
from triton.experimental.gluon.language.nvidia import blackwell  # as a module: see pipeline/storage.py
from triton.experimental.gluon.language.nvidia.hopper import fence_async_shared, tma

from tilepipe.pipeline import _trace
from tilepipe.pipeline.pieces import PiecedTile, tile_store
from tilepipe.pipeline.ring import ConsumerStage, GuardedTiles, ProducerConsumerPipeline, ProducerStage

Stages = gl.shared_memory_descriptor | PiecedTile | blackwell.tensor_memory_descriptor
"""What an output pipeline's stages are: shared-memory tiles, whole or in pieces (sm_90a), or TMEM accumulators
(sm_100a)."""


@gluon.constexpr_function
def halvings(parts):
    """How many times a tile is halved into `parts` column parts (a power of two)."""
    if parts < 1 or parts & (parts - 1):
        raise ValueError(f"a tile splits into a power-of-two count of column parts, got {parts}")
    return parts.bit_length() - 1


@gluon.jit
def column_part(d, j: gl.constexpr, PARTS: gl.constexpr):
    """Column part j of d's PARTS equal parts (d itself when PARTS is 1), each halving a reshape and a split. They move
    no data where the halved column bits are register bits: in a wgmma accumulator whose warps split its rows, every
    column bit from 3 up (parts of 8 columns or more)."""
    part = d
    for level in gl.static_range(halvings(PARTS)):
        half = gl.split(part.reshape([part.shape[0], 2, part.shape[1] // 2]).permute((0, 2, 1)))
        part = half[(j >> (halvings(PARTS) - 1 - level)) & 1]
    return part


@gluon.jit
def column_parts(d, PARTS: gl.constexpr):
    """All PARTS column parts of d, in order (column_part)."""
    parts = ()
    for j in gl.static_range(PARTS):
        parts = parts + (column_part(d, j, PARTS), )
    return parts


@gluon.jit
def column_join(parts):
    """The tile whose column parts (column_parts) are `parts`: adjacent parts joined pairwise until one is left."""
    level = parts
    for _ in gl.static_range(halvings(len(parts))):
        joined = ()
        for i in gl.static_range(len(level) // 2):
            pair = gl.join(level[2 * i], level[2 * i + 1]).permute((0, 2, 1))
            joined = joined + (pair.reshape([pair.shape[0], pair.shape[1] * pair.shape[2]]), )
        level = joined
    return level[0]


@aggregate
class OutputStage:
    """An output stage a role holds: its tile, its signal, and release() returning the advanced pipeline."""
    stage: ProducerStage | ConsumerStage
    tiles: Stages

    @gluon.jit
    def index(self):
        return self.stage.index()

    @builtin
    def tile(self, _semantic=None):
        """This stage's tile: a shared-memory tile, or a TMEM accumulator."""
        return self.tiles.index(self.stage.pipe.index, _semantic=_semantic)

    @builtin
    def arrive(self, _semantic=None):
        self.stage.arrive(_semantic=_semantic)

    @builtin
    def commit(self, _semantic=None):
        """MMA role (sm_100a): signal the stage with a tcgen05 commit, which arrives once every MMA this thread issued
        so far completed: the tile's accumulator is then final."""
        blackwell.tcgen05_commit(self.stage.mbar(_semantic=_semantic), _semantic=_semantic)

    @gluon.jit
    def store(self, desc, coords):
        """Store role: TMA-store the tile at `coords` of `desc` (a pieced tile in the descriptor's boxes) and wait until
        TMA has read it, so the stage may be released (and refilled) as soon as this returns."""
        tile_store(desc, coords, self.tile())
        tma.store_wait(0)

    @gluon.must_use_result("Rebind the pipeline: `outputs = out.release()`.")
    @builtin
    def release(self, _semantic=None):
        return OutputTilePipeline(self.stage.release(_semantic=_semantic), self.tiles)

    @gluon.must_use_result("Rebind the pipeline: `outputs = out.release_without_signal()`.")
    @builtin
    def release_without_signal(self, _semantic=None):
        """Advance after the stage was signalled with arrive() (consume_explicit)."""
        return OutputTilePipeline(self.stage.release_without_signal(_semantic=_semantic), self.tiles)


@aggregate
class OutputTilePipeline(GuardedTiles):
    """Output stages (`OutputTileStorage` tiles, or `TmemAccumulatorStorage` accumulators) and the pipeline from the
    MMA role to the role that writes them out."""
    pipeline: ProducerConsumerPipeline
    tiles: Stages

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

    @builtin
    def consume_explicit(self, _semantic=None):
        """`with outputs.consume_explicit() as out:`: the body frees the stage with `out.arrive()` (the epilogue,
        right after its last TMEM load); on exit `outputs` advances."""
        return _trace.StageContext(
            "consume_explicit", lambda: OutputStage(self.pipeline.acquire_consumer(_semantic=_semantic), self.tiles),
            lambda out: out.release_without_signal(_semantic=_semantic), _semantic)

    @gluon.jit
    def drain(self):
        """MMA role tail: wait until the store role released every stage."""
        self.pipeline.drain()


@aggregate
class SubtileStores:
    """Shared-memory buffers an epilogue writes D sub-tiles into and TMA-stores from, used in turn: a buffer is
    rewritten only once the store reading it retired, so `len(buffers) - 1` stores stay in flight."""
    buffers: gl.shared_memory_descriptor

    @gluon.jit
    def store(self, desc, coords, value, j: gl.constexpr):
        """Write sub-tile `value` into buffer j (mod the count) and TMA-store it at `coords` of `desc`."""
        COUNT: gl.constexpr = self.buffers.shape[0]
        tma.store_wait(COUNT - 1)  # the store that last read buffer j % COUNT has retired
        buffer = self.buffers.index(j % COUNT)
        buffer.store(value.to(desc.dtype))
        fence_async_shared()  # TMA (async proxy) reads what the threads just wrote
        tma.async_store(desc, coords, buffer)

    @gluon.jit
    def drain(self):
        """Epilogue tail: every store has read its buffer (and written global memory) before the role ends."""
        tma.store_wait(0)
