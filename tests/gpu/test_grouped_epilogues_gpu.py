"""GPU: the grouped GEMM's epilogues against float64 per group (tests/gpu/grouped_cases.py): grouped_mm with a
per-expert bias and activations, grouped_gated_mm over packed gate-up experts, and a MoE expert MLP eager and under
torch.compile; ragged groups with empty ones, both B layouts, fp32 D. Each case in its own process under a timeout."""

import pytest

from tests.gpu.guarded import assert_ok, run_cases

CASES = [("epilogue", act, dtype, out, layout, bias) for act, dtype, out, layout, bias in (
    ("gelu", "bf16", "bf16", "kmajor", "bias"), ("silu", "fp16", "fp32", "rowmajor", "bias"),
    ("none", "bf16", "fp32", "kmajor", "bias"), ("relu", "bf16", "bf16", "rowmajor", "nobias"))]
CASES += [("gated", "silu", "bf16", "bf16", "kmajor"), ("gated", "gelu", "fp16", "fp16", "rowmajor"),
          ("gated", "gelu_tanh", "bf16", "fp32", "kmajor"), ("gated", "relu", "fp16", "fp32", "rowmajor"), ("moe", ),
          ("gated", "silu", "bf16", "bf16", "kmajor", "dynamic")]
TIMEOUT_S = 240


@pytest.fixture(scope="module")
def runs():
    return run_cases("tests.gpu.grouped_cases", CASES, TIMEOUT_S, parallel=5)


@pytest.mark.gpu
@pytest.mark.parametrize("case", CASES, ids=" ".join)
def test_grouped_epilogue_matches_float64(runs, case):
    assert_ok(runs[case])
