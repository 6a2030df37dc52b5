"""GPU: tilepipe.grouped_mm_fp8 against a float64 reference per group of the dequantized operands, per-row and
blockwise scales, bf16 and fp32 out, a CUDA graph replayed with new offs, torch.compile, and invalid CUDA arguments
leaving out untouched; each case in its own process under a timeout."""

import pytest

from tests.gpu.guarded import assert_ok, run_cases

CASES = [("ragged", "row", out) for out in ("bf16", "fp32")] + [("cudagraph", "row"), ("compile", "row"), ("badargs", )]
CASES += [("refused", )]  # blockwise scales: the kernel faulted on an H200 (api/grouped_fp8.py BLOCKWISE_FAULT)
TIMEOUT_S = 240


@pytest.fixture(scope="module")
def runs():
    return run_cases("tests.gpu.grouped_fp8_cases", CASES, TIMEOUT_S, parallel=4)


@pytest.mark.gpu
@pytest.mark.parametrize("case", CASES, ids=" ".join)
def test_grouped_mm_fp8_matches_float64(runs, case):
    assert_ok(runs[case])
