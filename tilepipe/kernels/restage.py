"""Copies that put a tensor where TMA reads it well (host/staging.py launches them):

  restage_rows_kernel      dst[r, c] = src[r, c] where dst's rows start on 128-byte lines and src's do not. TMA
                           loads of rows whose pitch is 16 but not 32 bytes aligned (K = 3000 bf16: 6000-byte rows)
                           pull about twice the L2 sectors and cost the GEMM 20-50% (docs/perf-log.md rows 17-18); ops
                           stage such operands through it when the saving outweighs it. Plain vector loads and
                           stores: one BLOCK_R x BLOCK_C block per program, 16 bytes per thread.
  shift_scale_rows_kernel  the grouped blockwise GEMM's A scales: scale_a^T in SCALE_ALIGN copies, copy j shifted up
                           by j rows, so the scales of rows from any row start on 16 bytes in one of them
                           (kernels/blockwise_scales.py shifted_a_scales_at). One pass: scale_a read once, the copies
                           written along M.
"""

from triton.experimental import gluon
from triton.experimental.gluon import language as gl

BLOCK_R = 32
BLOCK_C = 256


VEC = gl.constexpr(8)  # 16-bit elements per 16-byte vector


@gluon.jit(do_not_specialize=["rows", "cols", "src_stride", "dst_stride"])
def restage_rows_kernel(src, dst, rows, cols, src_stride, dst_stride, BLOCK_R: gl.constexpr, BLOCK_C: gl.constexpr):
    """Copy one block of 16-bit elements. Both strides and `cols` are multiples of VEC (16 bytes), which the vectors
    assume, and cols >= BLOCK_C. A warp moves BLOCK_C contiguous elements of one row at a time."""
    layout: gl.constexpr = gl.BlockedLayout([1, VEC], [32 * VEC // BLOCK_C, BLOCK_C // VEC], [gl.num_warps(), 1],
                                            [1, 0])
    r = gl.program_id(0) * BLOCK_R + gl.arange(0, BLOCK_R, gl.SliceLayout(1, layout))
    first = gl.minimum(gl.program_id(1) * BLOCK_C, cols - BLOCK_C)  # the last block ends at cols (overlap: same values)
    c = first + gl.arange(0, BLOCK_C, gl.SliceLayout(0, layout))
    c = gl.max_contiguous(gl.multiple_of(c, VEC), VEC)[None, :]
    rows64 = r.to(gl.int64)[:, None]
    mask = (r < rows)[:, None]  # a row mask only, so that whole 16-byte vectors load and store
    src_offsets = gl.multiple_of(rows64 * src_stride, [VEC, VEC]) + c
    dst_offsets = gl.multiple_of(rows64 * dst_stride, [VEC, VEC]) + c
    gl.store(dst + dst_offsets, gl.load(src + src_offsets, mask=mask), mask=mask)


SHIFT_BLOCK_M = 128
SHIFT_BLOCK_K = 32


@gluon.jit(do_not_specialize=["scale_a", "M", "k_blocks", "stride_m", "stride_k", "width"])
def shift_scale_rows_kernel(scale_a, shifted, M, k_blocks, stride_m, stride_k, width, COPIES: gl.constexpr,
                            BLOCK_M: gl.constexpr, BLOCK_K: gl.constexpr, M_MAJOR: gl.constexpr):
    """shifted[j * k_blocks + k, r - j] = scale_a[r, k] (0 for r >= M) for each copy j < COPIES, over every column
    of `shifted` (k_blocks * COPIES rows of `width`): a BLOCK_M x BLOCK_K block of scale_a (any strides) per program,
    read along M where scale_a is M-major (M_MAJOR: as the copies are written), else in 32-byte runs along K and
    turned in registers, then written COPIES times along M."""
    write: gl.constexpr = gl.BlockedLayout([1, 1], [32, 1], [1, gl.num_warps()], [0, 1])
    read: gl.constexpr = write if M_MAJOR else gl.BlockedLayout([1, 1], [4, 8], [gl.num_warps(), 1], [1, 0])
    r = gl.program_id(0) * BLOCK_M + gl.arange(0, BLOCK_M, gl.SliceLayout(1, read))
    k = gl.program_id(1) * BLOCK_K + gl.arange(0, BLOCK_K, gl.SliceLayout(0, read))
    inside = (r < M)[:, None] & (k < k_blocks)[None, :]
    block = gl.load(scale_a + r.to(gl.int64)[:, None] * stride_m + k[None, :] * stride_k, mask=inside, other=0.0)
    block = gl.convert_layout(block, write)
    r = gl.program_id(0) * BLOCK_M + gl.arange(0, BLOCK_M, gl.SliceLayout(1, write))
    k = gl.program_id(1) * BLOCK_K + gl.arange(0, BLOCK_K, gl.SliceLayout(0, write))
    for j in gl.static_range(COPIES):
        column = r - j
        rows = (j * k_blocks + k).to(gl.int64) * width
        gl.store(shifted + rows[None, :] + column[:, None], block,
                 mask=((column >= 0) & (column < width))[:, None] & (k < k_blocks)[None, :])


def shift_scale_rows_spec(m_major: bool = True):
    """shift_scale_rows_kernel as the tilepipe.verify.compile KernelSpec that grouped_mm_fp8 launches (sm_90a), for
    an M-major scale_a (as linear_fp8 and DeepGEMM make them) or another layout."""
    from tilepipe.kernels.blockwise_scales import SCALE_ALIGN
    from tilepipe.kernels.spec import KernelSpec

    return KernelSpec(f"{__name__}:shift_scale_rows_kernel",
                      {"scale_a": "*fp32", "shifted": "*fp32", "M": "i32", "k_blocks": "i32", "stride_m": "i32",
                       "stride_k": "i32", "width": "i32", "COPIES": "constexpr", "BLOCK_M": "constexpr",
                       "BLOCK_K": "constexpr", "M_MAJOR": "constexpr"},
                      {"COPIES": SCALE_ALIGN.value, "BLOCK_M": SHIFT_BLOCK_M, "BLOCK_K": SHIFT_BLOCK_K,
                       "M_MAJOR": m_major}, num_warps=4)


def restage_spec(dtype: str = "bf16"):
    """restage_rows_kernel as the tilepipe.verify.compile KernelSpec that ops launches (sm_90a, 4 warps)."""
    from tilepipe.kernels.spec import KernelSpec

    return KernelSpec(f"{__name__}:restage_rows_kernel",
                      {"src": f"*{dtype}", "dst": f"*{dtype}", "rows": "i32", "cols": "i32", "src_stride": "i32",
                       "dst_stride": "i32", "BLOCK_R": "constexpr", "BLOCK_C": "constexpr"},
                      {"BLOCK_R": BLOCK_R, "BLOCK_C": BLOCK_C}, num_warps=4)
