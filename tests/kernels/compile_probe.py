"""Tiny Gluon kernels that exercise tilepipe.verify.compile: a plain store, a TMA + wgmma tile, and a trace-time error."""

from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import mbarrier, tma, warpgroup_mma


@gluon.jit
def store_probe(out_ptr, n, BLOCK: gl.constexpr):
    """out[i] = i + n; 4 elements per thread, so a 16-byte aligned out_ptr gives vector stores."""
    layout: gl.constexpr = gl.BlockedLayout([4], [32], [gl.num_warps()], [0])
    offs = gl.program_id(0) * BLOCK + gl.arange(0, BLOCK, layout)
    gl.store(out_ptr + offs, (offs + n).to(gl.float32))


@gluon.jit
def wgmma_probe(a_desc, b_desc, c_ptr):
    """C = A @ B^T for one tile: TMA-load A [M, K] and B [N, K] into smem, one synchronous wgmma, store C (fp32)."""
    BM: gl.constexpr = a_desc.block_type.shape[0]
    BN: gl.constexpr = b_desc.block_type.shape[0]
    a_smem = gl.allocate_shared_memory(a_desc.dtype, a_desc.block_type.shape, a_desc.layout)
    b_smem = gl.allocate_shared_memory(b_desc.dtype, b_desc.block_type.shape, b_desc.layout)
    bar = gl.allocate_shared_memory(gl.int64, [1], mbarrier.MBarrierLayout())
    mbarrier.init(bar, count=1)
    mbarrier.expect(bar, a_desc.block_type.nbytes + b_desc.block_type.nbytes)
    tma.async_load(a_desc, [0, 0], bar, a_smem)
    tma.async_load(b_desc, [0, 0], bar, b_smem)
    mbarrier.wait(bar, 0)
    mbarrier.invalidate(bar)

    acc_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[gl.num_warps(), 1],
                                                         instr_shape=[16, BN, 16])
    acc = gl.zeros([BM, BN], gl.float32, acc_layout)
    acc = warpgroup_mma(a_smem, b_smem.permute((1, 0)), acc)
    rows = gl.arange(0, BM, gl.SliceLayout(1, acc_layout))
    cols = gl.arange(0, BN, gl.SliceLayout(0, acc_layout))
    gl.store(c_ptr + rows[:, None] * BN + cols[None, :], acc)


@gluon.jit
def assert_probe(out_ptr):
    """Fails while tracing, the way a user's bad kernel would."""
    gl.static_assert(False, "boom")
    gl.store(out_ptr, 0.0)
