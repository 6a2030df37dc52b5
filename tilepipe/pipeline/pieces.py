"""Tiles with a side that is not a power of two (96, 160, 192), held as power-of-two pieces.

Gluon 3.9 gives register tensors, shared-memory allocations (all but the leading stage dimension) and TMA blocks
power-of-two shapes only, but the tile widths that fill a GPU's waves often are not (cuBLAS runs 192x192 at
1536x8960x1536, 128x160 and 128x96 at mid-size M). So such a side is held as pieces (`side_pieces`): 192 as 128 + 64,
160 as 128 + 32, 96 as 64 + 32; one shared-memory array per piece of the tile, one accumulator per piece, one wgmma per
pair of A and B pieces. Row pieces are at least 64 (one wgmma warpgroup's rows), so only 192 splits rows. The wgmma
rates measured on an H100 (bench/results/wgmma-rows-h100.json) put 128 x (128+64) at the full rate and 192 x 192 (a
64-row tail whose accumulators the two warpgroups split by columns) at 0.947 of it. Every piece's array is swizzled
as the TMA box that moves it (the tile's smallest pieces), so a 32-wide piece makes all of them 64-byte swizzled.

`PiecedTile` stands where a stage array stands: `index` picks a stage, `shape` is the whole tile's, TMA moves it in
its descriptor's boxes (`tile_load`, `tile_store`: a whole array in one box when the tile is not pieced).
"""

from dataclasses import dataclass

from triton.experimental import gluon
from triton.experimental.gluon import aggregate
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language._core import builtin
from triton.experimental.gluon.language.nvidia.hopper import tma
from triton.language.core import _unwrap_if_constexpr

from tilepipe.pipeline.cluster import wgmma_accumulator
from tilepipe.pipeline.multicast import CTAS, is_split_load

PIECES = {96: (64, 32), 160: (128, 32), 192: (128, 64)}
"""The sides held as pieces, and their pieces (largest first)."""
MIN_ROW_PIECE = 64
"""A row piece is a wgmma warpgroup's 64 rows at least: 192 is the one side that may split a tile's rows."""


def is_power_of_two(n: int) -> bool:
    return n > 0 and n & (n - 1) == 0


def side_pieces(side: int) -> tuple[int, ...]:
    """The power-of-two pieces of a tile side: itself, or PIECES' split; ValueError for any other side."""
    if is_power_of_two(side):
        return (side, )
    if side in PIECES:
        return PIECES[side]
    raise ValueError(f"a tile side must be a power of two or one of {sorted(PIECES)}, got {side}")


def row_side_ok(side: int) -> bool:
    """Whether a tile may have `side` rows: a power of two, or pieces of at least MIN_ROW_PIECE rows."""
    return is_power_of_two(side) or (side in PIECES and min(PIECES[side]) >= MIN_ROW_PIECE)


@dataclass(frozen=True)
class TilePieces:
    """A rows x cols tile's power-of-two pieces (side_pieces of each side), row pieces outer. A class, so kernels'
    constexpr functions may build one (Triton's JIT refuses plain functions there)."""
    rows: int
    cols: int

    @property
    def shapes(self) -> list[tuple[tuple[int, int], tuple[int, int]]]:
        """((row, col) origin, (rows, cols) shape) of each piece."""
        out, row = [], 0
        for rows in side_pieces(self.rows):
            col = 0
            for cols in side_pieces(self.cols):
                out.append(((row, col), (rows, cols)))
                col += cols
            row += rows
        return out

    @property
    def pieced(self) -> bool:
        """Whether a side is one PIECES holds in pieces (any other side is left to the shape checks it meets)."""
        return self.rows in PIECES or self.cols in PIECES

    @property
    def box(self) -> tuple[int, int]:
        """The TMA block that moves every piece in whole boxes: the smallest row and column pieces."""
        return min(side_pieces(self.rows)), min(side_pieces(self.cols))


@aggregate
class PiecedTile:
    """A tile (or stage array of tiles) held as one shared-memory array per piece; `rows` and `cols` are the pieces
    of its two tile dimensions (the last two of each array), `pieces` the arrays, row pieces outer. `shape` and
    `dtype` are what a single array's would be (leading stage dimension included)."""
    pieces: gl.tuple
    rows: gl.constexpr
    cols: gl.constexpr
    shape: gl.constexpr
    dtype: gl.constexpr

    def __init__(self, pieces, rows, cols):
        self.pieces = pieces
        self.rows = gl.constexpr(tuple(_unwrap_if_constexpr(rows)))
        self.cols = gl.constexpr(tuple(_unwrap_if_constexpr(cols)))
        lead = list(pieces[0].type.shape[:-2])
        self.shape = gl.constexpr(lead + [sum(self.rows.value), sum(self.cols.value)])
        self.dtype = gl.constexpr(pieces[0].dtype)

    @builtin
    def index(self, i, _semantic=None):
        """Stage i of every piece."""
        return PiecedTile(gl.tuple([p.index(i, _semantic=_semantic) for p in self.pieces]), self.rows, self.cols)

    @builtin
    def permute(self, order, _semantic=None):
        """The transposed tile ((1, 0) only): each piece transposed, row and column pieces exchanged."""
        if tuple(_unwrap_if_constexpr(order)) != (1, 0):
            raise ValueError(f"a pieced tile transposes with (1, 0) only, got {order}")
        nr, nc = len(self.rows.value), len(self.cols.value)
        moved = [self.pieces[i * nc + j].permute((1, 0), _semantic=_semantic) for j in range(nc) for i in range(nr)]
        return PiecedTile(gl.tuple(moved), self.cols, self.rows)

    @builtin
    def piece(self, p, _semantic=None):
        return self.pieces[_unwrap_if_constexpr(p)]

    def origins(self) -> list[tuple[int, int]]:
        """Each piece's (row, col) in the tile."""
        return [(sum(self.rows.value[:i]), sum(self.cols.value[:j])) for i in range(len(self.rows.value))
                for j in range(len(self.cols.value))]

    def boxes(self, box) -> list[tuple[object, int, int, int, int]]:
        """(piece, row in it, col in it, row in the tile, col in the tile) of every `box`-shaped part of the tile."""
        box_rows, box_cols = (_unwrap_if_constexpr(n) for n in box)
        parts = []
        for piece, (row, col) in zip(self.pieces, self.origins()):
            rows, cols = piece.type.shape[-2:]
            for r in range(0, rows, box_rows):
                for c in range(0, cols, box_cols):
                    parts.append((piece, r, c, row + r, col + c))
        return parts

    def count_boxes(self, box) -> int:
        return len(self.boxes(box))


def _views(tile, box, semantic):
    """(view, row, col) per TMA box of `tile`: sub-views of its pieces, or the whole single array at (0, 0)."""
    if not isinstance(tile, PiecedTile):
        return [(tile, 0, 0)]
    rows, cols = (_unwrap_if_constexpr(n) for n in box)
    views = []
    for piece, r, c, row, col in tile.boxes(box):
        view = piece
        if (rows, cols) != tuple(piece.type.shape[-2:]):
            view = piece.slice(r, rows, 0, _semantic=semantic).slice(c, cols, 1, _semantic=semantic)
        views.append((view, row, col))
    return views


def _at(coords, row, col, semantic):
    """coords + (row, col) in their first two dimensions (a box's origin within a 2-D tile), zero offsets left alone
    and any further coordinates as they are."""
    coords = list(coords)
    for i, d in enumerate((row, col)):
        if d:
            coords[i] = coords[i].__add__(d, _semantic=semantic)
    return coords


@builtin
def tile_load(desc, coords, bar, tile, multicast=False, _semantic=None):
    """TMA-load `tile` (one stage: an array, or a pieced tile box by box) from `desc` at `coords`, onto `bar`."""
    for view, row, col in _views(tile, desc.block_type.shape, _semantic):
        tma.async_load(desc, _at(coords, row, col, _semantic), bar, view, multicast=multicast, _semantic=_semantic)


@builtin
def tile_store(desc, coords, tile, _semantic=None):
    """TMA-store `tile` (one stage: an array, or a pieced tile box by box) to `desc` at `coords`."""
    for view, row, col in _views(tile, desc.block_type.shape, _semantic):
        tma.async_store(desc, _at(coords, row, col, _semantic), view, _semantic=_semantic)


@builtin
def tile_boxes(tile, desc, _semantic=None):
    """How many of `desc`'s boxes one stage of `tile` takes (1 for a single array in its own block; 2 for a shared one
    whose box is its half: one per CTA, pipeline/multicast.py)."""
    if isinstance(tile, PiecedTile):
        return gl.constexpr(tile.count_boxes(desc.block_type.shape))
    return gl.constexpr(CTAS if is_split_load(tile.type.shape[1:], desc) else 1)


@gluon.constexpr_function
def piece_layouts(rows, cols, num_warps):
    """The wgmma accumulator layout of each piece of a rows x cols tile on `num_warps` (8) MMA warps: a 128-row piece
    splits its rows over the two warpgroups, a 64-row piece its columns (each warpgroup half of its width)."""
    return [wgmma_accumulator.fn(num_warps, c, rows=r) for _, (r, c) in TilePieces(rows, cols).shapes]


@gluon.constexpr_function
def pieced(rows, cols):
    """Whether a kernel's rows x cols tile is held as pieces."""
    return TilePieces(rows, cols).pieced


@gluon.constexpr_function
def piece_count(rows, cols):
    return len(TilePieces(rows, cols).shapes)


@gluon.constexpr_function
def piece_row(rows, cols, p):
    """The first row of piece p of a rows x cols tile (PiecedTile's order)."""
    return TilePieces(rows, cols).shapes[p][0][0]


@gluon.constexpr_function
def piece_col(rows, cols, p):
    """The first column of piece p of a rows x cols tile (PiecedTile's order)."""
    return TilePieces(rows, cols).shapes[p][0][1]


@gluon.constexpr_function
def piece_cols(rows, cols, p, most=None):
    """The columns of piece p of a rows x cols tile (PiecedTile's order; a tile of one piece if not pieced), at most
    `most`."""
    return min(TilePieces(rows, cols).shapes[p][1][1], most or cols)


@builtin
def piece_zeros(rows, cols, num_warps, _semantic=None):
    """A zeroed fp32 accumulator per piece of a rows x cols tile (piece_layouts), as a tuple."""
    rows, cols, num_warps = (_unwrap_if_constexpr(n) for n in (rows, cols, num_warps))
    shapes = [shape for _, shape in TilePieces(rows, cols).shapes]
    return gl.tuple([gl.full(list(shape), 0.0, gl.float32, layout, _semantic=_semantic)
                     for shape, layout in zip(shapes, piece_layouts.fn(rows, cols, num_warps))])
