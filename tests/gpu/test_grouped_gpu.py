"""GPU: tilepipe.grouped_mm against a float64 reference per group, both B layouts, bf16 and fp16, fp32 out, the
dynamic schedule, a CUDA graph replayed with new offs (static and dynamic), torch.compile, and invalid CUDA arguments leaving out untouched; the masked decode
form (grouped_mm_masked, a graph replayed with new counts) and the 3D x 3D form; each case in its own process under
a timeout."""

import pytest

from tests.gpu.guarded import assert_ok, run_cases

CASES = [("ragged", dtype, out, layout) for dtype in ("bf16", "fp16") for out in (dtype, "fp32")
         for layout in ("kmajor", "rowmajor")]
CASES += [("ragged", "bf16", "bf16", "kmajor", "dynamic"), ("ragged", "fp16", "fp32", "rowmajor", "dynamic")]
CASES += [("cudagraph", ), ("cudagraph", "dynamic"), ("compile", ), ("badargs", )]
CASES += [("masked", "bf16", "bf16", "kmajor"), ("masked", "fp16", "fp32", "rowmajor"), ("masked_epilogue", ),
          ("masked", "bf16", "bf16", "kmajor", "16"), ("masked", "fp16", "fp32", "rowmajor", "300"),
          ("masked_cudagraph", ), ("masked_cudagraph", "16"), ("batched", "bf16", "bf16", "kmajor"),
          ("batched", "bf16", "fp32", "rowmajor")]
TIMEOUT_S = 240


@pytest.fixture(scope="module")
def runs():
    return run_cases("tests.gpu.grouped_cases", CASES, TIMEOUT_S, parallel=4)


@pytest.mark.gpu
@pytest.mark.parametrize("case", CASES, ids=" ".join)
def test_grouped_mm_matches_float64(runs, case):
    assert_ok(runs[case])
