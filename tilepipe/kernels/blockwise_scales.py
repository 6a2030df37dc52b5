"""DeepSeek-V3 blockwise scales (A: one per row per 128-wide K block; B: one per 128 x 128 block) as the blockwise
GEMMs use them: a K block's scales TMA-loaded into the input stage beside its tiles, read back per accumulator row and
per CTA along N, and a partial sum promoted into the fp32 total with them. Shared by the sm_90a kernel
(matmul_fp8_blockwise.py) and the sm_100a one (sm100_blockwise.py)."""

from triton.experimental import gluon
from triton.experimental.gluon import language as gl

from tilepipe.pipeline.cluster import row_bases

SCALE_BLOCK = gl.constexpr(128)  # the K (and B's N) extent one blockwise scale covers
SCALE_ALIGN = gl.constexpr(4)  # fp32 words in 16 bytes: TMA's innermost coordinate must be a multiple of 16 bytes


@gluon.jit
def a_scales_at(sa_desc, row, k):
    """Where K block k's scales of the A rows from `row` start in sa_desc, over scale_a^T (K blocks x M): [k, row]
    (`row` a multiple of SCALE_ALIGN: a tile's first row in a GEMM's grid)."""
    return k, row


@gluon.jit
def shifted_a_scales_at(sa_desc, row, k):
    """a_scales_at for A rows from any `row` (a grouped GEMM's tile starts at its group's first row): sa_desc over
    SCALE_ALIGN copies of scale_a^T stacked, copy j shifted up by j rows (api/grouped_fp8.py shifted_scale_rows), so
    the rows from `row` start in copy row % SCALE_ALIGN at row rounded down to a multiple of SCALE_ALIGN, on 16 bytes
    as TMA needs (docs/fp8.md rule 1; an unaligned start is an illegal instruction)."""
    aligned = row & -SCALE_ALIGN
    return (row - aligned) * (sa_desc.shape[0] // SCALE_ALIGN) + k, aligned


@gluon.jit
def load_stage_scales(stage, sa_desc, sb_desc, row, b_row, k, A_SCALES_AT: gl.constexpr = a_scales_at):
    """TMA-load K block k's scales of the tile whose A rows start at `row` and B rows (B's N, in B's descriptor) at
    `b_row` into the stage (its "a_scales" and "b_scales" arrays): A's column of BM row scales (where A_SCALES_AT
    says), and the tile's B boxes (one per 128 rows of B) from K block k - k % SCALE_ALIGN (stage_scales picks the
    block's word)."""
    a_k, a_row = A_SCALES_AT(sa_desc, row, k)
    stage.load("a_scales", sa_desc, [a_k, a_row])
    stage.load("b_scales", sb_desc, [b_row // SCALE_BLOCK, k - k % SCALE_ALIGN])


@gluon.jit
def stage_scales(tiles, k, layout: gl.constexpr):
    """scale_a[row] * scale_b of K block k (the stage's) per accumulator row and per CTA along N (each holds its own
    128 columns, so its own B block), read from shared memory: a [BM, CN] tensor in `layout`.

    A CTA's B box starts at K block k - k % SCALE_ALIGN (see load_stage_scales): its word k % SCALE_ALIGN scales every
    row."""
    a_scales = tiles.tile("a_scales")
    b_scales = tiles.tile("b_scales")
    row: gl.constexpr = gl.SwizzledSharedLayout(1, 1, 1, [0], row_bases(a_scales.type.layout.cga_layout))
    sa = a_scales.reinterpret(gl.float32, [a_scales.shape[1]], row).load(gl.SliceLayout(1, layout))
    every_word: gl.constexpr = gl.BlockedLayout([1, SCALE_ALIGN], [32, 1], [gl.num_warps(), 1], [1, 0],
                                                b_scales.type.layout.cga_layout)  # each thread: its CTA's 4 words
    words = b_scales.slice(0, SCALE_ALIGN, 1).load(every_word)
    block = gl.arange(0, SCALE_ALIGN, gl.SliceLayout(0, every_word)) == k % SCALE_ALIGN
    sb = gl.sum(gl.where(gl.expand_dims(block, 0), words, 0.0), axis=1)
    sb = gl.convert_layout(sb, gl.SliceLayout(0, layout), assert_trivial=True)
    return gl.expand_dims(sa, 1) * gl.expand_dims(sb, 0)


@gluon.jit
def promote(acc, partial, scale, view: gl.constexpr):
    """acc + partial * scale, the [BM, CN] `scale` broadcast over each CTA's columns: the partial sum seen as
    [BM, CN, BN / CN] in `view` (cluster.column_runs), the same registers."""
    BM: gl.constexpr = partial.shape[0]
    BN: gl.constexpr = partial.shape[1]
    CN: gl.constexpr = scale.shape[1]
    runs = gl.convert_layout(partial.reshape([BM, CN, BN // CN]), view, assert_trivial=True)
    scaled = (runs * gl.expand_dims(scale, 2)).reshape([BM, BN])
    return acc + gl.convert_layout(scaled, acc.type.layout, assert_trivial=True)
