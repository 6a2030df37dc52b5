"""GPU: tilepipe.matmul_fp8 against a float64 reference of the dequantized inputs, each case in its own process."""

import pytest

from tilepipe.debug import run_all_guarded

CASES = [(scaling, a, b, out) for scaling in ("tensor", "row", "blockwise")
         for a, b, out in (("e4m3", "e4m3", "bf16"), ("e4m3", "e5m2", "bf16"), ("e5m2", "e4m3", "fp32"))]
CASES += [("tensor", "e4m3", "e4m3", "fp16"), ("blockwise", "e4m3", "e4m3", "fp16")]
TIMEOUT_S = 240


@pytest.fixture(scope="module")
def runs():
    results = run_all_guarded([["-m", "tests.gpu.fp8_cases", *case] for case in CASES], TIMEOUT_S, parallel=4)
    return dict(zip(CASES, results))


@pytest.mark.gpu
@pytest.mark.parametrize("case", CASES, ids=" ".join)
def test_matmul_fp8_matches_float64(runs, case):
    run = runs[case]
    assert run.status == "ok", f"{run.status} after {run.seconds:.1f}s:\n{run.output[-4000:]}"
    assert run.result is not None and run.result["ok"], run.result
