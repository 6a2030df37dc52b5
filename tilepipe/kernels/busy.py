"""A kernel that holds some SMs for a fixed time, to benchmark GEMMs that share the GPU with other work (as a GEMM
beside an NCCL kernel does): a persistent GEMM whose CTAs start late keeps their static share of the tiles."""

import triton
import triton.language as tl


@triton.jit
def _globaltimer():
    return tl.inline_asm_elementwise("mov.u64 $0, %globaltimer;", "=l", [], dtype=tl.int64, is_pure=False, pack=1)


@triton.jit
def busy_kernel(sm_ids, ns):
    """Each program spins for `ns` nanoseconds, then records the SM it ran on. Launch with num_warps=32: a
    1024-thread program leaves too few registers on its SM for a GEMM CTA."""
    start = _globaltimer()
    now = start
    while now - start < ns:
        now = _globaltimer()
    smid = tl.inline_asm_elementwise("mov.u32 $0, %smid;", "=r", [], dtype=tl.int32, is_pure=True, pack=1)
    tl.store(sm_ids + tl.program_id(0), smid)
