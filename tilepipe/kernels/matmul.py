"""Warp-specialized persistent GEMM for sm_90a: D = alpha * A @ B (+ beta * C), written only with tilepipe's roles
and pipelines; its two MMA warpgroups work on one tile together (ping-pong, one a tile each: matmul_pingpong.py).

Roles (one CTA per SM; tiles in grouped order, from the static, dynamic or stream-K scheduler, tilepipe/schedulers/):
  load           (1 warp)   TMA A and B tiles into the input tile pipeline; paces the dynamic scheduler
  mma            (8 warps)  two wgmma warpgroups, one wgmma kept in flight; the epilogue writes D to an output stage
  store          (1 warp)   TMA-stores each output stage while the mma role runs the next tile's main loop
  epilogue_load  (1 warp, with C or stream-K)  TMA-loads C into the tile's output stage once the tile's main-loop
                 loads were issued (load-order pipeline) and the store role freed the stage
  scheduler      (1 warp, dynamic)  draws tile ids from a global counter and hands them to every other role
Stream-K: a unit may be part of a tile's k-steps; a program that does not finish the tile passes its partial sum
through output stages to its workspace slot (store role), and the finisher's epilogue-load role brings each slot
back into output stages for the mma role to add before its epilogue (pipeline/partials.py).
A is M x K row-major; B is N x K (K-major, B_KMAJOR) or K x N. C of D's dtype lands in the output stage it is stored
from, fp32 C (a 16-bit D) in its own source stages; C may be D. A bias (HAS_BIAS) is read from global memory. The
epilogue is a function (EPILOGUE, kernels/epilogue_functions.py; default alpha * acc + beta * (C or bias)).
Swap-AB (SWAP_AB, small M): the kernel computes D^T = B^T A^T, the mma role transposing each tile into D's stage.
A tile with a side of 96, 160 or 192 (TILE) is held as power-of-two pieces (pipeline/pieces.py): an array per piece
of A, B and output stages, an accumulator per piece. With EPILOGUE_N a stage holds EPILOGUE_N columns of D's tile."""

from dataclasses import replace

from triton.experimental import gluon
from triton.experimental.gluon import language as gl

from tilepipe.kernels.epilogues import columns_in, store_pieced, store_tile
from tilepipe.kernels.gemm_roles import (WORKER_REGS, WORKER_WARPS, c_pipelines, epilogue_load_role, load_role,
                                        output_origin, store_regs, store_role, wgmma_unit)
from tilepipe.kernels.read_ahead import reads_bias, tile_bias
from tilepipe.kernels.spec import gemm_spec
from tilepipe.pipeline.cluster import Cluster, wgmma_accumulator
from tilepipe.pipeline.epilogue import EpiLoadPipeline
from tilepipe.pipeline.multicast import split_operand, split_shared
from tilepipe.pipeline.output import OutputTilePipeline
from tilepipe.pipeline.partials import PartialTiles
from tilepipe.pipeline.pieces import TilePieces, pieced
from tilepipe.pipeline.probe import Probe
from tilepipe.pipeline.roles import warp_specialize
from tilepipe.pipeline.storage import (ClcPipelineStorage, EpiLoadPipelineStorage, InputPipelineStorage,
                                       LoadOrderBarrierStorage, OutputPipelineStorage, OutputTileStorage,
                                       SmemPipelineBundle, SmemPlan, SourceTileStorage, StandardTileStorage)
from tilepipe.pipeline.tiles import InputTilePipeline
from tilepipe.schedulers import scheduler_class
from tilepipe.schedulers.dynamic import scheduler_role

SCHEDULER_STAGES = 2  # tile ids in flight: the throttle keeps the scheduler one tile ahead of the load role


@gluon.constexpr_function
def matmul_plan(block_m, block_n, block_k, stages, c_stages, dtype, c_dtype, b_kmajor, has_c=False, src_dtype=None,
                dynamic=False, cluster_m=1, cluster_n=1, swap_ab=False, streamk=False, epilogue_n=None, split=False):
    """Shared memory: operand stages, output stages (which also receive C of D's dtype), source stages for C of
    another dtype (`src_dtype`), and the pipelines between the roles (with the dynamic scheduler, its tile-id ring).
    In a `cluster_m` x `cluster_n` cluster the blocks are the cluster's tiles: the operand its CTAs share is
    multicast (`split`: each CTA its half, pipeline/multicast.py), so its input ring counts both CTAs' releases (the
    dynamic scheduler's tile-id ring is multicast too). With `swap_ab` the output and source stages hold D's block_n
    x block_m tile. Under `streamk` the epilogue-load role also brings partial sums into the output stages
    (pipeline/partials.py). With `epilogue_n` a stage holds an epilogue_n-column sub-tile of D's tile."""
    cluster = Cluster(cluster_m, cluster_n)
    if swap_ab and cluster.num_ctas > 1:
        raise ValueError("swap-AB is built without clusters")
    b_tile = (block_n, block_k) if b_kmajor else (block_k, block_n)
    d_tile = (block_n, epilogue_n or block_m) if swap_ab else (block_m, epilogue_n or block_n)
    sources = EpiLoadPipelineStorage(c_stages, consumer="store") if has_c or streamk else None
    clc = ClcPipelineStorage(SCHEDULER_STAGES, ("load", "mma", "store") + (("epilogue_load", ) if has_c else ()),
                             multicast=cluster.num_ctas > 1)
    storages = dict(operands=StandardTileStorage(dtype, dtype, (block_m, block_k), b_tile, stages, a_cga=cluster.a,
                                                 b_cga=cluster.b(b_kmajor)),
                    c_tiles=OutputTileStorage(c_dtype, d_tile, c_stages, cga=cluster.c),
                    pipelines=SmemPipelineBundle(
                        InputPipelineStorage(stages, multicast=cluster.num_ctas > 1 and not split, split=split),
                        OutputPipelineStorage(c_stages, consumer="store", producer_proxy="generic",
                                              consumer_proxy="async"),
                        clc=clc if dynamic else None, epi_load=sources))
    if has_c:
        storages["load_order"] = LoadOrderBarrierStorage()
    if has_c and src_dtype is not None and src_dtype != c_dtype:
        storages["src_tiles"] = SourceTileStorage(src_dtype, d_tile, c_stages, cga=cluster.c)
    return SmemPlan("sm_90a", **storages)


@gluon.jit
def mma_role(inputs: InputTilePipeline, outputs: OutputTilePipeline, sources: EpiLoadPipeline, sched, k_tiles, alpha,
             beta, bias_ptr, D_COLS, D_BN: gl.constexpr, B_KMAJOR: gl.constexpr, HAS_C: gl.constexpr,
             HAS_BIAS: gl.constexpr, SWAP_AB: gl.constexpr, STREAMK: gl.constexpr, EPILOGUE: gl.constexpr):
    """Tiles of D_BN accumulator columns (with SWAP_AB transposed into D's tile first) into the output stages, whole or
    a sub-tile a stage, through the EPILOGUE function (store_tile); D_COLS: the GEMM's columns (the bias's length).
    STREAMK: partial sums pass through the output stages too, in lockstep with the epi_load ring (partials.py)."""
    D_BM: gl.constexpr = outputs.tiles.shape[1]
    BN: gl.constexpr = D_BM if SWAP_AB else D_BN  # the accumulator's columns
    PIECED: gl.constexpr = pieced(D_BM, D_BN)
    acc_layout: gl.constexpr = None if PIECED else wgmma_accumulator(gl.num_warps(), BN,
                                                                      outputs.tiles.type.layout.cga_layout)
    BIAS: gl.constexpr = reads_bias(EPILOGUE, HAS_BIAS, HAS_C)  # a tile's read at once (tile_bias; pieced: by piece)
    consumer = inputs.consumer().with_release_lag(1)
    work = sched.work()
    while work.valid:
        row, col = output_origin(work, D_BM, D_BN, SWAP_AB)
        bias = (tile_bias(bias_ptr, D_COLS, col, D_BM, D_BN, outputs.tiles.shape[2] * columns_in(EPILOGUE), acc_layout)
                if BIAS else None)  # before the main loop, which hides the load (stream-K: every unit's)
        acc, consumer = wgmma_unit(consumer, work, k_tiles, D_BN if SWAP_AB else D_BM, BN, acc_layout, B_KMAJOR)
        if PIECED:  # an accumulator per piece: into its arrays of the output stage, or through sub-tile stages
            outputs, sources = store_pieced(outputs, sources, acc, alpha, beta, bias_ptr, D_COLS, col, D_BN, HAS_C,
                                            HAS_BIAS, EPILOGUE, row, bias)
        elif work.finishes:
            acc, outputs, sources = work.add_partials(acc, outputs, sources)
            outputs, sources = store_tile(outputs, sources, gl.permute(acc, (1, 0)) if SWAP_AB else acc, alpha, beta,
                                          bias_ptr, D_COLS, col, HAS_C, HAS_BIAS, STREAMK, EPILOGUE, row, bias,
                                          work.adds_c())
        else:
            outputs, sources = work.publish_partial(acc, outputs, sources)
        work = work.next()
    outputs.drain()


@gluon.jit(do_not_specialize=["M", "N", "K", "alpha", "beta", "bias_ptr"])  # one binary per configuration
def matmul_kernel(a_desc, b_desc, d_desc, c_desc, bias_ptr, workspace, M, N, K, alpha, beta, STAGES: gl.constexpr,
                  C_STAGES: gl.constexpr, GROUP_M: gl.constexpr, B_KMAJOR: gl.constexpr, HAS_C: gl.constexpr,
                  HAS_BIAS: gl.constexpr, SCHEDULE: gl.constexpr, CLUSTER_M: gl.constexpr = 1,
                  CLUSTER_N: gl.constexpr = 1, SWAP_AB: gl.constexpr = False, probe_buf=None, PROBE: gl.constexpr = 0,
                  partial_desc=None, ticket_desc=None, TILE: gl.constexpr = None, EPILOGUE_N: gl.constexpr = None,
                  EPILOGUE: gl.constexpr = None):
    """SCHEDULE: "static", "dynamic" or "streamk" (tilepipe/schedulers/). `workspace`: the scheduler's int32
    global state, left as found by every launch: the dynamic scheduler's tile counter, or stream-K's flags and
    partial tiles (tilepipe/pipeline/partials.py); the static scheduler never reads it. Launched with
    num_ctas = CLUSTER_M * CLUSTER_N, the descriptors' blocks are a cluster's tiles and a program is a cluster.
    SWAP_AB: the operands come swapped (a_desc over the problem's B^T, b_desc over A, K-major; M and N swapped) and the
    kernel computes D^T, storing it as D's tiles (d_desc's blocks: the transposed tile). `partial_desc` (stream-K): a
    TMA descriptor over the workspace's partial tiles (pipeline/partials.py); `ticket_desc` (dynamic, in a cluster):
    one over its ticket rows (schedulers/dynamic.py). TILE: (BM, BN) where the descriptors' blocks do not give it (a
    pieced tile, or D in sub-tiles of EPILOGUE_N columns), else None. EPILOGUE: a function or its "module:name"
    (kernels/epilogue_functions.py); a gated one (COLUMNS_IN = 2) writes BN / 2 of D's columns a tile."""
    RATIO: gl.constexpr = columns_in(EPILOGUE)  # accumulator columns per column of D
    BM: gl.constexpr = d_desc.block_type.shape[1 if SWAP_AB else 0] if TILE is None else TILE[0]
    BN: gl.constexpr = TILE[1] if TILE is not None else d_desc.block_type.shape[0 if SWAP_AB else 1]
    BK: gl.constexpr = a_desc.block_type.shape[1]
    D_BN: gl.constexpr = d_desc.block_type.shape[1] if TILE is None else (BM if SWAP_AB else BN) // RATIO  # D's cols
    OWN_SOURCE: gl.constexpr = HAS_C and c_desc.dtype != d_desc.dtype  # fp32 C with a 16-bit D
    gl.static_assert(TILE is None or not (CLUSTER_M * CLUSTER_N > 1 or SWAP_AB and (pieced(BM, BN) or SCHEDULE ==
                     "streamk")), "a pieced tile or D in sub-tiles runs without a cluster; swap-AB takes D in "
                     "sub-tiles, not a pieced tile, and not under stream-K (its partial sums fill whole stages)")
    gl.static_assert((RATIO == 1 or EPILOGUE_N is not None) and (EPILOGUE_N is None or TILE is not None and not pieced(
        BM, 64)), "D in sub-tiles (EPILOGUE_N; a gated epilogue's must) takes TILE, not a tile pieced by its rows")
    gl.static_assert(TILE is None or EPILOGUE_N is not None or not (OWN_SOURCE or SCHEDULE == "streamk"),
                     "a pieced tile runs without an fp32 C or stream-K")
    STREAMK: gl.constexpr = SCHEDULE == "streamk"
    SOURCES: gl.constexpr = HAS_C or STREAMK  # an epilogue-load role and its ring
    PLAN: gl.constexpr = matmul_plan(BM, BN, BK, STAGES, C_STAGES, a_desc.dtype, d_desc.dtype, B_KMAJOR, HAS_C,
                                     c_desc.dtype, SCHEDULE == "dynamic", CLUSTER_M, CLUSTER_N, SWAP_AB, STREAMK,
                                     EPILOGUE_N, split_shared(a_desc, b_desc, BM, BN, CLUSTER_M, CLUSTER_N))
    k_tiles = gl.cdiv(K, BK)
    smem = PLAN.allocate(Probe.create(probe_buf, PROBE))  # probe: records of every pipeline wait (pipeline/probe.py)
    shared = PartialTiles.create(workspace, partial_desc, smem.c_tiles, BN) if STREAMK else ticket_desc  # in global
    # edge tiles inside D (TileGrid) but where that spills (a 128x256 stage with a bias, split-K's 64 rows) or is gated
    INWARD: gl.constexpr = not (HAS_C or SWAP_AB or CLUSTER_M * CLUSTER_N > 1 or (STREAMK and BM == 64) or (
        HAS_BIAS and EPILOGUE_N is None and BM * BN >= 128 * 256) or RATIO > 1)
    sched = scheduler_class(SCHEDULE).from_kernel(M, N, k_tiles, BM, BN, GROUP_M, smem.pipelines, workspace, shared,
                                                  INWARD)
    inputs = InputTilePipeline(smem.pipelines.input, smem.operands, 1)
    outputs = OutputTilePipeline(smem.pipelines.output, smem.c_tiles)
    sources, load_order = c_pipelines(smem, smem.src_tiles if OWN_SOURCE else smem.c_tiles, HAS_C, STREAMK)
    warp_specialize([(mma_role, (inputs, outputs, sources, sched, k_tiles, alpha, beta, bias_ptr, M if SWAP_AB else N,
                                 D_BN * RATIO, B_KMAJOR, HAS_C, HAS_BIAS, SWAP_AB, STREAMK, EPILOGUE)),
                     (load_role, (inputs, load_order, a_desc, b_desc, sched, k_tiles, B_KMAJOR, HAS_C), WORKER_WARPS,
                      WORKER_REGS),
                     (store_role, (outputs, sources, d_desc, sched, SOURCES, SWAP_AB, D_BN), WORKER_WARPS,
                      store_regs(STREAMK, CLUSTER_M * CLUSTER_N)),
                     (epilogue_load_role, (sources, load_order, c_desc, sched, D_BN, SWAP_AB, HAS_C),
                      WORKER_WARPS, WORKER_REGS) if SOURCES else None,
                     (scheduler_role, (sched, ), WORKER_WARPS, WORKER_REGS) if SCHEDULE == "dynamic" else None])


def operand_blocks(cfg, b_kmajor: bool) -> dict[str, tuple[tuple[int, int], tuple]]:
    """The TMA blocks of A, B and C/D for configuration `cfg` (a program's tiles: a cluster's; a pieced tile's smallest
    pieces, TilePieces.box; D's sub-tiles where the epilogue writes them), each with how the cluster's CTAs split or
    share it (pipeline/cluster.py). With swap_ab "a" and "b" are the kernel's operands (the problem's B^T and A,
    K-major) and D's block is the transposed tile. Split multicast halves the shared one's (kernels read it so)."""
    b_block = (cfg.tile_n, cfg.block_k) if b_kmajor else (cfg.block_k, cfg.tile_n)
    d_block = (cfg.tile_n, cfg.epilogue_n or cfg.tile_m) if cfg.swap_ab else (cfg.tile_m, cfg.epilogue_cols)
    blocks = {"a": ((cfg.tile_m, cfg.block_k), cfg.cluster.a), "b": (b_block, cfg.cluster.b(b_kmajor)),
              "c": (d_block, cfg.cluster.c)}
    return split_operand({name: (TilePieces(*block).box, cga) for name, (block, cga) in blocks.items()}, cfg, b_kmajor)


def matmul_spec(cfg, dtype: str, c_dtype: str, b_kmajor: bool, has_c: bool = False, source_dtype: str | None = None,
                bias_dtype: str | None = None, probe: int = 0, schedule: str = "static", cluster: tuple | None = None,
                swap_ab: bool | None = None, tile: tuple | None = None, epilogue_n: int | None = None,
                pingpong: bool | None = None, epilogue: str | None = None, split_multicast: bool | None = None):
    """matmul_kernel (matmul_pingpong_kernel for a ping-pong config) for one configuration and scheduler as a KernelSpec
    (sm_90a): D of `c_dtype`, with C of `source_dtype` (default D's) when `has_c`, or a bias of `bias_dtype`; `probe`
    is PROBE, `schedule` SCHEDULE, `epilogue` EPILOGUE ("module:name", epilogue_functions.py); others replace cfg's."""
    fields = dict(zip(("block_m", "block_n"), tile or ()), **dict(zip(("cluster_m", "cluster_n"), cluster or ())),
                  epilogue_n=epilogue_n, swap_ab=swap_ab, pingpong=pingpong, split_multicast=split_multicast)
    cfg = replace(cfg, **{name: value for name, value in fields.items() if value is not None})
    kernel = "tilepipe.kernels.matmul_pingpong:matmul_pingpong_kernel" if cfg.pingpong else f"{__name__}:matmul_kernel"
    spec = gemm_spec(kernel, cfg, dtype, c_dtype, b_kmajor, operand_blocks(cfg, b_kmajor), "sm_90a", has_c,
                     source_dtype, bias_dtype, probe, schedule)
    return replace(spec, signature={**spec.signature, "TILE": "constexpr", "EPILOGUE_N": "constexpr",
                                    "EPILOGUE": "constexpr"}, constexprs={**spec.constexprs, **cfg.tiling(),
                                                                          "EPILOGUE": epilogue})
