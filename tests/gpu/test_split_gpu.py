"""GPU: split multicast (issue 42) against float64 for every split cluster GEMM under every scheduler (and the
leader-issued form under the dynamic scheduler, whose pair barriers 9ea4452 had left uninitialised), a CUDA-graph
replay, and debug mode naming both CTAs' stuck roles when a release skips the peer CTA. Each case runs in its own
process under a timeout (tests/gpu/split_cases.py, tests/kernels/hang_kernels.py)."""

import os

import pytest

from tests.gpu.guarded import assert_ok, run_cases
from tilepipe.probes.debug import HANG_EXIT_CODE, run_all_guarded

SCHEDULERS = ("static", "dynamic", "streamk", "splitk")
CASES = [("matmul", "1x2", "plain", "bf16", "bf16", "rowmajor", s) for s in SCHEDULERS]  # A shared
CASES += [("matmul", "2x1", "plain", "fp16", "fp16", "kmajor", s) for s in SCHEDULERS]  # B shared (K-major)
CASES += [("matmul", cluster, "residual", "bf16", "bf16", "kmajor", s)  # C, C aliasing D, a bias row
          for cluster, s in (("1x2", "static"), ("1x2", "streamk"), ("2x1", "static"), ("2x1", "dynamic"))]
CASES += [("matmul", "1x2", "plain", "bf16", "fp32", "kmajor", "static")]
CASES += [("matmul", "1x2", "plain", "bf16", "bf16", "rowmajor", "dynamic", "leader"),  # the leader-issued form's pair
          ("matmul", "2x1", "residual", "bf16", "bf16", "kmajor", "dynamic", "leader")]  # barriers (05c7c7c)
CASES += [("fp8", scaling, cluster, schedule) for cluster in ("2x1", "1x2")
          for scaling, schedule in (("tensor", "static"), ("row", "streamk"))]
CASES += [("fp8", "blockwise", cluster, "static") for cluster in ("1x2", "2x1")]
CASES += [("graph", "1x2"), ("graph", "2x1")]
TIMEOUT_S = 90
STALL_S = "2"
HANG_TIMEOUT_S = 60
PRODUCER = "as producer, waits for the consumers' release (empty barrier)"
CONSUMER = "as consumer, waits for the producer's fill (full barrier)"
SKIPS_PEER = ["stuck roles: consumer in CTA 0, consumer in CTA 1, producer in CTA 0, producer in CTA 1\n",
              *(f"role producer (partition 1, CTA {cta} of each cluster): STUCK waiting at pipeline 'ring' {PRODUCER}, "
                "stage 0, phase 0, iteration 2" for cta in (0, 1)),
              *(f"role consumer (partition 0, CTA {cta} of each cluster): STUCK waiting at pipeline 'ring' {CONSUMER}, "
                "stage 0, phase 1, iteration 2" for cta in (0, 1))]
"""A two-stage split ring whose consumers release their own CTA's slot only: every empty barrier gets one of its two
arrivals, so both CTAs' producers fill both stages and wait for slot 0 on the second lap."""


@pytest.fixture(scope="module")
def runs():
    return run_cases("tests.gpu.split_cases", CASES, TIMEOUT_S, parallel=6)


@pytest.fixture(scope="module")
def hangs():
    saved = os.environ.get("TILEPIPE_DEBUG_STALL_S")
    os.environ["TILEPIPE_DEBUG_STALL_S"] = STALL_S
    try:
        cases = [["-m", "tests.kernels.hang_kernels", bug, "2"] for bug in ("split_skips_peer", "split_none")]
        return dict(zip(("split_skips_peer", "split_none"), run_all_guarded(cases, HANG_TIMEOUT_S, parallel=2)))
    finally:
        os.environ.pop("TILEPIPE_DEBUG_STALL_S")
        if saved is not None:
            os.environ["TILEPIPE_DEBUG_STALL_S"] = saved


@pytest.mark.gpu
@pytest.mark.parametrize("case", CASES, ids=" ".join)
def test_split_multicast_matches_float64(runs, case):
    assert_ok(runs[case])


@pytest.mark.gpu
def test_a_release_that_skips_the_peer_is_reported_in_both_ctas(hangs):
    run = hangs["split_skips_peer"]
    assert run.status == "failed" and run.returncode == HANG_EXIT_CODE, \
        f"{run.status}, exit code {run.returncode}:\n{run.output[-3000:]}"
    assert run.seconds < HANG_TIMEOUT_S / 2
    assert "tilepipe debug: kernel 'ring_kernel' made no progress for" in run.output
    for line in SKIPS_PEER:
        assert line in run.output, run.output[-3000:]


@pytest.mark.gpu
def test_a_healthy_split_ring_finishes_under_the_watchdog(hangs):
    assert_ok(hangs["split_none"])
