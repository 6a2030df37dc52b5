"""Grouped FP8 GEMM for Mixture-of-Experts on sm_90a (tilepipe.grouped_mm_fp8): D[rows of group g] = (A * scale_a) @
(B[g] * scale_b[g]) over the rows of each group, the groups' row ends read on the GPU, A and the experts' B e4m3
K-major (fp8 wgmma's), with matmul_fp8's two finer scalings. Both kernels are grouped_matmul_kernel's roles and
scheduler (kernels/grouped_matmul.py: group boundaries on the device, a spilling tile's masked store) with the FP8
GEMMs' main loops:

  grouped_scaled_kernel     per-row: the wgmma main loop (wgmma_unit), scale_a[row] * scale_b[g, col] applied by
                            the row_scaled epilogue function (its column scales the group's row, as a bias row is)
  grouped_blockwise_kernel  DeepSeek-V3 blockwise: matmul_fp8_blockwise's load role (A, B and the K tile's scales in
                            one stage, at the group's coordinates) and its main loop (blockwise_unit: each K tile's
                            partial sum promoted in registers); B's scales stacked like B, [G * N / 128, K / 128],
                            A's in four copies shifted by a row each, so a group may start on any row

Roles: load (1 warp), mma (8 warps: main loop, D's tile through the output stages or a masked register store),
store (1 warp, grouped_store_role); under SCHEDULE "dynamic" the scheduler (1 warp: schedulers/dynamic.py).
"""

from functools import cache

from triton.experimental import gluon
from triton.experimental.gluon import language as gl

from tilepipe.kernels.blockwise_scales import SCALE_BLOCK, shifted_a_scales_at
from tilepipe.kernels.epilogue_functions import row_scaled
from tilepipe.kernels.gemm_roles import WORKER_REGS, WORKER_WARPS, load_role, wgmma_unit
from tilepipe.kernels.grouped_matmul import grouped_mma_role, grouped_store_role
from tilepipe.kernels.matmul import matmul_plan
from tilepipe.kernels.matmul_fp8 import fp8_plan
from tilepipe.kernels.matmul_fp8_blockwise import blockwise_blocks, blockwise_load_role, blockwise_unit
from tilepipe.kernels.spec import KernelSpec, tile_desc
from tilepipe.pipeline.epilogue import LoadOrderBarrier
from tilepipe.pipeline.output import OutputTilePipeline
from tilepipe.pipeline.roles import warp_specialize
from tilepipe.pipeline.tiles import InputTilePipeline
from tilepipe.schedulers.dynamic import scheduler_role
from tilepipe.schedulers.grouped import grouped_scheduler_class


@gluon.jit(do_not_specialize=["offs", "workspace", "scale_a", "scale_b", "G", "M", "N", "K", "ld_d"])
def grouped_scaled_kernel(a_desc, b_desc, d_desc, d_ptr, offs, workspace, scale_a, scale_b, G, M, N, K, ld_d,
                          STAGES: gl.constexpr, C_STAGES: gl.constexpr, GROUP_M: gl.constexpr,
                          SCHEDULE: gl.constexpr):
    """Per-row scales: scale_a (M, fp32), scale_b (G x N, fp32: an expert's row per group). a_desc over A [M, K],
    b_desc over the experts stacked K-major [G * N, K], d_desc over D [M, N] in BM x EPILOGUE_N sub-tiles, d_ptr its
    address (row stride ld_d) for masked stores; offs: G int32 row ends. SCHEDULE "static" or "dynamic" (its tile
    counter: `workspace`'s word 0; schedulers/grouped.py)."""
    BM: gl.constexpr = a_desc.block_type.shape[0]
    BK: gl.constexpr = a_desc.block_type.shape[1]
    BN: gl.constexpr = b_desc.block_type.shape[0]
    DYNAMIC: gl.constexpr = SCHEDULE == "dynamic"
    PLAN: gl.constexpr = matmul_plan(BM, BN, BK, STAGES, C_STAGES, a_desc.dtype, d_desc.dtype, True,
                                     dynamic=DYNAMIC, epilogue_n=d_desc.block_type.shape[1])
    k_tiles = gl.cdiv(K, BK)
    smem = PLAN.allocate()
    sched = grouped_scheduler_class(SCHEDULE).create(offs, G, M, N, K, BM, BN, GROUP_M, smem.pipelines, workspace)
    inputs = InputTilePipeline(smem.pipelines.input, smem.operands, 1)
    outputs = OutputTilePipeline(smem.pipelines.output, smem.c_tiles)
    no_c = LoadOrderBarrier(smem.pipelines.output)  # the load role's load order, never signalled without C
    warp_specialize([(grouped_mma_role, (inputs, outputs, sched, k_tiles, d_ptr, ld_d, scale_b, True, True, row_scaled,
                                         wgmma_unit, scale_a)),
                     (load_role, (inputs, no_c, a_desc, b_desc, sched, k_tiles, True, False), WORKER_WARPS,
                      WORKER_REGS),
                     (grouped_store_role, (outputs, d_desc, sched, 1), WORKER_WARPS, WORKER_REGS),
                     (scheduler_role, (sched, ), WORKER_WARPS, WORKER_REGS) if DYNAMIC else None])


@gluon.jit(do_not_specialize=["offs", "workspace", "G", "M", "N", "K", "ld_d"])
def grouped_blockwise_kernel(a_desc, b_desc, sa_desc, sb_desc, d_desc, d_ptr, offs, workspace, G, M, N, K, ld_d,
                             STAGES: gl.constexpr, C_STAGES: gl.constexpr, GROUP_M: gl.constexpr,
                             SCHEDULE: gl.constexpr):
    """DeepSeek-V3 blockwise scales: sa_desc over SCALE_ALIGN copies of scale_a^T (K / 128 x M) stacked, copy j
    shifted up by j rows (a group's tiles start at any row; TMA reads scale_a^T's rows from 16-byte starts only:
    shifted_a_scales_at), sb_desc over the experts' scale_b^T stacked ([G * N / 128, K / 128]: N a multiple of 128,
    so B's rows b_row scale with row b_row / 128). The rest as grouped_scaled_kernel, D's tile one BM x BN output
    stage (BN = BK = 128: one B scale per K tile)."""
    BM: gl.constexpr = d_desc.block_type.shape[0]
    BN: gl.constexpr = d_desc.block_type.shape[1]
    BK: gl.constexpr = a_desc.block_type.shape[1]
    gl.static_assert(BN == SCALE_BLOCK and BK == SCALE_BLOCK, "one B scale per tile and one A scale column per K tile")
    DYNAMIC: gl.constexpr = SCHEDULE == "dynamic"
    PLAN: gl.constexpr = fp8_plan(BM, BN, BK, STAGES, C_STAGES, a_desc.dtype, b_desc.dtype, d_desc.dtype, True,
                                  dynamic=DYNAMIC)
    k_tiles = gl.cdiv(K, BK)
    smem = PLAN.allocate()
    inputs = InputTilePipeline(smem.pipelines.input, smem.operands, 1)
    outputs = OutputTilePipeline(smem.pipelines.output, smem.c_tiles)
    sched = grouped_scheduler_class(SCHEDULE).create(offs, G, M, N, K, BM, BN, GROUP_M, smem.pipelines, workspace)
    warp_specialize([(grouped_mma_role, (inputs, outputs, sched, k_tiles, d_ptr, ld_d, d_ptr, True, False, None,
                                         blockwise_unit, None, True)),  # N a multiple of BN: columns inside
                     (blockwise_load_role, (inputs, a_desc, b_desc, sa_desc, sb_desc, sched, k_tiles,
                                            shifted_a_scales_at), WORKER_WARPS, WORKER_REGS),
                     (grouped_store_role, (outputs, d_desc, sched, 1), WORKER_WARPS, WORKER_REGS),
                     (scheduler_role, (sched, ), WORKER_WARPS, WORKER_REGS) if DYNAMIC else None])


@cache
def grouped_fp8_blocks(cfg, blockwise: bool) -> dict[str, tuple]:
    """The TMA blocks, each with its (empty) cluster bases, of A, the stacked B, D ("c": sub-tiles per-row, whole tiles
    blockwise) and, blockwise, the scales ("sa": BM entries of scale_a^T, "sb": a stacked scale_b^T box). Kept per
    configuration (a frozen MatmulConfig), read only: grouped_mm_fp8 asks every call, and building them costs 9-22 us."""
    from tilepipe.kernels.matmul import operand_blocks

    return blockwise_blocks(cfg) if blockwise else operand_blocks(cfg, True)


def grouped_fp8_spec(cfg, c_dtype: str, blockwise: bool, schedule: str = "static") -> KernelSpec:
    """grouped_blockwise_kernel, or grouped_scaled_kernel (per-row), for one configuration as a KernelSpec (sm_90a):
    e4m3 operands, D of `c_dtype`, under `schedule` ("static" or "dynamic")."""
    blocks = grouped_fp8_blocks(cfg, blockwise)
    operands = {"a_desc": tile_desc("fp8e4nv", *blocks["a"]), "b_desc": tile_desc("fp8e4nv", *blocks["b"])}
    if blockwise:
        operands.update(sa_desc=tile_desc("fp32", *blocks["sa"]), sb_desc=tile_desc("fp32", *blocks["sb"]))
    scales = {} if blockwise else {"scale_a": "*fp32", "scale_b": "*fp32"}
    signature = {**operands, "d_desc": tile_desc(c_dtype, *blocks["c"]), "d_ptr": f"*{c_dtype}", "offs": "*i32",
                 "workspace": "*i32", **scales, "G": "i32", "M": "i32", "N": "i32", "K": "i32", "ld_d": "i32", "STAGES": "constexpr",
                 "C_STAGES": "constexpr", "GROUP_M": "constexpr", "SCHEDULE": "constexpr"}
    kernel = "grouped_blockwise_kernel" if blockwise else "grouped_scaled_kernel"
    return KernelSpec(f"{__name__}:{kernel}", signature, {"STAGES": cfg.stages, "C_STAGES": cfg.c_stages,
                                                          "GROUP_M": cfg.group_m, "SCHEDULE": schedule},
                      num_warps=cfg.num_warps, divisible_by_16=("d_ptr", ))
