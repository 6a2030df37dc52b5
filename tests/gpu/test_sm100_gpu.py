"""GPU, sm_100/sm_103 only (B200, B300): tilepipe.matmul's sm_100a GEMM against a float64 reference, every dtype pair
and B layout, its residual and bias-row epilogues, its two-CTA form (2x1 cluster, cta_group::2) on ragged shapes,
matmul_fp8's per-tensor, per-row and blockwise scales, matmul_block_scaled's MXFP8, MXFP4 and NVFP4, and both its
schedulers computing every tile exactly once (CLC included, over repeated launches and CUDA-graph replays). Skipped
with the reason on every other machine; these tests have never run (no Blackwell GPU has been available), so the
sm_100a GEMMs are compiled and checked on the CPU only."""

import pytest

from tests.gpu.guarded import assert_ok, run_cases
from tilepipe.host.device import GEMM_TARGETS

CASES = [(dtype, out, layout) for dtype in ("bf16", "fp16") for out in (dtype, "fp32") for layout in ("kmajor", "rowmajor")]
CASES += [("residual", "bf16", "bf16", "kmajor"), ("residual", "fp16", "fp16", "rowmajor"),
          ("residual", "bf16", "fp32", "kmajor")]
SCHEDULER_CASES = [("launches", schedule, out) for schedule in ("static", "clc") for out in ("fp32", "bf16")]
SCHEDULER_CASES += [("graphs", "clc"), ("bias", "clc")]
FP8_CASES = [("tensor", "e4m3", "e4m3", "bf16"), ("row", "e4m3", "e5m2", "fp32"), ("tensor", "e5m2", "e4m3", "fp16"),
             ("row", "e4m3", "e4m3", "bf16")]  # matmul_fp8 there: sm100_scaled_matmul_kernel
FP8_CASES += [("blockwise", "e4m3", "e4m3", "bf16"), ("blockwise", "e4m3", "e5m2", "fp32"),
              ("blockwise", "e5m2", "e4m3", "fp16")]  # sm100_blockwise_matmul_kernel
BLOCK_SCALED_CASES = [("mxfp8", "e4m3", "e4m3", "bf16"), ("mxfp8", "e5m2", "e4m3", "fp32"),
                      ("mxfp4", "e2m1", "e2m1", "bf16"), ("mxfp4", "e2m1", "e2m1", "fp32"),
                      ("nvfp4", "e2m1", "e2m1", "bf16"), ("nvfp4", "e2m1", "e2m1", "fp16")]
PAIR_CASES = [("pair", "bf16", "bf16", "kmajor"), ("pair", "fp16", "fp32", "rowmajor")]  # SM100_PAIR_CONFIGS
TIMEOUT_S = 240


@pytest.fixture(scope="module")
def runs():
    import torch

    capability = torch.cuda.get_device_capability()
    if GEMM_TARGETS.get(capability) != "sm_100a":
        pytest.skip(f"needs an sm_100/sm_103 GPU (B200, B300) for the sm_100a GEMM; this one is "
                    f"{torch.cuda.get_device_name()} (sm_{capability[0]}{capability[1]})")
    return {**run_cases("tests.gpu.matmul_cases", CASES + PAIR_CASES, TIMEOUT_S, parallel=4),
            **run_cases("tests.gpu.scheduler_cases", SCHEDULER_CASES, TIMEOUT_S, parallel=2),
            **run_cases("tests.gpu.fp8_cases", FP8_CASES, TIMEOUT_S, parallel=4),
            **run_cases("tests.gpu.block_scaled_cases", BLOCK_SCALED_CASES, TIMEOUT_S, parallel=4)}


@pytest.mark.gpu
@pytest.mark.parametrize("case", CASES, ids=" ".join)
def test_sm100_matmul_matches_float64(runs, case):
    assert_ok(runs[case])


@pytest.mark.gpu
@pytest.mark.parametrize("case", SCHEDULER_CASES, ids=" ".join)
def test_sm100_schedulers_compute_every_tile_once(runs, case):
    assert_ok(runs[case])


@pytest.mark.gpu
@pytest.mark.parametrize("case", FP8_CASES, ids=" ".join)
def test_sm100_fp8_matches_float64(runs, case):
    assert_ok(runs[case])


@pytest.mark.gpu
@pytest.mark.parametrize("case", BLOCK_SCALED_CASES, ids=" ".join)
def test_sm100_block_scaled_matches_float64(runs, case):
    assert_ok(runs[case])


@pytest.mark.gpu
@pytest.mark.parametrize("case", PAIR_CASES, ids=" ".join)
def test_sm100_two_cta_matmul_matches_float64(runs, case):
    assert_ok(runs[case])
