"""Warp-specialized persistent blockwise-scaled FP8 GEMM for sm_90a: DeepSeek-V3 scaling, A with an fp32 scale per
(row, 128-wide K block), B with one per 128 x 128 block. Each K tile's wgmma writes a fresh fp32 partial sum that the
MMA role promotes in registers: acc += partial * scale_a[row, k] * scale_b[n, k]. The scales arrive by TMA in the same
input stage as the operands (`BlockwiseFP8TileStorage`), so the main loop does no global load.

Roles (one CTA per SM; the static grouped schedule, or stream-K's, whose partial fp32 sums, already promoted, meet
through a workspace as in matmul.py): load (1 warp, TMA of A, B and the stage's scales), mma (8 warps: two wgmma
warpgroups, promotion, epilogue into an output stage), store (1 warp, the shared TMA store role), and under stream-K
the shared epilogue-load role (1 warp, TMA loads of the partial sums a finisher adds).
In a CLUSTER_M x CLUSTER_N cluster (static schedule) the blocks are the cluster's, as in matmul_fp8.py: the shared
operand is multicast with its scales (a 2x1 cluster shares B and its block scale, a 1x2 one A and its row scales),
and each CTA promotes its own columns with its own B block scale.
"""

from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import warpgroup_mma

from tilepipe.kernels.blockwise_scales import SCALE_BLOCK, a_scales_at, load_stage_scales, promote, stage_scales
from tilepipe.kernels.gemm_roles import WORKER_REGS, WORKER_WARPS, epilogue_load_role, operand_accumulator, store_role
from tilepipe.kernels.matmul_fp8 import accumulator_layout, allocate_roles, fp8_plan, tile_desc
from tilepipe.pipeline.cluster import column_runs
from tilepipe.pipeline.mma import warpgroup_local_wait
from tilepipe.pipeline.epilogue import EpiLoadPipeline
from tilepipe.pipeline.multicast import split_shared
from tilepipe.pipeline.output import OutputTilePipeline
from tilepipe.pipeline.partials import PartialTiles
from tilepipe.pipeline.pieces import tile_boxes
from tilepipe.pipeline.roles import warp_specialize
from tilepipe.pipeline.storage import BlockwiseScaleStorage
from tilepipe.pipeline.tiles import InputTilePipeline
from tilepipe.schedulers import scheduler_class


@gluon.jit
def blockwise_load_role(inputs: InputTilePipeline, a_desc, b_desc, sa_desc, sb_desc, sched, k_tiles,
                        A_SCALES_AT: gl.constexpr = a_scales_at):
    """A, B and the K tile's scales (A's BM row scales where A_SCALES_AT says, B's block scales) into one stage at the
    work's coordinates (a grouped GEMM's: its rows, expert); a cluster's shared operand multicast (tiles.load_a/b)."""
    BM: gl.constexpr = inputs.payload.a_tiles.shape[1]
    BK: gl.constexpr = a_desc.block_type.shape[1]
    BN: gl.constexpr = inputs.payload.b_tiles.shape[1]
    A_BOXES: gl.constexpr = tile_boxes(inputs.payload.a_tiles, a_desc)  # 2 where a CTA loads its half (split)
    B_BOXES: gl.constexpr = tile_boxes(inputs.payload.b_tiles, b_desc)
    producer = inputs.producer()
    work = sched.work(paces=True)
    while work.valid:
        row, col = work.origin(BM, BN)
        k_begin, k_end = work.k_steps(k_tiles)
        for k in range(k_begin, k_end):
            with producer.produce() as tiles:
                tiles.expect_loads(a_desc, b_desc, sa_desc, sb_desc, boxes=(A_BOXES, B_BOXES, 1, 1))
                a_row, a_col = work.a_coords(row, k * BK)
                b_row, b_col = work.b_coords(col, k * BK, True)
                tiles.load_a(a_desc, [a_row, a_col])
                tiles.load_b(b_desc, [b_row, b_col])
                load_stage_scales(tiles, sa_desc, sb_desc, a_row, b_row, k, A_SCALES_AT)
        work = work.next()
    producer.drain()


@gluon.jit
def issue_partial(tiles, acc):
    """Start the stage's wgmma into a fresh fp32 partial sum (`acc` only gives its type: use_acc=False)."""
    return warpgroup_mma(tiles.a_tile(), tiles.b_tile().permute((1, 0)), acc, use_acc=False, is_async=True)


@gluon.jit
def promote_while_next_runs(consumer, k, in_flight, scale, acc, view: gl.constexpr):
    """Start K tile k's wgmma, retire `in_flight` (K tile k - 1) and promote it into `acc`; frees its stage.

    Returns (consumer, the new partial sum in flight, its scales, acc)."""
    tiles = consumer.acquire()
    started = issue_partial(tiles, acc)
    done = warpgroup_local_wait(num_outstanding=1, deps=(in_flight, ))
    started_scale = stage_scales(tiles, k, gl.SliceLayout(2, view))
    consumer = tiles.release()  # with the release lag: the stage `done` read
    return consumer, started, started_scale, promote(acc, done, scale, view)


@gluon.jit
def blockwise_unit(consumer, work, k_tiles, BM: gl.constexpr, BN: gl.constexpr, acc_layout: gl.constexpr,
                   B_KMAJOR: gl.constexpr):
    """One unit's blockwise main loop (wgmma_unit's counterpart: the grouped GEMM takes either): per K tile a fresh
    wgmma partial sum, promoted in fp32 registers with the stage's scales while the next K tile's wgmma runs (total
    and two partial sums per thread), all retired and released. Returns (acc in `acc_layout`, the consumer).
    K tiles go in pairs so the partial sums swap roles by name, never by a register copy: a copy of one whose wgmma
    is in flight makes ptxas serialize every wgmma of the kernel."""
    gl.static_assert(B_KMAJOR, "fp8 wgmma reads B K-major")
    CN: gl.constexpr = consumer.payload.b_scales.shape[1]  # CTAs along N, each with its own B block scale
    layout: gl.constexpr = operand_accumulator(acc_layout, consumer.payload.a_tiles.dtype)
    view: gl.constexpr = column_runs(layout, [BM, BN], CN)
    scales: gl.constexpr = gl.SliceLayout(2, view)
    k_begin, k_end = work.k_steps(k_tiles)  # all K tiles, or a stream-K unit's (at least one)
    acc = gl.zeros([BM, BN], gl.float32, layout)
    tiles = consumer.acquire()
    p0 = issue_partial(tiles, acc)
    s0 = stage_scales(tiles, k_begin, scales)
    consumer = tiles.release()
    for k in range(k_begin + 2, k_end, 2):  # K tiles k - 1 and k
        consumer, p1, s1, acc = promote_while_next_runs(consumer, k - 1, p0, s0, acc, view)
        consumer, p0, s0, acc = promote_while_next_runs(consumer, k, p1, s1, acc, view)
    if (k_end - k_begin) % 2 == 0:  # one K tile left
        tiles = consumer.acquire()
        p1 = issue_partial(tiles, acc)
        last0, last1 = warpgroup_local_wait(num_outstanding=0, deps=(p0, p1))
        s1 = stage_scales(tiles, k_end - 1, scales)
        consumer = tiles.release()
        acc = promote(promote(acc, last0, s0, view), last1, s1, view)
    else:
        last0 = warpgroup_local_wait(num_outstanding=0, deps=(p0, ))
        acc = promote(acc, last0, s0, view)
    return gl.convert_layout(acc, acc_layout), consumer.flush_releases()  # the same registers


@gluon.jit
def blockwise_mma_role(inputs: InputTilePipeline, outputs: OutputTilePipeline, sources: EpiLoadPipeline, sched,
                       k_tiles, STREAMK: gl.constexpr):
    """Each unit's blockwise main loop (blockwise_unit), then its tile into an output stage. STREAMK: stream-K's
    partial tiles pass through the output stages, in lockstep with `sources` (pipeline/partials.py)."""
    BM: gl.constexpr = outputs.tiles.shape[1]
    BN: gl.constexpr = outputs.tiles.shape[2]
    acc_layout: gl.constexpr = accumulator_layout(gl.num_warps(), BN, outputs.tiles.type.layout.cga_layout)
    consumer = inputs.consumer().with_release_lag(1)  # a stage is freed once the wgmma reading it retired
    work = sched.work()
    while work.valid:
        acc, consumer = blockwise_unit(consumer, work, k_tiles, BM, BN, acc_layout, True)
        if work.finishes:
            acc, outputs, sources = work.add_partials(acc, outputs, sources)
            with outputs.produce() as out:
                if STREAMK:
                    _, sources = sources.wait()  # this use's empty fill
                out.tile().store(acc.to(outputs.tiles.dtype))
                out.arrive()
        else:
            outputs, sources = work.publish_partial(acc, outputs, sources)
        work = work.next()
    outputs.drain()


@gluon.jit(do_not_specialize=["M", "N", "K"])  # one binary per configuration
def blockwise_matmul_kernel(a_desc, b_desc, sa_desc, sb_desc, d_desc, workspace, M, N, K, STAGES: gl.constexpr,
                            C_STAGES: gl.constexpr, GROUP_M: gl.constexpr, SCHEDULE: gl.constexpr,
                            CLUSTER_M: gl.constexpr = 1, CLUSTER_N: gl.constexpr = 1, partial_desc=None):
    """D = sum over K blocks kb of (A_kb @ B_kb^T) * sa[row, kb] * sb[col // 128, kb]; sa_desc is over scale_a^T
    (K blocks x M), sb_desc over scale_b^T (N blocks x K blocks). SCHEDULE: "static" or "streamk"; `workspace`:
    stream-K's flags and partial tiles, which travel through `partial_desc` (unread by static). Launched with
    num_ctas = CLUSTER_M * CLUSTER_N (static only), the blocks are a cluster's tiles."""
    BM: gl.constexpr = d_desc.block_type.shape[0]
    BN: gl.constexpr = d_desc.block_type.shape[1]
    BK: gl.constexpr = a_desc.block_type.shape[1]
    gl.static_assert(BN == SCALE_BLOCK * CLUSTER_N and BK == SCALE_BLOCK,
                     "one B scale per CTA and one A scale column per K tile")
    STREAMK: gl.constexpr = SCHEDULE == "streamk"
    PLAN: gl.constexpr = fp8_plan(BM, BN, BK, STAGES, C_STAGES, a_desc.dtype, b_desc.dtype, d_desc.dtype, True,
                                  CLUSTER_M, CLUSTER_N, streamk=STREAMK,
                                  split=split_shared(a_desc, b_desc, BM, BN, CLUSTER_M, CLUSTER_N))
    inputs, outputs, sources, load_order = allocate_roles(PLAN, STREAMK)
    partials = PartialTiles.create(workspace, partial_desc, outputs.tiles, BN) if STREAMK else None
    sched = scheduler_class(SCHEDULE).from_kernel(M, N, gl.cdiv(K, BK), BM, BN, GROUP_M, None, workspace, partials)
    warp_specialize([(blockwise_mma_role, (inputs, outputs, sources, sched, gl.cdiv(K, BK), STREAMK)),
                     (blockwise_load_role, (inputs, a_desc, b_desc, sa_desc, sb_desc, sched, gl.cdiv(K, BK)),
                      WORKER_WARPS, WORKER_REGS),
                     (store_role, (outputs, sources, d_desc, sched, STREAMK), WORKER_WARPS, WORKER_REGS),  # no C
                     (epilogue_load_role, (sources, load_order, d_desc, sched, BN, False, False), WORKER_WARPS,
                      WORKER_REGS) if STREAMK else None])


def blockwise_blocks(cfg) -> dict[str, tuple[tuple[int, int], tuple]]:
    """The TMA blocks of A, B, scale_a^T ("sa"), scale_b^T ("sb") and D for configuration `cfg` (a program's tiles: a
    cluster's), each with how the cluster's CTAs split or share it: the operands' as kernels/matmul.py says, the
    scales' as the stage storage declares them (BlockwiseScaleStorage: each goes with its operand)."""
    from tilepipe.kernels.matmul import operand_blocks

    blocks = operand_blocks(cfg, True)
    sa, sb = BlockwiseScaleStorage(cfg.tile_m, 1, a_cga=blocks["a"][1], b_cga=blocks["b"][1]).parts()
    return {**blocks, "sa": (sa.tile, sa.cga), "sb": (sb.tile, sb.cga)}


def blockwise_spec(cfg, a_dtype: str, b_dtype: str, c_dtype: str, schedule: str = "static", target: str = "sm_90a"):
    """blockwise_matmul_kernel for one configuration (and its cluster) and schedule as a tilepipe.verify.compile
    KernelSpec; `target` "sm_100a": sm100_blockwise.py's kernel, which takes the same arguments but the cluster
    shape and the partial-tile descriptor."""
    from tilepipe.kernels.spec import KernelSpec, partial_signature

    fn = (f"{__name__}:blockwise_matmul_kernel" if target == "sm_90a" else
          "tilepipe.kernels.sm100_blockwise:sm100_blockwise_matmul_kernel")
    blocks = blockwise_blocks(cfg)
    sm90 = ({"CLUSTER_M": "constexpr", "CLUSTER_N": "constexpr",
             "partial_desc": partial_signature(cfg, c_dtype, schedule)} if target == "sm_90a" else {})
    return KernelSpec(fn,
                      {"a_desc": tile_desc(a_dtype, *blocks["a"]), "b_desc": tile_desc(b_dtype, *blocks["b"]),
                       "sa_desc": tile_desc("fp32", *blocks["sa"]), "sb_desc": tile_desc("fp32", *blocks["sb"]),
                       "d_desc": tile_desc(c_dtype, *blocks["c"]), "workspace": "*i32", "M": "i32", "N": "i32",
                       "K": "i32", "STAGES": "constexpr", "C_STAGES": "constexpr", "GROUP_M": "constexpr",
                       "SCHEDULE": "constexpr", **sm90},
                      {"STAGES": cfg.stages, "C_STAGES": cfg.c_stages, "GROUP_M": cfg.group_m, "SCHEDULE": schedule,
                       **({"CLUSTER_M": cfg.cluster_m, "CLUSTER_N": cfg.cluster_n} if target == "sm_90a" else {}),
                       **({} if schedule == "streamk" or target != "sm_90a" else {"partial_desc": None})},
                      target=target, num_warps=cfg.num_warps, options={"num_ctas": cfg.cluster.num_ctas})
