"""The reduce-scatter's sum (tilepipe/distributed/): out = the sum over ranks of the WORLD partial sums that the ranks
copied into this rank's slots, in fp32, in rank order (the same bits on every call), once each peer's flag holds the
call's epoch (pipeline/flags.py: wait_all; the rank's own slot needs no flag)."""

from triton.experimental import gluon
from triton.experimental.gluon import language as gl

from tilepipe.kernels.spec import KernelSpec
from tilepipe.pipeline.flags import wait_all

BLOCK = 2048  # elements a program sums: 8 per thread of 8 warps
WARPS = 8


@gluon.jit(do_not_specialize=["rank", "timeout_ms", "numel"])
def reduce_slots_kernel(slots, out, flags, epoch_ptr, report, rank, timeout_ms, numel, WORLD: gl.constexpr,
                        BLOCK: gl.constexpr, DEBUG: gl.constexpr):
    """slots: WORLD x numel contiguous partial sums (slot r from rank r); out: numel elements of its dtype."""
    layout: gl.constexpr = gl.BlockedLayout([BLOCK // (32 * gl.num_warps())], [32], [gl.num_warps()], [0])
    one_each: gl.constexpr = gl.BlockedLayout([1], [32], [gl.num_warps()], [0])
    wait_all(flags, gl.load(epoch_ptr), WORLD, rank, report if DEBUG else None, timeout_ms, one_each,
             32 * gl.num_warps())
    offsets = gl.program_id(0).to(gl.int64) * BLOCK + gl.arange(0, BLOCK, layout)
    inside = offsets < numel
    total = gl.zeros([BLOCK], gl.float32, layout)
    for r in gl.static_range(WORLD):
        total += gl.load(slots + r * numel.to(gl.int64) + offsets, mask=inside).to(gl.float32)
    gl.store(out + offsets, total.to(out.dtype.element_ty), mask=inside)


def reduce_slots_spec(dtype: str, world: int, debug: bool = False) -> KernelSpec:
    """reduce_slots_kernel over `dtype` slots for `world` ranks as a KernelSpec (sm_90a)."""
    signature = {"slots": f"*{dtype}", "out": f"*{dtype}", "flags": "*i32", "epoch_ptr": "*i32", "report": "*i32",
                 "rank": "i32", "timeout_ms": "i32", "numel": "i32", "WORLD": "constexpr", "BLOCK": "constexpr",
                 "DEBUG": "constexpr"}
    return KernelSpec(f"{__name__}:reduce_slots_kernel", signature, {"WORLD": world, "BLOCK": BLOCK, "DEBUG": debug},
                      "sm_90a", WARPS)
