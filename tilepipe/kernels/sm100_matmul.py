"""Warp-specialized persistent GEMM for sm_100a (Blackwell): D = alpha * A @ B (+ beta * C, or + beta * bias[col]),
its FP8 form D = (A @ B^T) * scale_a[row] * scale_b[col] (sm100_scaled_matmul_kernel), and the body of the
block-scaled GEMM (sm100_block_scaled.py), written only with tilepipe's roles and pipelines. Compiled for sm_100a on
the CPU; none has run on a GPU (none here).

Roles (tiles in grouped order; SCHEDULE "static": one CTA per SM, tilepipe/schedulers/static.py; "clc": one CTA per
tile, running CTAs take over pending ones' tiles through cluster launch control, tilepipe/schedulers/clc.py):
  epilogue  (4 warps, default)  waits for a tile's TMEM accumulator, reads it in EPI_N-column sub-tiles, frees it
            after the last TMEM load, scales them (C or bias; FP8: row and column scales), TMA-stores each one
  load      (1 warp)   TMA A and B tiles (and block scales) into the input tile pipeline (the sm_90a GEMM's load role)
  mma       (1 warp)   tcgen05 MMAs (block-scaled: scales to TMEM first) from the input stages into a TMEM accumulator
            stage; each MMA's commit frees its input stage, one commit per tile hands the accumulator on
  epilogue_load (1 warp, with C)  the sm_90a GEMM's: each C sub-tile into a source stage, after the tile's A, B loads
  scheduler (1 warp, clc)  try_cancel into the scheduler ring, paced by the load role; every other role reads it
Accumulators are double-buffered in TMEM where two fit beside any scale buffers (512 columns): the MMA role runs tile
i + 1's main loop while the epilogue drains tile i. A is M x K row-major; B is N x K (K-major, B_KMAJOR) or K x N;
C of any dtype the descriptor gives. The arguments are the sm_90a matmul_kernel's (C and D in BM x EPILOGUE_N boxes),
so one host launch serves both; the dynamic and stream-K schedules are not built for sm_100a
(schedulers.sm100_scheduler_class refuses them).
Two-CTA form (sm100_matmul_kernel with CLUSTER_M = 2, static schedule; compiled, never run): a 2x1 cluster computes
a 2 * 128 x BN tile with cta_group::2 MMAs. Each CTA TMA-loads its 128 rows of A and its BN / 2 rows of B into its
own stages, arriving on the lead CTA's pair barrier; the lead CTA's MMA role issues the MMAs over both CTAs' stages
(the other CTA's MMA role waits and issues nothing: Gluon predicates both to the lead CTA), and each commit lands on
both CTAs' barriers; each CTA's epilogue drains its own 128 rows of the accumulator and frees it on the pair barrier.
The roles are the same code: the storage declares the pair (sm100_plan's `cluster_m`), the pipelines do the rest.
"""

from triton.experimental import gluon
from triton.experimental.gluon import language as gl

from tilepipe.kernels.epilogues import epilogue_role
from tilepipe.kernels.gemm_roles import WORKER_REGS, WORKER_WARPS, c_pipelines, epilogue_load_role, load_role
from tilepipe.kernels.spec import gemm_spec
from tilepipe.pipeline.cluster import Cluster
from tilepipe.pipeline.output import OutputTilePipeline, SubtileStores
from tilepipe.pipeline.probe import Probe
from tilepipe.pipeline.roles import warp_specialize
from tilepipe.pipeline.storage import (TMEM_LIMIT_COLUMNS, BlockScaledTileStorage, ClcPipelineStorage,
                                       EpiLoadPipelineStorage, InputPipelineStorage, LoadOrderBarrierStorage,
                                       OutputPipelineStorage, OutputTileStorage, SmemPipelineBundle, SmemPlan,
                                       SourceTileStorage, StandardTileStorage, TmemAccumulatorStorage)
from tilepipe.pipeline.tiles import InputTilePipeline
from tilepipe.schedulers import sm100_scheduler_class
from tilepipe.schedulers.clc import clc_scheduler_role

EPILOGUE_N = 32
"""Columns of one epilogue sub-tile: a 32x32b TMEM load of 32 fp32 values per thread, and the D TMA box's width."""
CLC_STAGES = 2  # CLC responses in flight: the throttle keeps the scheduler one tile ahead of the load role
HOPPER_ONLY = gl.constexpr("the sm_100a FP8 and block-scaled GEMMs are not built for clusters or swap-AB")
PAIR_ONLY = gl.constexpr("sm100_matmul_kernel takes no cluster or a 2x1 one (launched with num_ctas = 2: the two-CTA "
                         "MMA, static schedule), and no swap-AB")


@gluon.constexpr_function
def sm100_plan(block_m, block_n, block_k, stages, sub_stages, dtype, c_dtype, b_kmajor, epi_n=EPILOGUE_N,
               src_dtype=None, clc=False, b_dtype=None, scales=None, cluster_m=1):
    """Shared and tensor memory: operand stages, `sub_stages` D sub-tile buffers of epi_n columns (and as many C
    sub-tile stages of `src_dtype`, with C), TMEM accumulators (two where they fit beside any scale buffers), and the
    pipelines between the roles (with `clc`, the scheduler ring of CLC responses, which every other role reads); B's
    stages of `b_dtype` where it differs from A's (FP8: e4m3 with e5m2); `scales` (scale dtype, packed 4-scale blocks
    along K a stage): a block-scaled payload, block_k in stored elements. `cluster_m` 2: the two-CTA form, block_m
    the pair's rows, the tiles split over its CTAs (sizes and TMEM columns per CTA), the input and accumulator rings
    declared for the pair's MMA. Refused (SmemBudgetError, a compile error in the kernel) over 227 KB of shared
    memory or 512 TMEM columns per CTA."""
    pair = Cluster(cluster_m)
    if pair.num_ctas > 1 and (clc or scales):
        raise ValueError("the two-CTA sm_100a GEMM is built for the static schedule, without block scales")
    b_tile = (block_n, block_k) if b_kmajor else (block_k, block_n)
    operands = (BlockScaledTileStorage(dtype, b_dtype or dtype, (block_m, block_k), b_tile, stages, *scales)
                if scales else StandardTileStorage(dtype, b_dtype or dtype, (block_m, block_k), b_tile, stages,
                                                   a_cga=pair.a, b_cga=pair.b(b_kmajor, mma_pair=True)))
    scale_columns = sum(part.columns for part in operands.tmem_parts())
    acc_stages = 2 if 2 * block_n + scale_columns <= TMEM_LIMIT_COLUMNS["sm_100a"] else 1
    has_c = src_dtype is not None
    readers = ("epilogue", "load", "mma") + (("epilogue_load", ) if has_c else ())
    mma = "mma" if pair.num_ctas > 1 else ""  # the pair's MMA: the input ring's consumer, the accumulators' producer
    storages = dict(operands=operands,
                    d_tiles=OutputTileStorage(c_dtype, (block_m, epi_n), sub_stages, cga=pair.c),
                    accumulators=TmemAccumulatorStorage(acc_stages, block_m, block_n, two_ctas=bool(mma)),
                    pipelines=SmemPipelineBundle(
                        InputPipelineStorage(stages, pair_mma=mma and "consumer"),
                        OutputPipelineStorage(acc_stages, pair_mma=mma and "producer"),
                        clc=ClcPipelineStorage(CLC_STAGES, readers, producer_proxy="async") if clc else None,
                        epi_load=EpiLoadPipelineStorage(sub_stages, consumer_proxy="generic") if has_c else None))
    if has_c:
        storages.update(src_tiles=SourceTileStorage(src_dtype, (block_m, epi_n), sub_stages, cga=pair.c),
                        load_order=LoadOrderBarrierStorage())
    return SmemPlan("sm_100a", **storages).check()


@gluon.jit
def mma_role(inputs: InputTilePipeline, accs: OutputTilePipeline, sched, k_tiles, B_KMAJOR: gl.constexpr,
             SCALED: gl.constexpr):
    consumer = inputs.consumer()
    work = sched.work()
    while work.valid:
        with accs.produce() as acc:  # waits until the epilogue drained this accumulator
            for k in range(k_tiles):
                tiles = consumer.acquire()
                if SCALED:  # the stage's block scales go to TMEM, then the block-scaled MMA (B K-major)
                    consumer = tiles.tcgen05_mma_scaled(acc.tile(), use_acc=k > 0)
                else:
                    b = tiles.b_tile().permute((1, 0)) if B_KMAJOR else tiles.b_tile()
                    consumer = tiles.tcgen05_mma(tiles.a_tile(), b, acc.tile(), use_acc=k > 0)
            acc.commit()  # the accumulator is final once every MMA issued so far completed
        work = work.next()
    accs.drain()


@gluon.jit
def sm100_gemm(a_desc, b_desc, d_desc, c_desc, bias_ptr, scale_a, scale_b, M, N, K, alpha, beta, STAGES: gl.constexpr,
               C_STAGES: gl.constexpr, GROUP_M: gl.constexpr, B_KMAJOR: gl.constexpr, HAS_C: gl.constexpr,
               HAS_BIAS: gl.constexpr, SA_STRIDE: gl.constexpr, SB_STRIDE: gl.constexpr, SCHEDULE: gl.constexpr,
               workspace, probe_buf, PROBE: gl.constexpr, sfa_desc=None, sfb_desc=None):
    """The GEMM the sm_100a kernels launch (given scale descriptors: a block-scaled payload; launched with two CTAs:
    the two-CTA form): plan, pipelines, roles."""
    SCALED: gl.constexpr = sfa_desc is not None
    BM: gl.constexpr = a_desc.block_type.shape[0]
    BK: gl.constexpr = a_desc.block_type.shape[1]
    BN: gl.constexpr = b_desc.block_type.shape[0] if B_KMAJOR else b_desc.block_type.shape[1]
    PLAN: gl.constexpr = sm100_plan(BM, BN, BK, STAGES, C_STAGES, a_desc.dtype, d_desc.dtype, B_KMAJOR,
                                    d_desc.block_type.shape[1], c_desc.dtype if HAS_C else None, SCHEDULE == "clc",
                                    b_desc.dtype, (sfa_desc.dtype, sfa_desc.block_type.shape[2]) if SCALED else None,
                                    gl.num_ctas())
    k_tiles = gl.cdiv(K, BK)
    smem = PLAN.allocate(Probe.create(probe_buf, PROBE))  # debug / trace records of every pipeline wait
    sched = sm100_scheduler_class(SCHEDULE).from_kernel(M, N, k_tiles, BM, BN, GROUP_M, smem.pipelines, workspace)
    inputs = InputTilePipeline(smem.pipelines.input, smem.operands, 1)
    accs = OutputTilePipeline(smem.pipelines.output, smem.accumulators)
    sources, load_order = c_pipelines(smem, smem.src_tiles if HAS_C else smem.d_tiles, HAS_C)  # C sub-tiles land
    warp_specialize([(epilogue_role, (accs, SubtileStores(smem.d_tiles), sources, sched, d_desc, alpha, beta,
                                      bias_ptr, scale_a, scale_b, M, N, HAS_C, HAS_BIAS, SA_STRIDE, SB_STRIDE)),
                     (load_role, (inputs, load_order, a_desc, b_desc, sched, k_tiles, B_KMAJOR, HAS_C, sfa_desc,
                                  sfb_desc), WORKER_WARPS, WORKER_REGS),
                     (mma_role, (inputs, accs, sched, k_tiles, B_KMAJOR, SCALED), WORKER_WARPS, WORKER_REGS),
                     (epilogue_load_role, (sources, load_order, c_desc, sched, BN), WORKER_WARPS, WORKER_REGS) if HAS_C
                     else None,
                     (clc_scheduler_role, (sched, ), WORKER_WARPS, WORKER_REGS) if SCHEDULE == "clc" else None])


@gluon.jit(do_not_specialize=["M", "N", "K", "alpha", "beta", "bias_ptr"])  # one binary per configuration
def sm100_matmul_kernel(a_desc, b_desc, d_desc, c_desc, bias_ptr, workspace, M, N, K, alpha, beta,
                        STAGES: gl.constexpr, C_STAGES: gl.constexpr, GROUP_M: gl.constexpr, B_KMAJOR: gl.constexpr,
                        HAS_C: gl.constexpr, HAS_BIAS: gl.constexpr, SCHEDULE: gl.constexpr,
                        CLUSTER_M: gl.constexpr = 1, CLUSTER_N: gl.constexpr = 1, SWAP_AB: gl.constexpr = False,
                        probe_buf=None, PROBE: gl.constexpr = 0, partial_desc=None, ticket_desc=None):
    """matmul_kernel's arguments (c_desc and d_desc in BM x EPILOGUE_N boxes; C_STAGES: D sub-tile buffers and C
    sub-tile stages; no swap-AB; CLUSTER_M = 2: the two-CTA form, its blocks the pair's); `workspace`,
    `partial_desc` and `ticket_desc` are not read (neither scheduler keeps global state)."""
    gl.static_assert(CLUSTER_N == 1 and CLUSTER_M == gl.num_ctas() and CLUSTER_M <= 2 and not SWAP_AB, PAIR_ONLY)
    sm100_gemm(a_desc, b_desc, d_desc, c_desc, bias_ptr, bias_ptr, bias_ptr, M, N, K, alpha, beta, STAGES, C_STAGES,
               GROUP_M, B_KMAJOR, HAS_C, HAS_BIAS, -1, -1, SCHEDULE, workspace, probe_buf, PROBE)


@gluon.jit(do_not_specialize=["scale_a", "scale_b", "M", "N", "K"])  # one binary per configuration
def sm100_scaled_matmul_kernel(a_desc, b_desc, d_desc, scale_a, scale_b, workspace, M, N, K, STAGES: gl.constexpr,
                               C_STAGES: gl.constexpr, GROUP_M: gl.constexpr, SA_STRIDE: gl.constexpr,
                               SB_STRIDE: gl.constexpr, SCHEDULE: gl.constexpr, CLUSTER_M: gl.constexpr = 1,
                               CLUSTER_N: gl.constexpr = 1, SWAP_AB: gl.constexpr = False):
    """kernels/matmul_fp8.py's scaled_matmul_kernel (its arguments) on sm_100a: A and B K-major e4m3/e5m2 (tcgen05's
    f8f6f4 MMA, fp32 accumulation in TMEM), D in BM x EPILOGUE_N boxes; no cluster, no swap-AB, no C."""
    gl.static_assert(CLUSTER_M * CLUSTER_N == 1 and not SWAP_AB, HOPPER_ONLY)
    sm100_gemm(a_desc, b_desc, d_desc, d_desc, scale_a, scale_a, scale_b, M, N, K, 1.0, 0.0, STAGES, C_STAGES,
               GROUP_M, True, False, False, SA_STRIDE, SB_STRIDE, SCHEDULE, workspace, None, 0)


def sm100_matmul_spec(cfg, dtype: str, c_dtype: str, b_kmajor: bool, has_c: bool = False,
                      source_dtype: str | None = None, bias_dtype: str | None = None, probe: int = 0,
                      schedule: str = "static"):
    """sm100_matmul_kernel for one configuration and scheduler as a KernelSpec (sm_100a): matmul_spec's arguments
    (D of `c_dtype`; C of `source_dtype` with `has_c`, or a bias of `bias_dtype`; PROBE, SCHEDULE); a 2x1 cluster in
    `cfg`: the two-CTA form."""
    return gemm_spec(f"{__name__}:sm100_matmul_kernel", cfg, dtype, c_dtype, b_kmajor,
                     sm100_operand_blocks(cfg, b_kmajor), "sm_100a", has_c, source_dtype, bias_dtype, probe, schedule)


def sm100_operand_blocks(cfg, b_kmajor: bool) -> dict[str, tuple[tuple[int, int], tuple]]:
    """The TMA blocks of sm100_matmul_kernel (a program's tiles: a pair's in the two-CTA form, A, C and D split by
    rows, B by its N columns, each CTA loading its own part), C and D in tile_m x EPILOGUE_N boxes (the epilogue's
    sub-tiles). A cluster other than 2x1 raises ValueError (1x2 is Hopper-only; swap-AB: api/matmul.py
    check_swap_ab)."""
    cluster = cfg.cluster
    if cluster.n > 1:
        raise ValueError(f"the sm_100a GEMM's cluster is the 2x1 pair of its two-CTA MMA; got cluster_n = "
                         f"{cfg.cluster_n} (a 1x2 cluster is built for sm_90a only): use cluster_n = 1")
    b_block = (cfg.block_n, cfg.block_k) if b_kmajor else (cfg.block_k, cfg.block_n)
    return {"a": ((cfg.tile_m, cfg.block_k), cluster.a), "b": (b_block, cluster.b(b_kmajor, mma_pair=True)),
            "c": ((cfg.tile_m, EPILOGUE_N), cluster.c)}
