"""The CPU protocol checker: every shipped kernel passes; seeded protocol bugs are caught with the right diagnosis."""

from collections.abc import Callable
from dataclasses import dataclass, replace

import pytest

from tilepipe.host.configs import LARGE_16BIT, MEDIUM, MatmulConfig
from tilepipe.kernels.catalogue import (MATMUL_ACTIVATIONS, MATMUL_CLUSTERS, MATMUL_EPILOGUES, MATMUL_GATED,
                                       MATMUL_PIECED, MATMUL_PINGPONG, MATMUL_QUANTIZING, MATMUL_SPLIT, MATMUL_SWAP,
                                       SPLIT_SCHEDULES, shipped_variants)
from tilepipe.pipeline.storage import BarrierPair, SmemPipelineBundle, Storage
from tilepipe.verify.checker import (Commit, Drain, Flush, Loop, Protocol, Role, Signal, Step, Wait, check,
                                     consume, format_results, loop, produce, trip_cases, wait_filled)
from tilepipe.verify.protocols import (UNCHECKED, check_shipped_kernels, covering_kernel, matmul_configs,
                                       matmul_protocol, sm100_blockwise_protocols, sm100_pair_protocols,
                                       sm100_protocols, stress_protocol, unchecked_reason, wgmma_protocol)


@pytest.fixture(scope="module")
def shipped():
    return check_shipped_kernels()


def matmul_c() -> object:
    return matmul_protocol("MEDIUM", MEDIUM, "matmul +C")


def role(protocol, name: str):
    return next(r for r in protocol.roles if r.name == name)


def with_role(protocol, new_role):
    """`protocol` with the role of the same name replaced."""
    return replace(protocol, roles=tuple(new_role if r.name == new_role.name else r for r in protocol.roles))


def rewrite(old_role, edit):
    """The role with every op (inside loops too) replaced by the ops `edit(op)` returns."""
    def walk(program):
        out = []
        for op in program:
            out += [replace(op, body=walk(op.body))] if isinstance(op, Loop) else list(edit(op))
        return tuple(out)
    return replace(old_role, program=walk(old_role.program))


def with_pipeline(protocol, name: str, **changes):
    """`protocol` with the storage of pipeline `name` changed (inside bundles too)."""
    def edit(storage):
        if isinstance(storage, BarrierPair) and storage.name == name:
            return replace(storage, **changes)
        if isinstance(storage, SmemPipelineBundle):
            return replace(storage, **{member: edit(value) for member, value in storage.members()})
        return storage
    return replace(protocol, storages=tuple(edit(s) for s in protocol.storages))


def only(result, kind: str):
    """The findings of `kind`, after checking that the result has some."""
    found = [f for f in result.findings if f.kind == kind]
    assert found, f"expected a {kind} finding:\n{format_results([result])}"
    return found


def test_every_shipped_kernel_passes(shipped):
    assert all(r.ok for r in shipped), format_results(shipped)
    assert all(r.traced and r.cases >= 2 and r.states > 0 for r in shipped)
    kernels = {r.kernel for r in shipped}
    assert kernels == {*MATMUL_EPILOGUES, *MATMUL_CLUSTERS, *MATMUL_SWAP, *(f"{c} streamk" for c in MATMUL_CLUSTERS),
                       *MATMUL_PIECED, *(f"{p} dynamic" for p in MATMUL_PIECED), *MATMUL_PINGPONG,
                       *(f"{c} dynamic" for c, options in MATMUL_CLUSTERS.items() if not options.get("has_c")),
                       *(name if schedule == "static" else f"{name} {schedule}" for name in MATMUL_SPLIT
                         for schedule in SPLIT_SCHEDULES[name]),
                       *(f"{epilogue} {schedule}" for epilogue in (*MATMUL_EPILOGUES, *MATMUL_SWAP)
                         for schedule in ("dynamic", "streamk")),
                       "matmul_fp8 scaled", "matmul_fp8 scaled cluster", "matmul_fp8 scaled swap-AB",
                       "matmul_fp8 blockwise", "matmul_fp8 blockwise cluster", "matmul_fp8 scaled streamk",
                       "matmul_fp8 scaled swap-AB streamk",
                       "matmul_fp8 blockwise streamk", "sm100_matmul_kernel", "sm100_matmul_kernel 2-CTA",
                       "sm100_scaled_matmul_kernel", "sm100_block_scaled_kernel", "sm100_blockwise_matmul_kernel",
                       "grouped_matmul_kernel", "grouped_wgrad_kernel", "grouped_mm_fp8", "ag_matmul_kernel",
                       "rs_matmul_kernel", "pipeline_demo stress",
                       *MATMUL_ACTIVATIONS, *MATMUL_GATED,
                       *(f"{a} streamk" for a in MATMUL_ACTIVATIONS), *(f"{g} dynamic" for g in MATMUL_GATED),
                       *MATMUL_QUANTIZING,
                       "pipeline_demo wgmma"}
    configs = {r.config.split()[0] for r in shipped if r.kernel in MATMUL_EPILOGUES}
    assert configs == set(matmul_configs()) and len(configs) == len(set(matmul_configs().values()))


def test_every_catalogue_variant_is_checked_or_says_why(shipped):
    """The catalogue drives the checker: a shipped variant is model-checked through a protocol of its kernel, or
    UNCHECKED gives the reason; a reason that matches no variant is stale."""
    checked = {r.kernel for r in shipped}
    missing = [v.name for v in shipped_variants() if unchecked_reason(v) is None and covering_kernel(v) not in checked]
    assert not missing, missing
    assert all(any(key in v.name.split() for v in shipped_variants()) for key in UNCHECKED)


def test_format_results_lists_every_config_and_finding(shipped):
    text = format_results(shipped)
    assert text.splitlines()[0].split() == ["kernel", "config", "cases", "states", "traced", "result"]
    assert text.count(" ok") == len(shipped)
    buggy = check(with_pipeline(matmul_c(), "input", consumer_arrivals=2))
    text = format_results([buggy])
    assert "deadlock: role 'load', pipeline 'input'" in text and "interleaving" in text


def test_wrong_arrive_count_deadlocks_the_producer():
    """The input pipeline declares 2 consumer arrivals, but only the mma role releases."""
    result = check(with_pipeline(matmul_c(), "input", consumer_arrivals=2))
    found = only(result, "deadlock")[0]
    assert (found.role, found.pipeline) == ("load", "input")
    assert "1 of 2 arrivals" in found.message


@pytest.mark.parametrize("bug", ["store skips sources.release()", "mma skips flush_releases()"])
def test_missing_release_deadlocks_the_producer(bug):
    protocol = matmul_c()
    if bug.startswith("store"):
        pipeline, producer = "epi_load", "epilogue_load"
        buggy = rewrite(role(protocol, "store"), lambda op: () if op == Signal("epi_load", "consumer") else (op, ))
    else:
        pipeline, producer = "input", "load"
        buggy = rewrite(role(protocol, "mma"), lambda op: () if isinstance(op, Flush) else (op, ))
    found = only(check(with_role(protocol, buggy)), "deadlock")
    assert {(f.role, f.pipeline) for f in found} == {(producer, pipeline)}
    assert "0 more to come from any role" in found[0].message


def dynamic_c() -> object:
    return matmul_protocol("MEDIUM", MEDIUM, "matmul +C", "dynamic")


def test_dynamic_scheduler_running_ahead_of_the_throttle_deadlocks_the_load_role():
    """A scheduler that never waits for the load role's throttle items: the load role fills the throttle ring and
    blocks (the pacing hand-off is modelled, not assumed)."""
    protocol = dynamic_c()
    buggy = rewrite(role(protocol, "scheduler"), lambda op: () if op.pipeline == "clc_throttle" else (op, ))
    found = only(check(with_role(protocol, buggy)), "deadlock")
    assert ("load", "clc_throttle") in {(f.role, f.pipeline) for f in found}


def test_a_role_that_skips_its_first_tile_id_leaves_the_scheduler_undrained():
    """The store role takes one tile id fewer than published (no take before its loop): the sentinel's slot is
    never released and the scheduler's drain never completes."""
    protocol = dynamic_c()
    store = role(protocol, "store")
    found = only(check(with_role(protocol, replace(store, program=store.program[3:]))), "deadlock")
    assert ("scheduler", "clc") in {(f.role, f.pipeline) for f in found}


def test_a_streamk_store_role_waiting_for_a_contributing_unit_deadlocks():
    """The store role takes a single output stage for the unit that ends inside a tile, as for a tile's D, but the
    mma role hands it the partial sum in `subs` stages (pipeline/partials.py): the stages it leaves never free."""
    protocol = matmul_protocol("MEDIUM", MEDIUM, "matmul", "streamk")
    store = role(protocol, "store")
    tiles, part, *tail = store.program
    buggy = replace(store, program=(tiles, replace(tiles, var="part", count="partial"), *tail))
    found = only(check(with_role(protocol, buggy)), "deadlock")
    assert {"mma", "epilogue_load"} & {f.role for f in found}


def test_a_streamk_partial_without_its_empty_fills_deadlocks_the_mma_role():
    """The contributing unit's stages pass the epilogue-load role too (an empty fill each), so the epi_load ring
    stays in lockstep with the output ring whose stages it shares; without them the mma role waits forever."""
    protocol = matmul_protocol("MEDIUM", MEDIUM, "matmul", "streamk")
    epilogue_load = role(protocol, "epilogue_load")
    tiles, part, *tail = epilogue_load.program
    buggy = replace(epilogue_load, program=(tiles, *tail))
    found = only(check(with_role(protocol, buggy)), "deadlock")
    assert ("mma", "epi_load") in {(f.role, f.pipeline) for f in found}


def test_producer_iterating_once_more_never_drains():
    protocol = wgmma_protocol(4)
    load = role(protocol, "load")
    load = replace(load, program=(replace(load.program[0], body=(replace(load.program[0].body[0], count="k_load"), )),
                                  *load.program[1:]))
    result = check(replace(with_role(protocol, load), cases=trip_cases(tiles=(2, ), k=(2, ), k_load=(3, ))))
    found = only(result, "deadlock")[0]
    assert (found.role, found.pipeline, found.iteration) == ("load", "operands", "drain")
    assert "finished: mma" in found.message


def test_consumer_iterating_once_more_starves():
    protocol = stress_protocol(2, 1)
    consumer = replace(role(protocol, "consumer0"), program=(loop("item", "consumer_items", *consume("stress")), ))
    result = check(replace(with_role(protocol, consumer), cases=trip_cases(items=(3, ), consumer_items=(4, ))))
    found = only(result, "deadlock")[0]
    assert (found.role, found.pipeline, found.iteration) == ("consumer0", "stress", "item 3")


def test_consumer_waiting_on_the_wrong_parity_is_phase_aliasing():
    protocol = matmul_c()
    mma = rewrite(role(protocol, "mma"),
                  lambda op: (replace(op, flip=True), ) if op == Wait("input", "consumer") else (op, ))
    found = only(check(with_role(protocol, mma)), "phase-aliasing")[0]
    assert (found.role, found.pipeline, found.stage, found.phase) == ("mma", "input", 0, 0)
    assert "not ready" in found.message


def test_one_way_barrier_lets_the_producer_lap_its_waiter():
    """load_order as a single signal-only barrier (no empty wait, no drain): the load role runs two tiles ahead."""
    protocol = matmul_c()
    load = rewrite(role(protocol, "load"),
                   lambda op: () if op in (Wait("load_order", "producer"), Drain("load_order")) else (op, ))

    def look_only(op):
        if op == Wait("load_order", "consumer"):
            return wait_filled("load_order")[:1]
        return () if op == Signal("load_order", "consumer") else (op, )

    waiter = rewrite(role(protocol, "epilogue_load"), look_only)
    buggy = replace(with_role(with_role(protocol, load), waiter), cases=trip_cases(tiles=(5, ), k=(1, )))
    found = only(check(buggy), "phase-aliasing")[0]
    assert (found.role, found.pipeline) == ("epilogue_load", "load_order")
    assert "beyond it (lapped)" in found.message


def test_more_arrivals_than_declared_is_over_arrival():
    """Two consumer roles release the stress ring, but it declares one consumer arrival per phase."""
    protocol = with_pipeline(stress_protocol(2, 2), "stress", consumer_arrivals=1)
    found = only(check(protocol), "over-arrival")
    assert {(f.role, f.pipeline) for f in found} == {("consumer0", "stress"), ("consumer1", "stress")}
    assert "lands in phase 1" in found[0].message


def test_signalling_a_stage_twice_is_over_arrival():
    protocol = matmul_c()
    mma = rewrite(role(protocol, "mma"),
                  lambda op: (op, op) if op == Signal("output", "producer") else (op, ))
    found = only(check(with_role(protocol, mma)), "over-arrival")[0]
    assert (found.role, found.pipeline, found.stage) == ("mma", "output", 0)
    assert "does not hold" in found.message


def test_release_lag_on_one_stage_deadlocks():
    found = only(check(wgmma_protocol(1)), "deadlock")[0]
    assert (found.role, found.pipeline) == ("mma", "operands")


def test_role_signalling_a_side_the_storage_gives_another_role():
    protocol = with_pipeline(matmul_c(), "output", consumer="epilogue")
    found = only(check(protocol), "declaration")[0]
    assert (found.role, found.pipeline) == ("store", "output")


def test_declaration_that_drifted_from_the_kernel_is_caught_by_tracing():
    """The kernel's store role releases the epilogue-load stages; a declaration that forgets it disagrees."""
    protocol = matmul_c()
    store = rewrite(role(protocol, "store"), lambda op: () if op.pipeline == "epi_load" else (op, ))
    found = only(check(with_role(protocol, store), trace=True), "drift")
    assert {(f.role, f.pipeline) for f in found} == {("store", "epi_load")}
    assert all("in the traced kernel, not in the declaration" in f.message for f in found)


def test_one_stage_ring_explores_every_interleaving():
    """Producer and consumer strictly alternate on one stage: one state per step, 4 steps per item plus the drain."""
    roles = (Role("p", "p", (loop("i", "n", *produce("ring")), Drain("ring"))),
             Role("c", "c", (loop("i", "n", *consume("ring")), )))
    result = check(Protocol("ring", "1 stage", (BarrierPair(1, "ring", "p", "c"), ), roles, trip_cases(n=(1, 2, 3))))
    assert result.ok and result.cases == 3
    assert result.states == sum(4 * n + 2 for n in (1, 2, 3))


def test_matmul_protocol_holds_for_other_stage_counts():
    """Two input and two output stages pass; one input stage cannot carry the mma role's release lag."""
    two = check(matmul_protocol("two", MatmulConfig(128, 128, 64, stages=2, c_stages=2), "matmul +C"))
    assert two.ok, format_results([two])
    one = check(matmul_protocol("one", MatmulConfig(128, 128, 64, stages=1)))
    assert {(f.kind, f.role, f.pipeline) for f in one.findings} == {("deadlock", "mma", "input")}


def test_undrained_extra_item_is_a_leftover():
    """Without a drain, a producer's extra item ends the kernel filled and never consumed."""
    protocol = stress_protocol(2, 1)
    producer = replace(role(protocol, "producer"), program=(loop("item", "produced", *produce("stress")), ))
    result = check(replace(with_role(protocol, producer), cases=trip_cases(items=(2, ), produced=(3, ))))
    found = only(result, "leftover")[0]
    assert (found.role, found.pipeline, found.stage) == ("consumer0", "stress", 0)
    assert "never saw" in found.message


def test_release_never_flushed_without_a_drain_is_a_leftover():
    """A lagged consumer that skips flush_releases() ends holding its last stage; without a drain nothing hangs."""
    protocol = wgmma_protocol(2)
    mma = rewrite(role(protocol, "mma"), lambda op: () if isinstance(op, Flush) else (op, ))
    load = rewrite(role(protocol, "load"), lambda op: () if isinstance(op, Drain) else (op, ))
    found = only(check(with_role(with_role(protocol, mma), load)), "leftover")
    assert {(f.role, f.pipeline) for f in found} == {("mma", "operands")}
    assert "without releasing it" in found[0].message


def sm100_static():
    """The sm_100a GEMM's protocol, 128 x 256 tiles, plain epilogue, static scheduler (compiled, never run)."""
    return next(p for p in sm100_protocols() if p.config == "128x256 stages=4 sm100 matmul static")


def test_tcgen05_commits_land_after_they_are_issued():
    """The sm_100a MMA role's commits (input releases, accumulator hand-offs) land at any time after it issued them,
    in order: the checker also explores the states where they are still pending, and the kernel passes in all."""
    protocol = sm100_static()
    immediate = with_role(protocol, rewrite(role(protocol, "mma"), lambda op: [
        Signal(op.pipeline, op.side) if isinstance(op, Commit) else op]))
    committed, signalled = check(protocol), check(immediate)
    assert committed.ok and signalled.ok, format_results([committed, signalled])
    assert committed.states > signalled.states


def test_input_released_by_commit_and_by_hand_is_an_over_arrival():
    protocol = sm100_static()
    twice = with_role(protocol, rewrite(role(protocol, "mma"), lambda op: [op, Signal(op.pipeline, op.side)] if
                                        isinstance(op, Commit) and op.pipeline == "input" else [op]))
    finding = only(check(twice), "over-arrival")[0]
    assert finding.pipeline == "input" and "does not hold" in finding.message


def test_an_accumulator_never_freed_deadlocks_the_mma_role_not_its_commits():
    protocol = sm100_static()
    never_freed = with_role(protocol, rewrite(role(protocol, "epilogue"), lambda op: [] if isinstance(op, Signal) and
                                              op.pipeline == "output" else [op]))
    finding = only(check(never_freed), "deadlock")[0]
    assert (finding.role, finding.pipeline) == ("mma", "output") and "'mma (commits)' waits" not in finding.message


def cluster() -> Protocol:
    return matmul_protocol("MEDIUM", MEDIUM, "matmul cluster 2x1")


def test_cluster_protocol_runs_both_ctas_over_the_multicast_ring():
    result = check(cluster())
    assert result.ok, format_results([result])
    assert result.states > check(matmul_protocol("MEDIUM", MEDIUM, "matmul")).states


def test_missing_peer_release_deadlocks_the_multicasting_producer():
    """Consumers that free their own CTA's slot but not the pair's (the GPU hang tests/kernels/hang_kernels.py
    seeds): the first CTA's producer waits on the pair barrier forever."""
    protocol = cluster()
    mma = rewrite(role(protocol, "mma"), lambda op: [replace(op, own_cta_only=True)]
                  if isinstance(op, Signal) and op.pipeline == "input" else [op])
    found = only(check(with_role(protocol, mma)), "deadlock")
    assert any("'load@cta0' waits on input.pair[" in f.message for f in found), found


@dataclass(frozen=True)
class _OneCtaPair(Storage):
    """A storage whose pair barriers (those `is_pair` picks: by default the multicast rings') count one CTA's
    arrivals instead of both (a seeded wrong cluster count)."""
    inner: Storage
    is_pair: Callable = lambda use: use.name.endswith("empty_pair")

    def parts(self):
        return self.inner.parts()

    def barriers(self):
        return [replace(use, arrivals=use.arrivals // 2) if self.is_pair(use) else use
                for use in self.inner.barriers()]


def test_pair_barrier_counting_one_cta_is_over_arrival():
    """With the pair complete after one CTA's release, the first CTA refills a slot the other still reads: the
    other CTA's release then lands in the next phase of the pair barrier."""
    protocol = cluster()
    protocol = replace(protocol, storages=tuple(_OneCtaPair(s) if isinstance(s, SmemPipelineBundle) else s
                                                for s in protocol.storages))
    found = only(check(protocol), "over-arrival")
    assert any("input.pair[" in f.message or "input.full[" in f.message for f in found), found


def cluster_streamk() -> Protocol:
    return matmul_protocol("LARGE_16BIT", LARGE_16BIT, "matmul cluster 1x2", "streamk")


def test_cluster_streamk_protocol_runs_both_ctas_through_partial_units():
    """Both CTAs' four roles (the epilogue-load role brings partial sums) over their own output and epi_load rings
    and the multicast input ring, through contributing and finishing units: it passes, over more states than one
    CTA's stream-K program."""
    result = check(cluster_streamk())
    assert result.ok, format_results([result])
    assert result.states > check(matmul_protocol("LARGE_16BIT", LARGE_16BIT, "matmul", "streamk")).states


def test_cluster_streamk_pair_barrier_counting_one_cta_is_over_arrival():
    """A seeded wrong count in the cluster's stream-K program: the pair barrier completes after one CTA's release."""
    protocol = cluster_streamk()
    protocol = replace(protocol, storages=tuple(_OneCtaPair(s) if isinstance(s, SmemPipelineBundle) else s
                                                for s in protocol.storages))
    found = only(check(protocol), "over-arrival")
    assert any("input.pair[" in f.message or "input.full[" in f.message for f in found), found


def test_cluster_streamk_epi_load_counting_two_fills_deadlocks():
    """A seeded wrong count: the epi_load ring declares two producer arrivals a stage, but each CTA's epilogue-load
    role fills (or skips) a stage once, so the mma role's wait for the first partial-sum stage never completes."""
    found = only(check(with_pipeline(cluster_streamk(), "epi_load", producer_arrivals=2)), "deadlock")
    assert any(f.pipeline == "epi_load" for f in found), found


def sm100_pair():
    """The sm_100a GEMM's two-CTA form (256 x 256, 6 stages; compiled, never run)."""
    return sm100_pair_protocols()[0]


def test_two_cta_protocol_runs_the_pair_over_its_mma_rings():
    """Both CTAs' roles, the lead CTA's MMA standing for the pair (its commits landing in both CTAs), either CTA the
    slower one: the kernel passes, over more states than one CTA's protocol."""
    result = check(sm100_pair())
    assert result.ok, format_results([result])
    one_cta = check(replace(sm100_pair(), ctas=1))
    assert result.states > one_cta.states


def test_two_cta_pair_barrier_counting_one_cta_is_over_arrival():
    """With the pair barrier complete after one CTA's loads, the lead CTA's MMA may start on a stage the other CTA has
    not filled, and that CTA's arrival lands in the next phase (the compiler doubles a pair barrier's count; this
    declaration forgot the other CTA)."""
    protocol = sm100_pair()
    protocol = replace(protocol, storages=tuple(
        _OneCtaPair(s, lambda use: use.kind == "pair_barrier") if isinstance(s, SmemPipelineBundle) else s
        for s in protocol.storages))
    found = only(check(protocol), "over-arrival")
    assert any("input.full[" in f.message or "output.empty[" in f.message for f in found), found


def test_two_cta_empty_counting_a_commit_per_cta_deadlocks_the_load_role():
    """An input ring declared as if both CTAs committed (2 arrivals per phase on each CTA's empty barrier): only the
    lead CTA's MMA commits, so the load roles wait for a release that never completes."""
    found = only(check(with_pipeline(sm100_pair(), "input", consumer_arrivals=2)), "deadlock")
    assert any(f.role.startswith("load") and f.pipeline == "input" for f in found), found


def sm100_blockwise():
    """The sm_100a blockwise FP8 GEMM's protocol, bf16 D (compiled, never run)."""
    return sm100_blockwise_protocols()[0]


def test_blockwise_scale_ring_counting_two_releases_deadlocks_the_load_role():
    """A seeded wrong count: the scale ring declares two consumer arrivals, but only the epilogue frees a stage."""
    found = only(check(with_pipeline(sm100_blockwise(), "scales", consumer_arrivals=2)), "deadlock")
    assert (found[0].role, found[0].pipeline) == ("load", "scales")


def test_blockwise_partial_committed_once_a_tile_deadlocks_the_promotion():
    """The plain sm_100a MMA role's shape (one accumulator commit a tile) under the per-K-tile promotion: the
    epilogue waits for a second partial that never comes."""
    protocol = sm100_blockwise()
    mma = role(protocol, "mma")
    tiles = mma.program[0]
    k_loop = tiles.body[0]
    per_tile = replace(tiles, body=(Wait("output", "producer"),
                                    replace(k_loop, body=tuple(op for op in k_loop.body if getattr(op, "pipeline", "")
                                                               == "input")),
                                    Commit("output", "producer"), Step("output")))
    found = only(check(with_role(protocol, replace(mma, program=(per_tile, *mma.program[1:])))), "deadlock")
    assert any(f.role == "epilogue" and f.pipeline == "output" for f in found)
