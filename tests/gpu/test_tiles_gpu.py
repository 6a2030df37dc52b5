"""GPU: k-grouped input tile pipelines, and one with a kernel author's own three-operand payload, against a float64
reference, each case in its own process."""

import pytest

from tests.gpu.guarded import assert_ok, run_cases

TIMEOUT_S = 120
CASES = [(2, 1, 512), (4, 2, 512), (6, 3, 512), (4, 4, 1024)]  # (stages, k_group, k_tiles); 512 = 3 x 170 + 2
CASES += [(4, 2, 512, "own"), (3, 1, 97, "own")]  # a kernel author's own three-operand payload


@pytest.fixture(scope="module")
def runs():
    return run_cases("tests.kernels.tile_kernels", CASES, TIMEOUT_S, parallel=4)


@pytest.mark.gpu
@pytest.mark.parametrize("case", CASES, ids=lambda c: f"stages{c[0]}-group{c[1]}-k{c[2]}" + (f"-{c[3]}" if c[3:] else ""))
def test_k_grouped_pipeline_matches_float64(runs, case):
    assert_ok(runs[case])
