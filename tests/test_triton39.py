"""CPU tests pinning what Triton 3.9's Gluon can and cannot do for tilepipe (docs/triton-notes.md).

Every probe of tests/kernels/triton39_probes.py is compiled in one compile_kernels call. sm_100a code is compiled
and disassembled only: nothing here says it runs correctly on a Blackwell GPU.
"""

import re

import pytest
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia import blackwell, hopper

from tilepipe.kernels.spec import KernelSpec, tdesc_signature
from tilepipe.verify.compile import CompileError, KernelReport, compile_kernels

PROBES = "tests.kernels.triton39_probes"
PAIR = {"num_ctas": 2}
# A 64x64 fp16 TMA box replicated in both CTAs of a pair (cga basis [0, 0]), spelled as the JIT spells the
# signature of a host TensorDescriptor argument.
REPLICATED_LAYOUT = gl.NVMMASharedLayout.get_default_for([64, 64], gl.float16, cga_layout=[[0, 0]])
REPLICATED = tdesc_signature("fp16", (64, 64), REPLICATED_LAYOUT)
LOAD_SIG = {"in_desc": REPLICATED, "out_ptr": "*fp16", "MULTICAST": "constexpr"}
OUT_I32 = {"out_ptr": "*i32"}
BARRIER_SIG = {"out_ptr": "*i32", "BARRIER": "constexpr"}
MMA_SIG = {"out_ptr": "*fp32", "NUM_CTAS": "constexpr"}
MERGE_SIG = {"out_ptr": "*i32", "flag": "i32", "SAME_TAG": "constexpr"}
# a cluster's 16-byte global slot (one row of 4 int32 per cluster), replicated in both CTAs of the pair
SLOT_LAYOUT = gl.NVMMASharedLayout.get_default_for([1, 4], gl.int32, cga_layout=[[0, 0]])
TICKET_SIG = {"counter": "*i32", "slots": "*i32", "slot_desc": tdesc_signature("i32", (1, 4), SLOT_LAYOUT),
              "out_ptr": "*i32", "ASM_DRAW": "constexpr"}


def probe(name: str, signature: dict, constexprs: dict | None = None, target: str = "sm_90a",
          options: dict | None = None, num_warps: int = 4) -> KernelSpec:
    return KernelSpec(f"{PROBES}:{name}", signature, constexprs or {}, target=target, num_warps=num_warps,
                      options=options or {})


SPECS = {
    "multicast": probe("multicast_load_probe", LOAD_SIG, {"MULTICAST": True}, options=PAIR),
    "multicast_sm100": probe("multicast_load_probe", LOAD_SIG, {"MULTICAST": True}, "sm_100a", PAIR),
    "replicated": probe("multicast_load_probe", LOAD_SIG, {"MULTICAST": False}, options=PAIR),
    "pair_barrier_tma": probe("pair_barrier_tma_probe", {"in_desc": REPLICATED, "out_ptr": "*fp16"}, options=PAIR),
    "cluster_barrier": probe("cluster_barrier_probe", BARRIER_SIG, {"BARRIER": True}, options=PAIR),
    "cluster_barrier_sm100": probe("cluster_barrier_probe", BARRIER_SIG, {"BARRIER": True}, "sm_100a", PAIR),
    "cluster_no_barrier": probe("cluster_barrier_probe", BARRIER_SIG, {"BARRIER": False}, options=PAIR),
    "try_wait": probe("try_wait_probe", OUT_I32),
    "try_wait_sm100": probe("try_wait_probe", OUT_I32, target="sm_100a"),
    "clc": probe("clc_probe", OUT_I32, target="sm_100a"),
    "clc_sm90": probe("clc_probe", OUT_I32),
    "mma_2cta": probe("mma_2cta_probe", MMA_SIG, {"NUM_CTAS": 2}, "sm_100a", PAIR),
    "mma_2cta_one_cta": probe("mma_2cta_probe", MMA_SIG, {"NUM_CTAS": 1}, "sm_100a"),
    "mma_2cta_sm90": probe("mma_2cta_probe", MMA_SIG, {"NUM_CTAS": 2}, options=PAIR),
    "barrier_slice": probe("barrier_slice_probe", OUT_I32),
    "low_rank_layout": probe("low_rank_layout_probe", OUT_I32),
    "rank3_layout": probe("rank3_layout_probe", OUT_I32),
    "string_default": probe("string_default_probe", OUT_I32),
    "if_merge_same": probe("if_merge_probe", MERGE_SIG, {"SAME_TAG": True}),
    "if_merge_different": probe("if_merge_probe", MERGE_SIG, {"SAME_TAG": False}),
    "ticket_asm": probe("cluster_ticket_probe", TICKET_SIG, {"ASM_DRAW": True}, options=PAIR, num_warps=1),
    "ticket_atomic": probe("cluster_ticket_probe", TICKET_SIG, {"ASM_DRAW": False}, options=PAIR, num_warps=1),
    "cross_cta_convert": probe("cross_cta_convert_probe", OUT_I32, options=PAIR),
}


@pytest.fixture(scope="module")
def built() -> dict[str, KernelReport | CompileError]:
    return dict(zip(SPECS, compile_kernels(list(SPECS.values()))))


def report(built: dict, name: str) -> KernelReport:
    result = built[name]
    if isinstance(result, CompileError):
        pytest.fail(f"{name} did not compile:\n{result}")
    return result


def refusal(built: dict, name: str) -> str:
    result = built[name]
    assert isinstance(result, CompileError), f"{name} compiled, but Triton 3.9 is expected to refuse it"
    return str(result)


def lines(text: str, pattern: str) -> list[str]:
    return [line.strip() for line in text.splitlines() if re.search(pattern, line)]


MULTICAST_LOAD = ("cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes"
                  ".multicast::cluster")


# ------------------------------------------------------------------------------------------ TMA multicast


def test_tma_multicast_load_sm90(built: dict) -> None:
    """TMA multicast (sm_90a): tma.async_load(..., multicast=True) into a CTA-replicated buffer is one
    `.multicast::cluster` load with CTA mask 0b11, issued by CTA 0 only; each CTA expects the whole tile (8192 B) on
    its own barrier; the compiler adds the cluster-scope barrier-init fence and cluster barrier."""
    r = report(built, "multicast")
    assert r.count(".reqnctapercluster 2") == 1
    (load, ) = lines(r.ptx, r"cp\.async\.bulk\.tensor")
    assert MULTICAST_LOAD in load and load.endswith("%rs1;")
    assert r.count("mov.b16 \t%rs1, 3;") == 1  # ctaMask: both CTAs of the pair
    assert r.count("%cluster_ctarank") == 1  # the issuer is the lowest-ranked CTA
    assert lines(r.ptx, r"expect_tx") == ["@%p3 mbarrier.arrive.expect_tx.shared::cta.b64 _, [%r1], 8192;"]
    assert r.count("fence.mbarrier_init.release.cluster") == 1
    assert r.count("UTMALDG.2D.MULTICAST", "sass") == 1


def test_tma_multicast_load_sm100(built: dict) -> None:
    """TMA multicast (sm_100a): the same probe compiles to the same `.multicast::cluster` load."""
    r = report(built, "multicast_sm100")
    assert len(lines(r.ptx, re.escape(MULTICAST_LOAD))) == 1
    assert r.count("UTMALDG.2D.MULTICAST", "sass") == 1


def test_replicated_load_without_multicast(built: dict) -> None:
    """TMA multicast, control: multicast=False into the same replicated buffer makes every CTA issue its own plain
    CTA-local load (`shared::cta`), and no barrier-init cluster fence is needed."""
    r = report(built, "replicated")
    assert lines(r.ptx, r"cp\.async\.bulk\.tensor") == [
        "@%p3 cp.async.bulk.tensor.2d.shared::cta.global.mbarrier::complete_tx::bytes [%r2], [%rd1, {%r3, %r3}], "
        "[%r1];"]
    assert r.count(".multicast::cluster") == 0
    assert r.count("fence.mbarrier_init") == 0
    assert r.count("UTMALDG.2D", "sass") == 1 and r.count("MULTICAST", "sass") == 0


def test_tma_barrier_cannot_be_a_pair_barrier(built: dict) -> None:
    """TMA multicast, refused: a pair barrier (allocate_mbarrier(two_ctas=True), cga [[0]]) as a Hopper TMA load's
    barrier; the barrier must be per CTA (cga [[1]])."""
    assert ("'ttng.async_tma_copy_global_to_local' op TMA barrier cga_layout must be [[1]], got [[0]]"
            in refusal(built, "pair_barrier_tma"))


# ------------------------------------------------------------------------------- cluster launch and barrier


@pytest.mark.parametrize("name", ["cluster_barrier", "cluster_barrier_sm100"])
def test_cluster_launch_and_barrier(built: dict, name: str) -> None:
    """Cluster launch + hopper.cluster.barrier (sm_90a and sm_100a): num_ctas=2 gives `.reqnctapercluster 2`,
    program_id(0) is the cluster index (ctaid.x >> 1), and cluster.barrier() is one `barrier.cluster.arrive` +
    `wait` on top of the pair the compiler puts at the end of every num_ctas > 1 kernel."""
    r = report(built, name)
    without = report(built, "cluster_no_barrier")
    assert r.count(".reqnctapercluster 2") == 1
    assert re.search(r"mov\.u32 \t(%r\d+), %ctaid\.x;\s+shr\.u32 \t%r\d+, \1, 1;", r.ptx)
    assert r.count("barrier.cluster.arrive.aligned;") == 2 == without.count("barrier.cluster.arrive.aligned;") + 1
    assert r.count("barrier.cluster.wait.aligned;") == 2 == without.count("barrier.cluster.wait.aligned;") + 1
    assert r.count("UCGABAR_ARV", "sass") == 2 and r.count("UCGABAR_WAIT", "sass") == 2


# ----------------------------------------------------------------------------------------------- try-wait


@pytest.mark.parametrize("name", ["try_wait", "try_wait_sm100"])
def test_try_wait_takes_the_barrier_as_an_operand(built: dict, name: str) -> None:
    """mbarrier try-wait (sm_90a and sm_100a): gl.inline_asm_elementwise (and gl.inline_asm) accept a shared-memory
    descriptor operand, passed as a register holding the barrier's shared address (here bars.index(1) =
    global_smem + 8); 3.6 refused the operand."""
    r = report(built, name)
    (try_wait, ) = lines(r.ptx, r"mbarrier\.try_wait")
    operand = re.search(r"mbarrier\.try_wait\.parity\.shared::cta\.b64 p, \[(%r\d+)\], %r\d+;", try_wait)
    assert operand, try_wait
    base = re.search(r"mov\.b32 \t(%r\d+), global_smem;", r.ptx).group(1)
    second = re.search(rf"add\.s32 \t(%r\d+), {base}, 8;", r.ptx).group(1)
    assert re.search(rf"and\.b32 \t{re.escape(operand.group(1))}, {second}, \d+;", r.ptx)
    (arrive, ) = lines(r.ptx, r"mbarrier\.arrive")
    assert re.fullmatch(r"mbarrier\.arrive\.shared::cta\.b64 _, \[%r\d+\];", arrive)


def test_no_try_wait_builtin() -> None:
    """mbarrier try-wait: 3.9 still has no try_wait/test_wait builtin, so inline PTX is the only route."""
    for module in (hopper.mbarrier, blackwell.mbarrier):
        assert not [name for name in dir(module) if "try" in name or "test_wait" in name]


# ------------------------------------------------------------------------------------------ CLC (sm_100a)


def test_clc_try_cancel_and_load_result(built: dict) -> None:
    """CLC (sm_100a): blackwell.clc.try_cancel is one `clusterlaunchcontrol.try_cancel` completing a 16-byte tx on
    the barrier; clc.load_result(...).is_canceled() / .program_id(0) decode it with `query_cancel`."""
    r = report(built, "clc")
    assert lines(r.ptx, r"clusterlaunchcontrol\.try_cancel") == [
        "@%p3 clusterlaunchcontrol.try_cancel.async.shared::cta.mbarrier::complete_tx::bytes.b128 [%r2], [%r1];"]
    assert r.count("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%r1], 16;") == 1
    assert r.count("clusterlaunchcontrol.query_cancel.is_canceled.pred.b128") == 1
    assert r.count("clusterlaunchcontrol.query_cancel.get_first_ctaid::x.b32.b128") == 1
    assert r.count("UGETNEXTWORKID.SELFCAST", "sass") == 1


def test_clc_refused_on_sm90(built: dict) -> None:
    """CLC, refused: the same probe for sm_90a."""
    assert "CLC operations require SM100+ (Blackwell)" in refusal(built, "clc_sm90")


# ------------------------------------------------------------------------------------ 2-CTA MMA (sm_100a)


def test_two_cta_mma(built: dict) -> None:
    """2-CTA MMA (sm_100a): a TensorMemoryLayout(two_ctas=True) accumulator makes tcgen05_mma a `cta_group::2`
    MMA (4 x K=16 for K=64), with cta_group::2 TMEM allocation and a multicast commit to both CTAs' barriers."""
    r = report(built, "mma_2cta")
    assert r.count(".reqnctapercluster 2") == 1
    assert r.count("tcgen05.mma.cta_group::2.kind::f16") == 4
    assert r.count("tcgen05.mma.cta_group::1") == 0
    assert r.count("tcgen05.alloc.cta_group::2.sync.aligned.shared::cta.b32") == 1
    assert r.count("tcgen05.commit.cta_group::2.mbarrier::arrive::one.shared::cluster.multicast::cluster.b64") == 1
    assert r.count("UTCHMMA.2CTA", "sass") == 4
    assert r.count("UTCBAR.2CTA.MULTICAST", "sass") == 1


def test_two_cta_layout_needs_a_pair_split(built: dict) -> None:
    """2-CTA MMA, refused: two_ctas=True without a cga_layout splitting M over the pair (here num_ctas=1)."""
    assert "twoCTAs layout requires the first CGALayout block basis to be [1, 0]" in refusal(built, "mma_2cta_one_cta")


def test_tensor_memory_refused_on_sm90(built: dict) -> None:
    """2-CTA MMA, refused: tensor memory (hence tcgen05) for sm_90a."""
    assert "'ttng.tmem_alloc' op requires tcgen05 support" in refusal(built, "mma_2cta_sm90")


# ------------------------------------------------------------------------------ 3.6 facts re-checked in 3.9


def test_barrier_array_slice_compiles(built: dict) -> None:
    """3.6 fact corrected: `.slice()` of an mbarrier array, then `.index()`, no longer aborts; the inits land 8 bytes
    apart and the arrive/wait use slice element 1."""
    r = report(built, "barrier_slice")
    inits = lines(r.ptx, r"mbarrier\.init")
    assert len(inits) == 4
    addresses = [re.search(r"\[(%r\d+)\]", line).group(1) for line in inits]
    base = re.search(r"mov\.b32 \t(%r\d+), global_smem;", r.ptx).group(1)
    assert addresses[0] == base
    for i, reg in enumerate(addresses[1:], 1):
        assert re.search(rf"add\.s32 \t{reg}, {base}, {8 * i};", r.ptx)
    assert lines(r.ptx, r"mbarrier\.arrive") == [f"@%p5 mbarrier.arrive.shared::cta.b64 _, [{addresses[1]}];"]


def test_one_rank_lower_shared_layout_indexes(built: dict) -> None:
    """3.6 fact corrected: a rank-1 SwizzledSharedLayout on a [2, 128] buffer compiles; index(1) is 512 bytes in."""
    r = report(built, "low_rank_layout")
    assert r.count("+512]") == 2  # the store and the load of buffer 1


def test_full_rank_shared_layout_refused_when_indexed(built: dict) -> None:
    """3.6 fact kept: a rank-3 SwizzledSharedLayout on a rank-3 buffer is refused at `.index()`: a view keeps the
    buffer's layout, whose rank must equal the view's rank or be one less (Got <layout rank> and <view rank>)."""
    assert "rank must be equal to or one less than the shape size. Got 3 and 2" in refusal(built, "rank3_layout")


def test_string_default_argument_compiles(built: dict) -> None:
    """3.6 fact corrected: a jit function may now have a string default for a constexpr parameter."""
    report(built, "string_default")


def test_runtime_if_merges_dead_names(built: dict) -> None:
    """3.6 fact kept: a name bound on both sides of a runtime `if` is merged even though it is dead afterwards; an
    aggregate's constexpr fields must be equal on both sides."""
    report(built, "if_merge_same")
    error = refusal(built, "if_merge_different")
    assert "Mismatched type for dead between then block" in error
    assert "('tag', constexpr_type[1])" in error and "('tag', constexpr_type[2])" in error


# -------------------------------------------- a tile id shared by a cluster (issue 18's dynamic scheduler; built on it)


def test_a_cluster_ticket_reaches_both_ctas_by_one_multicast(built: dict) -> None:
    """Expressible: CTA rank 0's lane 0 draws a ticket (inline-asm atom) into the cluster's global slot and fences the
    generic writes before the async proxy; each CTA expects the 16-byte slot on its own barrier, and one TMA multicast
    issued by rank 0 lands it in both. No cluster barrier between the kernel's start and its end."""
    r = report(built, "ticket_asm")
    assert r.spill_stores == 0 and r.count("atom.global.add.u32") == 1 and r.count("fence.proxy.async.global") == 1
    assert lines(r.ptx, r"expect_tx") and all(line.endswith(", 16;") for line in lines(r.ptx, r"expect_tx"))
    assert len(lines(r.ptx, MULTICAST_LOAD.replace(".", r"\."))) == 1 and r.count("UTMALDG.2D.MULTICAST", "sass") == 1
    assert r.count("ld.shared::cluster") == 0 and r.count("mapa") == 0
    assert r.count("barrier.cluster.arrive.relaxed") == 1  # after the barrier init
    assert r.count("barrier.cluster.arrive.aligned") == 1  # the kernel's end only


def test_scalar_atomic_and_cross_cta_convert_sync_the_whole_cluster(built: dict) -> None:
    """Not usable in a warp-specialized role: a scalar gl.atomic_add in a two-CTA kernel runs once per cluster and
    its result reaches the other CTA through distributed shared memory (mapa, ld.shared::cluster) between
    `barrier.cluster` pairs, as does a convert_layout from a CTA-split to a replicated layout. A cluster barrier
    waits for every thread of both CTAs, which the other roles of a warp_specialize kernel never send there."""
    for name in ("ticket_atomic", "cross_cta_convert"):
        r = report(built, name)
        assert r.count("mapa.shared::cluster") >= 1 and r.count("ld.shared::cluster") >= 1, name
        assert r.count("barrier.cluster.arrive.aligned") >= 2, name  # the exchange's, besides the kernel's end
