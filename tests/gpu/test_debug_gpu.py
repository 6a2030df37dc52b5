"""GPU: debug mode names the stuck role and pipeline of kernels hung on purpose; debug and trace modes of the GEMM.

Each case runs in its own process under a timeout; a hang case passes only if the watchdog ended its process with
HANG_EXIT_CODE long before the timeout, and its report names the kernel, the stuck roles and where they wait.
Set TILEPIPE_TIMELINE_DIR to keep the traced GEMM's timeline (JSON and PNG).
"""

import os
import tempfile

import pytest

from tilepipe.probes.debug import HANG_EXIT_CODE, run_all_guarded

STALL_S = "2"
TIMEOUT_S = 120
TRACE_SHAPE = ("4096", "4096", "4096")  # about four 128x256 tiles per SM: every k-step is readable in the PNG
CLUSTER_TRACE_SHAPE = ("1000", "3000", "700")  # ragged: the last cluster's second CTA has rows past M
PRODUCER = "as producer, waits for the consumers' release (empty barrier)"
CONSUMER = "as consumer, waits for the producer's fill (full barrier)"
HANGS = {
    # the producer's cursor is one stage ahead on a 1-stage ring: it waits for parity 0 of empty[0], which only the
    # consumer can complete, and the consumer waits for the first fill
    ("wrong_phase", "1"): ["stuck roles: consumer, producer\n",
                           f"role producer (partition 1): STUCK waiting at pipeline 'ring' {PRODUCER}, stage 0, "
                           "phase 0, iteration 1",
                           f"role consumer (partition 0): STUCK waiting at pipeline 'ring' {CONSUMER}, stage 0, "
                           "phase 0, iteration 0"],
    # the consumer never arrives on empty: the producer fills both stages, then waits for slot 0 on the second lap
    ("missing_arrive", "2"): ["stuck roles: consumer, producer\n",
                              f"role producer (partition 1): STUCK waiting at pipeline 'ring' {PRODUCER}, stage 0, "
                              "phase 0, iteration 2",
                              f"role consumer (partition 0): STUCK waiting at pipeline 'ring' {CONSUMER}, stage 0, "
                              "phase 1, iteration 2"],
    # two-CTA clusters, a multicast ring: the consumers free their own CTA's slots but never the pair's, so the
    # first CTA's producer fills both stages, then waits for slot 0 on the second lap; the second CTA finishes
    ("missing_peer_release", "2"): [
        "stuck roles: consumer in CTA 0, producer in CTA 0\n",
        "role producer (partition 1, CTA 0 of each cluster): STUCK waiting at pipeline 'ring' as producer, waits for "
        "both CTAs' release (pair barrier, in the cluster's first CTA), stage 0, phase 0, iteration 2"],
}


@pytest.fixture(scope="module")
def runs():
    timeline_dir = os.environ.get("TILEPIPE_TIMELINE_DIR") or tempfile.mkdtemp(prefix="tilepipe-timeline-")
    trace_path = os.path.join(timeline_dir, "timeline-matmul-bf16.json")
    cases = {case: ["-m", "tests.kernels.hang_kernels", *case] for case in [*HANGS, ("none", "2")]}
    cases["debug"] = ["-m", "tests.gpu.probe_cases", "debug"]
    cases["trace"] = ["-m", "tests.gpu.probe_cases", "trace", trace_path, *TRACE_SHAPE]
    cluster_path = os.path.join(timeline_dir, "timeline-matmul-bf16-2x1.json")  # a lane per CTA of each pair
    cases["trace 2x1"] = ["-m", "tests.gpu.probe_cases", "trace", cluster_path, *CLUSTER_TRACE_SHAPE, "2x1"]
    saved = os.environ.get("TILEPIPE_DEBUG_STALL_S")
    os.environ["TILEPIPE_DEBUG_STALL_S"] = STALL_S
    try:
        results = run_all_guarded(list(cases.values()), TIMEOUT_S, parallel=2)
    finally:
        os.environ.pop("TILEPIPE_DEBUG_STALL_S")
        if saved is not None:
            os.environ["TILEPIPE_DEBUG_STALL_S"] = saved
    return dict(zip(cases, results))


@pytest.mark.gpu
@pytest.mark.parametrize("case", HANGS, ids=" ".join)
def test_hang_is_reported_with_the_stuck_role_and_pipeline(runs, case):
    run = runs[case]
    assert run.status == "failed" and run.returncode == HANG_EXIT_CODE, \
        f"{run.status}, exit code {run.returncode}:\n{run.output[-3000:]}"
    assert run.seconds < TIMEOUT_S / 2
    assert "tilepipe debug: kernel 'ring_kernel' made no progress for" in run.output
    for line in HANGS[case]:
        assert line in run.output, run.output[-3000:]


@pytest.mark.gpu
@pytest.mark.parametrize("case", [("none", "2"), "debug", "trace", "trace 2x1"], ids=str)
def test_healthy_kernels_finish_under_the_watchdog_and_the_trace(runs, case):
    run = runs[case]
    assert run.status == "ok", f"{run.status} after {run.seconds:.1f}s:\n{run.output[-4000:]}"
    assert run.result is not None and run.result["ok"], run.result
