"""Two-CTA clusters without a GPU: the declarations (which tile is split, which shared), the plan's pair barriers,
and the compiled cluster GEMMs' multicast loads, remote releases and per-CTA byte counts (sm_90a), under the static,
the dynamic (a ticket per cluster, multicast to both CTAs) and the stream-K schedule (per-CTA partial tiles and
flags); which schedules the host lets a cluster take, and the workspace a cluster needs."""

import re
from dataclasses import dataclass, replace

import pytest
import torch

from tests.test_matmul import assert_partials_by_tma, tma_partial_boxes
from tilepipe.host.checks import check_cluster
from tilepipe.host import configs
from tilepipe.host.configs import LARGE_16BIT, MatmulConfig, schedule_for
from tilepipe.host.gpus import H100
from tilepipe.kernels.matmul import matmul_plan, matmul_spec
from tilepipe.pipeline.cluster import Cluster, ctas_splitting
from tilepipe.pipeline.storage import Storage
from tilepipe.schedulers import CLUSTER_SCHEDULES
from tilepipe.verify.compile import compile_kernels

CFG = MatmulConfig(128, 128, 64, stages=4)
CLUSTERS = {"1x2": (1, 2), "2x1": (2, 1)}
TILE = LARGE_16BIT
"""A CTA's tile in the compiled cluster GEMMs: the catalogue's (report --all compiles the same specs, and the checker
models its protocols), so a spec the session compiles anyway."""
SPECS = {(name, has_c): matmul_spec(TILE, "bf16", "bf16", True, has_c=has_c, cluster=shape)
         for name, shape in CLUSTERS.items() for has_c in (False, True)}
SPECS["1x1", False] = matmul_spec(TILE, "bf16", "bf16", True)
SPECS.update({(name, has_c, schedule): matmul_spec(TILE, "bf16", "bf16", True, has_c=has_c, cluster=shape,
                                                   schedule=schedule)
              for name, shape in CLUSTERS.items() for has_c in (False, True) for schedule in ("streamk", "dynamic")})
MULTICAST = re.compile(r"cp\.async\.bulk\.tensor\.2d\.shared::cluster\.global\.mbarrier::complete_tx::bytes"
                       r"\.multicast::cluster")


@pytest.fixture(scope="module")
def reports() -> dict:
    return dict(zip(SPECS, compile_kernels(list(SPECS.values()))))


def test_cluster_shapes_split_or_share_each_tile():
    assert Cluster(1, 2).a == ((0, 0), ) and Cluster(1, 2).b(True) == ((1, 0), ) and Cluster(1, 2).c == ((0, 1), )
    assert Cluster(2, 1).a == ((1, 0), ) and Cluster(2, 1).b(False) == ((0, 0), ) and Cluster(2, 1).c == ((1, 0), )
    assert Cluster().a == () and Cluster().num_ctas == 1
    assert [ctas_splitting(bases) for bases in ((), ((0, 0), ), ((0, 1), ))] == [1, 1, 2]
    with pytest.raises(ValueError, match="1x1, 2x1 or 1x2"):
        Cluster(2, 2)


def test_plan_counts_per_cta_bytes_and_adds_pair_barriers():
    """A 1x2 cluster's plan: B and C split (each CTA holds half of the cluster tile), A whole in both CTAs, and
    one pair barrier per input stage that counts both CTAs' releases."""
    single = matmul_plan.fn(128, 128, 64, 4, 1, "bf16", "bf16", True)
    pair = matmul_plan.fn(128, 256, 64, 4, 1, "bf16", "bf16", True, cluster_m=1, cluster_n=2)
    assert pair.total_bytes == single.total_bytes + 4 * 8  # the same tiles per CTA, plus 4 pair barriers
    uses = {use.name: use for use in pair.barrier_map()}
    assert uses["pipelines.input.empty_pair"].arrivals == 2 and uses["pipelines.input.empty_pair"].count == 4
    assert "pipelines.input.empty_pair" not in {use.name for use in single.barrier_map()}


def test_a_cluster_scheduler_ring_is_a_multicast_ring_the_scheduler_also_consumes():
    """Under the dynamic scheduler in a cluster the tile-id ring gets pair barriers, its slots are a TMA destination
    replicated in both CTAs, and the scheduler counts among its consumers (it reads each id back); one CTA's ring
    stays as it was."""
    single = matmul_plan.fn(128, 128, 64, 4, 1, "bf16", "bf16", True, dynamic=True)
    pair = matmul_plan.fn(128, 256, 64, 4, 1, "bf16", "bf16", True, dynamic=True, cluster_m=1, cluster_n=2)
    uses = {use.name: use for use in pair.barrier_map()}
    assert uses["pipelines.clc.empty"].arrivals == 4 and uses["pipelines.clc.empty"].producer.endswith("+scheduler")
    assert uses["pipelines.clc.empty_pair"].arrivals == 8 and uses["pipelines.clc.empty_pair"].count == 2
    assert {use.name: use for use in single.barrier_map()}["pipelines.clc.empty"].arrivals == 3
    assert "pipelines.clc.empty_pair" not in {use.name for use in single.barrier_map()}
    response = next(p.part for p in pair.placed if p.part.name == "clc.response")
    assert response.kind == "tile" and response.cga == ((0, 0), ) and response.nbytes == 2 * 128  # TMA-aligned stages


def test_clusters_run_the_schedules_the_host_takes():
    """The host takes dynamic, stream-K and split-K with a cluster on sm_90a, and on sm_100a nothing but static,
    naming the scheduler."""
    assert schedule_for(7000, 5000, 3000, MatmulConfig(128, 128, 64, 4, cluster_m=2), H100) == "static"
    assert MatmulConfig(128, 256, 64, 3, cluster_m=2).tile_m == 256
    for shape in CLUSTERS.values():
        cfg = MatmulConfig(128, 128, 64, 4, cluster_m=shape[0], cluster_n=shape[1])
        for schedule in CLUSTER_SCHEDULES:
            check_cluster(cfg, schedule, "sm_90a")
    with pytest.raises(ValueError, match="scheduler 'clc' does not hand out cluster tiles yet; on sm_100a"):
        check_cluster(MatmulConfig(128, 256, 64, 6, c_stages=2, num_warps=4, cluster_m=2), "clc", "sm_100a")
    assert CLUSTER_SCHEDULES == ("static", "dynamic", "streamk", "splitk")


@pytest.mark.parametrize("shape", CLUSTERS.values(), ids=CLUSTERS)
def test_a_cluster_streamk_workspace_holds_every_ctas_partial_tile_and_flag(shape):
    """Stream-K and split-K in a cluster on an H100 (66 programs of two SMs): every program's slot (its CTAs'
    blocks) lies in the workspace sized for single CTAs, and every CTA has a flag."""
    from tilepipe.host.configs import schedule_programs
    from tilepipe.host.launch import workspace_words
    from tilepipe.pipeline.partials import FLAG_WORDS

    sms = 132
    for block_n in (128, 256):
        cfg = MatmulConfig(128, block_n, 64, 3, cluster_m=shape[0], cluster_n=shape[1])
        for schedule in ("streamk", "splitk"):
            for M, N, K in ((1, 4096, 4096), (8, 14336, 4096), (2560, 2560, 2560), (7000, 5000, 3000)):
                programs = schedule_programs(M, N, K, cfg, sms, schedule)
                assert programs * cfg.cluster.num_ctas <= min(sms, FLAG_WORDS.value)
                assert FLAG_WORDS.value + programs * cfg.tile_m * cfg.tile_n <= workspace_words(sms, cfg)
    with pytest.raises(RuntimeError, match="flags for 1024 CTAs"):
        workspace_words(2048, CFG)


def test_a_cluster_dynamic_workspace_holds_every_clusters_ticket_rows_past_the_flags():
    """The dynamic scheduler's ticket rows (one per cluster and ring slot) start past stream-K's flags, which must
    rest at 0 whichever schedule ran last on the stream, 16-byte aligned for TMA, and fit the workspace."""
    from tilepipe.kernels.matmul import SCHEDULER_STAGES
    from tilepipe.host.launch import workspace_words
    from tilepipe.pipeline.partials import FLAG_WORDS
    from tilepipe.schedulers.dynamic import TICKET_BASE, TICKET_WORDS, ticket_rows

    assert TICKET_BASE.value >= FLAG_WORDS.value and TICKET_BASE.value * 4 % 16 == 0 and TICKET_WORDS.value * 4 == 16
    for sms in (1, 132, 1024):
        for cfg in (CFG, MatmulConfig(64, 64, 64, 3, cluster_m=2)):
            assert TICKET_BASE.value + ticket_rows(sms, SCHEDULER_STAGES) * TICKET_WORDS.value <= workspace_words(
                sms, cfg)


def test_the_host_hands_a_cluster_dynamic_launch_its_ticket_rows():
    """A dynamic launch in a cluster gets a TMA operand over one row per cluster and ring slot (66 clusters on 132
    SMs), from word TICKET_BASE of the workspace, in boxes of one row replicated in both CTAs; no other launch gets
    one."""
    import torch

    from tilepipe.host.launch import ticket_descriptor, ticket_slots, workspace_words
    from tilepipe.schedulers.dynamic import TICKET_BASE

    cfg = MatmulConfig(128, 128, 64, 4, cluster_m=2)
    workspace = torch.zeros(workspace_words(132, cfg), dtype=torch.int32)
    operand, area = ticket_slots(workspace, cfg, "dynamic", 132)
    assert area.shape == (132, 4) and operand.shape == (132, 4) and operand.strides == (4, 1)
    assert operand.address == workspace.data_ptr() + 4 * TICKET_BASE.value
    desc = ticket_descriptor(area)
    assert list(desc.block_shape) == [1, 4] and [list(b) for b in desc.layout.cga_layout] == [[0, 0]]
    for args in ((workspace, cfg, "static", 132), (workspace, CFG.__class__(128, 128, 64, 4), "dynamic", 132),
                 (None, cfg, "dynamic", 132)):
        assert ticket_slots(*args) == (None, None)
    assert ticket_descriptor(None) is None


@pytest.mark.parametrize("name", CLUSTERS)
@pytest.mark.parametrize("schedule", ("static", "streamk"))
@pytest.mark.parametrize("has_c", (False, True), ids=("plain", "+C"))
def test_cluster_gemm_multicasts_the_shared_operand_and_releases_across_ctas(reports, name, schedule, has_c):
    rep = reports[(name, has_c) + (() if schedule == "static" else (schedule, ))]
    assert rep.spill_stores == rep.spill_loads == 0
    assert ".reqnctapercluster 2" in rep.ptx
    assert len(MULTICAST.findall(rep.ptx)) == 1  # the shared operand, issued by the pair's first CTA
    multicasts = rep.count("UTMALDG.2D.MULTICAST", "sass")  # under stream-K ptxas may duplicate the load loop
    assert multicasts == 1 if schedule == "static" else multicasts >= 1
    # each CTA expects its own bytes: the shared tile whole and its half of the split one, a CTA's A and B tiles
    expected = (TILE.block_m + TILE.block_n) * TILE.block_k * 2
    assert re.search(rf"mbarrier\.arrive\.expect_tx\.shared::cta\.b64 _, \[%r\d+\], {expected};", rep.ptx)
    # a release reaches the pair barrier in the first CTA (steady state and the tile-end flush)
    assert rep.count("mbarrier.arrive.shared::cluster.b64") == 2
    assert rep.count("SYNCS.ARRIVE.TRANS64.RED.A1T0", "sass") == 2
    assert rep.count("fence.mbarrier_init.release.cluster") == 1  # barrier inits visible to the peer first
    assert rep.count(f"wgmma.mma_async.sync.aligned.m64n{TILE.block_n}k16") == 4  # per CTA: its own columns
    # each CTA loads its own part of the split operand (and of C) with a plain load
    assert rep.count("cp.async.bulk.tensor.2d.shared::cta.global") >= (2 if has_c else 1)
    if schedule == "streamk":  # each CTA stores and loads its part of a partial tile by TMA, and has its own flag
        assert_partials_by_tma(rep, tma_partial_boxes(TILE.block_n, "bf16"))
        # the flag of slot p is p * 2 + rank: the partials' own rank read (inline asm) in the store and epilogue-load
        assert len(re.findall(r"mov\.u32 %r\d+, %cluster_ctarank;", rep.ptx)) == 2  # roles (Triton's: a tab)
        assert rep.count("red.release.gpu.global.add") == rep.count("st.relaxed.gpu.global") == 1


@pytest.mark.parametrize("name", CLUSTERS)
@pytest.mark.parametrize("has_c", (False, True), ids=("plain", "+C"))
def test_cluster_dynamic_scheduler_multicasts_each_ticket_without_a_cluster_barrier(reports, name, has_c):
    """The dynamic scheduler in a cluster: the first CTA's lane 0 draws each ticket (one atom, in inline asm) into its
    row and fences it for the async proxy (first tile and draws: two asm blocks); both CTAs expect the row's 16 bytes
    and one multicast lands it in both (besides the shared operand's); every consumer of the tile-id ring, the
    scheduler included, also releases it on the pair barrier in the first CTA. No cluster barrier or distributed
    shared-memory read beyond the static kernel's (barrier init, kernel end), and no spills."""
    rep, static = reports[name, has_c, "dynamic"], reports[name, has_c]
    assert rep.spill_stores == rep.spill_loads == 0
    assert len(MULTICAST.findall(rep.ptx)) == 3  # the shared operand; the ticket row at the first tile and per draw
    assert rep.count("UTMALDG.2D.MULTICAST", "sass") >= 3
    assert rep.count("atom.global.add.u32") == 1 and rep.count("atom.global.exch.b32") == 1
    assert rep.count("fence.proxy.async.global") == 2 and rep.count("%cluster_ctarank") >= 2
    assert re.search(r"mbarrier\.arrive\.expect_tx\.shared::cta\.b64 _, \[%r\d+\], 16;", rep.ptx)
    # the input ring's two remote releases, plus two per consumer role of the tile-id ring (its first tile and its
    # loop): load, mma, store[, epilogue_load] and the scheduler
    assert rep.count("mbarrier.arrive.shared::cluster.b64") == 2 + 2 * (3 + has_c + 1)
    for what in ("barrier.cluster.arrive", "barrier.cluster.wait", "ld.shared::cluster", "mapa"):
        assert rep.count(what) == static.count(what), what


def test_unclustered_gemm_has_no_cluster_instructions(reports):
    rep = reports["1x1", False]
    assert not MULTICAST.search(rep.ptx) and "shared::cluster.b64" not in rep.ptx and "reqnctapercluster" not in rep.ptx


@pytest.mark.parametrize("schedule", ("static", "streamk"))
@pytest.mark.parametrize("shape", [(2, 1), (1, 2)], ids=("2x1", "1x2"))
def test_fp8_scaled_gemm_in_a_cluster_multicasts_the_shared_operand(shape, schedule):
    """The per-tensor/per-row FP8 kernel in a two-CTA cluster: the same multicast and remote releases as the 16-bit
    GEMM, FP8's 128-byte K tiles (each CTA expects the shared 128x128 tile whole and half of the split one); under
    stream-K (the kernel's; matmul_fp8 runs clusters static) each CTA's partial tiles move by TMA."""
    import torch

    from tilepipe.host.configs import fp8_configs
    from tilepipe.kernels.matmul_fp8 import scaled_spec
    from tilepipe.verify.compile import compile_kernel

    base = fp8_configs(False, torch.bfloat16)[0]
    cfg = MatmulConfig(base.block_m, base.block_n, base.block_k, base.stages, cluster_m=shape[0], cluster_n=shape[1])
    rep = compile_kernel(scaled_spec(cfg, "fp8e4nv", "fp8e4nv", "bf16", False, schedule))
    assert rep.spill_stores == rep.spill_loads == 0 and ".reqnctapercluster 2" in rep.ptx
    assert len(MULTICAST.findall(rep.ptx)) == 1 and rep.count("mbarrier.arrive.shared::cluster.b64") == 2
    own = base.block_m * base.block_k + base.block_n * base.block_k  # bytes of A and B tiles per CTA (fp8)
    assert re.search(rf"mbarrier\.arrive\.expect_tx\.shared::cta\.b64 _, \[%r\d+\], {own};", rep.ptx)
    if schedule == "streamk":
        assert_partials_by_tma(rep, tma_partial_boxes(base.block_n, "bf16"), reads=True)  # the scales


BLOCKWISE_CLUSTERS = {"2x1": (2, 1), "1x2": (1, 2)}


def blockwise_cluster(shape: tuple[int, int]) -> MatmulConfig:
    """The blockwise FP8 kernel's bf16 tile (128x128x128, stages fitted alone) in a two-CTA cluster."""
    import torch

    from tilepipe.host.configs import fp8_configs

    base = fp8_configs(True, torch.bfloat16)[0]
    return MatmulConfig(base.block_m, base.block_n, base.block_k, base.stages, cluster_m=shape[0], cluster_n=shape[1])


@pytest.fixture(scope="module")
def blockwise_reports() -> dict:
    from tilepipe.kernels.matmul_fp8_blockwise import blockwise_spec

    specs = {name: blockwise_spec(blockwise_cluster(shape), "fp8e4nv", "fp8e4nv", "bf16")
             for name, shape in BLOCKWISE_CLUSTERS.items()}
    return dict(zip(specs, compile_kernels(list(specs.values()))))


@pytest.mark.parametrize("name", BLOCKWISE_CLUSTERS)
def test_blockwise_scales_go_with_their_operand(name):
    """A 2x1 cluster splits A and A's row scales and shares B and its block scale; a 1x2 cluster the other way round,
    each CTA holding its own B box. Per CTA the stage holds what the unclustered kernel's does (plus pair barriers),
    and the TMA blocks the host builds are the storage's parts."""
    from tilepipe.kernels.matmul_fp8 import fp8_plan
    from tilepipe.kernels.matmul_fp8_blockwise import blockwise_blocks

    m, n = BLOCKWISE_CLUSTERS[name]
    cfg = blockwise_cluster((m, n))
    single = fp8_plan.fn(128, 128, 128, cfg.stages, 1, "fp8e4nv", "fp8e4nv", "bf16", True)
    pair = fp8_plan.fn(128 * m, 128 * n, 128, cfg.stages, 1, "fp8e4nv", "fp8e4nv", "bf16", True, m, n)
    parts = {part.name: part for part in pair.operands.parts()}
    split, shared = ((1, 0), ), ((0, 0), )
    assert parts["a"].cga == (split if m > 1 else shared) and parts["b"].cga == (shared if m > 1 else split)
    assert parts["a_scales"].tile == (1, 128 * m) and parts["a_scales"].cga == (((0, 1), ) if m > 1 else shared)
    assert parts["b_scales"].tile == (n, 32) and parts["b_scales"].cga == (shared if m > 1 else split)
    per_cta = [{(placed.storage, placed.part.name, placed.part.nbytes) for placed in plan.placed}
               for plan in (single, pair)]
    assert per_cta[1] - per_cta[0] == {("pipelines", "input.pair", cfg.stages * 8)}  # a pair barrier per stage
    assert per_cta[0] <= per_cta[1]
    blocks = blockwise_blocks(cfg)
    assert blocks["sa"] == (parts["a_scales"].tile, parts["a_scales"].cga)
    assert blocks["sb"] == (parts["b_scales"].tile, parts["b_scales"].cga)


def test_blockwise_cluster_refuses_swap_ab_and_stream_k():
    from tilepipe.kernels.matmul_fp8 import fp8_plan

    with pytest.raises(ValueError, match="no swap-AB variant"):
        fp8_plan.fn(128, 128, 128, 4, 1, "fp8e4nv", "fp8e4nv", "bf16", True, swap_ab=True)
    with pytest.raises(ValueError, match="stream-K scheduler"):
        fp8_plan.fn(256, 128, 128, 4, 1, "fp8e4nv", "fp8e4nv", "bf16", True, 2, 1, streamk=True)


@pytest.mark.parametrize("name", BLOCKWISE_CLUSTERS)
def test_blockwise_fp8_gemm_in_a_cluster_multicasts_the_shared_operand_with_its_scales(blockwise_reports, name):
    """The shared operand and its scales are two multicast loads issued by the pair's first CTA; the split ones are
    plain loads; each CTA expects its own bytes (the plan's stage per CTA: 128x128 of A and of B, 128 row scales and
    one 32-word B box); every release of the multicast ring also reaches the pair barrier."""
    from tilepipe.kernels.matmul_fp8 import fp8_plan

    rep = blockwise_reports[name]
    m, n = BLOCKWISE_CLUSTERS[name]
    stages = blockwise_cluster((m, n)).stages
    plan = fp8_plan.fn(128 * m, 128 * n, 128, stages, 1, "fp8e4nv", "fp8e4nv", "bf16", True, m, n)
    stage_bytes = sum(part.nbytes for part in plan.operands.parts()) // stages
    assert stage_bytes == 2 * 128 * 128 + 128 * 4 + 32 * 4
    assert rep.spill_stores == rep.spill_loads == 0 and ".reqnctapercluster 2" in rep.ptx
    assert len(MULTICAST.findall(rep.ptx)) == 2 and rep.count("UTMALDG.2D.MULTICAST", "sass") == 2
    assert rep.count("cp.async.bulk.tensor.2d.shared::cta.global") >= 2  # the split operand and its scales
    assert re.findall(r"mbarrier\.arrive\.expect_tx\.shared::cta\.b64 _, \[%r\d+\], (\d+);", rep.ptx) == [
        str(stage_bytes)]
    assert rep.count("mbarrier.arrive.shared::cluster.b64") >= 2
    assert rep.count("SYNCS.ARRIVE.TRANS64.RED.A1T0", "sass") == rep.count("mbarrier.arrive.shared::cluster.b64")
    assert rep.count("fence.mbarrier_init.release.cluster") == 1
    assert rep.count("wgmma.mma_async.sync.aligned.m64n128k32") == 16  # per CTA: its own 128x128, 2 partial sums


def test_blockwise_expect_bytes_must_match_the_stage():
    """A seeded wrong expect count: a scale descriptor whose box is the cluster's whole row (no cluster bases), so it
    would land twice the bytes a CTA's stage holds. The input pipeline refuses it while tracing."""
    from dataclasses import replace

    from tilepipe.kernels.matmul_fp8_blockwise import blockwise_spec
    from tilepipe.kernels.spec import tile_desc
    from tilepipe.verify.compile import CompileError

    spec = blockwise_spec(blockwise_cluster((2, 1)), "fp8e4nv", "fp8e4nv", "bf16")
    seeded = replace(spec, signature={**spec.signature, "sa_desc": tile_desc("fp32", (1, 256))})
    (result, ) = compile_kernels([seeded])
    assert isinstance(result, CompileError)
    assert "expect_loads arms 33920 bytes per CTA but a stage of its payload holds 33408" in str(result)


@pytest.mark.parametrize("name", BLOCKWISE_CLUSTERS)
def test_blockwise_cluster_protocol_passes_and_a_one_cta_pair_count_fails(name):
    """The protocol checker runs both CTAs' roles over the multicast ring (traced against the kernel); with the pair
    barrier counting one CTA's releases (a seeded wrong arrival count) the first CTA refills a slot its peer still
    reads, and with two consumer arrivals declared per CTA the producer waits forever."""
    from dataclasses import replace

    from tests.test_checker import _OneCtaPair, with_pipeline
    from tilepipe.pipeline.storage import SmemPipelineBundle
    from tilepipe.verify.checker import check, format_results
    from tilepipe.verify.protocols import fp8_cluster_protocol

    protocol = fp8_cluster_protocol(True, *BLOCKWISE_CLUSTERS[name])
    result = check(protocol, trace=True)
    assert result.ok and result.traced, format_results([result])
    one_cta = replace(protocol, storages=tuple(_OneCtaPair(s) if isinstance(s, SmemPipelineBundle) else s
                                               for s in protocol.storages))
    assert any(f.kind == "over-arrival" for f in check(one_cta).findings)
    deadlock = [f for f in check(with_pipeline(protocol, "input", consumer_arrivals=2)).findings
                if f.kind == "deadlock"]
    assert any(f.role.startswith("load") and f.pipeline == "input" for f in deadlock), deadlock


@dataclass(frozen=True)
class _SchedulerUncounted(Storage):
    """A bundle whose scheduler ring counts its consumers without the scheduler (a seeded wrong count: the
    scheduler's read-back release left out of the ring's empty count, per CTA and in the pair)."""
    inner: Storage

    def parts(self):
        return self.inner.parts()

    def barriers(self):
        less = {"clc.empty": 1, "clc.empty_pair": 2}
        return [replace(use, arrivals=use.arrivals - less.get(use.name, 0)) for use in self.inner.barriers()]


@pytest.mark.parametrize("name", CLUSTERS)
def test_cluster_dynamic_scheduler_ring_protocol_passes_and_a_count_without_the_scheduler_fails(name):
    """The checker runs both CTAs' roles over the multicast scheduler ring (traced against the kernel over that ring),
    up to three tiles; with the scheduler left out of the ring's consumer count its read-back release lands in the
    next phase, and with the pair barrier counting one CTA's releases the first CTA rewrites a slot the other still
    reads."""
    from tests.test_checker import _OneCtaPair
    from tilepipe.pipeline.storage import SmemPipelineBundle
    from tilepipe.verify.checker import check, format_results
    from tilepipe.verify.protocols import cluster_dynamic_protocols

    protocol = next(p for p in cluster_dynamic_protocols() if p.kernel == f"matmul cluster {name} dynamic")
    result = check(protocol, trace=True)
    assert result.ok and result.traced and result.cases == 3, format_results([result])
    for seeded in (_SchedulerUncounted, _OneCtaPair):
        wrong = replace(protocol, storages=tuple(seeded(s) if isinstance(s, SmemPipelineBundle) else s
                                                 for s in protocol.storages))
        found = [f for f in check(wrong).findings if f.kind == "over-arrival"]
        assert any(f.pipeline == "clc" for f in found), (seeded, found)


def test_cluster_dynamic_whole_protocol_passes_one_tile():
    """Every pipeline of the dynamic 2x1 GEMM at once (both CTAs' five roles, input and output rings beside the
    scheduler ring), traced: one tile of one k-step, the most the state budget takes."""
    from tilepipe.host.configs import LARGE_16BIT
    from tilepipe.verify.checker import check, format_results
    from tilepipe.verify.protocols import matmul_protocol

    protocol = matmul_protocol("LARGE_16BIT", LARGE_16BIT, "matmul cluster 2x1", "dynamic")
    result = check(replace(protocol, cases=((("tiles", 1), ("k", 1)), )), trace=True)
    assert result.ok and result.traced and result.states > 10**6, format_results([result])


def test_matmul_chooses_a_pair_where_it_measured_faster(monkeypatch):
    """A 2x1 cluster of the 128x256 tile for large GEMMs whose rows are off 32-byte sectors (K = 3000: measured faster
    than the tile alone in every run), the tile alone elsewhere; a cluster's schedule is the wave arithmetic over
    cluster tiles on sms / 2 programs (stream-K at 2304x2304x9216: 81 cluster tiles on 66 programs)."""
    monkeypatch.setattr(configs, "device_model", lambda device: H100)
    monkeypatch.setattr(configs, "cached_config", lambda *args: None)
    pair = replace(LARGE_16BIT, cluster_m=2)
    for shape in ((7000, 5000, 3000), (8192, 8192, 3000), (7919, 4133, 3000)):
        assert configs.config_for(*shape, torch.bfloat16, torch.bfloat16, True, 0) == pair, shape
        assert schedule_for(*shape, pair, H100) == "static"
    for shape in ((8192, 8192, 8192), (2560, 2560, 2560), (1536, 8960, 1536), (2048, 2048, 3000), (512, 4096, 3000)):
        assert configs.config_for(*shape, torch.bfloat16, torch.bfloat16, True, 0).cluster.num_ctas == 1, shape
    assert schedule_for(2304, 2304, 9216, pair, H100) == "streamk"
    assert configs.predict_us(7000, 5000, 3000, pair, "static", H100) == pytest.approx(
        configs.predict_us(7000, 5000, 3000, LARGE_16BIT, "static", H100), rel=0.05)
