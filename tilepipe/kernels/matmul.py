"""Warp-specialized persistent GEMM for sm_90a: C = A @ B, written only with tilepipe's roles and pipelines.

Roles (one CTA per SM, static grouped schedule):
  load   (1 warp)      TMA A and B tiles into the input tile pipeline
  mma    (8 warps)     two wgmma warpgroups, one wgmma kept in flight; writes the C tile to an output stage
  store  (1 warp)      TMA-stores each output stage while the mma role runs the next tile's main loop
A is M x K row-major; B is N x K (K-major, B_KMAJOR) or K x N (row-major).
"""

from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import tma, warpgroup_mma, warpgroup_mma_wait

from tilepipe.pipeline import ProducerConsumerPipeline
from tilepipe.roles import warp_specialize
from tilepipe.scheduler import StaticTileScheduler
from tilepipe.storage import (InputPipelineStorage, OutputPipelineStorage, OutputTileStorage, SmemPipelineBundleNoClc,
                              SmemPlan, StandardTileStorage)
from tilepipe.tiles import InputTilePipeline

LOAD_WARPS = gl.constexpr(1)
STORE_WARPS = gl.constexpr(1)
LOAD_REGS = gl.constexpr(40)
STORE_REGS = gl.constexpr(40)


@gluon.constexpr_function
def matmul_plan(block_m, block_n, block_k, stages, c_stages, dtype, c_dtype, b_kmajor):
    """Shared memory: operand stages, C stages, and the pipelines between the roles."""
    b_tile = (block_n, block_k) if b_kmajor else (block_k, block_n)
    return SmemPlan("sm_90a", operands=StandardTileStorage(dtype, dtype, (block_m, block_k), b_tile, stages),
                    c_tiles=OutputTileStorage(c_dtype, (block_m, block_n), c_stages),
                    pipelines=SmemPipelineBundleNoClc(
                        InputPipelineStorage(stages),
                        OutputPipelineStorage(c_stages, producer_proxy="generic", consumer_proxy="async")))


@gluon.jit
def load_role(inputs: InputTilePipeline, a_desc, b_desc, sched: StaticTileScheduler, k_tiles,
              B_KMAJOR: gl.constexpr):
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
    producer.drain()


@gluon.jit
def mma_role(inputs: InputTilePipeline, c_tiles, outputs: ProducerConsumerPipeline, sched: StaticTileScheduler,
             k_tiles, B_KMAJOR: gl.constexpr):
    BM: gl.constexpr = c_tiles.shape[1]
    BN: gl.constexpr = c_tiles.shape[2]
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
            c_tiles.index(out.index()).store(acc.to(c_tiles.dtype))
            out.arrive()
    outputs.drain()


@gluon.jit
def store_role(c_tiles, outputs: ProducerConsumerPipeline, c_desc, sched: StaticTileScheduler):
    BM: gl.constexpr = c_desc.block_type.shape[0]
    BN: gl.constexpr = c_desc.block_type.shape[1]
    for tile_id in range(gl.program_id(0), sched.num_tiles, gl.num_programs(0)):
        pid_m, pid_n = sched.coords(tile_id)
        with outputs.consume() as out:
            tma.async_copy_shared_to_global(c_desc, [pid_m * BM, pid_n * BN], c_tiles.index(out.index()))
            tma.store_wait(0)


@gluon.jit(do_not_specialize=["M", "N", "K"])  # one binary per configuration: ops.py caches it by that key
def matmul_kernel(a_desc, b_desc, c_desc, M, N, K, STAGES: gl.constexpr, C_STAGES: gl.constexpr,
                  GROUP_M: gl.constexpr, B_KMAJOR: gl.constexpr):
    BM: gl.constexpr = c_desc.block_type.shape[0]
    BN: gl.constexpr = c_desc.block_type.shape[1]
    BK: gl.constexpr = a_desc.block_type.shape[1]
    PLAN: gl.constexpr = matmul_plan(BM, BN, BK, STAGES, C_STAGES, a_desc.dtype, c_desc.dtype, B_KMAJOR)
    operands, c_tiles, pipelines = PLAN.allocate()
    input_pipeline, outputs = pipelines
    inputs = InputTilePipeline(input_pipeline, operands, 1)
    sched = StaticTileScheduler.create(M, N, BM, BN, GROUP_M)
    k_tiles = gl.cdiv(K, BK)
    warp_specialize([(mma_role, (inputs, c_tiles, outputs, sched, k_tiles, B_KMAJOR)),
                     (load_role, (inputs, a_desc, b_desc, sched, k_tiles, B_KMAJOR)),
                     (store_role, (c_tiles, outputs, c_desc, sched))], [LOAD_WARPS, STORE_WARPS], [LOAD_REGS, STORE_REGS])


def matmul_spec(cfg, dtype: str, c_dtype: str, b_kmajor: bool):
    """matmul_kernel for one configuration as a tilepipe.compile KernelSpec (sm_90a)."""
    from tilepipe.compile import KernelSpec, tdesc_signature
    from tilepipe.storage import Part

    def desc(dt: str, block: tuple[int, int]) -> str:
        return tdesc_signature(dt, list(block), Part("tile", dt, block, 1).layout)

    b_block = (cfg.block_n, cfg.block_k) if b_kmajor else (cfg.block_k, cfg.block_n)
    return KernelSpec(f"{__name__}:matmul_kernel",
                      {"a_desc": desc(dtype, (cfg.block_m, cfg.block_k)), "b_desc": desc(dtype, b_block),
                       "c_desc": desc(c_dtype, (cfg.block_m, cfg.block_n)), "M": "i32", "N": "i32", "K": "i32",
                       "STAGES": "constexpr", "C_STAGES": "constexpr", "GROUP_M": "constexpr",
                       "B_KMAJOR": "constexpr"},
                      {"STAGES": cfg.stages, "C_STAGES": cfg.c_stages, "GROUP_M": cfg.group_m, "B_KMAJOR": b_kmajor},
                      num_warps=cfg.num_warps)
