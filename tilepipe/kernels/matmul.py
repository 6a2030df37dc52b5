"""Warp-specialized persistent GEMM for sm_90a: D = alpha * A @ B (+ beta * C), written only with tilepipe's
roles and pipelines.

Roles (one CTA per SM, static grouped schedule):
  load           (1 warp)   TMA A and B tiles into the input tile pipeline
  mma            (8 warps)  two wgmma warpgroups, one wgmma kept in flight; the epilogue writes D to an output stage
  store          (1 warp)   TMA-stores each output stage while the mma role runs the next tile's main loop
  epilogue_load  (1 warp, with C)  TMA-loads the C tile into the output stage the tile will use, once the tile's
                 main-loop loads were issued (load-order pipeline) and the store role freed the stage
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
from tilepipe.probe import Probe
from tilepipe.roles import warp_specialize
from tilepipe.scheduler import StaticTileScheduler
from tilepipe.storage import (EpiLoadPipelineStorage, InputPipelineStorage, LoadOrderBarrierStorage,
                              OutputPipelineStorage, OutputTileStorage, SmemPipelineBundleNoClc, SmemPlan,
                              SourceTileStorage, StandardTileStorage)
from tilepipe.tiles import InputTilePipeline

WORKER_WARPS = gl.constexpr(1)
WORKER_REGS = gl.constexpr(40)


@gluon.constexpr_function
def matmul_plan(block_m, block_n, block_k, stages, c_stages, dtype, c_dtype, b_kmajor, has_c=False, src_dtype=None):
    """Shared memory: operand stages, output stages (which also receive C of D's dtype), source stages for C of
    another dtype (`src_dtype`), and the pipelines between the roles."""
    b_tile = (block_n, block_k) if b_kmajor else (block_k, block_n)
    sources = EpiLoadPipelineStorage(c_stages, consumer="store") if has_c else None
    storages = dict(operands=StandardTileStorage(dtype, dtype, (block_m, block_k), b_tile, stages),
                    c_tiles=OutputTileStorage(c_dtype, (block_m, block_n), c_stages),
                    pipelines=SmemPipelineBundleNoClc(
                        InputPipelineStorage(stages),
                        OutputPipelineStorage(c_stages, consumer="store", producer_proxy="generic",
                                              consumer_proxy="async"),
                        epi_load=sources))
    if has_c:
        storages["load_order"] = LoadOrderBarrierStorage()
    if has_c and src_dtype is not None and src_dtype != c_dtype:
        storages["src_tiles"] = SourceTileStorage(src_dtype, (block_m, block_n), c_stages)
    return SmemPlan("sm_90a", **storages)


@gluon.jit
def load_role(inputs: InputTilePipeline, load_order: LoadOrderBarrier, a_desc, b_desc, sched: StaticTileScheduler,
              k_tiles, B_KMAJOR: gl.constexpr, HAS_C: gl.constexpr):
    BM: gl.constexpr = a_desc.block_type.shape[0]
    BK: gl.constexpr = a_desc.block_type.shape[1]
    BN: gl.constexpr = b_desc.block_type.shape[0] if B_KMAJOR else b_desc.block_type.shape[1]
    producer = inputs.producer()
    for tile_id in range(gl.program_id(0), sched.num_tiles, gl.num_programs(0)):
        pid_m, pid_n = sched.coords(tile_id)
        for k in range(k_tiles):
            with producer.produce() as tiles:
                tiles.expect_bytes(a_desc.block_type.nbytes + b_desc.block_type.nbytes)
                tma.async_copy_global_to_shared(a_desc, [pid_m * BM, k * BK], tiles.mbar(), tiles.a_tile())
                if B_KMAJOR:
                    tma.async_copy_global_to_shared(b_desc, [pid_n * BN, k * BK], tiles.mbar(), tiles.b_tile())
                else:
                    tma.async_copy_global_to_shared(b_desc, [k * BK, pid_n * BN], tiles.mbar(), tiles.b_tile())
        if HAS_C:
            load_order = load_order.signal()  # this tile's main-loop loads are on their way
    producer.drain()
    if HAS_C:
        load_order.drain()


@gluon.jit
def mma_role(inputs: InputTilePipeline, outputs: OutputTilePipeline, sources: EpiLoadPipeline,
             sched: StaticTileScheduler, k_tiles, alpha, beta, bias_ptr, N, B_KMAJOR: gl.constexpr,
             HAS_C: gl.constexpr, HAS_BIAS: gl.constexpr):
    BM: gl.constexpr = outputs.tiles.shape[1]
    BN: gl.constexpr = outputs.tiles.shape[2]
    acc_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[gl.num_warps(), 1],
                                                         instr_shape=[16, BN, 16])
    consumer = inputs.consumer().with_release_lag(1)
    for tile_id in range(gl.program_id(0), sched.num_tiles, gl.num_programs(0)):
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
                acc = alpha * acc + beta * column_bias(bias_ptr, N, sched, tile_id, BN, acc_layout)[None, :]
            else:
                acc = alpha * acc
            out.tile().store(acc.to(outputs.tiles.dtype))
            out.arrive()
    outputs.drain()


@gluon.jit
def column_bias(bias_ptr, N, sched: StaticTileScheduler, tile_id, BN: gl.constexpr, acc_layout: gl.constexpr):
    """The tile's BN bias values (zero past N), in fp32, laid out along the accumulator's columns."""
    _, pid_n = sched.coords(tile_id)
    cols = pid_n * BN + gl.arange(0, BN, layout=gl.SliceLayout(0, acc_layout))
    return gl.load(bias_ptr + cols, mask=cols < N, other=0.0).to(gl.float32)


@gluon.jit
def store_role(outputs: OutputTilePipeline, sources: EpiLoadPipeline, d_desc, sched: StaticTileScheduler,
               HAS_C: gl.constexpr):
    BM: gl.constexpr = d_desc.block_type.shape[0]
    BN: gl.constexpr = d_desc.block_type.shape[1]
    for tile_id in range(gl.program_id(0), sched.num_tiles, gl.num_programs(0)):
        pid_m, pid_n = sched.coords(tile_id)
        with outputs.consume() as out:
            tma.async_copy_shared_to_global(d_desc, [pid_m * BM, pid_n * BN], out.tile())
            tma.store_wait(0)
            if HAS_C:
                sources = sources.release()  # C was used and D stored: the stage may receive the next C


@gluon.jit
def epilogue_load_role(sources: EpiLoadPipeline, load_order: LoadOrderBarrier, c_desc, sched: StaticTileScheduler):
    BM: gl.constexpr = c_desc.block_type.shape[0]
    BN: gl.constexpr = c_desc.block_type.shape[1]
    for tile_id in range(gl.program_id(0), sched.num_tiles, gl.num_programs(0)):
        pid_m, pid_n = sched.coords(tile_id)
        load_order = load_order.wait()  # this tile's main-loop loads were issued first
        sources = sources.load(c_desc, [pid_m * BM, pid_n * BN])
    sources.drain()


@gluon.jit(do_not_specialize=["M", "N", "K", "alpha", "beta", "bias_ptr"])  # one binary per configuration
def matmul_kernel(a_desc, b_desc, d_desc, c_desc, bias_ptr, M, N, K, alpha, beta, STAGES: gl.constexpr,
                  C_STAGES: gl.constexpr, GROUP_M: gl.constexpr, B_KMAJOR: gl.constexpr, HAS_C: gl.constexpr,
                  HAS_BIAS: gl.constexpr, probe_buf=None, PROBE: gl.constexpr = 0):
    BM: gl.constexpr = d_desc.block_type.shape[0]
    BN: gl.constexpr = d_desc.block_type.shape[1]
    BK: gl.constexpr = a_desc.block_type.shape[1]
    OWN_SOURCE: gl.constexpr = HAS_C and c_desc.dtype != d_desc.dtype  # fp32 C with a 16-bit D
    PLAN: gl.constexpr = matmul_plan(BM, BN, BK, STAGES, C_STAGES, a_desc.dtype, d_desc.dtype, B_KMAJOR, HAS_C,
                                     c_desc.dtype)
    sched = StaticTileScheduler.create(M, N, BM, BN, GROUP_M)
    k_tiles = gl.cdiv(K, BK)
    probe = Probe.create(probe_buf, PROBE)  # debug / trace records of every pipeline wait (tilepipe.probe)
    if OWN_SOURCE:
        operands, c_tiles, pipelines, order_pipeline, src_tiles = PLAN.allocate(probe)
        input_pipeline, output_pipeline, source_pipeline = pipelines
    elif HAS_C:
        operands, c_tiles, pipelines, order_pipeline = PLAN.allocate(probe)
        input_pipeline, output_pipeline, source_pipeline = pipelines
        src_tiles = c_tiles  # C lands in the output stage it will be stored from
    else:
        operands, c_tiles, pipelines = PLAN.allocate(probe)
        input_pipeline, output_pipeline = pipelines
        source_pipeline, order_pipeline, src_tiles = output_pipeline, output_pipeline, c_tiles  # never used
    inputs = InputTilePipeline(input_pipeline, operands, 1)
    outputs = OutputTilePipeline(output_pipeline, c_tiles)
    sources = EpiLoadPipeline(source_pipeline, src_tiles)
    load_order = LoadOrderBarrier(order_pipeline)
    if HAS_C:
        warp_specialize([(mma_role, (inputs, outputs, sources, sched, k_tiles, alpha, beta, bias_ptr, N, B_KMAJOR,
                                     True, False)),
                         (load_role, (inputs, load_order, a_desc, b_desc, sched, k_tiles, B_KMAJOR, True)),
                         (store_role, (outputs, sources, d_desc, sched, True)),
                         (epilogue_load_role, (sources, load_order, c_desc, sched))],
                        [WORKER_WARPS, WORKER_WARPS, WORKER_WARPS], [WORKER_REGS, WORKER_REGS, WORKER_REGS])
    else:
        warp_specialize([(mma_role, (inputs, outputs, sources, sched, k_tiles, alpha, beta, bias_ptr, N, B_KMAJOR,
                                     False, HAS_BIAS)),
                         (load_role, (inputs, load_order, a_desc, b_desc, sched, k_tiles, B_KMAJOR, False)),
                         (store_role, (outputs, sources, d_desc, sched, False))],
                        [WORKER_WARPS, WORKER_WARPS], [WORKER_REGS, WORKER_REGS])


def matmul_spec(cfg, dtype: str, c_dtype: str, b_kmajor: bool, has_c: bool = False, source_dtype: str | None = None,
                bias_dtype: str | None = None, probe: int = 0):
    """matmul_kernel for one configuration as a tilepipe.compile KernelSpec (sm_90a): D of `c_dtype`, with a C
    tile of `source_dtype` (default D's) when `has_c`, or a per-column bias of `bias_dtype` when given; `probe` is
    PROBE."""
    from tilepipe.compile import KernelSpec, tdesc_signature
    from tilepipe.probe import buffer_signature
    from tilepipe.storage import Part

    def desc(dt: str, block: tuple[int, int]) -> str:
        return tdesc_signature(dt, list(block), Part("tile", dt, block, 1).layout)

    b_block = (cfg.block_n, cfg.block_k) if b_kmajor else (cfg.block_k, cfg.block_n)
    c_block = (cfg.block_m, cfg.block_n)
    return KernelSpec(f"{__name__}:matmul_kernel",
                      {"a_desc": desc(dtype, (cfg.block_m, cfg.block_k)), "b_desc": desc(dtype, b_block),
                       "d_desc": desc(c_dtype, c_block), "c_desc": desc(source_dtype or c_dtype, c_block),
                       "bias_ptr": f"*{bias_dtype or c_dtype}", "M": "i32", "N": "i32", "K": "i32",
                       "alpha": "fp32", "beta": "fp32", "STAGES": "constexpr", "C_STAGES": "constexpr",
                       "GROUP_M": "constexpr", "B_KMAJOR": "constexpr", "HAS_C": "constexpr",
                       "HAS_BIAS": "constexpr", "probe_buf": buffer_signature(probe), "PROBE": "constexpr"},
                      {"STAGES": cfg.stages, "C_STAGES": cfg.c_stages, "GROUP_M": cfg.group_m, "B_KMAJOR": b_kmajor,
                       "HAS_C": has_c, "HAS_BIAS": bias_dtype is not None, "PROBE": probe,
                       **({} if probe else {"probe_buf": None})},
                      num_warps=cfg.num_warps)
