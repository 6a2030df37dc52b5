"""The vectors an sm_90a tile reads ahead of its main loop, whose wgmmas hide the loads, where a scalar load per
accumulator column in each sub-tile's epilogue exposed their latency before every sub-tile could be stored:
- its bias (issue 40): one coalesced load a thread per sub-tile (tile_bias; a pieced tile, pipeline/pieces.py, each
  piece's), each part of the tile handed its vector in EpilogueArgs.bias (bias_part), which the epilogue brings into
  the part's layout (epilogue_functions.part_bias);
- an FP8 tile's row and column scales: one coalesced load each (tile_scales), applied by scaled()."""

from triton.experimental import gluon
from triton.experimental.gluon import language as gl

from tilepipe.kernels.epilogue_functions import epilogue_function
from tilepipe.pipeline.output import column_part
from tilepipe.pipeline.pieces import piece_col, piece_cols, piece_count, pieced


@gluon.constexpr_function
def reads_bias(epilogue, has_bias, has_c=False):
    """Whether a kernel with a bias (has_bias) may read a tile's ahead of its epilogue (tile_bias): EPILOGUE reads it
    as a vector of its part's columns (epilogue_functions.part_bias; its READS_BIAS), the quantizers otherwise."""
    return has_bias and not has_c and getattr(epilogue_function(epilogue), "READS_BIAS", False)


@gluon.constexpr_function
def part_vectors(num_warps, layout, parts):
    """A vector along the columns of a tile in `layout` (None: one CTA's) as [columns a part, parts], part j's values
    in column j: a value a thread of each part, the parts in registers (split apart without moving data), its CTAs'
    parts as the tile's (a cluster's tile is read as one part: its bases are whole-tile offsets)."""
    bases = layout.cga_layout if layout is not None else []
    if parts > 1 and any(basis[1] for basis in bases):
        raise ValueError("a tile split between a cluster's CTAs along its columns is read ahead as one part")
    return gl.BlockedLayout([1, parts], [32, 1], [num_warps, 1], [1, 0], cga_layout=[[basis[1], 0] for basis in bases])


@gluon.jit
def tile_bias(bias_ptr, N, first_col, ROWS: gl.constexpr, COLS: gl.constexpr, PART_N: gl.constexpr,
              layout: gl.constexpr):
    """The bias of D's ROWS x COLS tile from first_col, zero past N, in the bias's dtype, in PART_N-column parts (an
    output stage's accumulator columns), so a tile may hold it through its main loop; store_tile hands part j's to the
    epilogue (bias_part). A pieced tile's (pipeline/pieces.py): a tuple, a piece's each (192 rows' two row pieces
    read the same columns: one load once compiled). `layout`: the accumulator's (None: a pieced tile's, one CTA's; a
    swap-AB one, D's columns its rows, has no cluster)."""
    biases = ()
    for p in gl.static_range(piece_count(ROWS, COLS)):
        biases = biases + (columns_bias(bias_ptr, N, first_col + piece_col(ROWS, COLS, p), piece_cols(ROWS, COLS, p),
                                        piece_cols(ROWS, COLS, p, PART_N), layout), )
    return biases if pieced(ROWS, COLS) else biases[0]


@gluon.jit
def columns_bias(bias_ptr, N, first_col, COLS: gl.constexpr, PART_N: gl.constexpr, layout: gl.constexpr):
    """tile_bias of COLS columns: each PART_N-column part's by one coalesced load (part_vectors)."""
    vectors: gl.constexpr = part_vectors(gl.num_warps(), layout, COLS // PART_N)
    cols = (first_col + gl.arange(0, PART_N, gl.SliceLayout(1, vectors))[:, None] +
            PART_N * gl.arange(0, COLS // PART_N, gl.SliceLayout(0, vectors))[None, :])
    return gl.load(bias_ptr + cols, mask=cols < N, other=0.0)


@gluon.jit
def bias_part(bias, j: gl.constexpr):
    """Part j's vector of tile_bias' (a split in registers), or None without one."""
    if bias is not None:
        bias = column_part(bias, j, bias.shape[1]).reshape([bias.shape[0]])
    return bias


@gluon.constexpr_function
def compact_vector(num_warps, layout, dim):
    """A value a thread of a vector along dimension `dim` of a tile in `layout` (its CTAs' parts as the tile's)."""
    return gl.BlockedLayout([1], [32], [num_warps], [0], cga_layout=[[basis[dim]] for basis in layout.cga_layout])


@gluon.jit
def tile_scales(work, scale_a, scale_b, M, N, BM: gl.constexpr, BN: gl.constexpr, SA_STRIDE: gl.constexpr,
                SB_STRIDE: gl.constexpr, layout: gl.constexpr):
    """An FP8 tile's row scales (scale_a[row * SA_STRIDE]) and column scales, zero past M and N, each read by one
    coalesced load (a value a thread: compact_vector of the accumulator's `layout`) so a tile may hold them through
    its main loop; `work`: the tile (its origin). scaled() applies them."""
    row, col = work.origin(BM, BN)
    rows = row + gl.arange(0, BM, compact_vector(gl.num_warps(), layout, 0))
    cols = col + gl.arange(0, BN, compact_vector(gl.num_warps(), layout, 1))
    return (gl.load(scale_a + rows * SA_STRIDE, mask=rows < M, other=0.0),
            gl.load(scale_b + cols * SB_STRIDE, mask=cols < N, other=0.0))


@gluon.jit
def scaled(acc, row_scales, col_scales):
    """acc times tile_scales' row and column scales, brought into the accumulator's layout."""
    layout: gl.constexpr = acc.type.layout
    return (acc * gl.convert_layout(row_scales, gl.SliceLayout(1, layout))[:, None]
            * gl.convert_layout(col_scales, gl.SliceLayout(0, layout))[None, :])
