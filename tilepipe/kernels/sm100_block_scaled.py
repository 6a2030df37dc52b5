"""Block-scaled GEMM for sm_100a (Blackwell): D = (A * SFA) @ (B * SFB)^T on tcgen05's block-scaled MMA, for MXFP8
(e4m3/e5m2 data, e8m0 scales, one per 32 K-elements), MXFP4 (e2m1 data packed two to a byte, e8m0 scales, one per 32)
and NVFP4 (e2m1 packed, e4m3 scales, one per 16). Compiled for sm_100a on the CPU; never run (no Blackwell GPU here).

It is the sm_100a GEMM's body, roles and pipelines (sm100_matmul.py: sm100_gemm) over a block-scaled payload (the
seed's BlockScaledTilePayload: A, B, SFA, SFB a stage, pipeline/storage.py: BlockScaledTileStorage): the load role
TMA-loads each k-step's two scale boxes into the stage beside A and B, under the same barrier; the MMA role copies
them into TMEM (tcgen05_copy) and issues tcgen05_mma_scaled, whose commit frees the stage; the epilogue is the plain
one. Scales are in the packed-block layout torch._scaled_mm takes for MX and NV formats (SWIZZLE_32_4_4: rows padded
to 128, scales along K to 4), which tcgen05_copy reads unswizzled from shared memory.
"""

from typing import NamedTuple

from triton.experimental import gluon
from triton.experimental.gluon import language as gl

from tilepipe.kernels.sm100_matmul import HOPPER_ONLY, sm100_gemm, sm100_operand_blocks
from tilepipe.kernels.spec import KernelSpec, tile_desc
from tilepipe.pipeline.storage import packed_scale_box


class BlockFormat(NamedTuple):
    """A block-scaled format as the kernel reads it."""
    per_element: int  # K elements a stored element holds (2: e2m1 packed two to a uint8)
    vec: int  # K elements one scale covers
    scale_dtype: str  # the scales' Gluon dtype: e8m0 travels as uint8 (which makes the MMA an MX one)
    dtype: str  # the data's Gluon dtype (MXFP8 takes "fp8e5" for either operand too)

    def k_blocks(self, block_k: int) -> int:
        """Packed blocks of 4 scales along K in a stage `block_k` stored elements deep."""
        return block_k * self.per_element // (4 * self.vec)

    def scales(self, block_k: int) -> tuple[str, int]:
        """sm100_plan's `scales` for stages `block_k` stored elements deep."""
        return self.scale_dtype, self.k_blocks(block_k)


FORMATS = {"mxfp8": BlockFormat(1, 32, "uint8", "fp8e4nv"), "mxfp4": BlockFormat(2, 32, "uint8", "uint8"),
           "nvfp4": BlockFormat(2, 16, "fp8e4nv", "uint8")}
"""The formats the kernel is built for, as tcgen05.mma lowers them (PTX kind, SASS): kind::mxf8f6f4.block32 (UTCQMMA),
kind::mxf4.block32 (UTCOMMA) and kind::mxf4nvf4.block16 (UTCOMMA.4X). The same e2m1 tiles make MXFP4 with e8m0 scales
(uint8), NVFP4 with e4m3 ones (tests/test_block_scaled.py asserts each lowering)."""


@gluon.jit(do_not_specialize=["M", "N", "K"])  # one binary per configuration
def sm100_block_scaled_kernel(a_desc, b_desc, sfa_desc, sfb_desc, d_desc, workspace, M, N, K, STAGES: gl.constexpr,
                              C_STAGES: gl.constexpr, GROUP_M: gl.constexpr, SCHEDULE: gl.constexpr,
                              CLUSTER_M: gl.constexpr = 1, CLUSTER_N: gl.constexpr = 1, SWAP_AB: gl.constexpr = False):
    """A (M x K) and B (N x K, K-major) counted in stored elements (K: bytes of packed FP4), their scales in packed
    boxes (packed_scale_box), D in BM x EPILOGUE_N boxes; `workspace` is not read (it stands in for the pointers the
    plain GEMM's epilogue reads); no cluster, no swap-AB (the FP8 launch passes both)."""
    gl.static_assert(CLUSTER_M * CLUSTER_N == 1 and not SWAP_AB, HOPPER_ONLY)
    sm100_gemm(a_desc, b_desc, d_desc, d_desc, workspace, workspace, workspace, M, N, K, 1.0, 0.0, STAGES, C_STAGES,
               GROUP_M, True, False, False, -1, -1, SCHEDULE, workspace, None, 0, sfa_desc, sfb_desc)


def block_scaled_blocks(cfg, fmt: str) -> dict[str, tuple]:
    """The TMA boxes of sm100_block_scaled_kernel in configuration `cfg` (block_k in stored elements): A's, B's and
    D's as sm100_operand_blocks gives them ((block, cga bases)), and the scale boxes of SFA and SFB."""
    k_blocks = FORMATS[fmt].k_blocks(cfg.block_k)
    return {**sm100_operand_blocks(cfg, True), "sfa": packed_scale_box(cfg.block_m, k_blocks),
            "sfb": packed_scale_box(cfg.block_n, k_blocks)}


def block_scaled_spec(cfg, fmt: str, a_dtype: str, b_dtype: str, c_dtype: str, schedule: str = "static"
                      ) -> KernelSpec:
    """sm100_block_scaled_kernel for one configuration as a KernelSpec (sm_100a): `fmt` "mxfp8" (A and B "fp8e4nv"
    or "fp8e5"), "mxfp4" or "nvfp4" (both "uint8"), D of `c_dtype`."""
    blocks, scales = block_scaled_blocks(cfg, fmt), FORMATS[fmt].scale_dtype
    return KernelSpec(f"{__name__}:sm100_block_scaled_kernel",
                      {"a_desc": tile_desc(a_dtype, *blocks["a"]), "b_desc": tile_desc(b_dtype, *blocks["b"]),
                       "sfa_desc": tile_desc(scales, blocks["sfa"], kind="scales"),
                       "sfb_desc": tile_desc(scales, blocks["sfb"], kind="scales"),
                       "d_desc": tile_desc(c_dtype, *blocks["c"]), "workspace": "*i32", "M": "i32", "N": "i32",
                       "K": "i32", "STAGES": "constexpr", "C_STAGES": "constexpr", "GROUP_M": "constexpr",
                       "SCHEDULE": "constexpr", "CLUSTER_M": "constexpr", "CLUSTER_N": "constexpr",
                       "SWAP_AB": "constexpr"},
                      {"STAGES": cfg.stages, "C_STAGES": cfg.c_stages, "GROUP_M": cfg.group_m, "SCHEDULE": schedule,
                       "CLUSTER_M": 1, "CLUSTER_N": 1, "SWAP_AB": False},
                      target="sm_100a", num_warps=cfg.num_warps)
