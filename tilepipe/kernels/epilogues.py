"""The GEMM epilogues the kernels share: the sm_90a store of a finished tile through its epilogue function
(kernels/epilogue_functions.py; whole, in sub-tiles, or pieced: pipeline/pieces.py), handed the tile's bias where
the kernel read it ahead of its main loop (kernels/read_ahead.py); and the sm_100a GEMMs' epilogue role (TMEM
sub-tiles to TMA stores; its own bias, read with part_bias, and C, not the epilogue functions)."""

from triton.experimental import gluon
from triton.experimental.gluon import language as gl

from tilepipe.kernels.epilogue_functions import EpilogueArgs, columns_in, epilogue_function, paired_columns, part_bias
from tilepipe.kernels.read_ahead import bias_part
from tilepipe.pipeline.epilogue import EpiLoadPipeline
from tilepipe.pipeline.output import OutputTilePipeline, SubtileStores, column_part
from tilepipe.pipeline.pieces import piece_col, piece_count, piece_row


@gluon.jit
def store_tile(outputs: OutputTilePipeline, sources: EpiLoadPipeline, d, alpha, beta, bias_ptr, N, first_col,
               HAS_C: gl.constexpr, HAS_BIAS: gl.constexpr, STREAMK: gl.constexpr, EPILOGUE: gl.constexpr = None,
               first_row=0, bias=None, adds_c=True):
    """The sm_90a epilogue of D's finished tile `d` (at first_row, first_col of the GEMM's output): the EPILOGUE
    function (epilogue_function; C waited for in `sources` where HAS_C, landed in the output stage or its own source
    stage) into the output stages, a stage per sub-tile where a stage is narrower than the tile (each split off in
    registers, COLUMNS_IN accumulator columns per column of the stage); under STREAMK each stage use takes its empty
    fill; a swap-AB tile's parts are first brought into each thread's registers (paired_columns). `bias`: the tile's
    read ahead (tile_bias; None: the epilogue reads its own). `adds_c` (the work's): False where C's stages got an
    empty fill (the ring's first chunk), so the epilogue runs without C. Returns (outputs, sources), advanced."""
    epilogue: gl.constexpr = epilogue_function(EPILOGUE, HAS_C)
    without_c: gl.constexpr = epilogue_function(EPILOGUE, False)
    gl.static_assert(columns_in(EPILOGUE) == 1 or not (HAS_C or STREAMK), "a gated epilogue runs without C or stream-K")
    PART_N: gl.constexpr = outputs.tiles.shape[2] * columns_in(EPILOGUE)
    PARTS: gl.constexpr = d.shape[1] // PART_N
    d = gl.convert_layout(d, paired_columns(d.type.layout, d.shape, PART_N))
    for j in gl.static_range(PARTS):
        part = column_part(d, j, PARTS)
        args = EpilogueArgs(alpha, beta, bias_ptr, N, HAS_BIAS, bias=bias_part(bias, j))
        with outputs.produce() as out:
            col = first_col + j * PART_N
            if HAS_C or STREAMK:
                source, sources = sources.wait()  # C, or (stream-K, the ring's first chunk) this use's empty fill
            if not HAS_C:
                part = without_c(part, None, args, first_row, col)
            elif adds_c:
                part = epilogue(part, source.load(part.type.layout).to(gl.float32), args, first_row, col)
            else:
                part = without_c(part, None, args, first_row, col)
            out.tile().store(part.to(outputs.tiles.dtype))
            out.arrive()
    return outputs, sources


@gluon.jit
def store_pieced(outputs: OutputTilePipeline, sources: EpiLoadPipeline, acc, alpha, beta, bias_ptr, N, first_col,
                 COLS: gl.constexpr, HAS_C: gl.constexpr, HAS_BIAS: gl.constexpr, EPILOGUE: gl.constexpr = None,
                 first_row=0, bias=None):
    """A pieced tile's epilogue (pipeline/pieces.py) with COLS columns: each piece's accumulator into its array of one
    output stage (store_pieces, C landed there), or, where a stage holds a sub-tile of D (a tile pieced by its
    columns), through store_tile's sub-tile stages piece after piece, in the column order the C loads and the TMA
    stores walk; `bias`: the pieces' read ahead (tile_bias), or None. Returns (outputs, sources), advanced."""
    ROWS: gl.constexpr = outputs.tiles.shape[1]
    gl.static_assert(columns_in(EPILOGUE) == 1, "a pieced tile takes epilogues that write every column they read")
    if outputs.tiles.shape[2] < COLS:
        for p in gl.static_range(piece_count(ROWS, COLS)):
            outputs, sources = store_tile(outputs, sources, acc[p], alpha, beta, bias_ptr, N,
                                          first_col + piece_col(ROWS, COLS, p), HAS_C, HAS_BIAS, False, EPILOGUE,
                                          first_row, None if bias is None else bias[p])
    else:
        with outputs.produce() as out:
            sources = store_pieces(out.tile(), acc, EpilogueArgs(alpha, beta, bias_ptr, N, HAS_BIAS), first_row,
                                   first_col, sources, HAS_C, EPILOGUE, bias)
            out.arrive()
    return outputs, sources


@gluon.jit
def store_pieces(tile, acc, args: EpilogueArgs, first_row, first_col, sources, HAS_C: gl.constexpr,
                 EPILOGUE: gl.constexpr, bias=None):
    """A pieced tile's epilogue (pipeline/pieces.py): the EPILOGUE function of each piece's accumulator and its piece
    of C (HAS_C: waited for in `sources`, landed in this output stage) into its array of the output stage `tile`;
    first_row, first_col: the tile's origin; `bias`: the pieces' read ahead, or None. Returns `sources`, advanced."""
    ROWS: gl.constexpr = tile.shape[0]
    COLS: gl.constexpr = tile.shape[1]
    epilogue: gl.constexpr = epilogue_function(EPILOGUE, HAS_C)
    if HAS_C:
        source, sources = sources.wait()
    for p in gl.static_range(piece_count(ROWS, COLS)):
        c = None
        if HAS_C:
            c = source.piece(p).load(acc[p].type.layout).to(gl.float32)
        if bias is not None:  # the piece's, whole
            args = EpilogueArgs(args.alpha, args.beta, args.bias_ptr, args.N, args.HAS_BIAS, bias=bias_part(bias[p], 0))
        d = epilogue(acc[p], c, args, first_row + piece_row(ROWS, COLS, p), first_col + piece_col(ROWS, COLS, p))
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
                    bias = part_bias(EpilogueArgs(alpha, beta, bias_ptr, N, HAS_BIAS), pid_n * BN + j * EPI_N, EPI_N,
                                     layout)
                    d = alpha * d + beta * bias[None, :]
                elif SA_STRIDE >= 0:
                    cols = pid_n * BN + j * EPI_N + gl.arange(0, EPI_N, gl.SliceLayout(0, layout))
                    d = d * row_scales * gl.load(scale_b + cols * SB_STRIDE, mask=cols < N, other=0.0)[None, :]
                else:
                    d = alpha * d
                stores.store(d_desc, [pid_m * BM, pid_n * BN + j * EPI_N], d, j)
        work = work.next()
    stores.drain()
