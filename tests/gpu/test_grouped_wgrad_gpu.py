"""GPU: grouped_mm's 2D x 2D (weight-gradient) form against a float64 reference per group, in the four operand layouts,
bf16 and fp16, fp32 out; offs clamped on the device; a CUDA graph replayed with new offs; torch.compile; invalid
CUDA arguments leaving out untouched. Each case in its own process under a timeout."""

import pytest

from tests.gpu.guarded import assert_ok, run_cases

LAYOUTS = [("mmajor", "nmajor"), ("kmajor", "kmajor"), ("kmajor", "nmajor"), ("mmajor", "kmajor")]
CASES = [("ragged", "bf16", out, *layouts) for out in ("bf16", "fp32") for layouts in LAYOUTS]
CASES += [("ragged", "fp16", out, "mmajor", "nmajor") for out in ("fp16", "fp32")]
CASES += [("clamped", ), ("cudagraph", ), ("compile", ), ("badargs", )]
TIMEOUT_S = 240


@pytest.fixture(scope="module")
def runs():
    return run_cases("tests.gpu.grouped_wgrad_cases", CASES, TIMEOUT_S, parallel=4)


@pytest.mark.gpu
@pytest.mark.parametrize("case", CASES, ids=" ".join)
def test_grouped_wgrad_matches_float64(runs, case):
    assert_ok(runs[case])
