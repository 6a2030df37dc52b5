"""Warp-specialized persistent GEMM for sm_90a: D = alpha * A @ B (+ beta * C), written only with tilepipe's
roles and pipelines.

Roles (one CTA per SM; tiles in grouped order, from the static or the dynamic scheduler, tilepipe/scheduler.py):
  load           (1 warp)   TMA A and B tiles into the input tile pipeline; paces the dynamic scheduler
  mma            (8 warps)  two wgmma warpgroups, one wgmma kept in flight; the epilogue writes D to an output stage
  store          (1 warp)   TMA-stores each output stage while the mma role runs the next tile's main loop
  epilogue_load  (1 warp, with C)  TMA-loads the C tile into the output stage the tile will use, once the tile's
                 main-loop loads were issued (load-order pipeline) and the store role freed the stage
  scheduler      (1 warp, DYNAMIC)  draws tile ids from a global counter and hands them to every other role
A is M x K row-major; B is N x K (K-major, B_KMAJOR) or K x N (row-major). C has D's dtype, and then lands in the
output stage it will be stored from, or is fp32 with a 16-bit D, and then lands in its own source stages
(`SourceTileStorage`). C may be D itself: each tile is read before it is written, by the same CTA.
A per-column bias (HAS_BIAS: D = alpha * A @ B + beta * bias[col]) needs no C pipeline: the mma role reads the
tile's BN bias values straight from global memory in its epilogue.
"""

from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import tma, warpgroup_mma, warpgroup_mma_wait

from tilepipe.epilogue import EpiLoadPipeline, LoadOrderBarrier
from tilepipe.output import OutputTilePipeline
from tilepipe.roles import warp_specialize
from tilepipe.scheduler import DynamicTileScheduler, StaticTileScheduler, scheduler_role
from tilepipe.storage import (ClcPipelineStorage, EpiLoadPipelineStorage, InputPipelineStorage, LoadOrderBarrierStorage,
                              OutputPipelineStorage, OutputTileStorage, SmemPipelineBundle, SmemPlan,
                              SourceTileStorage, StandardTileStorage)
from tilepipe.tiles import InputTilePipeline

WORKER_WARPS = gl.constexpr(1)
WORKER_REGS = gl.constexpr(40)
SCHEDULER_STAGES = 2  # tile ids in flight: the throttle keeps the scheduler one tile ahead of the load role


@gluon.constexpr_function
def matmul_plan(block_m, block_n, block_k, stages, c_stages, dtype, c_dtype, b_kmajor, has_c=False, src_dtype=None,
                dynamic=False):
    """Shared memory: operand stages, output stages (which also receive C of D's dtype), source stages for C of
    another dtype (`src_dtype`), and the pipelines between the roles (with the dynamic scheduler, its tile-id
    ring: every other role consumes it)."""
    b_tile = (block_n, block_k) if b_kmajor else (block_k, block_n)
    sources = EpiLoadPipelineStorage(c_stages, consumer="store") if has_c else None
    clc = ClcPipelineStorage(SCHEDULER_STAGES, ("load", "mma", "store") + (("epilogue_load", ) if has_c else ()))
    storages = dict(operands=StandardTileStorage(dtype, dtype, (block_m, block_k), b_tile, stages),
                    c_tiles=OutputTileStorage(c_dtype, (block_m, block_n), c_stages),
                    pipelines=SmemPipelineBundle(
                        InputPipelineStorage(stages),
                        OutputPipelineStorage(c_stages, consumer="store", producer_proxy="generic",
                                              consumer_proxy="async"),
                        clc=clc if dynamic else None, epi_load=sources))
    if has_c:
        storages["load_order"] = LoadOrderBarrierStorage()
    if has_c and src_dtype is not None and src_dtype != c_dtype:
        storages["src_tiles"] = SourceTileStorage(src_dtype, (block_m, block_n), c_stages)
    return SmemPlan("sm_90a", **storages)


@gluon.jit
def load_role(inputs: InputTilePipeline, load_order: LoadOrderBarrier, a_desc, b_desc, sched, k_tiles,
              B_KMAJOR: gl.constexpr, HAS_C: gl.constexpr):
    BM: gl.constexpr = a_desc.block_type.shape[0]
    BK: gl.constexpr = a_desc.block_type.shape[1]
    BN: gl.constexpr = b_desc.block_type.shape[0] if B_KMAJOR else b_desc.block_type.shape[1]
    producer = inputs.producer()
    work = sched.work(paces=True)
    while work.valid:
        row, col = work.origin(BM, BN)
        for k in range(k_tiles):
            with producer.produce() as tiles:
                tiles.expect_bytes(a_desc.block_type.nbytes + b_desc.block_type.nbytes)
                tma.async_load(a_desc, [row, k * BK], tiles.mbar(), tiles.a_tile())
                if B_KMAJOR:
                    tma.async_load(b_desc, [col, k * BK], tiles.mbar(), tiles.b_tile())
                else:
                    tma.async_load(b_desc, [k * BK, col], tiles.mbar(), tiles.b_tile())
        if HAS_C:
            load_order = load_order.signal()  # this tile's main-loop loads are on their way
        work = work.next()
    producer.drain()
    if HAS_C:
        load_order.drain()


@gluon.jit
def mma_role(inputs: InputTilePipeline, outputs: OutputTilePipeline, sources: EpiLoadPipeline, sched, k_tiles, alpha,
             beta, bias_ptr, N, B_KMAJOR: gl.constexpr, HAS_C: gl.constexpr, HAS_BIAS: gl.constexpr):
    BM: gl.constexpr = outputs.tiles.shape[1]
    BN: gl.constexpr = outputs.tiles.shape[2]
    acc_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[gl.num_warps(), 1],
                                                         instr_shape=[16, BN, 16])
    consumer = inputs.consumer().with_release_lag(1)
    work = sched.work()
    while work.valid:
        acc = gl.zeros([BM, BN], gl.float32, acc_layout)
        for k in range(k_tiles):
            tiles = consumer.acquire()
            b = tiles.b_tile()
            if B_KMAJOR:
                b = b.permute((1, 0))
            acc = warpgroup_mma(tiles.a_tile(), b, acc, is_async=True)
            acc = warpgroup_mma_wait(num_outstanding=1, deps=(acc, ))
            consumer = tiles.release()
        acc = warpgroup_mma_wait(num_outstanding=0, deps=(acc, ))
        consumer = consumer.flush_releases()
        with outputs.produce() as out:
            if HAS_C:
                source, sources = sources.wait()  # C was loaded into this output stage, or its own source stage
                acc = alpha * acc + beta * source.load(acc_layout).to(gl.float32)
            elif HAS_BIAS:
                _, col = work.origin(BM, BN)
                acc = alpha * acc + beta * column_bias(bias_ptr, N, col, BN, acc_layout)[None, :]
            else:
                acc = alpha * acc
            out.tile().store(acc.to(outputs.tiles.dtype))
            out.arrive()
        work = work.next()
    outputs.drain()


@gluon.jit
def column_bias(bias_ptr, N, col, BN: gl.constexpr, acc_layout: gl.constexpr):
    """The BN bias values from column col (zero past N), in fp32, laid out along the accumulator's columns."""
    cols = col + gl.arange(0, BN, layout=gl.SliceLayout(0, acc_layout))
    return gl.load(bias_ptr + cols, mask=cols < N, other=0.0).to(gl.float32)


@gluon.jit
def store_role(outputs: OutputTilePipeline, sources: EpiLoadPipeline, d_desc, sched, HAS_C: gl.constexpr):
    BM: gl.constexpr = d_desc.block_type.shape[0]
    BN: gl.constexpr = d_desc.block_type.shape[1]
    work = sched.work()
    while work.valid:
        with outputs.consume() as out:
            row, col = work.origin(BM, BN)
            tma.async_store(d_desc, [row, col], out.tile())
            tma.store_wait(0)
            if HAS_C:
                sources = sources.release()  # C was used and D stored: the stage may receive the next C
        work = work.next()


@gluon.jit
def epilogue_load_role(sources: EpiLoadPipeline, load_order: LoadOrderBarrier, c_desc, sched):
    BM: gl.constexpr = c_desc.block_type.shape[0]
    BN: gl.constexpr = c_desc.block_type.shape[1]
    work = sched.work()
    while work.valid:
        load_order = load_order.wait()  # this tile's main-loop loads were issued first
        row, col = work.origin(BM, BN)
        sources = sources.load(c_desc, [row, col])
        work = work.next()
    sources.drain()


@gluon.jit(do_not_specialize=["M", "N", "K", "alpha", "beta", "bias_ptr"])  # one binary per configuration
def matmul_kernel(a_desc, b_desc, d_desc, c_desc, bias_ptr, counter, M, N, K, alpha, beta, STAGES: gl.constexpr,
                  C_STAGES: gl.constexpr, GROUP_M: gl.constexpr, B_KMAJOR: gl.constexpr, HAS_C: gl.constexpr,
                  HAS_BIAS: gl.constexpr, DYNAMIC: gl.constexpr):
    """`counter`: the dynamic scheduler's int32 tile counter (zero between launches; unused by the static one)."""
    BM: gl.constexpr = d_desc.block_type.shape[0]
    BN: gl.constexpr = d_desc.block_type.shape[1]
    BK: gl.constexpr = a_desc.block_type.shape[1]
    OWN_SOURCE: gl.constexpr = HAS_C and c_desc.dtype != d_desc.dtype  # fp32 C with a 16-bit D
    PLAN: gl.constexpr = matmul_plan(BM, BN, BK, STAGES, C_STAGES, a_desc.dtype, d_desc.dtype, B_KMAJOR, HAS_C,
                                     c_desc.dtype, DYNAMIC)
    k_tiles = gl.cdiv(K, BK)
    allocated = PLAN.allocate()  # operands, C stages, pipelines (input, output[, clc][, epi_load])[, load
    operands, c_tiles, pipelines = allocated[0], allocated[1], allocated[2]  # order][, source stages]
    if DYNAMIC:
        sched = DynamicTileScheduler.create(M, N, BM, BN, GROUP_M, pipelines[2], counter)
    else:
        sched = StaticTileScheduler.create(M, N, BM, BN, GROUP_M, not (HAS_C or (HAS_BIAS and BM * BN >= 128 * 256)))
    if HAS_C:
        source_pipeline, order_pipeline = pipelines[len(pipelines) - 1], allocated[3]
    else:
        source_pipeline, order_pipeline = pipelines[1], pipelines[1]  # never used without C
    src_tiles = allocated[4] if OWN_SOURCE else c_tiles  # C of D's dtype lands in the output stage it is stored from
    inputs = InputTilePipeline(pipelines[0], operands, 1)
    outputs = OutputTilePipeline(pipelines[1], c_tiles)
    sources = EpiLoadPipeline(source_pipeline, src_tiles)
    load_order = LoadOrderBarrier(order_pipeline)
    warp_specialize([(mma_role, (inputs, outputs, sources, sched, k_tiles, alpha, beta, bias_ptr, N, B_KMAJOR, HAS_C,
                                 HAS_BIAS)),
                     (load_role, (inputs, load_order, a_desc, b_desc, sched, k_tiles, B_KMAJOR, HAS_C)),
                     (store_role, (outputs, sources, d_desc, sched, HAS_C)),
                     (epilogue_load_role, (sources, load_order, c_desc, sched)) if HAS_C else None,
                     (scheduler_role, (sched, )) if DYNAMIC else None],
                    [WORKER_WARPS, WORKER_WARPS, WORKER_WARPS, WORKER_WARPS],
                    [WORKER_REGS, WORKER_REGS, WORKER_REGS, WORKER_REGS])


def matmul_spec(cfg, dtype: str, c_dtype: str, b_kmajor: bool, has_c: bool = False, source_dtype: str | None = None,
                bias_dtype: str | None = None, dynamic: bool = False):
    """matmul_kernel for one configuration and scheduler as a tilepipe.compile KernelSpec (sm_90a): D of `c_dtype`,
    with a C tile of `source_dtype` (default D's) when `has_c`, or a per-column bias of `bias_dtype` when given."""
    from tilepipe.compile import KernelSpec, tdesc_signature
    from tilepipe.storage import Part

    def desc(dt: str, block: tuple[int, int]) -> str:
        return tdesc_signature(dt, list(block), Part("tile", dt, block, 1).layout)

    b_block = (cfg.block_n, cfg.block_k) if b_kmajor else (cfg.block_k, cfg.block_n)
    c_block = (cfg.block_m, cfg.block_n)
    return KernelSpec(f"{__name__}:matmul_kernel",
                      {"a_desc": desc(dtype, (cfg.block_m, cfg.block_k)), "b_desc": desc(dtype, b_block),
                       "d_desc": desc(c_dtype, c_block), "c_desc": desc(source_dtype or c_dtype, c_block),
                       "bias_ptr": f"*{bias_dtype or c_dtype}", "counter": "*i32", "M": "i32", "N": "i32",
                       "K": "i32", "alpha": "fp32", "beta": "fp32", "STAGES": "constexpr", "C_STAGES": "constexpr",
                       "GROUP_M": "constexpr", "B_KMAJOR": "constexpr", "HAS_C": "constexpr",
                       "HAS_BIAS": "constexpr", "DYNAMIC": "constexpr"},
                      {"STAGES": cfg.stages, "C_STAGES": cfg.c_stages, "GROUP_M": cfg.group_m, "B_KMAJOR": b_kmajor,
                       "HAS_C": has_c, "HAS_BIAS": bias_dtype is not None, "DYNAMIC": dynamic},
                      num_warps=cfg.num_warps)
