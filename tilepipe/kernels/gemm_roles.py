"""The GEMM roles the GEMM kernels share, as CUTLASS splits its collectives from the kernel: the TMA load warp (sm_90a
and sm_100a, block-scaled payloads included), the TMA store warp and the epilogue-load warp, the C pipelines they
take, and the sm_90a MMA role's main loop (the epilogues: kernels/epilogues.py). Each walks its tiles through the
kernel's scheduler and touches shared memory only through the pipelines it is given."""

from triton.experimental import gluon
from triton.experimental.gluon import language as gl

from tilepipe.pipeline.epilogue import EpiLoadPipeline, LoadOrderBarrier
from tilepipe.pipeline.output import OutputTilePipeline
from tilepipe.pipeline.pieces import piece_zeros, tile_boxes
from tilepipe.pipeline.tiles import InputTilePipeline

WORKER_WARPS = gl.constexpr(1)
WORKER_REGS = gl.constexpr(40)
CLUSTER_STREAMK_STORE_REGS = 48


@gluon.constexpr_function
def store_regs(streamk, num_ctas):
    """The store role's registers: WORKER_REGS, or 48 under stream-K in a cluster (1x2: at 40 its partials spilled)."""
    return CLUSTER_STREAMK_STORE_REGS if streamk and num_ctas > 1 else WORKER_REGS.value


@gluon.jit
def c_pipelines(smem, c_tiles, HAS_C: gl.constexpr, STREAMK: gl.constexpr = False):
    """The C pipeline (into `c_tiles`, where C lands) and load-order barrier a GEMM's roles take. Without C they are
    stand-ins over the output pipeline, never used: a role (the default partition above all) cannot be handed None;
    under STREAMK the C pipeline is real (it brings partial sums, pipeline/partials.py)."""
    if HAS_C:
        sources = EpiLoadPipeline(smem.pipelines.epi_load, c_tiles)
        load_order = LoadOrderBarrier(smem.load_order)
    elif STREAMK:
        sources = EpiLoadPipeline(smem.pipelines.epi_load, c_tiles)
        load_order = LoadOrderBarrier(smem.pipelines.output)
    else:
        sources = EpiLoadPipeline(smem.pipelines.output, c_tiles)
        load_order = LoadOrderBarrier(smem.pipelines.output)
    return sources, load_order


@gluon.jit
def load_role(inputs: InputTilePipeline, load_order: LoadOrderBarrier, a_desc, b_desc, sched, k_tiles,
              B_KMAJOR: gl.constexpr, HAS_C: gl.constexpr, sfa_desc=None, sfb_desc=None, arrivals=None,
              A_KMAJOR: gl.constexpr = True):
    """A and B tiles per k-step through work.operands' descriptors, in their boxes (a pieced tile takes several); given
    scale descriptors, a block-scaled payload's scales; given `arrivals` (flags.py ChunkFlags), each tile waits for
    the chunk of A holding its rows, its rank's own from the shard's descriptor. A_KMAJOR False: A's tiles BK x BM."""
    BM: gl.constexpr = inputs.payload.a_tiles.shape[1] if A_KMAJOR else inputs.payload.a_tiles.shape[2]
    BK: gl.constexpr = a_desc.block_type.shape[1] if A_KMAJOR else a_desc.block_type.shape[0]
    BN: gl.constexpr = inputs.payload.b_tiles.shape[1] if B_KMAJOR else inputs.payload.b_tiles.shape[2]
    A_BOXES: gl.constexpr = tile_boxes(inputs.payload.a_tiles, a_desc)
    B_BOXES: gl.constexpr = tile_boxes(inputs.payload.b_tiles, b_desc)
    gl.static_assert(sfa_desc is None or not sched.grid.INWARD, "block scales are loaded at the tile's coordinates: "
                     "a block-scaled kernel takes no edge tiles moved inside D (TileGrid INWARD)")
    producer = inputs.producer()
    a_from, b_from = a_desc, b_desc
    work = sched.work(paces=True)
    while work.valid:
        pid_m, pid_n = work.coords()
        row, col = work.origin(BM, BN)
        if arrivals is not None:
            arrivals = arrivals.wait_rows(row)
        k_begin, k_end = work.k_steps(k_tiles)
        a_from, b_from = work.operands(a_from, b_from, a_desc, b_desc, A_KMAJOR, B_KMAJOR)
        for k in range(k_begin, k_end):
            with producer.produce() as tiles:
                if sfa_desc is None:
                    tiles.expect_loads(a_desc, b_desc, boxes=(A_BOXES, B_BOXES))
                else:
                    tiles.expect_loads(a_desc, b_desc, sfa_desc, sfb_desc)
                    tiles.load_scales(sfa_desc, sfb_desc, pid_m, pid_n, k)
                if arrivals is None:
                    a_row, a_col = work.a_coords(row, k * BK, A_KMAJOR)
                    tiles.load_a(a_from, [a_row, a_col])
                else:  # this rank's own chunk from its shard, the others from the gathered A
                    arrivals.load_a(tiles, a_from, row, k * BK)
                b_row, b_col = work.b_coords(col, k * BK, B_KMAJOR)
                tiles.load_b(b_from, [b_row, b_col])
        if HAS_C and work.finishes:
            load_order = load_order.signal()  # this tile's main-loop loads are on their way
        work = work.next()
    producer.drain()
    if HAS_C:
        load_order.drain()


@gluon.jit
def output_origin(work, ROWS: gl.constexpr, COLS: gl.constexpr, SWAP_AB: gl.constexpr = False):
    """Where the ROWS x COLS tile of D of the scheduler's current tile starts: its origin (moved inside D's edges where
    the grid says so: TileGrid), or its transpose's where the kernel computes D^T = B^T A^T (SWAP_AB)."""
    if SWAP_AB:
        pid_m, pid_n = work.coords()
        return pid_n * ROWS, pid_m * COLS
    return work.origin(ROWS, COLS)


@gluon.jit
def store_role(outputs: OutputTilePipeline, sources: EpiLoadPipeline, d_desc, sched, SOURCES: gl.constexpr,
               SWAP_AB: gl.constexpr = False, D_BN: gl.constexpr = None, deliveries=None):
    """SOURCES: the stages also receive C or partial sums (the epi_load ring), which this role frees. D_BN: D's tile's
    columns where a stage holds a sub-tile (a stage each), else None. `deliveries` (pipeline/flags.py RingDelivery):
    each tile's destination in place of `d_desc`, and the tile's flag once it is stored."""
    BM: gl.constexpr = outputs.tiles.shape[1]  # D's tile (d_desc's block, or its boxes' where the tile is pieced)
    SUB_N: gl.constexpr = outputs.tiles.shape[2]
    BN: gl.constexpr = SUB_N if D_BN is None else D_BN
    work = sched.work()
    while work.valid:
        if work.finishes:
            outputs, sources = work.pass_partials(outputs, sources)  # stream-K: stages the partial sums came in
            for j in gl.static_range(BN // SUB_N):
                with outputs.consume() as out:
                    row, col = output_origin(work, BM, BN, SWAP_AB)
                    if deliveries is None:
                        out.store(d_desc, [row, col + j * SUB_N])
                    else:
                        deliveries.store(out, work, row, col + j * SUB_N)
                    if SOURCES:
                        sources = sources.release()  # C was used and D stored: the stage may receive the next C
            if deliveries is not None:
                deliveries.sent(work)
        else:
            outputs, sources = work.store_partial(outputs, sources)  # stream-K contributor
        work = work.next()


@gluon.jit
def epilogue_load_role(sources: EpiLoadPipeline, load_order: LoadOrderBarrier, c_desc, sched, BN: gl.constexpr,
                       SWAP_AB: gl.constexpr = False, HAS_C: gl.constexpr = True, arrivals=None):
    """C of each finished BM x BN tile of D, a source stage at a time (sm_90a: the whole tile, a pieced one box by
    box; sm_100a: a sub-tile a stage), after stream-K's partial sums; an empty fill for a stage use without a load
    (pipeline/partials.py, work.adds_c). `arrivals` (flags.py TileFlags): C waits for another rank's partial sums."""
    BM: gl.constexpr = sources.tiles.shape[1]  # a stage's tile: c_desc's block, or its boxes' where it is pieced
    SUB_N: gl.constexpr = sources.tiles.shape[2]
    work = sched.work()
    while work.valid:
        if work.finishes:
            sources = work.fetch_partials(sources)
            if HAS_C:
                load_order = load_order.wait()  # this tile's main-loop loads were issued first
                row, col = output_origin(work, BM, BN, SWAP_AB)
                if arrivals is not None:
                    arrivals, row = arrivals.wait_for(work, row)  # and where C's rows lie: this call's slots
                adds = work.adds_c()
                for j in gl.static_range(BN // SUB_N):
                    if adds:
                        sources = sources.load(c_desc, [row, col + j * SUB_N])
                    else:
                        sources = sources.skip()
            else:
                for j in gl.static_range(BN // SUB_N):
                    sources = sources.skip()
        else:
            sources = work.skip_partial(sources)
        work = work.next()
    sources.drain()


@gluon.constexpr_function
def operand_accumulator(acc_layout, dtype):
    """`acc_layout` with the wgmma instruction's K for operands of `dtype` (16 for 16-bit, 32 for FP8): the same
    registers, so a role written for 16-bit operands (matmul's mma role, whose layout says 16) also runs FP8 ones."""
    instr_k = 256 // dtype.primitive_bitwidth
    if acc_layout.instr_shape[2] == instr_k:
        return acc_layout
    return gl.NVMMADistributedLayout(acc_layout.version, acc_layout.warps_per_cta,
                                     [*acc_layout.instr_shape[:2], instr_k], acc_layout.cga_layout)


@gluon.jit
def wgmma_unit(consumer, work, k_tiles, BM: gl.constexpr, BN: gl.constexpr, acc_layout: gl.constexpr,
               B_KMAJOR: gl.constexpr, A_KMAJOR: gl.constexpr = True):
    """An sm_90a MMA role's main loop for one scheduler unit (wgmma_steps), the last wgmmas retired: (acc, consumer)."""
    acc, consumer = wgmma_steps(consumer, work, k_tiles, BM, BN, acc_layout, B_KMAJOR, A_KMAJOR)
    acc, consumer = consumer.retire(acc)
    if acc_layout is not None:  # FP8 operands under a 16-bit role's layout: the same registers (operand_accumulator)
        acc = gl.convert_layout(acc, acc_layout)
    return acc, consumer


@gluon.jit
def wgmma_steps(consumer, work, k_tiles, BM: gl.constexpr, BN: gl.constexpr, acc_layout: gl.constexpr,
                B_KMAJOR: gl.constexpr, A_KMAJOR: gl.constexpr = True):
    """A fresh accumulator, one wgmma per k-step of the unit on the input stages (B transposed when K-major, A when
    M-major; what a stage holds outside the unit's K zeroed first: work.mask_k), the last ones still in flight:
    (acc, consumer). A pieced tile (acc_layout None, pipeline/pieces.py): a tuple of accumulators, a wgmma a piece."""
    acc = piece_zeros(BM, BN, gl.num_warps()) if acc_layout is None else gl.zeros(
        [BM, BN], gl.float32, operand_accumulator(acc_layout, consumer.payload.a_tiles.dtype))
    k_begin, k_end = work.k_steps(k_tiles)
    for k in range(k_begin, k_end):
        tiles = consumer.acquire()
        work.mask_k(tiles, k, A_KMAJOR, B_KMAJOR)
        b = tiles.b_tile()  # B's view before A's: the order the dense kernel's PTX is pinned in (tests/test_probe.py)
        if B_KMAJOR:
            b = b.permute((1, 0))
        a = tiles.a_tile()
        if not A_KMAJOR:
            a = a.permute((1, 0))
        acc, consumer = tiles.wgmma(a, b, acc)
    return acc, consumer
