"""GPU: tilepipe.grouped_mm_fp8 against a float64 reference per group of the dequantized operands, per-row and
blockwise scales (groups starting off 4 rows: the scale rows' fix), bf16 and fp32 out, the dynamic schedule, a CUDA
graph replayed with new offs, torch.compile, 1024-row groups, invalid CUDA arguments leaving out untouched, and the
shifted copies of the A scales; each case in its own process under a timeout."""

import pytest

from tests.gpu.guarded import assert_ok, run_cases

CASES = [("ragged", scaling, out) for scaling in ("row", "blockwise") for out in ("bf16", "fp32")]
CASES += [(kind, scaling) for kind in ("cudagraph", "compile") for scaling in ("row", "blockwise")]
CASES += [("ragged", "row", "bf16", "dynamic"), ("ragged", "blockwise", "bf16", "dynamic"),
          ("cudagraph", "blockwise", "dynamic")]  # the dynamic schedule
CASES += [("badargs", ), ("shifted", )]
CASES += [("uniform", kernel) for kernel in ("grouped", "dense")]  # 32 groups of 1024 rows; the dense call alone
TIMEOUT_S = 240


@pytest.fixture(scope="module")
def runs():
    return run_cases("tests.gpu.grouped_fp8_cases", CASES, TIMEOUT_S, parallel=4)


@pytest.mark.gpu
@pytest.mark.parametrize("case", CASES, ids=" ".join)
def test_grouped_mm_fp8_matches_float64(runs, case):
    assert_ok(runs[case])
