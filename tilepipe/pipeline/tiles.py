"""Input tile pipelines: operand tiles in shared memory, handed from a TMA load role to an MMA role.

The seed's `InputTilePipeline[Payload, stages, k_group_size]`. A payload is the tile storage's device
aggregate (`StandardTiles`: A and B arrays; block-scaled and blockwise-FP8 payloads add scale arrays);
`k_group_size` tiles share one barrier pair, so one acquire covers a group of K steps. Roles take a view:

    producer = inputs.producer()
    with producer.produce() as tiles:              # waits until the MMA role freed the group's slots
        tiles.expect_bytes(k_group_size * BYTES)
        for j in gl.static_range(k_group_size):
            a, b = tiles.get_tile(j)
            tma.async_load(a_desc, [m, k], tiles.mbar(), a)
            ...
    producer.drain()

    consumer = inputs.consumer().with_release_lag(1)   # one wgmma in flight
    tiles = consumer.acquire()
    ...
    consumer = tiles.release()

    consumer = tiles.tcgen05_mma(a, b, acc, use_acc)   # sm_100a: the MMA's commit releases the slot
    consumer = tiles.tcgen05_mma_scaled(acc, use_acc)  # sm_100a, block-scaled payload: scales copied to TMEM first

Cursor and protocol live in the wrapped `ProducerConsumerPipeline`; this module only adds the payload.
"""

import math

from triton.experimental import gluon
from triton.experimental.gluon import aggregate
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language._core import builtin
from triton.experimental.gluon.language.nvidia import blackwell  # as a module: see pipeline/storage.py
from triton.experimental.gluon.language.nvidia.hopper import tma, warpgroup_mma, warpgroup_mma_wait
from triton.language.core import _unwrap_if_constexpr, base_value

from tilepipe.pipeline import _trace
from tilepipe.pipeline.cluster import ctas_splitting
from tilepipe.pipeline.multicast import is_split_load, split_multicast_load
from tilepipe.pipeline.pieces import PiecedTile, tile_load
from tilepipe.pipeline.ring import ConsumerStage, ProducerConsumerPipeline, ProducerStage
from tilepipe.pipeline.storage import mma_scale_shape

Payload = base_value
"""The seed's open `TilePayload` trait: any aggregate of stage arrays, with `a_tiles` and `b_tiles` for the A/B
accessors (`tile(field)` reaches any other array). The storages give `StandardTiles`, `BlockScaledTiles` and
`BlockwiseFP8Tiles`; a kernel may wrap them in its own aggregate."""

MMA_FORMATS = {"uint8": "e2m1", "fp8e4nv": "e4m3", "fp8e5": "e5m2"}
"""tcgen05_mma_scaled's operand format by the stage tile's dtype (FP4 travels packed two to a byte, as uint8)."""


def _shared_by_cluster(tile) -> bool:
    """Whether every CTA of the cluster holds all of `tile` (a replicated cga layout), so one multicast fills it."""
    bases = tile.type.layout.cga_layout
    return bool(bases) and ctas_splitting(bases) == 1


def _stage_bytes(payload, k_group_size: int) -> int:
    """Bytes of one k-group of the payload's shared-memory arrays in each CTA (TMEM buffers are not TMA's)."""
    total = 0
    for name, _ in payload.type.fields:
        field = getattr(payload, name)
        for array in field.pieces if isinstance(field, PiecedTile) else (field, ):
            if isinstance(array, gl.shared_memory_descriptor):
                tile = math.prod(array.type.shape[1:]) * array.dtype.primitive_bitwidth // 8
                total += tile // ctas_splitting(array.type.layout.cga_layout)
    return total * k_group_size


def _payload_tile(payload, field: str, stage_index, j, k_group_size: int, semantic):
    """Tile j of the current k-group in array `field` of the payload: flat slot index * k_group_size + j."""
    array = getattr(payload, field)
    if k_group_size == 1:
        return array.index(stage_index, _semantic=semantic)
    flat = stage_index.__mul__(k_group_size, _semantic=semantic).__add__(j, _semantic=semantic)
    return array.index(flat, _semantic=semantic)


@aggregate
class _TileStage:
    """What producer and consumer tile stages share: the stage handle, the payload, and tile access."""

    @gluon.jit
    def index(self):
        return self.stage.index()

    @builtin
    def a_tile(self, j=0, _semantic=None):
        return self.tile("a_tiles", j, _semantic=_semantic)

    @builtin
    def b_tile(self, j=0, _semantic=None):
        return self.tile("b_tiles", j, _semantic=_semantic)

    @builtin
    def tile(self, field, j=0, _semantic=None):
        """Tile j of this k-group in any payload array, e.g. tiles.tile("sfa_tiles")."""
        return _payload_tile(self.payload, _unwrap_if_constexpr(field), self.stage.pipe.index,
                             j, self.k_group_size.value, _semantic)

    @builtin
    def get_tile(self, j=0, _semantic=None):
        """(A, B) tiles of step j of this k-group; of a block-scaled payload, (A, B, SFA, SFB)."""
        fields = ("a_tiles", "b_tiles") + (("sfa_tiles", "sfb_tiles") if _block_scaled(self.payload) else ())
        return gl.tuple([self.tile(field, j, _semantic=_semantic) for field in fields])

    @builtin
    def mbar(self, _semantic=None):
        return self.stage.mbar(_semantic=_semantic)


@aggregate
class InputProducerStage(_TileStage):
    """A k-group of operand slots the load role holds: arm the barrier, issue the TMA loads, release."""
    stage: ProducerStage
    payload: Payload
    k_group_size: gl.constexpr

    @builtin
    def expect_bytes(self, nbytes, _semantic=None):
        self.stage.expect_bytes(nbytes, _semantic=_semantic)

    @builtin
    def expect_loads(self, *descs, boxes=None, _semantic=None):
        """Arm the stage for one TMA load from each descriptor (`boxes[i]` of descriptor i where given: a pieced
        tile loads box by box), by the bytes each lands in this CTA. They must be the bytes the k-group's
        shared-memory arrays hold per CTA, as the storage declares them (a shared tile whole, a split one its part),
        else ProtocolError: a load left out, or a descriptor whose block or cluster bases are not the storage's,
        would leave the barrier short or over its count on the GPU (a hang or an early wake)."""
        counts = [1] * len(descs) if boxes is None else [_unwrap_if_constexpr(n) for n in boxes]
        armed = sum(_unwrap_if_constexpr(desc.nbytes_per_cta) * n for desc, n in zip(descs, counts))
        held = _stage_bytes(self.payload, _unwrap_if_constexpr(self.k_group_size))
        if armed != held:
            raise _trace.ProtocolError(
                f"pipeline '{_unwrap_if_constexpr(self.stage.pipe.name)}': expect_loads arms {armed} bytes per CTA "
                f"but a stage of its payload holds {held}: name every TMA load of the stage, with descriptors in the "
                "storage's blocks and cluster bases")
        self.stage.expect_bytes(armed, _semantic=_semantic)

    @builtin
    def load(self, field, desc, coords, j=0, _semantic=None):
        """TMA-load tile j of payload array `field` from `desc` at `coords`, signalling this stage (a pieced tile in
        the descriptor's boxes). A tile every CTA of the cluster holds in full (a shared operand) is multicast to all
        of them: by the first CTA whole, or, where `desc`'s box is its half, by each CTA its half (a split ring's:
        pipeline/multicast.py)."""
        tile = self.tile(field, j, _semantic=_semantic)
        multicast = not isinstance(tile, PiecedTile) and _shared_by_cluster(tile)
        pipe = self.stage.pipe
        if multicast and is_split_load(tile.type.shape, desc):  # each CTA its half, to both (pipeline/multicast.py)
            if not _unwrap_if_constexpr(pipe.split):
                raise _trace.ProtocolError(f"pipeline '{_unwrap_if_constexpr(pipe.name)}': a split multicast load "
                                           "needs a split ring (InputPipelineStorage(split=True)): both CTAs' "
                                           "producers write both CTAs' slots")
            split_multicast_load(desc, coords, self.mbar(_semantic=_semantic), tile, _semantic=_semantic)
            return
        if multicast and not (_unwrap_if_constexpr(pipe.multicast) or _unwrap_if_constexpr(pipe.split)):
            raise _trace.ProtocolError(f"pipeline '{_unwrap_if_constexpr(pipe.name)}': a multicast load needs a ring "
                                       "whose releases count both CTAs (multicast or split)")
        tile_load(desc, coords, self.mbar(_semantic=_semantic), tile, multicast=multicast, _semantic=_semantic)

    @builtin
    def load_a(self, desc, coords, j=0, _semantic=None):
        self.load("a_tiles", desc, coords, j, _semantic=_semantic)

    @builtin
    def load_b(self, desc, coords, j=0, _semantic=None):
        self.load("b_tiles", desc, coords, j, _semantic=_semantic)

    @gluon.jit
    def load_scales(self, sfa_desc, sfb_desc, pid_m, pid_n, k, j: gl.constexpr = 0):
        """TMA-load the block scales of k-step k of tile (pid_m, pid_n) into SFA and SFB tile j: one box each of the
        packed-block layout (storage.packed_scale_box), whose coordinates count blocks of 128 rows and 4 scales."""
        self.load("sfa_tiles", sfa_desc, [0, pid_m * sfa_desc.block_type.shape[1], k * sfa_desc.block_type.shape[2],
                                          0, 0], j)
        self.load("sfb_tiles", sfb_desc, [0, pid_n * sfb_desc.block_type.shape[1], k * sfb_desc.block_type.shape[2],
                                          0, 0], j)

    @gluon.must_use_result("Rebind the producer: `producer = tiles.release()`.")
    @builtin
    def release(self, _semantic=None):
        return TileProducer(self.stage.release(_semantic=_semantic), self.payload, self.k_group_size)


@aggregate
class InputConsumerStage(_TileStage):
    """A k-group of operand slots the MMA role reads; release() frees it (or the lagged one)."""
    stage: ConsumerStage
    payload: Payload
    k_group_size: gl.constexpr

    @gluon.must_use_result("Rebind the consumer: `consumer = tiles.release()`.")
    @builtin
    def release(self, _semantic=None):
        return TileConsumer(self.stage.release(_semantic=_semantic), self.payload, self.k_group_size)

    @builtin
    def wgmma(self, a, b, acc, _semantic=None):
        """acc += a @ b as async wgmmas on this stage's tiles, one per pair of A and B pieces where a tile is pieced
        (acc then a tuple of the pieces' accumulators, pipeline/pieces.py); then wait until only the consumer's
        release lag of k-steps is still in flight and release: the slot freed is the one whose wgmmas just retired,
        so in-flight depth and release lag are one number. Returns (acc, the advanced consumer)."""
        a_pieces = list(a.pieces) if isinstance(a, PiecedTile) else [a]
        b_pieces = list(b.pieces) if isinstance(b, PiecedTile) else [b]
        accs = list(acc) if isinstance(acc, gl.tuple) else [acc]
        if len(accs) != len(a_pieces) * len(b_pieces):
            raise ValueError(f"{len(accs)} accumulators for {len(a_pieces)} x {len(b_pieces)} operand pieces")
        accs = [warpgroup_mma(a_pieces[i // len(b_pieces)], b_pieces[i % len(b_pieces)], part, is_async=True,
                              _semantic=_semantic) for i, part in enumerate(accs)]
        lag = _unwrap_if_constexpr(self.stage.pipe.release_lag)
        accs = warpgroup_mma_wait(num_outstanding=lag * len(accs), deps=accs, _semantic=_semantic)
        acc = gl.tuple(list(accs)) if isinstance(acc, gl.tuple) else accs
        return gl.tuple([acc, self.release(_semantic=_semantic)])

    @gluon.must_use_result("Rebind the consumer: `consumer = tiles.tcgen05_mma(a, b, acc, use_acc)`.")
    @builtin
    def tcgen05_mma(self, a, b, acc, use_acc=True, _semantic=None):
        """sm_100a: acc (TMEM) += a @ b as an async tcgen05 MMA on this stage's tiles, released by the MMA itself: its
        commit arrives on the stage's empty barrier (the seed's `mbar()` path) once it has read the tiles, so the
        load role refills the slot while later MMAs still run. A two-CTA accumulator (cta_group::2) needs a ring
        declared for it (pair_mma="consumer"), whose empty count is the commits Gluon says land per phase. Returns the
        advanced consumer."""
        _check_pair_mma(self.stage.pipe, a, b, acc)
        blackwell.tcgen05_mma(a, b, acc, use_acc=use_acc, mbarriers=[self.stage.mbar(_semantic=_semantic)],
                              _semantic=_semantic)
        return TileConsumer(self.stage.release_without_signal(_semantic=_semantic), self.payload, self.k_group_size)

    @gluon.must_use_result("Rebind the consumer: `consumer = tiles.tcgen05_mma_scaled(acc, use_acc)`.")
    @builtin
    def tcgen05_mma_scaled(self, acc, use_acc=True, _semantic=None):
        """sm_100a, block-scaled payload: acc (TMEM) += (A * SFA) @ (B * SFB)^T on this stage's tiles (B K-major). The
        stage's SFA and SFB are copied into the payload's TMEM scale buffers (tcgen05_copy, each box viewed as the
        rows x scales matrix the MMA reads), then the MMA is issued, released by its own commit as tcgen05_mma is:
        the copies run before it in issue order, and the commit covers them too. Returns the advanced consumer."""
        a, b, sfa, sfb = self.get_tile(_semantic=_semantic)
        payload = self.payload
        blackwell.tcgen05_copy(_mma_scales(sfa, _semantic), payload.sfa_tmem, _semantic=_semantic)
        blackwell.tcgen05_copy(_mma_scales(sfb, _semantic), payload.sfb_tmem, _semantic=_semantic)
        a_format, b_format = (gl.constexpr(MMA_FORMATS[str(tile.dtype)]) for tile in (a, b))
        blackwell.tcgen05_mma_scaled(a, b.permute((1, 0), _semantic=_semantic), acc, payload.sfa_tmem,
                                     payload.sfb_tmem, a_format, b_format, use_acc=use_acc,
                                     mbarriers=[self.stage.mbar(_semantic=_semantic)], _semantic=_semantic)
        return TileConsumer(self.stage.release_without_signal(_semantic=_semantic), self.payload, self.k_group_size)


def _check_pair_mma(pipe, a, b, acc) -> None:
    """ProtocolError unless the input ring is a two-CTA MMA ring exactly when `acc` is a two-CTA accumulator, with the
    empty count tcgen05_mma_barrier_count gives for these operands (1 for a 2x1 pair: the lead CTA's commit)."""
    two_ctas, name = bool(acc.type.layout.two_ctas), _unwrap_if_constexpr(pipe.name)
    if two_ctas != (_unwrap_if_constexpr(pipe.pair_side) == "full"):
        raise _trace.ProtocolError(f"pipeline '{name}': a {'two' if two_ctas else 'one'}-CTA MMA needs an input ring "
                                   f"declared with pair_mma={'consumer' if two_ctas else ''!r}")
    commits = blackwell.tcgen05_mma_barrier_count.fn([a, b], True, True) if two_ctas else 1
    if commits != _unwrap_if_constexpr(pipe.consumer_arrivals):
        raise _trace.ProtocolError(f"pipeline '{name}': {commits} MMA commit(s) land on each empty barrier per phase, "
                                   f"the ring declares {_unwrap_if_constexpr(pipe.consumer_arrivals)}")


def _block_scaled(payload) -> bool:
    return any(name == "sfa_tiles" for name, _ in payload.type.fields)


def _mma_scales(box, semantic):
    """A packed scale box [1, R, RK, 2, 256] viewed as the (R * 128) x (RK * 4) matrix tcgen05 reads: each 512-byte
    block holds row 32 * i + r, scale c at byte 16 * r + 4 * i + c."""
    rows, scales = mma_scale_shape(box.type.shape)
    blocks = box.reshape((box.type.shape[1], box.type.shape[2], 32, 4, 4), _semantic=semantic)
    return blocks.permute((0, 3, 2, 1, 4), _semantic=semantic).reshape((rows, scales), _semantic=semantic)


def _role_context(role, kind: str, semantic):
    """`with role.produce()/consume() as tiles:` acquires on enter; on exit releases and advances `role`."""
    return _trace.StageContext(kind, lambda: role.acquire(_semantic=semantic),
                               lambda tiles: tiles.release(_semantic=semantic), semantic)


@aggregate
class TileProducer:
    """The load role's view of an input tile pipeline."""
    pipeline: ProducerConsumerPipeline
    payload: Payload
    k_group_size: gl.constexpr

    @gluon.jit
    def try_acquire(self):
        """Non-blocking: whether the next k-group's slots are free; pass it to acquire(ready)."""
        return self.pipeline.try_acquire_producer()

    @builtin
    def acquire(self, ready=None, _semantic=None):
        """Wait until the consumers freed the next k-group's slots (skipped where `ready` is set)."""
        stage = self.pipeline.acquire_producer(ready, _semantic=_semantic)
        return InputProducerStage(stage, self.payload, self.k_group_size)

    @builtin
    def produce(self, _semantic=None):
        """`with producer.produce() as tiles:`; on exit the producer advances."""
        return _role_context(self, "produce", _semantic)

    @gluon.jit
    def drain(self):
        """No exit while the MMA role may still release a slot this role filled."""
        self.pipeline.drain()


@aggregate
class TileConsumer:
    """The MMA role's view of an input tile pipeline."""
    pipeline: ProducerConsumerPipeline
    payload: Payload
    k_group_size: gl.constexpr

    @gluon.jit
    def try_acquire(self):
        """Non-blocking: whether the next k-group has landed; pass it to acquire(ready)."""
        return self.pipeline.try_acquire_consumer()

    @builtin
    def acquire(self, ready=None, _semantic=None):
        """Wait until the load role filled the next k-group (skipped where `ready` is set)."""
        stage = self.pipeline.acquire_consumer(ready, _semantic=_semantic)
        return InputConsumerStage(stage, self.payload, self.k_group_size)

    @builtin
    def consume(self, _semantic=None):
        """`with consumer.consume() as tiles:`; on exit the slots are released and the consumer advances."""
        return _role_context(self, "consume", _semantic)

    @builtin
    def with_release_lag(self, lag, _semantic=None):
        """Free each k-group `lag` acquisitions late, once the wgmma reading it retired (see pipeline.py)."""
        return TileConsumer(self.pipeline.with_release_lag(lag, _semantic=_semantic), self.payload,
                            self.k_group_size)

    @builtin
    def taking_turns(self, turns, _semantic=None):
        """This MMA role is one of `turns` taking turns at the ring, a tile each (pipeline/turns.py)."""
        return TileConsumer(self.pipeline.taking_turns(turns, _semantic=_semantic), self.payload, self.k_group_size)

    @gluon.must_use_result("Rebind the consumer: `consumer = consumer.pass_over(k_groups)`.")
    @builtin
    def pass_over(self, k_groups, _semantic=None):
        """Skip `k_groups` k-groups: another role's tile, taken in its turn (after retire: no release pending)."""
        return TileConsumer(self.pipeline.pass_over(k_groups, _semantic=_semantic), self.payload, self.k_group_size)

    @gluon.must_use_result("Rebind the consumer: `consumer = consumer.flush_releases()`.")
    @builtin
    def flush_releases(self, _semantic=None):
        return TileConsumer(self.pipeline.flush_releases(_semantic=_semantic), self.payload, self.k_group_size)

    @builtin
    def retire(self, acc, _semantic=None):
        """End of a tile's wgmmas (stage.wgmma): wait for the last ones and free the slots they read. Returns (acc,
        the consumer)."""
        if isinstance(acc, gl.tuple):
            acc = gl.tuple(list(warpgroup_mma_wait(num_outstanding=0, deps=list(acc), _semantic=_semantic)))
        else:
            acc = warpgroup_mma_wait(num_outstanding=0, deps=(acc, ), _semantic=_semantic)
        return gl.tuple([acc, self.flush_releases(_semantic=_semantic)])


@aggregate
class InputTilePipeline:
    """Operand tiles (the payload) plus the pipeline that guards them, one barrier pair per k-group."""
    pipeline: ProducerConsumerPipeline
    payload: Payload
    k_group_size: gl.constexpr

    @gluon.jit
    def producer(self):
        return TileProducer(self.pipeline, self.payload, self.k_group_size)

    @gluon.jit
    def consumer(self):
        return TileConsumer(self.pipeline, self.payload, self.k_group_size)
