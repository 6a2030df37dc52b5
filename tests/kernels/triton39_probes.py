"""Compile-only probes of what Triton 3.9's Gluon can and cannot do for tilepipe's kernels (docs/triton-notes.md).

One small kernel per capability; tests/test_triton39.py compiles them all in one batch and pins the PTX/SASS (or the
exact refusal). The cluster kernels take `num_ctas` through the compile options; the sm_100a ones are compiled, never
run. None of these kernels is meant to compute anything useful: each only has to keep its instruction alive.
"""

from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.blackwell import (TensorMemoryLayout, allocate_tensor_memory, clc,
                                                                 tcgen05_mma, tcgen05_mma_barrier_count)
from triton.experimental.gluon.language.nvidia.hopper import cluster, mbarrier, tma


@gluon.jit
def _store_tile(ptr, x, layout: gl.constexpr):
    """x[i, j] -> ptr[i * cols + j]."""
    rows = gl.arange(0, x.shape[0], gl.SliceLayout(1, layout))
    cols = gl.arange(0, x.shape[1], gl.SliceLayout(0, layout))
    gl.store(ptr + rows[:, None] * x.shape[1] + cols[None, :], x)


# ----------------------------------------------------------------------------------------- clusters (sm_90a)


@gluon.jit
def multicast_load_probe(in_desc, out_ptr, MULTICAST: gl.constexpr):
    """num_ctas=2: one tile into a CTA-replicated buffer (descriptor cga_layout [[0, 0]]) through TMA.

    Each CTA expects the whole tile on its own barrier (`nbytes_per_cta` of a replicated layout is the full tile).
    With MULTICAST the lowest-ranked CTA issues one `.multicast::cluster` load for both; without, each CTA loads
    its own copy. The two copies are read back through a view split over the pair (cga [[1, 0]]).
    """
    BM: gl.constexpr = in_desc.block_shape[0]
    BN: gl.constexpr = in_desc.block_shape[1]
    smem = gl.allocate_shared_memory(in_desc.dtype, [BM, BN], in_desc.layout)
    bar = mbarrier.allocate_mbarrier()  # shape [num_ctas], cga [[1]]: one barrier per CTA
    mbarrier.init(bar, count=1)
    mbarrier.expect(bar, in_desc.nbytes_per_cta)
    tma.async_load(in_desc, [0, 0], bar, smem, multicast=MULTICAST)
    mbarrier.wait(bar, 0, deps=[smem])
    split_l: gl.constexpr = gl.NVMMASharedLayout.get_default_for([2 * BM, BN], gl.float16, cga_layout=[[1, 0]])
    reg: gl.constexpr = gl.BlockedLayout([1, 8], [4, 8], [gl.num_warps(), 1], [1, 0], cga_layout=[[1, 0]])
    _store_tile(out_ptr, smem.reinterpret(shape=[2 * BM, BN], layout=split_l).load(reg), reg)


@gluon.jit
def pair_barrier_tma_probe(in_desc, out_ptr):
    """Refused: a pair barrier (allocate_mbarrier(two_ctas=True), cga [[0]]) as the barrier of a Hopper TMA load."""
    BM: gl.constexpr = in_desc.block_shape[0]
    BN: gl.constexpr = in_desc.block_shape[1]
    smem = gl.allocate_shared_memory(in_desc.dtype, [BM, BN], in_desc.layout)
    bar = mbarrier.allocate_mbarrier(two_ctas=True)
    mbarrier.init(bar, count=1)
    mbarrier.expect(bar, in_desc.nbytes_per_cta)
    tma.async_load(in_desc, [0, 0], bar, smem, multicast=True)
    mbarrier.wait(bar, 0, deps=[smem])
    reg: gl.constexpr = gl.BlockedLayout([1, 8], [4, 8], [gl.num_warps(), 1], [1, 0], cga_layout=[[0, 0]])
    _store_tile(out_ptr, smem.load(reg), reg)


@gluon.jit
def cluster_barrier_probe(out_ptr, BARRIER: gl.constexpr):
    """num_ctas=2: program_id is the cluster index; `cluster.barrier()` (when BARRIER) between two stores.

    Every num_ctas > 1 kernel already ends in a compiler-made cluster barrier, so the test compares BARRIER on/off.
    """
    layout: gl.constexpr = gl.BlockedLayout([1], [32], [gl.num_warps()], [0], cga_layout=[[1]])
    offs = gl.arange(0, 256, layout)
    gl.store(out_ptr + offs, offs + gl.program_id(0))
    if BARRIER:
        cluster.barrier()
    gl.store(out_ptr + 256 + offs, offs * gl.num_ctas())


# ------------------------------------------------------------------------------------- try-wait (both targets)


@gluon.jit
def try_wait_probe(out_ptr):
    """A non-blocking mbarrier test through inline PTX that takes the barrier itself as an operand (3.6 refused it).

    The descriptor becomes one uniform i32 shared address; descriptor operands need is_pure=False. Also the
    result-less `gl.inline_asm` form (one asm block per thread), here an arrive on the same barrier.
    """
    bars = gl.allocate_shared_memory(gl.int64, [2, 1], mbarrier.MBarrierLayout())
    mbarrier.init(bars.index(0), count=1)
    mbarrier.init(bars.index(1), count=1)
    layout: gl.constexpr = gl.BlockedLayout([1], [32], [gl.num_warps()], [0])
    parity = gl.program_id(0) & 1
    ready = gl.inline_asm_elementwise(
        "{ .reg .pred p; mbarrier.try_wait.parity.shared::cta.b64 p, [$1], $2; selp.u32 $0, 1, 0, p; }",
        "=r,r,r", [bars.index(1), parity], dtype=gl.int32, is_pure=False, pack=1)
    gl.inline_asm("mbarrier.arrive.shared::cta.b64 _, [$0];", "r", [bars.index(0)])
    gl.store(out_ptr + gl.arange(0, 32 * gl.num_warps(), layout), gl.full([32 * gl.num_warps()], 0, gl.int32,
                                                                          layout) + ready)


# ------------------------------------------------------------------------------------------- Blackwell (sm_100a)


@gluon.jit
def clc_probe(out_ptr):
    """One cluster-launch-control round: try_cancel into a 16-byte response, wait its tx, decode it."""
    response = gl.allocate_shared_memory(gl.int64, [2], gl.SwizzledSharedLayout(1, 1, 1, [0]))
    bar = mbarrier.allocate_mbarrier()
    mbarrier.init(bar, count=1)
    mbarrier.expect(bar, 16)
    clc.try_cancel(response, bar)
    mbarrier.wait(bar, 0)
    result = clc.load_result(response)
    gl.store(out_ptr, gl.where(result.is_canceled(), result.program_id(0), -1))


@gluon.jit
def mma_2cta_probe(out_ptr, NUM_CTAS: gl.constexpr):
    """A 256x128x64 bf16 tcgen05_mma over a CTA pair: TensorMemoryLayout(two_ctas=True), A and the accumulator split
    by M (cga [[1, 0]]), B [N, K] split by N and permuted. Operands are uninitialised smem: compile-only."""
    BM: gl.constexpr = 256
    BN: gl.constexpr = 128
    BK: gl.constexpr = 64
    cga: gl.constexpr = [[1, 0]] if NUM_CTAS == 2 else []
    a = gl.allocate_shared_memory(gl.bfloat16, [BM, BK],
                                  gl.NVMMASharedLayout.get_default_for([BM, BK], gl.bfloat16, cga_layout=cga))
    b = gl.allocate_shared_memory(gl.bfloat16, [BN, BK],
                                  gl.NVMMASharedLayout.get_default_for([BN, BK], gl.bfloat16, cga_layout=cga))
    acc = allocate_tensor_memory(gl.float32, [BM, BN],
                                 TensorMemoryLayout([128, BN], col_stride=1, cga_layout=cga, two_ctas=True))
    done = mbarrier.allocate_mbarrier()
    mbarrier.init(done, count=tcgen05_mma_barrier_count([a, b], multicast=False, two_ctas=True))
    tcgen05_mma(a, b.permute((1, 0)), acc, use_acc=False, mbarriers=[done])
    mbarrier.wait(done, 0)
    reg: gl.constexpr = acc.get_reg_layout()
    _store_tile(out_ptr, acc.load(reg), reg)


# ------------------------------------------------------------------------------- 3.6 facts re-checked under 3.9


@gluon.jit
def barrier_slice_probe(out_ptr):
    """3.6 aborted in LLVM: `.slice()` on an mbarrier array, then init through `.index()` of the slice."""
    bars = gl.allocate_shared_memory(gl.int64, [8, 1], mbarrier.MBarrierLayout())
    full = bars.slice(0, 4)
    for i in gl.static_range(4):
        mbarrier.init(full.index(i), count=1)
    mbarrier.arrive(full.index(1))
    mbarrier.wait(full.index(1), 0)
    gl.store(out_ptr, 1)


@gluon.jit
def low_rank_layout_probe(out_ptr):
    """3.6 aborted in LLVM: a [stages, n] buffer with a rank-1 SwizzledSharedLayout(order=[0]), stored via .index."""
    layout: gl.constexpr = gl.BlockedLayout([1], [32], [gl.num_warps()], [0])
    buf = gl.allocate_shared_memory(gl.int32, [2, 128], gl.SwizzledSharedLayout(1, 1, 1, [0]))
    offs = gl.arange(0, 128, layout)
    buf.index(1).store(offs)
    gl.store(out_ptr + offs, buf.index(1).load(layout))


@gluon.jit
def _named(x, name: gl.constexpr = "pipeline"):
    gl.static_assert(len(name) > 0)
    return x


@gluon.jit
def string_default_probe(out_ptr):
    """3.6 refused a jit function whose constexpr parameter has a string default."""
    gl.store(out_ptr, _named(1))


@gluon.aggregate
class Tagged:
    """A value with a per-handle constexpr, like tilepipe's stage token."""
    value: gl.tensor
    tag: gl.constexpr


@gluon.jit
def if_merge_probe(out_ptr, flag, SAME_TAG: gl.constexpr):
    """A name bound on both sides of a runtime `if` is merged even though it is dead afterwards, so the two sides'
    types must match, constexpr fields included (SAME_TAG=False binds different tags)."""
    if flag > 0:
        dead = Tagged(gl.to_tensor(flag), 1)
        gl.store(out_ptr, dead.value)
    else:
        dead = Tagged(gl.to_tensor(flag + 1), 1 if SAME_TAG else 2)
        gl.store(out_ptr, dead.value)


@gluon.jit
def rank3_layout_probe(out_ptr):
    """3.6 refused, once indexed, a rank-3 SwizzledSharedLayout on a rank-3 buffer."""
    layout: gl.constexpr = gl.BlockedLayout([1, 4], [1, 32], [gl.num_warps(), 1], [1, 0])
    buf = gl.allocate_shared_memory(gl.int32, [2, 8, 128], gl.SwizzledSharedLayout(1, 1, 1, [2, 1, 0]))
    x = gl.full([8, 128], 7, gl.int32, layout)
    buf.index(1).store(x)
    _store_tile(out_ptr, buf.index(1).load(layout), layout)


# ------------------------------------------------------- a tile id shared by a cluster (issue 18's dynamic scheduler)

# lane 0 of CTA rank 0 draws a ticket and writes it to the cluster's global slot; every lane then orders the generic
# writes before the async proxy (the TMA load that reads the slot)
_DRAW_TO_SLOT = gl.constexpr("""{
 .reg .u32 lane, rank, ticket;
 .reg .pred first;
 mov.u32 lane, %laneid;
 mov.u32 rank, %cluster_ctarank;
 setp.eq.u32 first, lane, 0;
 setp.eq.and.u32 first, rank, 0, first;
 @first atom.global.add.u32 ticket, [$1], 1;
 @first st.global.u32 [$2], ticket;
 bar.warp.sync -1;
 fence.proxy.async.global;
 mov.u32 $0, 0;
}""")


@gluon.jit
def cluster_ticket_probe(counter, slots, slot_desc, out_ptr, ASM_DRAW: gl.constexpr):
    """num_ctas=2, one warp (as a scheduler role): both CTAs of a cluster get the same ticket from a global counter. CTA rank 0 draws it
    into the cluster's 16-byte global slot; each CTA expects the slot's bytes on its own barrier and one TMA multicast
    (the slot's box replicated, cga [[0, 0]]) lands it in both. ASM_DRAW: the draw in inline asm; else gl.atomic_add
    and gl.store under `if rank == 0`, which Triton lowers with a cross-CTA broadcast of the atomic's result."""
    gl.static_assert(gl.num_warps() == 1, "lane 0 draws for the CTA")
    smem = gl.allocate_shared_memory(gl.int32, [1, 4], slot_desc.layout)
    bar = mbarrier.allocate_mbarrier()
    mbarrier.init(bar, count=1)
    cluster_id = gl.program_id(0)
    lanes: gl.constexpr = gl.BlockedLayout([1], [32], [1], [0], cga_layout=[[0]])
    if ASM_DRAW:
        gl.inline_asm_elementwise(_DRAW_TO_SLOT, "=r,l,l", [counter + gl.zeros([32], gl.int32, lanes),
                                                           slots + cluster_id * 4 + gl.zeros([32], gl.int32, lanes)],
                                  dtype=gl.int32, is_pure=False, pack=1)
    else:
        rank = gl.inline_asm_elementwise("mov.u32 $0, %cluster_ctarank;", "=r", [], dtype=gl.int32, is_pure=True,
                                         pack=1)
        if rank == 0:
            gl.store(slots + cluster_id * 4, gl.atomic_add(counter, 1))
    mbarrier.expect(bar, slot_desc.nbytes_per_cta)
    tma.async_load(slot_desc, [cluster_id, 0], bar, smem, multicast=True)
    mbarrier.wait(bar, 0, deps=[smem])
    words: gl.constexpr = gl.BlockedLayout([1, 4], [1, 32], [1, 1], [1, 0], cga_layout=[[0, 0]])
    tile_id = gl.max(gl.max(smem.load(words), axis=1), axis=0)
    gl.store(out_ptr + cluster_id + gl.zeros([32], gl.int32, lanes), tile_id + gl.zeros([32], gl.int32, lanes))


@gluon.jit
def cross_cta_convert_probe(out_ptr):
    """num_ctas=2: rows held one per CTA (cga [[1, 0]]) converted to a layout replicated over the pair (cga [[0, 0]])."""
    split: gl.constexpr = gl.BlockedLayout([1, 4], [2, 16], [1, gl.num_warps()], [1, 0], cga_layout=[[1, 0]])
    replicated: gl.constexpr = gl.BlockedLayout([1, 4], [2, 16], [1, gl.num_warps()], [1, 0], cga_layout=[[0, 0]])
    rows = gl.arange(0, 4, gl.SliceLayout(1, split))
    _store_tile(out_ptr, gl.convert_layout(gl.full([4, 4], 1, gl.int32, split) * rows[:, None], replicated),
                replicated)
