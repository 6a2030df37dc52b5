"""Shared-memory storage: one declaration gives the tile arrays, the barriers, their bytes and the budget.

The seed's `pipeline_storage` (Mojo, SM100 structured kernels). A storage is a frozen dataclass that
says what a kernel keeps in shared memory (and, on sm_100a, in tensor memory): tile storages (A/B stages,
scale tiles, C stages, source tiles), pipeline storages (barrier pairs whose count follows from the stage
count) and TMEM accumulators (`TmemAccumulatorStorage`). The same object serves the host and the kernel:

* on the host, `SmemPlan` lays the parts out (offsets, with the alignment swizzled TMA tiles need),
  counts TMEM columns beside the bytes, checks both against the target's limits with an error that lists
  every part, finds the largest stage count that fits, and prints a table with the barrier map;
* in a kernel, `storage.allocate()` (a `@builtin`, reached through a constexpr plan) allocates the
  same parts and returns tile arrays or initialised `ProducerConsumerPipeline`s: sizes are written in
  one place only.

A kernel builds its plan from its constexpr parameters with a `gluon.constexpr_function` that the
host calls too, so host and device cannot disagree. Triton chooses the final offsets itself; with
every part live at once it packs them as tightly as the plan does, which the CPU tests check by
comparing `SmemPlan.total_bytes` with the compiled kernel's shared-memory size.
"""

import functools
import inspect
from collections.abc import Callable
from dataclasses import dataclass, field, fields, replace
from typing import ClassVar

from triton.experimental.gluon import aggregate
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language._core import builtin
# Gluon's Blackwell API through its module, never names bound from it: tilepipe's namespaces outlive exit (held via
# triton's JIT registry), and a bound name keeps the package's uncleared one, so GluonOpBuilder leaks (test_quiet.py).
from triton.experimental.gluon.language.nvidia import blackwell
from triton.experimental.gluon.language.nvidia.hopper import mbarrier
from triton.language import core as tl

from tilepipe._text import format_table
from tilepipe.pipeline.cluster import Bases, cga_list, ctas_splitting
from tilepipe.pipeline.pieces import PiecedTile, TilePieces, side_pieces
from tilepipe.pipeline.ring import ProducerConsumerPipeline, allocate_barriers

SMEM_LIMIT_BYTES = {"sm_90a": 227 * 1024, "sm_100a": 227 * 1024}
"""Largest dynamic shared memory one block may use, per target (the opt-in limit of H100/H200 and B200)."""
TMEM_LIMIT_COLUMNS = {"sm_90a": 0, "sm_100a": 512}
"""Tensor-memory columns (128 lanes x 32 bits each) one block may allocate, per target: Hopper has none."""
TMEM_MIN_COLUMNS = 32  # Triton allocates TMEM in powers of two of at least 32 columns

DTYPES = {"fp16": gl.float16, "bf16": gl.bfloat16, "fp32": gl.float32, "fp8e4nv": gl.float8e4nv,
          "fp8e5": gl.float8e5, "int8": gl.int8, "uint8": gl.uint8, "int32": gl.int32, "int64": gl.int64}
_SWIZZLE_ALIGNMENT = {0: 128, 32: 256, 64: 512, 128: 1024}  # bytes: TMA needs 128; a swizzle atom repeats at 8 rows
_DEFAULT_ALIGNMENT = 16  # what Triton's allocator gives a buffer with no alignment of its own (barriers, words)


class SmemBudgetError(ValueError):
    """A storage plan does not fit the shared-memory or the TMEM limit; the message lists every part."""


def dtype_of(name) -> gl.dtype:
    """The Gluon dtype for a name ("fp16", "bf16", ...) or a Gluon dtype."""
    if isinstance(name, gl.dtype) and name in DTYPES.values():
        return name
    if name not in DTYPES:
        raise TypeError(f"unsupported shared-memory dtype {name!r}; expected one of {sorted(DTYPES)}")
    return DTYPES[name]


@dataclass(frozen=True)
class Part:
    """One shared-memory allocation: `stages` copies of a `tile` of `dtype` (barriers: int64 [count, 1]).

    In a cluster kernel a tile is the cluster's, and `cga` (tilepipe.pipeline.cluster) says how its CTAs split or
    share it; sizes are per CTA. Barriers are per CTA ("barrier": one in every CTA) or per CTA pair ("pair_barrier":
    one in the pair's first CTA, which both CTAs arrive on).
    """
    name: str
    dtype: str
    tile: tuple[int, ...]
    stages: int
    kind: str = "tile"  # "tile" (NVMMA layout, TMA/MMA-ready), "scales" (unswizzled, for tcgen05_copy),
    #                     "barrier"/"pair_barrier" (mbarriers), "words" (int32)
    cga: Bases = ()
    box: tuple[int, ...] | None = None  # a piece of a pieced tile: the TMA box whose swizzle every piece shares

    def __post_init__(self) -> None:
        dtype = dtype_of(self.dtype)
        object.__setattr__(self, "dtype", next(name for name, value in DTYPES.items() if value == dtype))
        if self.kind not in ("tile", "scales", "barrier", "pair_barrier", "words"):
            raise ValueError(f"{self.name}: unknown part kind {self.kind!r}")
        if not (isinstance(self.stages, int) and self.stages >= 1):
            raise ValueError(f"{self.name}: stages must be a positive int, got {self.stages!r}")
        if not self.tile or not all(isinstance(d, int) and d >= 1 for d in self.tile):
            raise ValueError(f"{self.name}: tile dimensions must be positive ints, got {self.tile!r}")

    @property
    def shape(self) -> list[int]:
        return [self.stages, *self.tile]

    @property
    def nbytes(self) -> int:
        count = self.stages
        for dim in self.tile:
            count *= dim
        return count * dtype_of(self.dtype).primitive_bitwidth // 8 // ctas_splitting(self.cga)

    @property
    def layout(self):
        if self.kind in ("barrier", "pair_barrier"):
            return mbarrier.MBarrierLayout()
        if self.kind == "words":
            return gl.SwizzledSharedLayout(1, 1, 1, [1, 0])
        if self.kind == "scales":  # tcgen05_copy finds no copy layout for a swizzled scale tile
            return gl.NVMMASharedLayout(swizzle_byte_width=0, element_bitwidth=dtype_of(self.dtype).primitive_bitwidth,
                                        rank=len(self.tile))
        return gl.NVMMASharedLayout.get_default_for(list(self.box or self.tile), dtype_of(self.dtype),
                                                    cga_layout=cga_list(self.cga) if self.cga else None)

    @property
    def alignment(self) -> int:
        if self.kind not in ("tile", "scales"):
            return _DEFAULT_ALIGNMENT
        return _SWIZZLE_ALIGNMENT[self.layout.swizzle_byte_width]

    def allocate(self, semantic):
        """Allocate this part in the kernel being traced (barriers: [count, CTAs that hold one], one per CTA or
        per pair of the launch's cluster)."""
        if self.kind in ("barrier", "pair_barrier"):
            return allocate_barriers(self.stages, self.kind == "pair_barrier", self.name, semantic)
        return gl.allocate_shared_memory(dtype_of(self.dtype), self.shape, self.layout, _semantic=semantic)


def tile_parts(name: str, dtype: str, tile: tuple[int, ...], stages: int, cga: Bases = ()) -> list[Part]:
    """The parts of one stage array: itself, or (a 2-D tile with a side held as pieces) one per piece, `name` and the
    piece's number, each swizzled as the TMA box that moves it (pipeline/pieces.py)."""
    if len(tile) != 2 or not TilePieces(*tile).pieced:
        return [Part(name, dtype, tile, stages, cga=cga)]
    if cga:
        raise ValueError(f"{name}: a pieced {tile[0]}x{tile[1]} tile is built without clusters")
    pieces = TilePieces(*tile)
    return [Part(f"{name}{k}", dtype, shape, stages, box=pieces.box) for k, (_, shape) in enumerate(pieces.shapes)]


def allocate_tile(parts: list[Part], tile: tuple[int, ...], semantic):
    """Allocate tile_parts' `parts`: the array, or a PiecedTile of the pieces' arrays."""
    arrays = [part.allocate(semantic) for part in parts]
    if len(arrays) == 1:
        return arrays[0]
    return PiecedTile(gl.tuple(arrays), gl.constexpr(side_pieces(tile[0])), gl.constexpr(side_pieces(tile[1])))


@dataclass(frozen=True)
class BarrierUse:
    """One line of a plan's barrier map (`kind` "pair_barrier": one barrier per CTA pair, in its lead CTA;
    "split_barrier": one per CTA, which the roles of both CTAs signal: a split multicast ring's)."""
    name: str
    count: int
    arrivals: int
    producer: str
    consumer: str
    kind: str = "barrier"


class Storage:
    """Base of every storage declaration: its parts and its barriers, for the plan."""

    def parts(self) -> list[Part]:
        raise NotImplementedError

    def barriers(self) -> list[BarrierUse]:
        return []

    def tmem_parts(self) -> list["TmemPart"]:
        """What this storage keeps in tensor memory (sm_100a); most storages keep nothing there."""
        return []


# ---- tile storages ---------------------------------------------------------------------------


@aggregate
class StandardTiles:
    """A and B stage arrays in shared memory (device side of StandardTileStorage), each one array or, with a side
    held as pieces (pipeline/pieces.py), a PiecedTile."""
    a_tiles: gl.shared_memory_descriptor | PiecedTile
    b_tiles: gl.shared_memory_descriptor | PiecedTile


@aggregate
class BlockScaledTiles:
    """The seed's BlockScaledTilePayload (device side of BlockScaledTileStorage): A, B and their block scale factors
    SFA, SFB per stage in shared memory, and the one TMEM buffer per operand the MMA role copies a stage's scales to."""
    a_tiles: gl.shared_memory_descriptor
    b_tiles: gl.shared_memory_descriptor
    sfa_tiles: gl.shared_memory_descriptor
    sfb_tiles: gl.shared_memory_descriptor
    sfa_tmem: blackwell.tensor_memory_descriptor
    sfb_tmem: blackwell.tensor_memory_descriptor


@aggregate
class BlockwiseFP8Tiles:
    """FP8 A and B tiles plus the stage's 128-wide K block scales: A's per row, B's per 128 x 128 block."""
    a_tiles: gl.shared_memory_descriptor
    b_tiles: gl.shared_memory_descriptor
    a_scales: gl.shared_memory_descriptor
    b_scales: gl.shared_memory_descriptor


@dataclass(frozen=True)
class StandardTileStorage(Storage):
    """A (BM x BK) and B (BN x BK, or BK x BN) tiles per stage, swizzled for TMA and wgmma/tcgen05; in a cluster
    kernel the cluster's tiles, split or shared as `a_cga` / `b_cga` say (tilepipe.pipeline.cluster.Cluster)."""
    a_dtype: str
    b_dtype: str
    a_tile: tuple[int, int]
    b_tile: tuple[int, int]
    stages: int
    a_cga: Bases = field(default=(), kw_only=True)
    b_cga: Bases = field(default=(), kw_only=True)
    device: ClassVar[type] = StandardTiles

    def operand_parts(self) -> tuple[list[Part], list[Part]]:
        """A's and B's parts: one each, or one per piece of a tile with a side held as pieces."""
        return (tile_parts("a", self.a_dtype, self.a_tile, self.stages, self.a_cga),
                tile_parts("b", self.b_dtype, self.b_tile, self.stages, self.b_cga))

    def parts(self) -> list[Part]:
        a, b = self.operand_parts()
        return a + b

    @builtin
    def allocate(self, _semantic=None):
        """The tile arrays, in the order of parts() (A and B each one array or a PiecedTile, then a subclass's
        arrays), as this storage's device aggregate."""
        a, b = self.operand_parts()
        rest = self.parts()[len(a) + len(b):]
        return self.device(allocate_tile(a, self.a_tile, _semantic), allocate_tile(b, self.b_tile, _semantic),
                           *(part.allocate(_semantic) for part in rest))


SCALE_BLOCK_ROWS = 128
"""Rows of one packed scale block: 32 x 4 x 4 bytes hold 128 rows by 4 scales (cuBLAS's block-scaling-factor layout,
torch._scaled_mm's SWIZZLE_32_4_4), the unit tcgen05's scale layout reads."""


def packed_scale_box(rows: int, k_blocks: int) -> tuple[int, ...]:
    """The TMA box of `rows` (a multiple of 128) by 4 * `k_blocks` scales in the packed-block layout, seen as
    [1, rows / 128, K scales / 4, 2, 256] (each 512-byte block as two 256-byte rows: a TMA box is at most 256 wide)."""
    if rows % SCALE_BLOCK_ROWS or k_blocks < 1:
        raise ValueError(f"packed scale boxes hold whole blocks of {SCALE_BLOCK_ROWS} rows and 4 scales; got {rows} "
                         f"rows and {k_blocks} blocks of 4 along K")
    return (1, rows // SCALE_BLOCK_ROWS, k_blocks, 2, 256)


def mma_scale_shape(box: tuple[int, ...]) -> tuple[int, int]:
    """(rows, scales along K) of a packed scale box, as tcgen05_mma_scaled reads it from TMEM."""
    return box[1] * SCALE_BLOCK_ROWS, box[2] * 4


@dataclass(frozen=True)
class BlockScaledTileStorage(StandardTileStorage):
    """MX/NV block-scaled operands (sm_100a): A (BM x BK) and K-major B (BN x BK) plus their scale factors SFA, SFB per
    stage, each a packed_scale_box of `k_blocks` blocks of 4 scales along K, loaded by TMA beside its operand
    (unswizzled, as tcgen05_copy needs); and one TMEM scale buffer per operand (tcgen05.cp and tcgen05.mma from one
    thread run in issue order, so the next stage's copy cannot overtake the MMA reading the buffer)."""
    sf_dtype: str
    k_blocks: int
    device: ClassVar[type] = BlockScaledTiles

    def __post_init__(self) -> None:
        for rows in (self.a_tile[0], self.b_tile[0]):
            packed_scale_box(rows, self.k_blocks)  # whole scale blocks, else ValueError

    @property
    def sfa_tile(self) -> tuple[int, ...]:
        return packed_scale_box(self.a_tile[0], self.k_blocks)

    @property
    def sfb_tile(self) -> tuple[int, ...]:
        return packed_scale_box(self.b_tile[0], self.k_blocks)

    def parts(self) -> list[Part]:
        return super().parts() + [Part("sfa", self.sf_dtype, self.sfa_tile, self.stages, kind="scales"),
                                  Part("sfb", self.sf_dtype, self.sfb_tile, self.stages, kind="scales")]

    def tmem_parts(self) -> list["TmemPart"]:
        return [TmemPart("sfa", mma_scale_shape(self.sfa_tile), 1, self.sf_dtype),
                TmemPart("sfb", mma_scale_shape(self.sfb_tile), 1, self.sf_dtype)]

    @builtin
    def allocate(self, _semantic=None):
        """The stage arrays (A, B, SFA, SFB) and the two TMEM scale buffers, as BlockScaledTiles."""
        tiles = [part.allocate(_semantic) for part in self.parts()]
        scales = [blackwell.allocate_tensor_memory(dtype_of(self.sf_dtype), list(part.block),
                                                   blackwell.TensorMemoryScalesLayout(), _semantic=_semantic)
                  for part in self.tmem_parts()]
        return self.device(*tiles, *scales)


@aggregate
class BlockwiseScales:
    """A stage of blockwise FP8 scales apart from the operands (device side of BlockwiseScaleStorage)."""
    a_scales: gl.shared_memory_descriptor
    b_scales: gl.shared_memory_descriptor


@dataclass(frozen=True)
class BlockwiseScaleStorage(Storage):
    """Blockwise FP8 scales of one 128-wide K block per stage: a (1 x block_m) fp32 row of A-scales and, per CTA along
    N, a 32-word fp32 B-scale box. TMA needs 128-byte aligned shared destinations and 16-byte aligned innermost
    coordinates, so a B box is 128 bytes and starts at a multiple of 4 K blocks: the stage's 128 x 128 block scale is
    one of its first 4 words. In a cluster the scales go with their operand (`a_cga`, `b_cga`: the operands' bases):
    A's row is split where A is and shared where A is, and each CTA holding its own B columns holds its own B box.
    Alone (sm_100a), a ring of its own from the load role to the promoting epilogue."""
    block_m: int
    stages: int
    a_cga: Bases = field(default=(), kw_only=True)
    b_cga: Bases = field(default=(), kw_only=True)
    device: ClassVar[type] = BlockwiseScales
    B_BOX_WORDS: ClassVar[int] = 32

    @property
    def a_scale_tile(self) -> tuple[int, int]:
        return (1, self.block_m)

    @property
    def b_scale_tile(self) -> tuple[int, int]:
        """One B box per CTA that holds B columns of its own (a tile split along N: one per part)."""
        return (ctas_splitting(self.b_cga), self.B_BOX_WORDS)

    def parts(self) -> list[Part]:
        a_cga = tuple((k, m) for m, k in self.a_cga)  # the row is scale_a^T's (K blocks x M): A's bases transposed
        return [Part("a_scales", "fp32", self.a_scale_tile, self.stages, cga=a_cga),
                Part("b_scales", "fp32", self.b_scale_tile, self.stages, cga=self.b_cga)]

    @builtin
    def allocate(self, _semantic=None):
        return self.device(*(part.allocate(_semantic) for part in self.parts()))


@dataclass(frozen=True)
class BlockwiseFP8TileStorage(StandardTileStorage):
    """DeepSeek-style blockwise FP8 (sm_90a): A, B and the K block's BlockwiseScaleStorage scales in one stage.

    Scales travel with the operands (TMA, same barrier, split or shared over a cluster as their operand is), so the
    MMA role never loads from global memory in its main loop."""
    device: ClassVar[type] = BlockwiseFP8Tiles

    @property
    def scales(self) -> BlockwiseScaleStorage:
        return BlockwiseScaleStorage(self.a_tile[0], self.stages, a_cga=self.a_cga, b_cga=self.b_cga)

    def parts(self) -> list[Part]:
        return super().parts() + self.scales.parts()


class _SingleArrayStorage(Storage):
    """A storage of one shared-memory array; allocate() returns its descriptor."""

    @builtin
    def allocate(self, _semantic=None):
        return self.parts()[0].allocate(_semantic)


@dataclass(frozen=True)
class _TileArrayStorage(_SingleArrayStorage):
    """`stages` tiles of one dtype, named `part_name` in plans (a cluster's tiles, split as `cga` says)."""
    dtype: str
    tile: tuple[int, int]
    stages: int
    cga: Bases = field(default=(), kw_only=True)
    part_name: ClassVar[str] = "tiles"

    def parts(self) -> list[Part]:
        return tile_parts(self.part_name, self.dtype, self.tile, self.stages, self.cga)

    @builtin
    def allocate(self, _semantic=None):
        """The stage array, or a PiecedTile of its pieces' arrays."""
        return allocate_tile(self.parts(), self.tile, _semantic)


@dataclass(frozen=True)
class OutputTileStorage(_TileArrayStorage):
    """C tiles staged for the store role (sm_90a: the output pipeline's stages)."""
    part_name: ClassVar[str] = "c"


@dataclass(frozen=True)
class SourceTileStorage(_TileArrayStorage):
    """Source C tiles for residual epilogues, filled by the epilogue-load role."""
    part_name: ClassVar[str] = "src"


@dataclass(frozen=True)
class TmemPart:
    """One tensor-memory allocation: `stages` blocks (rows x columns) of fp32 accumulators, one column per value, or
    of 8-bit block scales (TensorMemoryScalesLayout), 32 columns each: Triton allocates TMEM in units of 32 columns
    (measured: 2 x 256 accumulator columns + SFA + SFB compile to 576 columns, MXFP8 and NVFP4 alike)."""
    name: str
    block: tuple[int, int]
    stages: int
    dtype: str = "fp32"

    @property
    def columns(self) -> int:
        if self.dtype == "fp32":
            return self.stages * self.block[1]
        lane_words = -(-self.block[0] * self.block[1] // (4 * 128))  # 32-bit columns over TMEM's 128 lanes
        return self.stages * -(-lane_words // TMEM_MIN_COLUMNS) * TMEM_MIN_COLUMNS


@dataclass(frozen=True)
class TmemAccumulatorStorage(Storage):
    """sm_100a: `stages` fp32 BM x BN accumulators in tensor memory, the stages of the MMA -> epilogue output pipeline
    (double-buffered where 2 x BN <= 512 columns, so the MMA role runs the next tile while the epilogue drains one).

    Gluon allocates TMEM itself (`allocate_tensor_memory` is hoisted to the kernel's entry and freed after the
    partitions join), so the seed's TMEM address word and dealloc barrier (`TmemDeallocStorage`) have nothing to
    do here and are not declared."""
    stages: int
    block_m: int
    block_n: int
    two_ctas: bool = False  # a cta_group::2 accumulator: block_m rows over a CTA pair, each CTA holding its half

    @property
    def cta_rows(self) -> int:
        """Rows of the accumulator one CTA holds (the lanes it occupies)."""
        return self.block_m // 2 if self.two_ctas else self.block_m

    def parts(self) -> list[Part]:
        return []

    def tmem_parts(self) -> list[TmemPart]:
        return [TmemPart("acc", (self.cta_rows, self.block_n), self.stages)]

    @builtin
    def allocate(self, _semantic=None):
        """The accumulators: a [stages, BM, BN] fp32 tensor-memory descriptor (one column per fp32 value; two_ctas:
        split by rows over the pair, the layout that makes tcgen05_mma a cta_group::2 MMA)."""
        layout = blackwell.TensorMemoryLayout((self.cta_rows, self.block_n), col_stride=1,
                                              cga_layout=[[1, 0]] if self.two_ctas else [], two_ctas=self.two_ctas)
        return blackwell.allocate_tensor_memory(gl.float32, [self.stages, self.block_m, self.block_n], layout,
                                                _semantic=_semantic)


# ---- pipeline (barrier) storages --------------------------------------------------------------


@dataclass(frozen=True)
class BarrierPair(Storage):
    """`stages` full/empty mbarrier pairs: the barriers of one ProducerConsumerPipeline, one set per CTA.

    `multicast`: the slots are filled by TMA multicast in a two-CTA cluster (one CTA loads a shared tile into both),
    so a slot is free only when the consumers of both CTAs released it: a third barrier per stage, `empty_pair`,
    lives in the pair's first CTA, counts both CTAs' releases, and gates the multicasting producer.

    `split`: a split multicast ring instead (pipeline/multicast.py): each CTA's producer fills its half of every
    shared tile in both CTAs, so each CTA's empty barrier counts the consumers of both CTAs (each releases on its own
    CTA's and the peer's) and each full barrier takes both CTAs' bytes; no pair barrier.

    `pair_mma` ("producer" or "consumer"): that side is the lead CTA's two-CTA (cta_group::2) tcgen05 MMA. The barrier
    it waits on (a consumer's full, a producer's empty) is then a pair barrier in the lead CTA, which the other role
    of both CTAs arrives on (each CTA's arrivals, counted twice by the compiler; only the lead CTA waits); the barrier
    it signals stays one per CTA: its commit lands on both CTAs' barriers, one arrival each (Gluon's
    tcgen05_mma_barrier_count for a 2x1 pair, checked where the MMA is issued: tiles.py)."""
    stages: int
    name: str
    producer: str
    consumer: str
    producer_arrivals: int = 1
    consumer_arrivals: int = 1
    producer_proxy: str = "async"
    consumer_proxy: str = "async"
    multicast: bool = False
    pair_mma: str = ""
    split: bool = False

    def __post_init__(self) -> None:
        if self.pair_mma not in ("", "producer", "consumer") or self.pair_mma and (self.multicast or self.split):
            raise ValueError(f"pipeline '{self.name}': pair_mma must be '', 'producer' or 'consumer' (and a two-CTA "
                             f"MMA pipeline is not a multicast ring), got {self.pair_mma!r}")
        if self.split and self.multicast:
            raise ValueError(f"pipeline '{self.name}': a ring is a leader-issued (multicast) or a split multicast "
                             "ring, not both")

    @property
    def pair_side(self) -> str:
        """The barrier kept per CTA pair: "full" (the MMA consumes), "empty" (the MMA produces), "" (none)."""
        return {"consumer": "full", "producer": "empty"}.get(self.pair_mma, "")

    def parts(self) -> list[Part]:
        if self.pair_mma:
            return [Part("barriers", "int64", (1, ), self.stages, kind="barrier"),
                    Part("pair", "int64", (1, ), self.stages, kind="pair_barrier")]
        pair = [Part("pair", "int64", (1, ), self.stages, kind="pair_barrier")] if self.multicast else []
        return [Part("barriers", "int64", (1, ), 2 * self.stages, kind="barrier")] + pair

    def barriers(self) -> list[BarrierUse]:
        pair = [BarrierUse(f"{self.name}.empty_pair", self.stages, 2 * self.consumer_arrivals,
                           f"{self.consumer} of both CTAs", self.producer)] if self.multicast else []
        full, empty = (BarrierUse(f"{self.name}.full", self.stages, self.producer_arrivals, self.producer,
                                  self.consumer),
                       BarrierUse(f"{self.name}.empty", self.stages, self.consumer_arrivals, self.consumer,
                                  self.producer))
        if self.split:  # each CTA's barriers: both CTAs' bytes on full, both CTAs' consumers on empty
            full = replace(full, kind="split_barrier")
            empty = replace(empty, arrivals=2 * empty.arrivals, kind="split_barrier")
        if self.pair_side == "full":
            full = replace(full, arrivals=2 * full.arrivals, kind="pair_barrier")  # the producers of both CTAs
        elif self.pair_side == "empty":
            empty = replace(empty, arrivals=2 * empty.arrivals, kind="pair_barrier")  # the consumers of both
        return [full, empty] + pair

    @builtin
    def allocate(self, probe=None, _semantic=None, _generator=None):
        """Allocate and initialise the barriers; returns the pipeline over them (carrying `probe`, if given)."""
        parts = self.parts()
        pipe = ProducerConsumerPipeline.from_barriers(
            parts[0].allocate(_semantic), self.stages, self.producer_arrivals, self.consumer_arrivals,
            self.name, self.producer_proxy, self.consumer_proxy, probe,
            parts[1].allocate(_semantic) if len(parts) > 1 else None, self.pair_side, self.split, _semantic=_semantic)
        _generator.call_JitFunction(ProducerConsumerPipeline.init_barriers, [pipe], {})
        return pipe


@dataclass(frozen=True)
class OutputPipelineStorage(BarrierPair):
    """Output stages MMA -> store/epilogue role (sm_90a: smem C tiles; sm_100a: TMEM accumulators)."""
    name: str = "output"
    producer: str = "mma"
    consumer: str = "epilogue"


@dataclass(frozen=True)
class EpiLoadPipelineStorage(BarrierPair):
    """Source-tile stages epilogue-load role -> epilogue."""
    name: str = "epi_load"
    producer: str = "epilogue_load"
    consumer: str = "epilogue"


@dataclass(frozen=True)
class InputPipelineStorage(BarrierPair):
    """Operand stages TMA load -> MMA; with k-groups, one barrier pair guards `k_group_size` stages."""
    name: str = "input"
    producer: str = "load"
    consumer: str = "mma"
    k_group_size: int = 1

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.k_group_size < 1 or self.stages % self.k_group_size:
            raise ValueError(f"input pipeline: {self.stages} stages are not a whole number of k-groups of "
                             f"{self.k_group_size}")

    @property
    def group_stages(self) -> int:
        return self.stages // self.k_group_size

    def parts(self) -> list[Part]:
        return self._grouped().parts()

    def barriers(self) -> list[BarrierUse]:
        return self._grouped().barriers()

    def _grouped(self) -> BarrierPair:
        return BarrierPair(self.group_stages, self.name, self.producer, self.consumer, self.producer_arrivals,
                           self.consumer_arrivals, self.producer_proxy, self.consumer_proxy, self.multicast,
                           self.pair_mma, self.split)

    @builtin
    def allocate(self, probe=None, _semantic=None, _generator=None):
        return self._grouped().allocate(probe, _semantic=_semantic, _generator=_generator)


@aggregate
class ClcPipelines:
    """The scheduler ring (tile ids to every other role), its throttle, and the response words."""
    pipeline: ProducerConsumerPipeline
    throttle: ProducerConsumerPipeline
    response: gl.shared_memory_descriptor


@dataclass(frozen=True)
class ClcPipelineStorage(Storage):
    """Scheduler ring: full/empty per stage (every other role consumes), a throttle pair, and 16 B per stage.

    The 16-byte response matches sm_100a's CLC `try_cancel` result; the Hopper dynamic scheduler writes the tile
    id into all four words. The throttle pair lets the pacing role (load) hold the scheduler back.
    `multicast` (a two-CTA cluster): the first CTA's TMA multicast fills both CTAs' slots (a tile id shared by the
    cluster: schedulers/dynamic.py), so the ring is a multicast ring (pair empty barriers), its response slots are
    replicated over the CTAs, and the scheduler counts among the consumers: it reads each id back, and the other
    CTA's multicast must not overwrite a slot before it has.
    """
    stages: int
    consumers: tuple[str, ...]
    producer: str = "scheduler"
    throttle_producer: str = "load"
    producer_proxy: str = "generic"  # "async": the hardware writes the response (CLC try_cancel), not the scheduler
    multicast: bool = False

    def _ring(self) -> BarrierPair:
        consumers = self.consumers + ((self.producer, ) if self.multicast else ())
        return BarrierPair(self.stages, "clc", self.producer, "+".join(consumers), 1, len(consumers),
                           "async" if self.multicast else self.producer_proxy, "generic", multicast=self.multicast)

    def _throttle(self) -> BarrierPair:
        return BarrierPair(self.stages, "clc_throttle", self.throttle_producer, self.producer, 1, 1, "generic",
                           "generic")

    def _response(self) -> Part:
        """[stages, rows, 4] int32 words, the response in each stage's first row. A multicast ring's stages are a TMA
        destination, replicated in both CTAs, which must start 128-byte aligned: 8 rows a stage, 7 unused."""
        if self.multicast:
            return Part("response", "int32", (8, 4), self.stages, cga=((0, 0), ))
        return Part("response", "int32", (1, 4), self.stages, kind="words")

    def parts(self) -> list[Part]:
        return self._ring().parts() + [Part("throttle", "int64", (1, ), 2 * self.stages, kind="barrier"),
                                       self._response()]

    def barriers(self) -> list[BarrierUse]:
        return self._ring().barriers() + self._throttle().barriers()

    @builtin
    def allocate(self, probe=None, _semantic=None, _generator=None):
        ring = self._ring().allocate(probe, _semantic=_semantic, _generator=_generator)
        throttle = self._throttle().allocate(probe, _semantic=_semantic, _generator=_generator)
        return ClcPipelines(ring, throttle, self._response().allocate(_semantic))


@dataclass(frozen=True)
class LoadOrderBarrierStorage(BarrierPair):
    """The load role tells the epilogue-load role that a tile's main-loop loads were issued, so C loads do not
    take bandwidth from A and B first. A pair, not one barrier: with one barrier a load role two tiles ahead
    would flip its phase twice and the waiter could miss a tile; the pair bounds how far ahead it runs."""
    stages: int = 2
    name: str = "load_order"
    producer: str = "load"
    consumer: str = "epilogue_load"
    producer_proxy: str = "generic"
    consumer_proxy: str = "generic"


@dataclass(frozen=True)
class TurnOrderStorage(BarrierPair):
    """Two roles taking turns (pipeline/turns.py): a one-stage ring, turn 0's role its producer, turn 1's its
    consumer; no data, so no proxy fences."""
    stages: int = 1
    name: str = "turns"
    producer: str = "mma (turn 0)"
    consumer: str = "mma (turn 1)"
    producer_proxy: str = "generic"
    consumer_proxy: str = "generic"


@dataclass(frozen=True)
class RawBarrierStorage(_SingleArrayStorage):
    """Escape hatch: `count` mbarriers the kernel initialises and drives itself."""
    count: int
    name: str = "raw"

    def parts(self) -> list[Part]:
        return [Part("barriers", "int64", (1, ), self.count, kind="barrier")]

    def barriers(self) -> list[BarrierUse]:
        return [BarrierUse(self.name, self.count, 0, "?", "?")]


# ---- bundles -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class SmemPipelineBundle(Storage):
    """The matmul family's pipelines in one declaration: input, output, scheduler, epilogue load.

    `allocate()` returns them as a tuple in that order, leaving out the ones declared None; its fields are the
    member names (`pipelines.input`, `pipelines.epi_load`).
    """
    input: InputPipelineStorage
    output: OutputPipelineStorage
    clc: ClcPipelineStorage | None = None
    epi_load: EpiLoadPipelineStorage | None = None

    def members(self) -> list[tuple[str, Storage]]:
        return [(f.name, getattr(self, f.name)) for f in fields(self) if getattr(self, f.name) is not None]

    def parts(self) -> list[Part]:
        return [replace(part, name=f"{name}.{part.name}")
                for name, member in self.members() for part in member.parts()]

    def barriers(self) -> list[BarrierUse]:
        return [use for _, member in self.members() for use in member.barriers()]

    @builtin
    def allocate(self, probe=None, _semantic=None, _generator=None):
        return _allocate_each(self.members(), probe, _semantic, _generator)


def _allocate_each(storages: list[tuple[str, Storage]], probe, semantic, generator):
    """Allocate (name, storage) pairs in order (each given the code generator, and the pipelines' probe, if its
    allocate takes them); a tuple of the results whose fields are the names (`smem.pipelines.output`)."""
    allocated = []
    for _, storage in storages:
        wants = inspect.signature(storage.allocate).parameters
        extra = {name: value for name, value in (("_generator", generator), ("probe", probe)) if name in wants}
        allocated.append(storage.allocate(_semantic=semantic, **extra))
    return gl.tuple(allocated, tl.tuple_type([value.type for value in allocated], [name for name, _ in storages]))


@dataclass(frozen=True)
class SmemPipelineBundleNoClc(SmemPipelineBundle):
    """The bundle for kernels without a scheduler role (static persistent grids)."""

    def __post_init__(self) -> None:
        if self.clc is not None:
            raise ValueError("SmemPipelineBundleNoClc has no scheduler ring; use SmemPipelineBundle")


@dataclass(frozen=True)
class SmemLayouts:
    """The matmul family's shared layouts (K-major A and B, the C tile), from the same rule as storage parts.

    Host code builds TMA descriptors with these, so they always match what the kernel's storage allocates.
    """
    block_m: int
    block_n: int
    block_k: int
    dtype: str
    c_dtype: str

    @property
    def a(self):
        return Part("a", self.dtype, (self.block_m, self.block_k), 1).layout

    @property
    def b(self):
        return Part("b", self.dtype, (self.block_n, self.block_k), 1).layout

    @property
    def c(self):
        return Part("c", self.c_dtype, (self.block_m, self.block_n), 1).layout


# ---- the plan ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class PlacedPart:
    storage: str
    part: Part
    offset: int


class SmemPlan:
    """A kernel's whole shared memory: named storages, laid out and checked against a target's limit.

    `SmemPlan(target, tiles=StandardTileStorage(...), pipelines=SmemPipelineBundle(...), ...)`; storages are
    reached by name (`plan.tiles`), and `plan.allocate()` in a kernel allocates all of them at once.
    """

    def __init__(self, target: str = "sm_90a", limit: int | None = None, **storages: Storage) -> None:
        if target not in SMEM_LIMIT_BYTES:
            raise ValueError(f"unknown target {target!r}; expected one of {sorted(SMEM_LIMIT_BYTES)}")
        self.target, self.limit, self.storages = target, limit, tuple(storages.items())
        parts = [(name, part) for name, storage in self.storages for part in storage.parts()]
        # Triton's allocator, for buffers that are live together: largest first (ties in allocation order, which is
        # declaration order), each at the next offset aligned for it.
        offset, placed = 0, []
        for name, part in sorted(parts, key=lambda named: -named[1].nbytes):
            offset = -(-offset // part.alignment) * part.alignment
            placed.append(PlacedPart(name, part, offset))
            offset += part.nbytes
        self.placed = tuple(placed)

    def _key(self) -> tuple:
        return self.target, self.limit, self.storages

    def __eq__(self, other: object) -> bool:
        return isinstance(other, SmemPlan) and self._key() == other._key()

    def __hash__(self) -> int:
        return hash(self._key())

    def __repr__(self) -> str:
        storages = ", ".join(f"{name}={storage!r}" for name, storage in self.storages)
        return f"SmemPlan({self.target!r}, {storages})"

    def __getattr__(self, name: str) -> Storage:
        for key, storage in self.__dict__.get("storages", ()):
            if key == name:
                return storage
        raise AttributeError(name)

    @builtin
    def allocate(self, probe=None, _semantic=None, _generator=None):
        """Allocate every storage, in declaration order; returns a tuple of what each storage's allocate() gives,
        whose fields are the storages' names (`smem.operands`, `smem.pipelines.output`).

        `probe` (`tilepipe.pipeline.probe.Probe`) goes to every pipeline: the kernel's debug/trace switch, off by default.
        """
        return _allocate_each(list(self.storages), probe, _semantic, _generator)

    @property
    def total_bytes(self) -> int:
        return max((p.offset + p.part.nbytes for p in self.placed), default=0)

    @property
    def limit_bytes(self) -> int:
        return self.limit if self.limit is not None else device_limit(self.target)

    @property
    def tmem_parts(self) -> list[tuple[str, TmemPart]]:
        return [(name, part) for name, storage in self.storages for part in storage.tmem_parts()]

    @property
    def tmem_columns(self) -> int:
        """TMEM columns the block allocates: what the parts declare, rounded up as Triton rounds it (a power of two,
        at least 32); 0 without TMEM."""
        declared = sum(part.columns for _, part in self.tmem_parts)
        return 0 if declared == 0 else max(TMEM_MIN_COLUMNS, 1 << (declared - 1).bit_length())

    @property
    def tmem_limit(self) -> int:
        return TMEM_LIMIT_COLUMNS[self.target]

    @property
    def fits(self) -> bool:
        return self.total_bytes <= self.limit_bytes and self.tmem_columns <= self.tmem_limit

    def check(self) -> "SmemPlan":
        """Raise SmemBudgetError listing every part if the plan is over the shared-memory or the TMEM limit; returns
        the plan."""
        over = []
        if self.total_bytes > self.limit_bytes:
            over.append(f"shared memory plan needs {self.total_bytes} B but {self.target} allows {self.limit_bytes} "
                        "B per block")
        if self.tmem_columns > self.tmem_limit:
            over.append(f"TMEM plan needs {self.tmem_columns} columns but {self.target} allows {self.tmem_limit} per "
                        "block")
        if over:
            raise SmemBudgetError(f"{'; '.join(over)}:\n{self.table()}")
        return self

    def barrier_map(self) -> list[BarrierUse]:
        return [replace(use, name=use.name if use.name.split(".")[0] == name else f"{name}.{use.name}")
                for name, storage in self.storages for use in storage.barriers()]

    def table(self) -> str:
        rows = [("part", "shape", "dtype", "stages", "bytes", "offset", "align")]
        for p in sorted(self.placed, key=lambda p: p.offset):
            rows.append((f"{p.storage}.{p.part.name}", "x".join(map(str, p.part.tile)), p.part.dtype,
                         str(p.part.stages), str(p.part.nbytes), str(p.offset), str(p.part.alignment)))
        rows.append(("total", "", "", "", str(self.total_bytes), "", f"limit {self.limit_bytes}"))
        if not self.tmem_parts:
            return format_table(rows)
        tmem = [("TMEM part", "shape", "dtype", "stages", "columns")]
        tmem += [(f"{name}.{part.name}", "x".join(map(str, part.block)), part.dtype, str(part.stages),
                  str(part.columns)) for name, part in self.tmem_parts]
        tmem.append(("TMEM total", "", "", "", f"{self.tmem_columns} (limit {self.tmem_limit})"))
        return f"{format_table(rows)}\n\n{format_table(tmem)}"

    def __str__(self) -> str:
        barriers = [("barrier", "count", "arrivals", "producer", "consumer")]
        barriers += [(u.name + (" (pair)" if u.kind == "pair_barrier" else ""), str(u.count), str(u.arrivals),
                      u.producer, u.consumer) for u in self.barrier_map()]
        return f"{self.table()}\n\n{format_table(barriers)}"


def largest_stages(build: Callable[[int], SmemPlan], max_stages: int = 32, multiple_of: int = 1) -> int:
    """The largest stage count (a multiple of `multiple_of`, at most `max_stages`) whose plan fits; 0 if none."""
    best = 0
    for stages in range(multiple_of, max_stages + 1, multiple_of):
        if not build(stages).fits:
            break
        best = stages
    return best


@functools.cache
def device_limit(target: str) -> int:
    """The per-block shared-memory limit: the current GPU's opt-in limit when it is of `target`'s
    architecture, else the target's documented limit."""
    import torch

    if torch.cuda.is_available():
        major, minor = torch.cuda.get_device_capability()
        if f"sm_{major}{minor}a" == target:
            return torch.cuda.get_device_properties(torch.cuda.current_device()).shared_memory_per_block_optin
    return SMEM_LIMIT_BYTES[target]
