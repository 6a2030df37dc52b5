"""GPU: tilepipe.matmul against a float64 reference, every dtype pair and B layout, each group in its own process."""

import pytest

from tests.gpu.guarded import assert_ok, run_cases

CASES = [(dtype, out, layout) for dtype in ("bf16", "fp16") for out in (dtype, "fp32") for layout in ("kmajor", "rowmajor")]
CASES += [("bf16", "fp16", "kmajor"), ("fp16", "bf16", "rowmajor")]
CASES += [("residual", dtype, out, layout) for dtype, out, layout in (("bf16", "bf16", "kmajor"), ("fp16", "fp16", "rowmajor"),
                                                                       ("bf16", "fp32", "kmajor"))]
CASES += [("restaged", "bf16", "bf16", "kmajor"), ("restaged", "fp16", "fp32", "rowmajor")]
CASES += [("splitk", "bf16", "bf16", "kmajor"), ("splitk", "fp16", "fp32", "rowmajor")]
CASES += [("narrow", "bf16", "bf16", "kmajor"), ("narrow", "fp16", "fp32", "rowmajor")]
CASES += [("pieced", "bf16", "bf16", "kmajor", "static"), ("pieced", "fp16", "fp16", "rowmajor", "dynamic")]
CASES += [("subtiled", "bf16", "bf16", "kmajor", "static"), ("subtiled", "fp16", "fp16", "rowmajor", "dynamic"),
          ("subtiled", "bf16", "bf16", "rowmajor", "streamk"), ("subtiled", "fp16", "fp16", "kmajor", "splitk"),
          ("subtiled", "bf16", "fp32", "kmajor", "static"), ("subtiled", "fp16", "fp32", "rowmajor", "streamk")]
CASES += [("pingpong", "bf16", "bf16", "kmajor"), ("pingpong", "fp16", "fp16", "rowmajor")]
CASES += [("edges", "bf16", "bf16", "kmajor"), ("edges", "fp16", "fp16", "rowmajor"),
          ("edges", "bf16", "fp32", "kmajor")]
CASES += [("swap", tile, schedule, out) for tile, schedule, out in (("64", "static", "bf16"), ("64", "splitk", "fp32"),
                                                                  ("64", "streamk", "bf16"), ("128", "static", "fp32"),
                                                                  ("64", "dynamic", "bf16"))]
CLUSTER_CASES = (("plain", "bf16", "bf16", "kmajor"), ("plain", "fp16", "fp32", "rowmajor"),
                 ("residual", "bf16", "bf16", "rowmajor"))
CASES += [("cluster", cluster, *case) for cluster in ("1x2", "2x1") for case in CLUSTER_CASES]
CASES += [("cluster", cluster, *case, scheduler) for cluster in ("1x2", "2x1")
          for scheduler in ("dynamic", "streamk", "splitk") for case in CLUSTER_CASES[:2]]
CASES += [("cluster", cluster, "residual", "bf16", "bf16", "kmajor", scheduler) for cluster in ("1x2", "2x1")
          for scheduler in ("dynamic", "streamk")]
TIMEOUT_S = 240


@pytest.fixture(scope="module")
def runs():
    return run_cases("tests.gpu.matmul_cases", CASES, TIMEOUT_S, parallel=4)


@pytest.mark.gpu
@pytest.mark.parametrize("case", CASES, ids=" ".join)
def test_matmul_matches_float64(runs, case):
    assert_ok(runs[case])
