"""Split multicast without a GPU (issue 42): the catalogue's split variants compiled for sm_90a (the specs report --all
compiles, so the compile cache shares them) issue each shared operand's tile from both CTAs, a half each, to both
(mask 0b11, not predicated on the CTA's rank), name the shared descriptor's own kernel parameter, arm each CTA's full
barrier for the whole tile, release every slot on the peer CTA's empty barrier too, and initialise their barriers
for the cluster; the protocol checker passes them and catches a release that skips the peer."""

import re
from collections import Counter
from dataclasses import replace

import pytest
import torch

from tilepipe.host.checks import check_pingpong, check_subtiles
from tilepipe.host.staging import reads_b_kmajor
from tilepipe.host.configs import LARGE_16BIT, LARGE_SUBTILED_16BIT, PINGPONG_16BIT, MatmulConfig
from tilepipe.kernels.catalogue import FP8_SPLIT, SPLIT_SCHEDULES
from tilepipe.kernels.matmul import operand_blocks
from tilepipe.pipeline.multicast import split_block
from tilepipe.verify.checker import Loop, Signal, check, format_results
from tilepipe.verify.compile import compile_kernels
from tilepipe.verify.protocols import split_protocols
from tilepipe.verify.report import catalogue_rows

SPLIT_TMA = re.compile(r"@p cp\.async\.bulk\.tensor\.2d\.shared::cluster\.global\.mbarrier::complete_tx::bytes"
                       r"\.multicast::cluster \[dst\], \[d, \{\S+, row\}\], \[\S+\], mask;")
SHARED_PARAM = {"1x2": 0, "2x1": 1}  # A's descriptor is the kernel's first 128-byte parameter, B's the second
ROWS = {row.label: row for row in catalogue_rows() if " split " in row.label}


@pytest.fixture(scope="module")
def reports() -> dict:
    return dict(zip(ROWS, compile_kernels([row.spec for row in ROWS.values()])))


def asm_block(ptx: str, anchor: str) -> str:
    """The inline-asm block { ... } of the PTX that contains `anchor`."""
    at = ptx.index(anchor)
    return ptx[ptx.rindex("{", 0, at):ptx.index("}", at) + 1]


def test_the_catalogue_ships_a_split_variant_per_family_and_per_scheduler():
    assert sorted(ROWS) == sorted(["matmul split 1x2 static", "matmul split 1x2 dynamic", "matmul split 1x2 streamk",
                                   "matmul +C split 2x1 static", "matmul_fp8 scaled split 2x1",
                                   "matmul_fp8 blockwise split 1x2"])


@pytest.mark.parametrize("label", sorted(ROWS))
def test_each_cta_issues_its_half_of_the_shared_tile_to_both(reports, label):
    """One split TMA per shared operand in the load role's k-loop, issued by each CTA's elected thread (a tid test,
    no cluster-rank predicate) at its half's offsets with mask 3, from the shared descriptor's own parameter; the
    operand itself is not also multicast by the first CTA (only the dynamic scheduler's ticket and the blockwise
    scales are, as before)."""
    ptx = reports[label].ptx
    assert len(SPLIT_TMA.findall(ptx)) == 1, label
    block = asm_block(ptx, "[dst], [d, {")
    assert "setp.eq.u32 p, t, 0" in block and "%tid.x" in block and "mov.b16 mask, 3;" in block
    assert re.search(r"mad\.lo\.u32 dst, rank, (8192|16384), ", block) and "mov.u32 rank, %cluster_ctarank" in block
    assert re.search(r"mad\.lo\.u32 row, rank, (64|128), ", block)
    params = re.findall(r"\.param \.align 64 \.b8 (\w+)\[128\]", ptx)
    assert f"mov.b32 pa, {params[SHARED_PARAM[re.search('1x2|2x1', label)[0]]]};" in block
    leader = ptx.count(".multicast::cluster") - 1  # the dynamic scheduler's ticket (two sites), blockwise scales
    assert leader == (2 if "dynamic" in label else 1 if "blockwise" in label else 0), label


@pytest.mark.parametrize("label", sorted(ROWS))
def test_releases_reach_the_peer_and_barriers_are_initialised_for_the_cluster(reports, label):
    """Every release also arrives, from one thread, on the peer CTA's empty barrier (mapa + an arrive without a
    memory fence: SASS has no MEMBAR.ALL.GPU before any cluster arrive, which `.release.cluster` put before each one
    and cost the split form half its speed); the empty barriers count both CTAs' consumers; the inits are fenced for
    the cluster before a cluster barrier, and the kernel ends on one."""
    ptx = reports[label].ptx
    remote = ptx.count("mbarrier.arrive.shared::cluster.b64 _, [remote];")
    sass = reports[label].sass.splitlines()
    arrives = [i for i, line in enumerate(sass) if "SYNCS.ARRIVE.TRANS64.RED" in line]
    assert arrives and not any("MEMBAR.ALL.GPU" in sass[j] for i in arrives for j in range(i - 8, i)), label
    assert remote >= 1 and remote == ptx.count("mapa.shared::cluster.u32 remote, ")
    assert re.search(r"mbarrier\.init\.shared::cta\.b64 \[%r\d+\], 2;", ptx)
    fence = ptx.index("fence.mbarrier_init.release.cluster;")
    assert "barrier.cluster.arrive" in ptx[fence:] and ptx.count("barrier.cluster.arrive") >= 2  # after init, at exit
    assert reports[label].spill_stores == 0


def test_every_barrier_the_plan_declares_is_initialised_with_its_count(reports):
    """Each barrier of the storage declaration has its mbarrier.init, with the declared arrivals: a split ring's empty
    barriers count both CTAs' consumers, and a leader-issued ring in the same kernel (the dynamic scheduler's) keeps
    its pair barriers (9ea4452 left every pair barrier uninitialised: the H200's launch failures under the dynamic
    scheduler and in the FP8 cluster rows)."""
    labels = [f"{variant} {schedule}" for variant, schedules in SPLIT_SCHEDULES.items() for schedule in schedules]
    labels += [f"{kernel} split {m}x{n}" for kernel, (m, n) in FP8_SPLIT]
    protocols = split_protocols()
    assert len(labels) == len(protocols)
    for label, protocol in zip(labels, protocols):
        declared = Counter(use.arrivals for storage in protocol.storages for use in storage.barriers()
                           for _ in range(use.count))
        inits = Counter(map(int, re.findall(r"mbarrier\.init\.shared::cta\.b64 \[%r\d+\], (\d+);", reports[label].ptx)))
        assert inits == declared, label


def test_each_cta_arms_its_full_barrier_for_the_whole_tile(reports):
    """The stage's expect covers the whole shared tile (both halves land in every CTA) plus the CTA's own part of
    the other operand: 1x2 at LARGE_16BIT's 128x256 a CTA: A 128x64 whole, B 256x64 its own."""
    expect = re.findall(r"mbarrier\.arrive\.expect_tx\.shared::cta\.b64 _, \[%r\d+\], (\d+);",
                        reports["matmul split 1x2 static"].ptx)
    assert str(2 * (128 * 64 + 256 * 64)) in expect


def test_the_host_halves_the_shared_operands_block():
    """split_multicast halves the shared operand's TMA block (A in 1x2, B in 2x1, K-major) and leaves the rest; a
    row-major B in a 2x1 cluster and halves that are not whole swizzle patterns are refused."""
    pair = replace(LARGE_16BIT, cluster_n=2, split_multicast=True)
    assert operand_blocks(pair, True)["a"] == ((64, 64), ((0, 0), ))
    assert operand_blocks(pair, True)["b"] == operand_blocks(replace(pair, split_multicast=False), True)["b"]
    assert operand_blocks(replace(pair, cluster_m=2, cluster_n=1), True)["b"] == ((128, 64), ((0, 0), ))
    assert operand_blocks(replace(pair, cluster_n=1), True)["a"] == ((128, 64), ())  # no cluster: no split
    with pytest.raises(ValueError, match="K-major"):
        operand_blocks(MatmulConfig(128, 128, 64, 4, cluster_m=2, split_multicast=True), False)
    with pytest.raises(ValueError, match="swizzle"):
        split_block((24, 64))


def test_a_b_with_both_strides_one_is_read_k_major_where_the_split_needs_it():
    """A (1, 1) or (K, 1) B passes the stride test as row-major; a split 2x1 cluster (B shared, K-major only) reads it
    K-major, as swap-AB does (the H200's 2x1 'kmajor' cases at 1x1x1 were refused as row-major)."""
    pair = MatmulConfig(128, 128, 64, 4, cluster_m=2, split_multicast=True)
    for b in (torch.randn(1, 1).t(), torch.randn(64, 1)):
        assert reads_b_kmajor(b, pair) and not reads_b_kmajor(b, replace(pair, split_multicast=False))
    assert not reads_b_kmajor(torch.randn(64, 8), pair)  # row-major: refused by split_operand


def test_the_checker_passes_the_split_rings_and_catches_a_release_that_skips_the_peer():
    protocols = split_protocols()
    results = [check(p) for p in protocols]
    assert all(r.ok for r in results), format_results(results)
    assert {p.kernel for p in protocols} >= {"matmul split 1x2", "matmul +C split 2x1", "matmul_fp8 scaled cluster"}

    def skip_peer(program):
        return tuple(replace(op, body=skip_peer(op.body)) if isinstance(op, Loop) else
                     replace(op, own_cta_only=True) if isinstance(op, Signal) and op.pipeline == "input" else op
                     for op in program)

    plain = protocols[0]
    seeded = replace(plain, roles=tuple(replace(r, program=skip_peer(r.program)) if r.name == "mma" else r
                                        for r in plain.roles))
    found = [f for f in check(seeded).findings if f.kind == "deadlock"]
    assert any("waits on input.empty[" in f.message for f in found), format_results([check(seeded)])


def test_the_benchmark_times_each_cluster_split_and_leader_issued():
    """Each cluster variant, from any choice of the host (D in sub-tiles, ping-pong: built without clusters), is
    one the host builds (the H200's bench refused its clusters of the sub-tiled 128x256 choice)."""
    from tilepipe.tools.bench_clusters import SPLIT_SHAPES, cluster_variants

    variants = cluster_variants(MatmulConfig(128, 256, 64, 3, cluster_m=2, split_multicast=True), split=True)
    assert list(variants) == ["default", "1x1", "1x2", "2x1", "1x2 split", "2x1 split"]
    assert [v.split_multicast for v in variants.values() if v] == [False, False, False, True, True]
    assert (448, 4096, 14336) in SPLIT_SHAPES["bf16"] and (1024, 2048, 7168) in SPLIT_SHAPES["blockwise"]
    for chosen in (LARGE_SUBTILED_16BIT, PINGPONG_16BIT):
        for name, cfg in cluster_variants(chosen, split=True).items():
            if cfg is not None:
                check_subtiles(cfg, "sm_90a")
                check_pingpong(cfg, "static", "sm_90a", False)
                assert (cfg.block_m, cfg.block_n) == (chosen.block_m, chosen.block_n), name


def test_the_benchmark_records_a_variant_whose_process_dies_and_goes_on(monkeypatch):
    """A child that dies in a unit (a launch failure poisons its CUDA context) leaves that unit missing with the
    exception's line; a new child takes the units after it; the units reported before it are kept."""
    import json

    from tilepipe.probes.debug import GuardedRun
    from tilepipe.tools import bench_clusters

    calls = []

    def fake_run(args, timeout):
        units = json.loads(args[-1])["units"]
        calls.append(units)
        lines = [json.dumps({"unit": u, "rel_err": 0.0}) for u in units[:units.index("b") if "b" in units else None]]
        died = "b" in units
        output = "\n".join(lines + (["torch.AcceleratorError: CUDA error: unspecified launch failure"] if died else []))
        return GuardedRun(tuple(args), 1 if died else 0, 1.0, output, None)

    monkeypatch.setattr(bench_clusters, "run_guarded", fake_run)
    missing: list[str] = []
    done = bench_clusters.guarded({"mode": "check"}, list("abc"), list("abc"), float("inf"), missing, "case ")
    assert calls == [["a", "b", "c"], ["c"]] and sorted(done) == ["a", "c"]
    assert missing == ["case b: torch.AcceleratorError: CUDA error: unspecified launch failure"]
