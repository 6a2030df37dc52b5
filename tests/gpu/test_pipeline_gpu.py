"""GPU: pipeline stress in every API style, a wgmma consumer, and the prev-copy root cause; each in its own process."""

import pytest

from tests.gpu.guarded import assert_ok
from tilepipe.examples.pipeline_demo import STYLES
from tilepipe.probes.debug import run_all_guarded

ITEMS = 8192
STRESS = [("stress", style, str(stages), str(consumers), str(ITEMS)) for style in STYLES for stages in (1, 2, 4, 8)
          for consumers in (1, 2)]
WGMMA = [("wgmma", str(stages), "8", "1024") for stages in (2, 4, 8)]  # 8 tiles x 1024 k-steps = 8192 items
CASES = STRESS + WGMMA
TIMEOUT_S = 120


@pytest.fixture(scope="module")
def runs():
    commands = [["-m", "tilepipe.examples.pipeline_demo", *case] for case in CASES]
    commands += [["-m", "tests.kernels.prev_copy"], ["-m", "tests.kernels.try_wait_outcomes"]]
    results = run_all_guarded(commands, TIMEOUT_S, parallel=8)
    return dict(zip(CASES + [("prev_copy", ), ("try_wait_outcomes", )], results))


@pytest.mark.gpu
@pytest.mark.parametrize("case", CASES, ids=" ".join)
def test_pipeline_case(runs, case):
    assert_ok(runs[case])


@pytest.mark.gpu
def test_prev_copy_root_cause(runs):
    """The unfixed kernel really stores the pre-loop value on the GPU: the cause of the `prev = s` hangs."""
    assert_ok(runs[("prev_copy", )])


@pytest.mark.gpu
def test_try_wait_answers_both_ways(runs):
    """The non-blocking try is real: 'not ready' before a phase completes, 'ready' after, from every thread."""
    assert_ok(runs[("try_wait_outcomes", )])
