"""Why Gluon 3.6 has no try-acquire: inline PTX cannot be handed an mbarrier (a shared memory descriptor)."""

from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import mbarrier


@gluon.jit
def try_wait_via_inline_ptx(out_ptr):
    bars = gl.allocate_shared_memory(gl.int64, [1, 1], mbarrier.MBarrierLayout())
    mbarrier.init(bars.index(0), count=1)
    ready = gl.inline_asm_elementwise(
        "{ .reg .pred p; mbarrier.try_wait.parity.shared::cta.b64 p, [$1], 0; selp.u32 $0, 1, 0, p; }",
        "=r,r", [bars.index(0)], dtype=gl.int32, is_pure=False, pack=1)
    gl.store(out_ptr, ready)
