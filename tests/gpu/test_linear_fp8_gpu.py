"""GPU: tilepipe.linear_fp8 (FP8 output, 1x128 and per-tensor scales) against float64 and consumed by matmul_fp8, each
case in its own process (tests/gpu/linear_fp8_cases.py)."""

import pytest

from tests.gpu.guarded import assert_ok, run_cases

CASES = [("block", "bf16"), ("block", "fp16"), ("tensor", "bf16"), ("tensor", "fp16"), ("compile", ), ("badargs", )]
TIMEOUT_S = 240


@pytest.fixture(scope="module")
def runs():
    return run_cases("tests.gpu.linear_fp8_cases", CASES, TIMEOUT_S, parallel=6)


@pytest.mark.gpu
@pytest.mark.parametrize("case", CASES, ids=" ".join)
def test_fp8_output_matches_float64(runs, case):
    assert_ok(runs[case])
