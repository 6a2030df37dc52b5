"""Grouped GEMM's weight-gradient form on sm_90a (torch._grouped_mm's 2D x 2D): D[g] = A[:, k_{g-1}:k_g] @
B[k_{g-1}:k_g, :] for each group g, the K ends read on the GPU (schedulers/kgrouped.py), written with the GEMM's roles
and pipelines. A MoE backward gives A = X^T for X (tokens, D) row-major (M-major: K is A's outer dimension) and B = dY
(tokens, H) row-major; both layouts of each operand are taken (wgmma reads MN-major 16-bit tiles from shared memory).

Roles (one CTA per SM; the G groups' M x N tiles, group after group):
  load   (1 warp)   the GEMM's load role (gemm_roles.py): A and B at the group's k-steps (KGroupedWork.a_coords,
                    b_coords), which start at the group's first K row: TMA boxes need no alignment along an outer
                    dimension (a K-major operand's steps start on 16 bytes, one step earlier at most); through
                    descriptors re-cut at the group's K end on the device (KGroupedWork.operands), so the last step
                    reads zeros past it
  mma    (8 warps)  the GEMM's wgmma main loop; a first step rounded down to 16 bytes has the previous group's rows of
                    A and B zeroed in shared memory first (work.mask_k: pipeline/masking.py); D's tile in BM x SUB_N
                    sub-tiles
  store  (1 warp)   the grouped GEMM's store role (grouped_matmul.py): TMA-stores the sub-tiles into D, the groups
                    stacked as [G * M, N]

An empty group has no k-steps: its tiles store the zero accumulator. Where M < BM a tile would spill into the next
group's rows of D, so the mma role stores it from registers under a row mask (grouped_matmul.masked_store) and hands
its stages on unwritten, as the grouped GEMM does with a small group.
"""

from triton.experimental import gluon
from triton.experimental.gluon import language as gl

from tilepipe.kernels.gemm_roles import WORKER_REGS, WORKER_WARPS, load_role, wgmma_unit
from tilepipe.kernels.grouped_matmul import grouped_store_role, masked_store
from tilepipe.kernels.matmul import matmul_plan
from tilepipe.kernels.spec import KernelSpec, tile_desc
from tilepipe.pipeline.cluster import wgmma_accumulator
from tilepipe.pipeline.epilogue import LoadOrderBarrier
from tilepipe.pipeline.output import OutputTilePipeline, column_part
from tilepipe.pipeline.roles import warp_specialize
from tilepipe.pipeline.storage import SmemPlan, StandardTileStorage
from tilepipe.pipeline.tiles import InputTilePipeline
from tilepipe.schedulers.kgrouped import KGroupedTileScheduler, KOperands

K_ALIGN_BYTES = gl.constexpr(16)
"""A TMA box's innermost coordinate sits on 16 bytes (schedulers/grid.py COLUMN_STEP): where an operand is K-major a
group's k-steps start on a multiple of this many bytes."""


@gluon.constexpr_function
def wgrad_plan(block_m, block_n, block_k, stages, c_stages, dtype, c_dtype, a_kmajor, b_kmajor, epilogue_n):
    """matmul_plan's shared memory (no C, D in block_m x epilogue_n sub-tiles), A's stages block_k x block_m where A
    is M-major."""
    plan = matmul_plan(block_m, block_n, block_k, stages, c_stages, dtype, c_dtype, b_kmajor, epilogue_n=epilogue_n)
    storages = dict(plan.storages)
    if not a_kmajor:
        operands = storages["operands"]
        storages["operands"] = StandardTileStorage(dtype, dtype, (block_k, block_m), operands.b_tile, stages)
    return SmemPlan(plan.target, **storages)


@gluon.jit
def wgrad_mma_role(inputs: InputTilePipeline, outputs: OutputTilePipeline, sched, d_ptr, ld_d, N,
                   A_KMAJOR: gl.constexpr, B_KMAJOR: gl.constexpr):
    """The GEMM's main loop over each tile's group's k-steps, then D's tile a sub-tile (an output stage) at a time,
    rounded to D's dtype; a tile that spills past its group's rows is stored from registers under a row mask instead,
    its stages handed on unwritten."""
    BM: gl.constexpr = outputs.tiles.shape[1]
    SUB_N: gl.constexpr = outputs.tiles.shape[2]
    BN: gl.constexpr = sched.BN
    PARTS: gl.constexpr = BN // SUB_N
    acc_layout: gl.constexpr = wgmma_accumulator(gl.num_warps(), BN, outputs.tiles.type.layout.cga_layout)
    consumer = inputs.consumer().with_release_lag(1)
    work = sched.work()
    while work.valid:
        acc, consumer = wgmma_unit(consumer, work, 0, BM, BN, acc_layout, B_KMAJOR, A_KMAJOR)
        row, col = work.origin(BM, BN)
        spills = work.spills()
        for j in gl.static_range(PARTS):
            with outputs.produce() as out:
                part = column_part(acc, j, PARTS).to(outputs.tiles.dtype)
                if spills:
                    masked_store(d_ptr, ld_d, part, row, col + j * SUB_N, work.rows_end(), N)
                else:
                    out.tile().store(part)
                out.arrive()
        work = work.next()
    outputs.drain()


@gluon.jit(do_not_specialize=["offs", "G", "M", "N", "K", "ld_d", "a_ptr", "lda", "b_ptr", "ldb"])  # a binary a config
def grouped_wgrad_kernel(a_desc, b_desc, d_desc, d_ptr, offs, G, M, N, K, ld_d, a_ptr, lda, b_ptr, ldb,
                         STAGES: gl.constexpr, C_STAGES: gl.constexpr, GROUP_M: gl.constexpr, A_KMAJOR: gl.constexpr,
                         B_KMAJOR: gl.constexpr, TILE: gl.constexpr):
    """a_desc over A (M, K) K-major, else over its transpose (K, M); b_desc over B's transpose (N, K) K-major, else B
    (K, N); d_desc over D's G groups stacked, [G * M, N], in BM x SUB_N blocks, d_ptr its address (row stride ld_d)
    for masked stores; offs: G int32 K ends; a_ptr, b_ptr (row strides lda, ldb) what a_desc and b_desc cover, for
    their copies re-cut at each group's K end (KGroupedWork.operands). TILE: (BM, BN)."""
    BM: gl.constexpr = TILE[0]
    BN: gl.constexpr = TILE[1]
    BK: gl.constexpr = a_desc.block_type.shape[1] if A_KMAJOR else a_desc.block_type.shape[0]
    K_ALIGN: gl.constexpr = 1 if not (A_KMAJOR or B_KMAJOR) else K_ALIGN_BYTES // (a_desc.dtype.primitive_bitwidth // 8)
    PLAN: gl.constexpr = wgrad_plan(BM, BN, BK, STAGES, C_STAGES, a_desc.dtype, d_desc.dtype, A_KMAJOR, B_KMAJOR,
                                    d_desc.block_type.shape[1])
    smem = PLAN.allocate()
    sched = KGroupedTileScheduler.create(offs, G, M, N, K, BM, BN, BK, GROUP_M, K_ALIGN,
                                         KOperands(a_ptr, lda, b_ptr, ldb))
    inputs = InputTilePipeline(smem.pipelines.input, smem.operands, 1)
    outputs = OutputTilePipeline(smem.pipelines.output, smem.c_tiles)
    no_c = LoadOrderBarrier(smem.pipelines.output)  # the load role's load order, never signalled without C
    warp_specialize([(wgrad_mma_role, (inputs, outputs, sched, d_ptr, ld_d, N, A_KMAJOR, B_KMAJOR)),
                     (load_role, (inputs, no_c, a_desc, b_desc, sched, 0, B_KMAJOR, False, None, None, None,
                                  A_KMAJOR), WORKER_WARPS, WORKER_REGS),
                     (grouped_store_role, (outputs, d_desc, sched, 1), WORKER_WARPS, WORKER_REGS)])


def wgrad_blocks(cfg, a_kmajor: bool, b_kmajor: bool) -> dict[str, tuple[int, int]]:
    """The TMA blocks of A (or its transpose), B (or its transpose) and D's sub-tiles for `cfg` (a MatmulConfig)."""
    return {"a": (cfg.block_m, cfg.block_k) if a_kmajor else (cfg.block_k, cfg.block_m),
            "b": (cfg.block_n, cfg.block_k) if b_kmajor else (cfg.block_k, cfg.block_n),
            "d": (cfg.block_m, cfg.epilogue_cols)}


def wgrad_spec(cfg, dtype: str, c_dtype: str, a_kmajor: bool, b_kmajor: bool) -> KernelSpec:
    """grouped_wgrad_kernel for one configuration (no cluster, swap-AB or pieces) as a KernelSpec (sm_90a): inputs of
    `dtype`, D of `c_dtype`, in the operands' layouts."""
    blocks = wgrad_blocks(cfg, a_kmajor, b_kmajor)
    signature = {"a_desc": tile_desc(dtype, blocks["a"]), "b_desc": tile_desc(dtype, blocks["b"]),
                 "d_desc": tile_desc(c_dtype, blocks["d"]), "d_ptr": f"*{c_dtype}", "offs": "*i32", "G": "i32",
                 "M": "i32", "N": "i32", "K": "i32", "ld_d": "i32", "a_ptr": f"*{dtype}", "lda": "i32",
                 "b_ptr": f"*{dtype}", "ldb": "i32", "STAGES": "constexpr", "C_STAGES": "constexpr",
                 "GROUP_M": "constexpr", "A_KMAJOR": "constexpr", "B_KMAJOR": "constexpr", "TILE": "constexpr"}
    constexprs = {"STAGES": cfg.stages, "C_STAGES": cfg.c_stages, "GROUP_M": cfg.group_m, "A_KMAJOR": a_kmajor,
                  "B_KMAJOR": b_kmajor, "TILE": [cfg.block_m, cfg.block_n]}
    return KernelSpec(f"{__name__}:grouped_wgrad_kernel", signature, constexprs, num_warps=cfg.num_warps,
                      divisible_by_16=("d_ptr", ))
