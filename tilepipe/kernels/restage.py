"""Row re-pitching copy: dst[r, c] = src[r, c] where dst's rows start on 128-byte lines and src's do not.

TMA loads of rows whose pitch is 16 but not 32 bytes aligned (K = 3000 bf16: 6000-byte rows) pull about twice the L2
sectors and cost the GEMM 20-50% (docs/perf-log.md rows 17-18); ops stages such operands through this copy when the
saving outweighs it. Plain vector loads and stores: one BLOCK_R x BLOCK_C block per program, 16 bytes per thread.
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


def restage_spec(dtype: str = "bf16"):
    """restage_rows_kernel as the tilepipe.verify.compile KernelSpec that ops launches (sm_90a, 4 warps)."""
    from tilepipe.kernels.spec import KernelSpec

    return KernelSpec(f"{__name__}:restage_rows_kernel",
                      {"src": f"*{dtype}", "dst": f"*{dtype}", "rows": "i32", "cols": "i32", "src_stride": "i32",
                       "dst_stride": "i32", "BLOCK_R": "constexpr", "BLOCK_C": "constexpr"},
                      {"BLOCK_R": BLOCK_R, "BLOCK_C": BLOCK_C}, num_warps=4)
