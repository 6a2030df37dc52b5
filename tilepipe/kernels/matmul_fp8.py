"""Warp-specialized persistent FP8 GEMM for sm_90a (e4m3, or e5m2 for one operand), bf16/fp16/fp32 out, and what
the FP8 kernels share (their shared-memory plan, accumulator layout and pipelines).

`scaled_matmul_kernel`: D = (A @ B^T) * scale_a[row] * scale_b[col], torch._scaled_mm's per-tensor (both scale
vectors of stride 0) and per-row scaling, A (M x K) and B (N x K) K-major as fp8 wgmma needs, BK = 128 (128 bytes of
fp8). The scales are read from device memory (no host sync) ahead of the main loop, per-tensor once, per-row before
each tile's loop (a stream-K finisher's after it). The wgmma accumulates in Hopper's limited fp8 precision over the
whole K (torch's `use_fast_accum=True`). The blockwise-scaled kernel is matmul_fp8_blockwise.py.

Roles (one CTA per SM; the static grouped schedule, or stream-K's, whose partial tiles meet through a workspace as
in matmul.py; edge tiles moved inside D as schedulers/grid.py says): load (1 warp, TMA), mma (8 warps: two wgmma
warpgroups, epilogue into an output stage), store (1 warp, TMA store overlapped with the next tile's main loop), and
under stream-K epilogue_load (1 warp, the partial sums a finisher adds); all but mma are gemm_roles.py's.
In a CLUSTER_M x CLUSTER_N cluster the blocks are the cluster's and the shared operand is multicast, as in matmul.py
(matmul_fp8 launches clusters under the static schedule; the kernel's stream-K takes them too); with SWAP_AB (small
M) the kernel computes D^T, as matmul.py does.
"""

from triton.experimental import gluon
from triton.experimental.gluon import language as gl

from tilepipe.kernels.gemm_roles import (WORKER_REGS, WORKER_WARPS, c_pipelines, epilogue_load_role, load_role,
                                        store_regs, store_role, wgmma_unit)
from tilepipe.kernels.matmul import SCHEDULER_STAGES
from tilepipe.kernels.read_ahead import scaled, tile_scales
from tilepipe.kernels.spec import tile_desc
from tilepipe.pipeline.cluster import Cluster, wgmma_accumulator
from tilepipe.pipeline.epilogue import EpiLoadPipeline
from tilepipe.pipeline.multicast import split_shared
from tilepipe.pipeline.output import OutputTilePipeline
from tilepipe.pipeline.partials import PartialTiles
from tilepipe.pipeline.roles import warp_specialize
from tilepipe.pipeline.storage import (BlockwiseFP8TileStorage, ClcPipelineStorage, EpiLoadPipelineStorage,
                                       InputPipelineStorage, OutputPipelineStorage, OutputTileStorage,
                                       SmemPipelineBundle, SmemPlan, StandardTileStorage)
from tilepipe.pipeline.tiles import InputTilePipeline
from tilepipe.schedulers import scheduler_class


@gluon.constexpr_function
def fp8_plan(block_m, block_n, block_k, stages, c_stages, a_dtype, b_dtype, c_dtype, blockwise=False, cluster_m=1,
             cluster_n=1, swap_ab=False, streamk=False, split=False, dynamic=False):
    """Shared memory: operand stages (plus the blockwise scales), output stages, and the pipelines between roles.

    Blockwise: the MMA role reads the scales with ordinary loads before it frees a stage, so the input pipeline's
    consumer side is "generic" (a proxy fence precedes each release, before TMA refills the slot). A cluster splits
    and shares the blocks as pipeline/cluster.py says (blockwise: the scales with their operands). `swap_ab` (scaled
    kernel only): the output stages hold D's tile, the transpose of the block_m x block_n one the kernel computes.
    `streamk`: the epilogue-load ring that brings partial sums into the output stages (pipeline/partials.py).
    `split`: each CTA issues its half of the shared operand's tile (a split ring: pipeline/multicast.py); blockwise,
    the shared operand's scales are still multicast by the first CTA (a few hundred bytes). `dynamic` (one CTA; the
    grouped blockwise kernel's): the dynamic scheduler's tile-id ring for the load, mma and store roles.
    """
    cluster = Cluster(cluster_m, cluster_n)
    if blockwise and swap_ab:
        raise ValueError("the blockwise FP8 kernel has no swap-AB variant")
    if blockwise and streamk and cluster.num_ctas > 1:  # the scaled kernel's partial tiles are per CTA in a cluster
        raise ValueError("the stream-K scheduler is not built for the blockwise FP8 kernel in a cluster; its clusters "
                         "run under the static scheduler")
    storage = BlockwiseFP8TileStorage if blockwise else StandardTileStorage
    return SmemPlan("sm_90a",
                    operands=storage(a_dtype, b_dtype, (block_m, block_k), (block_n, block_k), stages,
                                     a_cga=cluster.a, b_cga=cluster.b(True)),
                    c_tiles=OutputTileStorage(c_dtype, (block_n, block_m) if swap_ab else (block_m, block_n), c_stages,
                                              cga=cluster.c),
                    pipelines=SmemPipelineBundle(
                        InputPipelineStorage(stages, consumer_proxy="generic" if blockwise else "async",
                                             multicast=cluster.num_ctas > 1 and not split, split=split),
                        OutputPipelineStorage(c_stages, consumer="store", producer_proxy="generic",
                                              consumer_proxy="async"),
                        clc=ClcPipelineStorage(SCHEDULER_STAGES, ("load", "mma", "store")) if dynamic else None,
                        epi_load=EpiLoadPipelineStorage(c_stages, consumer="store") if streamk else None))


@gluon.constexpr_function
def accumulator_layout(num_warps, block_n, bases=()):
    """FP8 wgmma's fp32 accumulator layout: warpgroups stacked along M (in a cluster, each CTA's part)."""
    return wgmma_accumulator(num_warps, block_n, bases, 32)


@gluon.jit
def allocate_roles(PLAN: gl.constexpr, STREAMK: gl.constexpr = False):
    """The input, output and source pipelines of a plan from fp8_plan (sources: stream-K's partial sums, else a
    stand-in) and the load-order stand-in the shared epilogue-load role takes (no C)."""
    smem = PLAN.allocate()
    sources, load_order = c_pipelines(smem, smem.c_tiles, False, STREAMK)
    return (InputTilePipeline(smem.pipelines.input, smem.operands, 1),
            OutputTilePipeline(smem.pipelines.output, smem.c_tiles), sources, load_order)


@gluon.jit
def scaled_mma_role(inputs: InputTilePipeline, outputs: OutputTilePipeline, sources: EpiLoadPipeline, sched, k_tiles,
                    scale_a, scale_b, M, N, SA_STRIDE: gl.constexpr, SB_STRIDE: gl.constexpr, SWAP_AB: gl.constexpr,
                    STREAMK: gl.constexpr):
    """The scales multiply the accumulator's rows and columns (the problem's B^T and A under SWAP_AB: the host swaps
    the scales too); the output stage takes D's tile, the accumulator's transpose under SWAP_AB. STREAMK: partial
    sums pass through the output stages, in lockstep with `sources` (pipeline/partials.py)."""
    BM: gl.constexpr = outputs.tiles.shape[2] if SWAP_AB else outputs.tiles.shape[1]
    BN: gl.constexpr = outputs.tiles.shape[1] if SWAP_AB else outputs.tiles.shape[2]
    acc_layout: gl.constexpr = accumulator_layout(gl.num_warps(), BN, outputs.tiles.type.layout.cga_layout)
    PER_TENSOR: gl.constexpr = SA_STRIDE == 0 and SB_STRIDE == 0
    EARLY: gl.constexpr = not (PER_TENSOR or STREAMK)  # stream-K: after the loop (a first form spilled there)
    if PER_TENSOR:  # one product for every tile, read once
        tensor_scale = gl.load(scale_a) * gl.load(scale_b)
    consumer = inputs.consumer().with_release_lag(1)
    work = sched.work()
    while work.valid:
        if EARLY:  # read before the tile's main loop, which hides their latency
            sa, sb = tile_scales(work, scale_a, scale_b, M, N, BM, BN, SA_STRIDE, SB_STRIDE, acc_layout)
        acc, consumer = wgmma_unit(consumer, work, k_tiles, BM, BN, acc_layout, True)  # FP8: B always K-major
        if work.finishes:  # the scales multiply the whole sum: a stream-K finisher adds the partials first
            acc, outputs, sources = work.add_partials(acc, outputs, sources)
            if PER_TENSOR:
                acc = acc * tensor_scale
            else:
                if not EARLY:
                    sa, sb = tile_scales(work, scale_a, scale_b, M, N, BM, BN, SA_STRIDE, SB_STRIDE, acc_layout)
                acc = scaled(acc, sa, sb)
            d = gl.permute(acc, (1, 0)) if SWAP_AB else acc  # D's tile
            with outputs.produce() as out:
                if STREAMK:
                    _, sources = sources.wait()  # this use's empty fill
                out.tile().store(d.to(outputs.tiles.dtype))
                out.arrive()
        else:
            outputs, sources = work.publish_partial(acc, outputs, sources)
        work = work.next()
    outputs.drain()


@gluon.jit(do_not_specialize=["scale_a", "scale_b", "M", "N", "K"])  # one binary per configuration
def scaled_matmul_kernel(a_desc, b_desc, d_desc, scale_a, scale_b, workspace, M, N, K, STAGES: gl.constexpr,
                         C_STAGES: gl.constexpr, GROUP_M: gl.constexpr, SA_STRIDE: gl.constexpr,
                         SB_STRIDE: gl.constexpr, SCHEDULE: gl.constexpr, CLUSTER_M: gl.constexpr = 1,
                         CLUSTER_N: gl.constexpr = 1, SWAP_AB: gl.constexpr = False, partial_desc=None):
    """D = (A @ B^T) * scale_a[row * SA_STRIDE] * scale_b[col * SB_STRIDE] (strides 0: per-tensor, 1: per-row).
    SCHEDULE: "static" or "streamk"; `workspace`: stream-K's flags and partial tiles (unread by static). Launched
    with num_ctas = CLUSTER_M * CLUSTER_N, the blocks are a cluster's tiles (stream-K: per-CTA partials). SWAP_AB:
    the host passes B, A, their scales and N, M in that order, and d_desc's blocks are D's (transposed) tiles.
    `partial_desc` (stream-K): the workspace's partial tiles (pipeline/partials.py)."""
    BM: gl.constexpr = d_desc.block_type.shape[1] if SWAP_AB else d_desc.block_type.shape[0]
    BN: gl.constexpr = d_desc.block_type.shape[0] if SWAP_AB else d_desc.block_type.shape[1]
    BK: gl.constexpr = a_desc.block_type.shape[1]
    D_BN: gl.constexpr = d_desc.block_type.shape[1]
    STREAMK: gl.constexpr = SCHEDULE == "streamk"
    PLAN: gl.constexpr = fp8_plan(BM, BN, BK, STAGES, C_STAGES, a_desc.dtype, b_desc.dtype, d_desc.dtype, False,
                                  CLUSTER_M, CLUSTER_N, SWAP_AB, STREAMK, split_shared(a_desc, b_desc, BM, BN,
                                                                                       CLUSTER_M, CLUSTER_N))
    inputs, outputs, sources, load_order = allocate_roles(PLAN, STREAMK)
    partials = PartialTiles.create(workspace, partial_desc, outputs.tiles, BN) if STREAMK else None
    # edge tiles inside D (TileGrid) but where it spills: 128x256's column scales, split-K's 64-row tiles
    INWARD: gl.constexpr = not (SWAP_AB or CLUSTER_M * CLUSTER_N > 1 or BM * BN >= 128 * 256 or (STREAMK and BM == 64))
    sched = scheduler_class(SCHEDULE).from_kernel(M, N, gl.cdiv(K, BK), BM, BN, GROUP_M, None, workspace, partials,
                                                  INWARD)
    warp_specialize([(scaled_mma_role, (inputs, outputs, sources, sched, gl.cdiv(K, BK), scale_a, scale_b, M, N,
                                        SA_STRIDE, SB_STRIDE, SWAP_AB, STREAMK)),
                     (load_role, (inputs, None, a_desc, b_desc, sched, gl.cdiv(K, BK), True, False), WORKER_WARPS,
                      WORKER_REGS),  # no C: no load-order barrier
                     (store_role, (outputs, sources, d_desc, sched, STREAMK, SWAP_AB), WORKER_WARPS,
                      store_regs(STREAMK, CLUSTER_M * CLUSTER_N)),
                     (epilogue_load_role, (sources, load_order, d_desc, sched, D_BN, SWAP_AB,
                                           False), WORKER_WARPS, WORKER_REGS) if STREAMK else None])


# ---- ahead-of-time specs ------------------------------------------------------------------------


def scaled_spec(cfg, a_dtype: str, b_dtype: str, c_dtype: str, per_row: bool, schedule: str = "static",
                target: str = "sm_90a"):
    """scaled_matmul_kernel for one configuration (and its cluster) and schedule as a tilepipe.verify.compile
    KernelSpec; on target "sm_100a" its Blackwell form, kernels/sm100_matmul.py: sm100_scaled_matmul_kernel (the
    same arguments, D in BM x EPILOGUE_N boxes)."""
    from tilepipe.kernels.matmul import operand_blocks
    from tilepipe.kernels.spec import KernelSpec, partial_signature

    stride = 1 if per_row else 0
    if target == "sm_100a":
        from tilepipe.kernels.sm100_matmul import sm100_operand_blocks

        fn, blocks = "tilepipe.kernels.sm100_matmul:sm100_scaled_matmul_kernel", sm100_operand_blocks(cfg, True)
    else:
        fn, blocks = f"{__name__}:scaled_matmul_kernel", operand_blocks(cfg, True)
    # the sm_90a kernel's stream-K partial tiles (kernels/spec.py: partial_signature); the sm_100a one has none
    partials = {} if target == "sm_100a" else {"partial_desc": partial_signature(cfg, c_dtype, schedule)}
    unread = {"partial_desc": None} if partials and schedule != "streamk" else {}
    return KernelSpec(fn,
                      {"a_desc": tile_desc(a_dtype, *blocks["a"]), "b_desc": tile_desc(b_dtype, *blocks["b"]),
                       "d_desc": tile_desc(c_dtype, *blocks["c"]), "scale_a": "*fp32", "scale_b": "*fp32",
                       "workspace": "*i32", "M": "i32", "N": "i32", "K": "i32", "STAGES": "constexpr",
                       "C_STAGES": "constexpr", "GROUP_M": "constexpr", "SA_STRIDE": "constexpr",
                       "SB_STRIDE": "constexpr", "SCHEDULE": "constexpr", "CLUSTER_M": "constexpr",
                       "CLUSTER_N": "constexpr", "SWAP_AB": "constexpr", **partials},
                      {"STAGES": cfg.stages, "C_STAGES": cfg.c_stages, "GROUP_M": cfg.group_m, "SA_STRIDE": stride,
                       "SB_STRIDE": stride, "SCHEDULE": schedule, "CLUSTER_M": cfg.cluster_m,
                       "CLUSTER_N": cfg.cluster_n, "SWAP_AB": cfg.swap_ab, **unread},
                      target=target, num_warps=cfg.num_warps, options={"num_ctas": cfg.cluster.num_ctas},
                      divisible_by_16=("workspace", ))  # the JIT's: the scales unspecialized


