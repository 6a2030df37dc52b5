"""Warp-specialized persistent FP8 GEMMs for sm_90a (e4m3, or e5m2 for one operand), bf16/fp16/fp32 out.

Two kernels, both with A (M x K) and B (N x K) K-major, as fp8 wgmma needs, and BK = 128 (128 bytes of fp8):

* `scaled_matmul_kernel`: D = (A @ B^T) * scale_a[row] * scale_b[col], torch._scaled_mm's per-tensor (both
  scale vectors of stride 0) and per-row scaling. The scales are read from device memory in the epilogue, once per
  tile: no host sync. Its load and store roles are the bf16 GEMM's (`tilepipe.kernels.matmul`); the wgmma
  accumulates in Hopper's limited fp8 precision over the whole K (torch's `use_fast_accum=True`).
* `blockwise_matmul_kernel`: DeepSeek-V3 blockwise scaling, A with an fp32 scale per (row, 128-wide K block),
  B with one per 128 x 128 block. Each K tile's wgmma writes a fresh fp32 partial sum that the MMA role promotes
  in registers: acc += partial * scale_a[row, k] * scale_b[n, k]. The scales arrive by TMA in the same input stage
  as the operands (`BlockwiseFP8TileStorage`), so the main loop does no global load.

Roles (one CTA per SM, static grouped schedule): load (1 warp, TMA), mma (8 warps: two wgmma warpgroups, epilogue
into an output stage), store (1 warp, TMA store overlapped with the next tile's main loop).
"""

from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import tma, warpgroup_mma, warpgroup_mma_wait

from tilepipe.epilogue import EpiLoadPipeline, LoadOrderBarrier
from tilepipe.kernels.matmul import WORKER_REGS, WORKER_WARPS, load_role, store_role
from tilepipe.output import OutputTilePipeline
from tilepipe.roles import warp_specialize
from tilepipe.scheduler import StaticTileScheduler
from tilepipe.storage import (BlockwiseFP8TileStorage, InputPipelineStorage, OutputPipelineStorage,
                              OutputTileStorage, SmemPipelineBundleNoClc, SmemPlan, StandardTileStorage)
from tilepipe.tiles import InputTilePipeline

SCALE_BLOCK = gl.constexpr(128)  # the K (and B's N) extent one blockwise scale covers
SCALE_ALIGN = gl.constexpr(4)  # fp32 words in 16 bytes: TMA's innermost coordinate must be a multiple of 16 bytes


@gluon.constexpr_function
def fp8_plan(block_m, block_n, block_k, stages, c_stages, a_dtype, b_dtype, c_dtype, blockwise=False):
    """Shared memory: operand stages (plus the blockwise scales), output stages, and the pipelines between roles.

    Blockwise: the MMA role reads the scales with ordinary loads before it frees a stage, so the input pipeline's
    consumer side is "generic" (a proxy fence precedes each release, before TMA refills the slot).
    """
    storage = BlockwiseFP8TileStorage if blockwise else StandardTileStorage
    return SmemPlan("sm_90a",
                    operands=storage(a_dtype, b_dtype, (block_m, block_k), (block_n, block_k), stages),
                    c_tiles=OutputTileStorage(c_dtype, (block_m, block_n), c_stages),
                    pipelines=SmemPipelineBundleNoClc(
                        InputPipelineStorage(stages, consumer_proxy="generic" if blockwise else "async"),
                        OutputPipelineStorage(c_stages, consumer="store", producer_proxy="generic",
                                              consumer_proxy="async")))


@gluon.constexpr_function
def accumulator_layout(num_warps, block_n):
    """wgmma's fp32 accumulator layout: warpgroups stacked along M."""
    return gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[num_warps, 1], instr_shape=[16, block_n, 32])


@gluon.jit
def allocate_roles(PLAN: gl.constexpr):
    """The input and output tile pipelines of a plan from fp8_plan."""
    operands, c_tiles, pipelines = PLAN.allocate()
    input_pipeline, output_pipeline = pipelines
    return InputTilePipeline(input_pipeline, operands, 1), OutputTilePipeline(output_pipeline, c_tiles)


# ---- per-tensor / per-row scaling -----------------------------------------------------------------


@gluon.jit
def scaled_mma_role(inputs: InputTilePipeline, outputs: OutputTilePipeline, sched: StaticTileScheduler, k_tiles,
                    scale_a, scale_b, M, N, SA_STRIDE: gl.constexpr, SB_STRIDE: gl.constexpr):
    BM: gl.constexpr = outputs.tiles.shape[1]
    BN: gl.constexpr = outputs.tiles.shape[2]
    acc_layout: gl.constexpr = accumulator_layout(gl.num_warps(), BN)
    consumer = inputs.consumer().with_release_lag(1)
    work = sched.work()
    while work.valid:
        pid_m, pid_n = work.coords()
        acc = gl.zeros([BM, BN], gl.float32, acc_layout)
        for k in range(k_tiles):
            tiles = consumer.acquire()
            acc = warpgroup_mma(tiles.a_tile(), tiles.b_tile().permute((1, 0)), acc, is_async=True)
            acc = warpgroup_mma_wait(num_outstanding=1, deps=(acc, ))
            consumer = tiles.release()
        acc = warpgroup_mma_wait(num_outstanding=0, deps=(acc, ))
        consumer = consumer.flush_releases()
        rows = pid_m * BM + gl.arange(0, BM, gl.SliceLayout(1, acc_layout))
        cols = pid_n * BN + gl.arange(0, BN, gl.SliceLayout(0, acc_layout))
        sa = gl.load(scale_a + rows * SA_STRIDE, mask=rows < M, other=0.0)
        sb = gl.load(scale_b + cols * SB_STRIDE, mask=cols < N, other=0.0)
        acc = acc * gl.expand_dims(sa, 1) * gl.expand_dims(sb, 0)
        with outputs.produce() as out:
            out.tile().store(acc.to(outputs.tiles.dtype))
            out.arrive()
        work = work.next()
    outputs.drain()


@gluon.jit(do_not_specialize=["scale_a", "scale_b", "M", "N", "K"])  # one binary per configuration
def scaled_matmul_kernel(a_desc, b_desc, d_desc, scale_a, scale_b, M, N, K, STAGES: gl.constexpr,
                         C_STAGES: gl.constexpr, GROUP_M: gl.constexpr, SA_STRIDE: gl.constexpr,
                         SB_STRIDE: gl.constexpr):
    """D = (A @ B^T) * scale_a[row * SA_STRIDE] * scale_b[col * SB_STRIDE] (strides 0: per-tensor, 1: per-row)."""
    BM: gl.constexpr = d_desc.block_type.shape[0]
    BN: gl.constexpr = d_desc.block_type.shape[1]
    BK: gl.constexpr = a_desc.block_type.shape[1]
    PLAN: gl.constexpr = fp8_plan(BM, BN, BK, STAGES, C_STAGES, a_desc.dtype, b_desc.dtype, d_desc.dtype)
    sched = StaticTileScheduler.create(M, N, BM, BN, GROUP_M)
    inputs, outputs = allocate_roles(PLAN)
    sources = EpiLoadPipeline(outputs.pipeline, outputs.tiles)  # no C: the shared roles never touch it
    load_order = LoadOrderBarrier(outputs.pipeline)
    warp_specialize([(scaled_mma_role, (inputs, outputs, sched, gl.cdiv(K, BK), scale_a, scale_b, M, N, SA_STRIDE,
                                        SB_STRIDE)),
                     (load_role, (inputs, load_order, a_desc, b_desc, sched, gl.cdiv(K, BK), True, False)),
                     (store_role, (outputs, sources, d_desc, sched, False))],
                    [WORKER_WARPS, WORKER_WARPS], [WORKER_REGS, WORKER_REGS])


# ---- blockwise scaling --------------------------------------------------------------------------


@gluon.jit
def blockwise_load_role(inputs: InputTilePipeline, a_desc, b_desc, sa_desc, sb_desc, sched: StaticTileScheduler,
                        k_tiles):
    """A, B and the K tile's scales (A's column of BM row scales, B's block scale) into one input stage."""
    BM: gl.constexpr = a_desc.block_type.shape[0]
    BK: gl.constexpr = a_desc.block_type.shape[1]
    BN: gl.constexpr = b_desc.block_type.shape[0]
    producer = inputs.producer()
    work = sched.work(paces=True)
    while work.valid:
        pid_m, pid_n = work.coords()
        for k in range(k_tiles):
            with producer.produce() as tiles:
                tiles.expect_bytes(a_desc.block_type.nbytes + b_desc.block_type.nbytes + sa_desc.block_type.nbytes
                                   + sb_desc.block_type.nbytes)
                tma.async_load(a_desc, [pid_m * BM, k * BK], tiles.mbar(), tiles.a_tile())
                tma.async_load(b_desc, [pid_n * BN, k * BK], tiles.mbar(), tiles.b_tile())
                tma.async_load(sa_desc, [k, pid_m * BM], tiles.mbar(), tiles.tile("a_scales"))
                tma.async_load(sb_desc, [pid_n, k - k % SCALE_ALIGN], tiles.mbar(),
                                                tiles.tile("b_scales"))
        work = work.next()
    producer.drain()


@gluon.jit
def stage_scales(tiles, k, row_layout: gl.constexpr):
    """scale_a[row] * scale_b of K block k (the stage's), one value per accumulator row, read from shared memory.

    B's box starts at K block k - k % SCALE_ALIGN (see blockwise_load_role): its word k % SCALE_ALIGN is broadcast to
    every row."""
    BM: gl.constexpr = tiles.payload.a_scales.shape[2]
    SB: gl.constexpr = tiles.payload.b_scales.shape[2]
    flat: gl.constexpr = gl.SwizzledSharedLayout(1, 1, 1, [0])
    sa = tiles.tile("a_scales").reinterpret(gl.float32, [BM], flat).load(row_layout)
    every_word: gl.constexpr = gl.BlockedLayout([SCALE_ALIGN], [32], [gl.num_warps()], [0])  # each thread: all 4
    words = tiles.tile("b_scales").reinterpret(gl.float32, [SB], flat).slice(0, SCALE_ALIGN).load(every_word)
    sb = gl.sum(gl.where(gl.arange(0, SCALE_ALIGN, every_word) == k % SCALE_ALIGN, words, 0.0), axis=0)
    return sa * sb


@gluon.jit
def issue_partial(tiles, acc):
    """Start the stage's wgmma into a fresh fp32 partial sum (`acc` only gives its type: use_acc=False)."""
    return warpgroup_mma(tiles.a_tile(), tiles.b_tile().permute((1, 0)), acc, use_acc=False, is_async=True)


@gluon.jit
def promote_while_next_runs(consumer, k, in_flight, scale, acc, rows: gl.constexpr):
    """Start K tile k's wgmma, retire `in_flight` (K tile k - 1) and promote it into `acc`; frees its stage.

    Returns (consumer, the new partial sum in flight, its scales, acc)."""
    tiles = consumer.acquire()
    started = issue_partial(tiles, acc)
    done = warpgroup_mma_wait(num_outstanding=1, deps=(in_flight, ))
    started_scale = stage_scales(tiles, k, rows)
    consumer = tiles.release()  # with the release lag: the stage `done` read
    return consumer, started, started_scale, acc + done * gl.expand_dims(scale, 1)


@gluon.jit
def blockwise_mma_role(inputs: InputTilePipeline, outputs: OutputTilePipeline, sched: StaticTileScheduler, k_tiles):
    """Per K tile a fresh wgmma partial sum, promoted in fp32 registers with the stage's scales while the next
    K tile's wgmma runs: three 64 x BN fp32 tensors per thread (total, and two partial sums in turn).

    The main loop takes K tiles in pairs so the two partial sums swap roles by name, never by a register copy: a
    copy of a partial sum whose wgmma is still in flight makes ptxas serialize every wgmma of the kernel.
    """
    BM: gl.constexpr = outputs.tiles.shape[1]
    BN: gl.constexpr = outputs.tiles.shape[2]
    acc_layout: gl.constexpr = accumulator_layout(gl.num_warps(), BN)
    rows: gl.constexpr = gl.SliceLayout(1, acc_layout)
    consumer = inputs.consumer().with_release_lag(1)  # a stage is freed once the wgmma reading it retired
    work = sched.work()
    while work.valid:
        acc = gl.zeros([BM, BN], gl.float32, acc_layout)
        tiles = consumer.acquire()
        p0 = issue_partial(tiles, acc)
        s0 = stage_scales(tiles, 0, rows)
        consumer = tiles.release()
        for k in range(2, k_tiles, 2):  # K tiles k - 1 and k
            consumer, p1, s1, acc = promote_while_next_runs(consumer, k - 1, p0, s0, acc, rows)
            consumer, p0, s0, acc = promote_while_next_runs(consumer, k, p1, s1, acc, rows)
        if k_tiles % 2 == 0:  # one K tile left
            tiles = consumer.acquire()
            p1 = issue_partial(tiles, acc)
            last0, last1 = warpgroup_mma_wait(num_outstanding=0, deps=(p0, p1))
            s1 = stage_scales(tiles, k_tiles - 1, rows)
            consumer = tiles.release()
            acc += last0 * gl.expand_dims(s0, 1) + last1 * gl.expand_dims(s1, 1)
        else:
            last0 = warpgroup_mma_wait(num_outstanding=0, deps=(p0, ))
            acc += last0 * gl.expand_dims(s0, 1)
        consumer = consumer.flush_releases()
        with outputs.produce() as out:
            out.tile().store(acc.to(outputs.tiles.dtype))
            out.arrive()
        work = work.next()
    outputs.drain()


@gluon.jit(do_not_specialize=["M", "N", "K"])  # one binary per configuration
def blockwise_matmul_kernel(a_desc, b_desc, sa_desc, sb_desc, d_desc, M, N, K, STAGES: gl.constexpr,
                            C_STAGES: gl.constexpr, GROUP_M: gl.constexpr):
    """D = sum over K blocks kb of (A_kb @ B_kb^T) * sa[row, kb] * sb[col // 128, kb]; sa_desc is over scale_a^T
    (K blocks x M), sb_desc over scale_b^T (N blocks x K blocks)."""
    BM: gl.constexpr = d_desc.block_type.shape[0]
    BN: gl.constexpr = d_desc.block_type.shape[1]
    BK: gl.constexpr = a_desc.block_type.shape[1]
    gl.static_assert(BN == SCALE_BLOCK and BK == SCALE_BLOCK, "one B scale and one A scale column per K tile")
    PLAN: gl.constexpr = fp8_plan(BM, BN, BK, STAGES, C_STAGES, a_desc.dtype, b_desc.dtype, d_desc.dtype, True)
    sched = StaticTileScheduler.create(M, N, BM, BN, GROUP_M)
    inputs, outputs = allocate_roles(PLAN)
    sources = EpiLoadPipeline(outputs.pipeline, outputs.tiles)  # no C: the store role never touches it
    warp_specialize([(blockwise_mma_role, (inputs, outputs, sched, gl.cdiv(K, BK))),
                     (blockwise_load_role, (inputs, a_desc, b_desc, sa_desc, sb_desc, sched, gl.cdiv(K, BK))),
                     (store_role, (outputs, sources, d_desc, sched, False))],
                    [WORKER_WARPS, WORKER_WARPS], [WORKER_REGS, WORKER_REGS])


# ---- ahead-of-time specs ------------------------------------------------------------------------


def _desc(dtype: str, block: tuple[int, int]) -> str:
    from tilepipe.compile import tdesc_signature
    from tilepipe.storage import Part

    return tdesc_signature(dtype, list(block), Part("tile", dtype, block, 1).layout)


def scaled_spec(cfg, a_dtype: str, b_dtype: str, c_dtype: str, per_row: bool):
    """scaled_matmul_kernel for one configuration as a tilepipe.compile KernelSpec (sm_90a)."""
    from tilepipe.compile import KernelSpec

    stride = 1 if per_row else 0
    return KernelSpec(f"{__name__}:scaled_matmul_kernel",
                      {"a_desc": _desc(a_dtype, (cfg.block_m, cfg.block_k)),
                       "b_desc": _desc(b_dtype, (cfg.block_n, cfg.block_k)),
                       "d_desc": _desc(c_dtype, (cfg.block_m, cfg.block_n)), "scale_a": "*fp32", "scale_b": "*fp32",
                       "M": "i32", "N": "i32", "K": "i32", "STAGES": "constexpr", "C_STAGES": "constexpr",
                       "GROUP_M": "constexpr", "SA_STRIDE": "constexpr", "SB_STRIDE": "constexpr"},
                      {"STAGES": cfg.stages, "C_STAGES": cfg.c_stages, "GROUP_M": cfg.group_m, "SA_STRIDE": stride,
                       "SB_STRIDE": stride},
                      num_warps=cfg.num_warps, divisible_by_16=())


def blockwise_spec(cfg, a_dtype: str, b_dtype: str, c_dtype: str):
    """blockwise_matmul_kernel for one configuration as a tilepipe.compile KernelSpec (sm_90a)."""
    from tilepipe.compile import KernelSpec

    return KernelSpec(f"{__name__}:blockwise_matmul_kernel",
                      {"a_desc": _desc(a_dtype, (cfg.block_m, cfg.block_k)),
                       "b_desc": _desc(b_dtype, (cfg.block_n, cfg.block_k)),
                       "sa_desc": _desc("fp32", (1, cfg.block_m)),
                       "sb_desc": _desc("fp32", BlockwiseFP8TileStorage.b_scale_tile),
                       "d_desc": _desc(c_dtype, (cfg.block_m, cfg.block_n)), "M": "i32", "N": "i32", "K": "i32",
                       "STAGES": "constexpr", "C_STAGES": "constexpr", "GROUP_M": "constexpr"},
                      {"STAGES": cfg.stages, "C_STAGES": cfg.c_stages, "GROUP_M": cfg.group_m},
                      num_warps=cfg.num_warps)
