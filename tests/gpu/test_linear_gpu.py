"""GPU: tilepipe.linear and tilepipe.gated_linear (fused epilogues) against float64, each case in its own process."""

import pytest

from tests.gpu.guarded import assert_ok, run_cases

CASES = [("linear", act, dtype, bias) for act, dtype, bias in (
    ("none", "bf16", "bias"), ("relu", "bf16", "nobias"), ("gelu", "bf16", "bias"), ("gelu_tanh", "fp16", "bias"),
    ("silu", "fp16", "nobias"), ("silu", "bf16", "bias"))]
CASES += [("forced", "gelu", "bf16"), ("forced", "silu", "fp16")]
CASES += [("gated", "silu", "bf16", "forced"), ("gated", "gelu", "fp16", "forced"),
          ("gated", "gelu_tanh", "bf16", "chosen"), ("gated", "relu", "fp16", "chosen")]
CASES += [("graphs", "bf16")]
TIMEOUT_S = 300


@pytest.fixture(scope="module")
def runs():
    return run_cases("tests.gpu.linear_cases", CASES, TIMEOUT_S, parallel=4)


@pytest.mark.gpu
@pytest.mark.parametrize("case", CASES, ids=" ".join)
def test_fused_epilogue_matches_float64(runs, case):
    assert_ok(runs[case])
