"""GPU: each output tile computed exactly once by every tile scheduler and by matmul's per-shape choice (repeated
launches, CUDA-graph replay), each group in its own process under a timeout."""

import pytest

from tests.gpu.guarded import assert_ok, run_cases

SCHEDULERS = ("static", "dynamic", "streamk", "splitk", "default")
CASES = [("launches", scheduler, out) for scheduler in SCHEDULERS for out in ("fp32", "bf16")]
CASES += [("graphs", scheduler) for scheduler in SCHEDULERS]
CASES += [("bias", scheduler) for scheduler in ("static", "streamk", "splitk")]
# two-CTA clusters: a program is a cluster, stream-K's flags are one per CTA (split-K: the same kernel), a dynamic
# tile id is drawn once per cluster and multicast to both CTAs
CASES += [("launches", scheduler, out, cluster) for scheduler in ("dynamic", "streamk", "splitk")
          for out in ("fp32", "bf16") for cluster in ("2x1", "1x2")]
CASES += [("graphs", scheduler, cluster) for scheduler in ("dynamic", "streamk") for cluster in ("2x1", "1x2")]
TIMEOUT_S = 120


@pytest.fixture(scope="module")
def runs():
    return run_cases("tests.gpu.scheduler_cases", CASES, TIMEOUT_S, parallel=3)


@pytest.mark.gpu
@pytest.mark.parametrize("case", CASES, ids=" ".join)
def test_every_tile_exactly_once(runs, case):
    assert_ok(runs[case])
