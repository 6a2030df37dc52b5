"""GPU: tilepipe.grouped_mm_fp8 with DeepSeek-V3 blockwise scales, the kernel whose H200 fault (scale_a^T read by TMA
from rows off 16 bytes) is fixed but not yet run: ragged groups (starts off 4 rows) with bf16 and fp32 out, a CUDA
graph replayed with new offs, torch.compile, and the bench's 1024-row groups (and its dense call alone), against a
float64 reference per group; each case in its own process (which lifts api/grouped_fp8.py's BLOCKWISE_FAULT) under a
timeout."""

import pytest

from tests.gpu.guarded import assert_ok, run_cases

CASES = [("ragged", "blockwise", out) for out in ("bf16", "fp32")] + [("cudagraph", "blockwise"),
                                                                       ("compile", "blockwise")]
CASES += [("uniform", kernel) for kernel in ("grouped", "dense")]  # the bench's first row, each kernel alone
TIMEOUT_S = 240


@pytest.fixture(scope="module")
def runs():
    return run_cases("tests.gpu.grouped_fp8_cases", CASES, TIMEOUT_S, parallel=2)


@pytest.mark.gpu
@pytest.mark.parametrize("case", CASES, ids=" ".join)
def test_grouped_mm_fp8_blockwise_matches_float64(runs, case):
    assert_ok(runs[case])
