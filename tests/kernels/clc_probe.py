"""sm_100a cluster launch control (CLC) from Gluon 3.6, compile-only: one try_cancel into the scheduler ring and its
decode (docs/scheduler.md).

Inline PTX cannot take a shared-memory operand in 3.6, so the asm names Triton's `global_smem` symbol plus the
offsets the storage plan gives for the ring's first full barrier and response slot. That holds only while Triton
places the buffers where the plan says (all of them live to the end; a buffer that dies early lends its bytes to a
later one); tests/test_scheduler.py checks it against the PTX.
"""

from triton.experimental import gluon
from triton.experimental.gluon import language as gl

from tests.kernels.storage_kernels import keep_alive
from tilepipe.pipeline.storage import ClcPipelineStorage, SmemPlan


@gluon.constexpr_function
def probe_plan():
    """One ring slot: its full/empty barriers, the throttle pair, and the 16-byte response."""
    return SmemPlan("sm_100a", clc=ClcPipelineStorage(1, ("worker", ), throttle_producer="worker"))


@gluon.constexpr_function
def offset_of(plan, part_name):
    """Where the plan (Triton's placement rule) puts a part, in bytes from the start of shared memory."""
    return next(placed.offset for placed in plan.placed if placed.part.name == part_name)


# one thread asks the hardware to cancel a not-yet-launched CTA; the 16-byte answer completes the full barrier's tx
TRY_CANCEL = gl.constexpr("""{
 .reg .u32 base, response, full, tid;
 .reg .pred leader;
 mov.u32 base, global_smem;
 add.u32 response, base, $1;
 add.u32 full, base, $2;
 mov.u32 tid, %tid.x;
 setp.eq.u32 leader, tid, 0;
 @leader clusterlaunchcontrol.try_cancel.async.shared::cta.mbarrier::complete_tx::bytes.b128 [response], [full];
 mov.u32 $0, 0;
}""")

# the first CTA id of the cancelled cluster, or -1 when the grid is exhausted
DECODE = gl.constexpr("""{
 .reg .b64 lo, hi;
 .reg .b128 answer;
 .reg .pred cancelled;
 .reg .b32 ctaid;
 mov.b64 lo, {$1, $2};
 mov.b64 hi, {$3, $4};
 mov.b128 answer, {lo, hi};
 clusterlaunchcontrol.query_cancel.is_canceled.pred.b128 cancelled, answer;
 clusterlaunchcontrol.query_cancel.get_first_ctaid::x.b32.b128 ctaid, answer;
 selp.b32 $0, ctaid, -1, cancelled;
}""")


@gluon.jit
def _word(words, j: gl.constexpr):
    cols = gl.arange(0, 4, gl.SliceLayout(0, words.type.layout))[None, :]
    return gl.sum(gl.where(cols == j, words, 0), axis=1)


@gluon.jit
def clc_try_cancel_probe(out_ptr):
    PLAN: gl.constexpr = probe_plan()
    FULL_OFFSET: gl.constexpr = offset_of(PLAN, "barriers")  # slot 0's full barrier comes first in the pair array
    RESPONSE_OFFSET: gl.constexpr = offset_of(PLAN, "response")
    clc = PLAN.allocate()[0]
    ring = clc.pipeline
    one: gl.constexpr = gl.BlockedLayout([1], [32], [gl.num_warps()], [0])
    with ring.produce() as slot:
        slot.expect_bytes(16)
        gl.inline_asm_elementwise(TRY_CANCEL, "=r,r,r", [gl.full([32 * gl.num_warps()], RESPONSE_OFFSET, gl.int32, one),
                                                        gl.full([32 * gl.num_warps()], FULL_OFFSET, gl.int32, one)],
                                  dtype=gl.int32, is_pure=False, pack=1)
    with ring.consume() as slot:
        words = clc.response.index(slot.index()).load(gl.BlockedLayout([1, 4], [1, 32], [1, gl.num_warps()], [1, 0]))
    ctaid = gl.inline_asm_elementwise(DECODE, "=r,r,r,r,r", [_word(words, 0), _word(words, 1), _word(words, 2),
                                                              _word(words, 3)], dtype=gl.int32, is_pure=True, pack=1)
    gl.store(out_ptr + gl.arange(0, 1, ctaid.type.layout), ctaid)
    keep_alive(clc)  # as in a warp-specialized kernel, every part lives to the end, so none shares another's bytes
