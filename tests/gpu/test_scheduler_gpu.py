"""GPU: each output tile computed exactly once by the static and the dynamic scheduler (repeated launches, CUDA-graph
replay), each group in its own process under a timeout."""

import pytest

from tilepipe.debug import run_all_guarded

CASES = [("launches", scheduler, out) for scheduler in ("static", "dynamic") for out in ("fp32", "bf16")]
CASES += [("graphs", scheduler) for scheduler in ("static", "dynamic")]
TIMEOUT_S = 120


@pytest.fixture(scope="module")
def runs():
    results = run_all_guarded([["-m", "tests.gpu.scheduler_cases", *case] for case in CASES], TIMEOUT_S, parallel=3)
    return dict(zip(CASES, results))


@pytest.mark.gpu
@pytest.mark.parametrize("case", CASES, ids=" ".join)
def test_every_tile_exactly_once(runs, case):
    run = runs[case]
    assert run.status == "ok", f"{run.status} after {run.seconds:.1f}s:\n{run.output[-4000:]}"
    assert run.result is not None and run.result["ok"], run.result
