"""GPU: tilepipe.matmul_fp8 against a float64 reference of the dequantized inputs, each case in its own process."""

import pytest

from tests.gpu.guarded import assert_ok, run_cases

CASES = [(scaling, a, b, out) for scaling in ("tensor", "row", "blockwise")
         for a, b, out in (("e4m3", "e4m3", "bf16"), ("e4m3", "e5m2", "bf16"), ("e5m2", "e4m3", "fp32"))]
CASES += [("tensor", "e4m3", "e4m3", "fp16"), ("blockwise", "e4m3", "e4m3", "fp16")]
CASES += [("tensor", "e4m3", "e4m3", "bf16", "2x1"), ("row", "e4m3", "e5m2", "fp32", "1x2"),  # two-CTA clusters
          ("blockwise", "e4m3", "e4m3", "bf16", "2x1"), ("blockwise", "e5m2", "e4m3", "fp32", "1x2")]
CASES += [("tensor", "e4m3", "e4m3", "bf16", "streamk"), ("row", "e4m3", "e5m2", "fp32", "splitk"),
          ("tensor", "e5m2", "e4m3", "fp16", "splitk"), ("blockwise", "e4m3", "e4m3", "bf16", "streamk"),
          ("blockwise", "e4m3", "e5m2", "fp32", "splitk")]  # stream-K's partial tiles, forced
CASES += [("tensor", "e4m3", "e4m3", "bf16", "swap-static"), ("row", "e4m3", "e5m2", "fp32", "swap-splitk"),
          ("row", "e5m2", "e4m3", "bf16", "swap-streamk")]  # swap-AB (D^T = B^T A^T)
TIMEOUT_S = 240


@pytest.fixture(scope="module")
def runs():
    return run_cases("tests.gpu.fp8_cases", CASES, TIMEOUT_S, parallel=4)


@pytest.mark.gpu
@pytest.mark.parametrize("case", CASES, ids=" ".join)
def test_matmul_fp8_matches_float64(runs, case):
    assert_ok(runs[case])
