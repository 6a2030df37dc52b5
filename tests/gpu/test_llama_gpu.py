"""GPU: transformers' Llama with tilepipe.nn.swap_linears gives the stock model's logits within bf16 tolerance, eager
and under torch.compile (tests/gpu/llama_cases.py, each in its own process). Skipped without transformers."""

import pytest

from tests.gpu.guarded import assert_ok, run_cases

CASES = [("logits", "eager"), ("logits", "compile")]
TIMEOUT_S = 240


@pytest.fixture(scope="module")
def runs():
    pytest.importorskip("transformers")
    return run_cases("tests.gpu.llama_cases", CASES, TIMEOUT_S, parallel=2)


@pytest.mark.gpu
@pytest.mark.parametrize("case", CASES, ids=" ".join)
def test_swapped_llama_matches_stock(runs, case):
    assert_ok(runs[case])
