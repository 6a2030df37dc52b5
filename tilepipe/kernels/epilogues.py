"""The GEMM epilogues the kernels share: the per-column bias read, the sm_90a epilogue (whole or in sub-tiles), a
pieced tile's epilogue (its accumulators, with C or a bias: pipeline/pieces.py), and the sm_100a GEMMs' epilogue role
(TMEM sub-tiles to TMA stores)."""

from triton.experimental import gluon
from triton.experimental.gluon import language as gl

from tilepipe.pipeline.epilogue import EpiLoadPipeline
from tilepipe.pipeline.output import OutputTilePipeline, SubtileStores, column_part
from tilepipe.pipeline.pieces import piece_col, piece_count


@gluon.jit
def column_bias(bias_ptr, N, first_col, COLS: gl.constexpr, layout: gl.constexpr):
    """The COLS bias values from column first_col (zero past N), in fp32, laid out along the columns of `layout`."""
    cols = first_col + gl.arange(0, COLS, layout=gl.SliceLayout(0, layout))
    return gl.load(bias_ptr + cols, mask=cols < N, other=0.0).to(gl.float32)


@gluon.jit
def scaled(d, alpha, beta, bias_ptr, N, first_col, HAS_BIAS: gl.constexpr):
    """The sm_90a epilogue without C: alpha * d, plus beta * bias[col] (HAS_BIAS) for d's columns from first_col."""
    if HAS_BIAS:
        return alpha * d + beta * column_bias(bias_ptr, N, first_col, d.shape[1], d.type.layout)[None, :]
    return alpha * d


@gluon.jit
def store_tile(outputs: OutputTilePipeline, sources: EpiLoadPipeline, d, alpha, beta, bias_ptr, N, first_col,
               HAS_C: gl.constexpr, HAS_BIAS: gl.constexpr, STREAMK: gl.constexpr):
    """The sm_90a epilogue of D's finished tile `d` (first_col: its first column of D): alpha * d plus beta times C
    (HAS_C: waited for in `sources`, landed in the output stage or its own source stage) or the bias, into the output
    stages, a stage per sub-tile where a stage is narrower than the tile (each split off in registers); under STREAMK
    each stage use takes its empty fill. Returns (outputs, sources), advanced."""
    SUB_N: gl.constexpr = outputs.tiles.shape[2]
    PARTS: gl.constexpr = d.shape[1] // SUB_N
    for j in gl.static_range(PARTS):
        part = column_part(d, j, PARTS)
        with outputs.produce() as out:
            if HAS_C:
                source, sources = sources.wait()
                part = alpha * part + beta * source.load(part.type.layout).to(gl.float32)
            else:
                if STREAMK:
                    _, sources = sources.wait()  # this use's empty fill
                part = scaled(part, alpha, beta, bias_ptr, N, first_col + j * SUB_N, HAS_BIAS)
            out.tile().store(part.to(outputs.tiles.dtype))
            out.arrive()
    return outputs, sources


@gluon.jit
def store_pieced(outputs: OutputTilePipeline, sources: EpiLoadPipeline, acc, alpha, beta, bias_ptr, N, first_col,
                 COLS: gl.constexpr, HAS_C: gl.constexpr, HAS_BIAS: gl.constexpr):
    """A pieced tile's epilogue (pipeline/pieces.py) with COLS columns: each piece's accumulator into its array of one
    output stage (store_pieces, C landed there), or, where a stage holds a sub-tile of D (a tile pieced by its
    columns), through store_tile's sub-tile stages piece after piece, in the column order the C loads and the TMA
    stores walk. Returns (outputs, sources), advanced."""
    ROWS: gl.constexpr = outputs.tiles.shape[1]
    if outputs.tiles.shape[2] < COLS:
        for p in gl.static_range(piece_count(ROWS, COLS)):
            outputs, sources = store_tile(outputs, sources, acc[p], alpha, beta, bias_ptr, N,
                                          first_col + piece_col(ROWS, COLS, p), HAS_C, HAS_BIAS, False)
    else:
        with outputs.produce() as out:
            sources = store_pieces(out.tile(), acc, alpha, beta, bias_ptr, N, first_col, HAS_BIAS, sources, HAS_C)
            out.arrive()
    return outputs, sources


@gluon.jit
def store_pieces(tile, acc, alpha, beta, bias_ptr, N, first_col, HAS_BIAS: gl.constexpr, sources, HAS_C: gl.constexpr):
    """A pieced tile's epilogue (pipeline/pieces.py): each piece's accumulator, scaled, plus beta times its piece of C
    (HAS_C: waited for in `sources`, landed in this output stage) or of the bias, into its array of the output stage
    `tile`; first_col: the tile's first column of D. Returns `sources`, advanced past C."""
    ROWS: gl.constexpr = tile.shape[0]
    COLS: gl.constexpr = tile.shape[1]
    if HAS_C:
        source, sources = sources.wait()
    for p in gl.static_range(piece_count(ROWS, COLS)):
        if HAS_C:
            d = alpha * acc[p] + beta * source.piece(p).load(acc[p].type.layout).to(gl.float32)
        else:
            d = scaled(acc[p], alpha, beta, bias_ptr, N, first_col + piece_col(ROWS, COLS, p), HAS_BIAS)
        tile.piece(p).store(d.to(tile.dtype))
    return sources


@gluon.jit
def epilogue_role(accs: OutputTilePipeline, stores: SubtileStores, sources: EpiLoadPipeline, sched, d_desc, alpha,
                  beta, bias_ptr, scale_a, scale_b, M, N, HAS_C: gl.constexpr, HAS_BIAS: gl.constexpr,
                  SA_STRIDE: gl.constexpr, SB_STRIDE: gl.constexpr):
    """The sm_100a GEMMs' epilogue (kernels/sm100_matmul.py). SA_STRIDE, SB_STRIDE >= 0 (FP8): D times
    scale_a[row * SA_STRIDE] * scale_b[col * SB_STRIDE]; -1: no scales. Over a two-CTA accumulator each CTA reads and
    stores its own half of the rows (the TMEM, register and D-buffer layouts all split them over the pair)."""
    BM: gl.constexpr = accs.tiles.shape[1]
    BN: gl.constexpr = accs.tiles.shape[2]
    EPI_N: gl.constexpr = d_desc.block_type.shape[1]
    SUBTILES: gl.constexpr = BN // EPI_N
    layout: gl.constexpr = accs.tiles.index(0).slice(0, EPI_N).get_reg_layout()  # of a sub-tile's TMEM load
    work = sched.work()
    while work.valid:
        pid_m, pid_n = work.coords()
        if SA_STRIDE >= 0:
            rows = pid_m * BM + gl.arange(0, BM, gl.SliceLayout(1, layout))
            row_scales = gl.load(scale_a + rows * SA_STRIDE, mask=rows < M, other=0.0)[:, None]
        with accs.consume_explicit() as acc:
            for j in gl.static_range(SUBTILES):
                d = acc.tile().slice(j * EPI_N, EPI_N).load(layout)
                if j == SUBTILES - 1:
                    acc.arrive()  # every TMEM load of the tile is done: the MMA role may overwrite the accumulator
                if HAS_C:
                    with sources.consume() as source:  # C sub-tile j has landed; freed once read
                        d = alpha * d + beta * sources.tiles.index(source.index()).load(layout).to(gl.float32)
                elif HAS_BIAS:
                    d = alpha * d + beta * column_bias(bias_ptr, N, pid_n * BN + j * EPI_N, EPI_N, layout)[None, :]
                elif SA_STRIDE >= 0:
                    cols = pid_n * BN + j * EPI_N + gl.arange(0, EPI_N, gl.SliceLayout(0, layout))
                    d = d * row_scales * gl.load(scale_b + cols * SB_STRIDE, mask=cols < N, other=0.0)[None, :]
                else:
                    d = alpha * d
                stores.store(d_desc, [pid_m * BM, pid_n * BN + j * EPI_N], d, j)
        work = work.next()
    stores.drain()
