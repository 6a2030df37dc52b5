"""GPU: transformers' Mixtral with tilepipe.nn.swap_experts (its experts on grouped_gated_mm + grouped_mm) gives the
stock sparse-MoE block's output and the stock model's logits within bf16 tolerance, eager, under torch.compile and
(the block) replayed from a CUDA graph (tests/gpu/mixtral_cases.py, each in its own process). Skipped without
transformers."""

import pytest

from tests.gpu.guarded import assert_ok, run_cases

CASES = [("block", "eager"), ("block", "compile"), ("block", "graph"), ("logits", "eager"), ("logits", "compile"),
         ("block", "eager", "dynamic")]
TIMEOUT_S = 300


@pytest.fixture(scope="module")
def runs():
    pytest.importorskip("transformers")
    return run_cases("tests.gpu.mixtral_cases", CASES, TIMEOUT_S, parallel=2)


@pytest.mark.gpu
@pytest.mark.parametrize("case", CASES, ids=" ".join)
def test_swapped_mixtral_matches_stock(runs, case):
    assert_ok(runs[case])
