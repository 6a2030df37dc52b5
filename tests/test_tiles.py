"""CPU tests of tilepipe.pipeline.tiles: k-grouped input tile pipelines compile to one barrier pair per group."""

import pytest

from tests.kernels.tile_kernels import kgroup_plan, spec
from tilepipe.verify.compile import CompileError, compile_kernels

CASES = [(2, 1), (4, 2), (6, 3), (4, 4)]


@pytest.fixture(scope="module")
def reports():
    return dict(zip(CASES, compile_kernels([spec(*case) for case in CASES])))


@pytest.mark.parametrize("case", CASES, ids=lambda c: f"stages{c[0]}-group{c[1]}")
def test_k_groups_share_a_barrier_pair(reports, case):
    stages, k_group = case
    report = reports[case]
    assert not isinstance(report, CompileError), report
    assert report.count("mbarrier.init") == 2 * stages // k_group
    assert report.count("mbarrier.arrive.expect_tx") == 1  # one expect for the whole group
    assert report.count("cp.async.bulk.tensor") == 2 * k_group  # A and B for each step of the group
    assert report.count("HGMMA", "sass") > 0 and report.spill_stores == 0
    planned = kgroup_plan.fn(stages, k_group, [128, 64], [64, 64], "fp16").total_bytes
    assert 0 <= report.shared - planned < 256


def test_a_kernel_authors_own_three_operand_payload_goes_through_the_same_pipeline(reports):
    """The payload is an open trait, as the seed's TilePayload: a kernel's own aggregate with a third array (E, reached
    by its field name) shares the storage payload's barriers; each k-step loads and multiplies one more tile, and the
    group's one expect counts its bytes (tests/gpu/test_tiles_gpu.py runs it)."""
    own = compile_kernels([spec(4, 2, own_payload=True)])[0]
    plain = reports[(4, 2)]
    assert not isinstance(own, CompileError), own
    assert own.count("mbarrier.init") == plain.count("mbarrier.init") == 4
    assert own.count("mbarrier.arrive.expect_tx") == 1
    assert own.count("cp.async.bulk.tensor") == 3 * 2 and own.count("wgmma.mma_async") == 2 * plain.count(
        "wgmma.mma_async")
    assert own.spill_stores == 0
