"""Blockwise-scaled FP8 GEMM for sm_100a (Blackwell), DeepSeek-V3 scaling as kernels/matmul_fp8_blockwise.py (A: an
fp32 scale per (row, 128-wide K block); B: one per 128 x 128 block). Compiled for sm_100a on the CPU; never run (no
Blackwell GPU here).

tcgen05_mma_scaled takes e8m0/e4m3 scales per 16 or 32 K-elements, not fp32 ones per 128, so each K tile (BK = 128)
is promoted outside the tensor core, as the sm_90a kernel does, with the roles split the sm_100a way:
  epilogue (8 warps, default)  promotes: waits for K tile k's fresh partial sum in TMEM, loads it and frees it, and
            adds it times scale_a[row, k] * scale_b[k] (read from the scale ring's stage, then freed) to the tile's
            fp32 total in registers (64 values a thread: two warpgroups split the columns); TMA-stores D at the end
  load      (1 warp)  TMA of A and B into the input ring and of the K block's scales into the scale ring
  mma       (1 warp)  per K tile, tcgen05 MMAs (kind::f8f6f4, use_acc=False) into a TMEM partial buffer; their
            commit frees the input stage, a second commit hands the partial to the epilogue
Two partial buffers (2 x 128 TMEM columns) let the MMAs of K tile k + 1 run while the epilogue promotes K tile k. The
scales get a ring of their own rather than riding in the input stage: the MMA's commit frees that stage before the
epilogue reads them. Static schedule only; D is one BM x BN TMA box (C_STAGES = 1 buffer), as in the sm_90a kernel.
"""

from triton.experimental import gluon
from triton.experimental.gluon import language as gl

from tilepipe.kernels.gemm_roles import WORKER_REGS, WORKER_WARPS
from tilepipe.kernels.blockwise_scales import SCALE_BLOCK, load_stage_scales, promote, stage_scales
from tilepipe.kernels.sm100_matmul import sm100_plan
from tilepipe.pipeline.cluster import column_runs
from tilepipe.pipeline.output import OutputTilePipeline, SubtileStores
from tilepipe.pipeline.roles import warp_specialize
from tilepipe.pipeline.storage import BarrierPair, BlockwiseScaleStorage, SmemPlan
from tilepipe.pipeline.tiles import InputTilePipeline
from tilepipe.schedulers import sm100_scheduler_class


@gluon.constexpr_function
def sm100_blockwise_plan(block_m, block_n, stages, dtype, b_dtype, c_dtype):
    """sm100_plan's (BK = 128, one BM x BN D buffer, two TMEM partial buffers as its accumulators) plus the scale ring:
    `stages` BlockwiseScaleStorage stages and their barriers (load -> epilogue). SmemBudgetError past the limits."""
    base = sm100_plan(block_m, block_n, SCALE_BLOCK, stages, 1, dtype, c_dtype, True, block_n, b_dtype=b_dtype)
    return SmemPlan("sm_100a", **dict(base.storages), scales=BlockwiseScaleStorage(block_m, stages),
                    scale_ring=BarrierPair(stages, "scales", "load", "epilogue", consumer_proxy="generic")).check()


@gluon.jit
def scale_ring_load_role(inputs: InputTilePipeline, scales: InputTilePipeline, a_desc, b_desc, sa_desc, sb_desc,
                        sched, k_tiles):
    """Per K tile its scales into the scale ring, then A and B into the input ring."""
    BM: gl.constexpr = a_desc.block_type.shape[0]
    BK: gl.constexpr = a_desc.block_type.shape[1]
    BN: gl.constexpr = b_desc.block_type.shape[0]
    producer = inputs.producer()
    scale_producer = scales.producer()
    work = sched.work(paces=True)
    while work.valid:
        pid_m, pid_n = work.coords()
        for k in range(k_tiles):
            with scale_producer.produce() as stage:
                stage.expect_loads(sa_desc, sb_desc)
                load_stage_scales(stage, sa_desc, sb_desc, pid_m * BM, pid_n * BN, k)
            with producer.produce() as tiles:
                tiles.expect_loads(a_desc, b_desc)
                tiles.load_a(a_desc, [pid_m * BM, k * BK])
                tiles.load_b(b_desc, [pid_n * BN, k * BK])
        work = work.next()
    producer.drain()
    scale_producer.drain()


@gluon.jit
def partial_mma_role(inputs: InputTilePipeline, partials: OutputTilePipeline, sched, k_tiles):
    """Each K tile's MMAs into a fresh partial buffer: their commit frees the input stage, the partial's hands it on."""
    consumer = inputs.consumer()
    work = sched.work()
    while work.valid:
        for k in range(k_tiles):
            with partials.produce() as part:  # waits until the epilogue loaded this buffer's last partial
                tiles = consumer.acquire()
                consumer = tiles.tcgen05_mma(tiles.a_tile(), tiles.b_tile().permute((1, 0)), part.tile(),
                                             use_acc=False)
                part.commit()
        work = work.next()
    partials.drain()


@gluon.jit
def promote_role(partials: OutputTilePipeline, scales: InputTilePipeline, stores: SubtileStores, sched, d_desc,
                 k_tiles):
    """acc += partial_k * scale_a[row, k] * scale_b[k] over the tile's K tiles, in fp32 registers; then D."""
    BM: gl.constexpr = partials.tiles.shape[1]
    BN: gl.constexpr = partials.tiles.shape[2]
    layout: gl.constexpr = partials.tiles.index(0).get_reg_layout()
    view: gl.constexpr = column_runs(layout, [BM, BN], 1)  # one B block scale per tile (no cluster)
    consumer = scales.consumer()
    work = sched.work()
    while work.valid:
        pid_m, pid_n = work.coords()
        acc = gl.zeros([BM, BN], gl.float32, layout)
        for k in range(k_tiles):
            with partials.consume_explicit() as part:
                partial = part.tile().load(layout)
                part.arrive()  # loaded: the MMA role may write the K tile after next into it
            with consumer.consume() as stage:
                scale = stage_scales(stage, k, gl.SliceLayout(2, view))
            acc = promote(acc, partial, scale, view)
        stores.store(d_desc, [pid_m * BM, pid_n * BN], acc, 0)
        work = work.next()
    stores.drain()


@gluon.jit(do_not_specialize=["M", "N", "K"])  # one binary per configuration
def sm100_blockwise_matmul_kernel(a_desc, b_desc, sa_desc, sb_desc, d_desc, workspace, M, N, K, STAGES: gl.constexpr,
                                  C_STAGES: gl.constexpr, GROUP_M: gl.constexpr, SCHEDULE: gl.constexpr):
    """blockwise_matmul_kernel's arguments (sa_desc over scale_a^T, sb_desc over scale_b^T, D in BM x BN boxes) on
    sm_100a; C_STAGES must be 1 (one D buffer), SCHEDULE "static"; `workspace` is not read."""
    BM: gl.constexpr = d_desc.block_type.shape[0]
    BN: gl.constexpr = d_desc.block_type.shape[1]
    BK: gl.constexpr = a_desc.block_type.shape[1]
    gl.static_assert(BN == SCALE_BLOCK and BK == SCALE_BLOCK, "one B scale and one A scale column per K tile")
    gl.static_assert(C_STAGES == 1, "one BM x BN D buffer: one store per tile")
    PLAN: gl.constexpr = sm100_blockwise_plan(BM, BN, STAGES, a_desc.dtype, b_desc.dtype, d_desc.dtype)
    k_tiles = gl.cdiv(K, BK)
    smem = PLAN.allocate()
    sched = sm100_scheduler_class(SCHEDULE).from_kernel(M, N, k_tiles, BM, BN, GROUP_M, smem.pipelines, workspace)
    inputs = InputTilePipeline(smem.pipelines.input, smem.operands, 1)
    scales = InputTilePipeline(smem.scale_ring, smem.scales, 1)
    partials = OutputTilePipeline(smem.pipelines.output, smem.accumulators)
    warp_specialize([(promote_role, (partials, scales, SubtileStores(smem.d_tiles), sched, d_desc, k_tiles)),
                     (scale_ring_load_role, (inputs, scales, a_desc, b_desc, sa_desc, sb_desc, sched, k_tiles),
                      WORKER_WARPS, WORKER_REGS),
                     (partial_mma_role, (inputs, partials, sched, k_tiles), WORKER_WARPS, WORKER_REGS)])
