"""GPU: k-grouped input tile pipelines against a float64 reference, each case in its own process."""

import pytest

from tilepipe.debug import run_all_guarded

CASES = [(2, 1, 512), (4, 2, 512), (6, 3, 512), (4, 4, 1024)]  # (stages, k_group, k_tiles); 512 = 3 x 170 + 2


@pytest.fixture(scope="module")
def runs():
    commands = [["-m", "tests.kernels.tile_kernels", *map(str, case)] for case in CASES]
    return dict(zip(CASES, run_all_guarded(commands, 120, parallel=4)))


@pytest.mark.gpu
@pytest.mark.parametrize("case", CASES, ids=lambda c: f"stages{c[0]}-group{c[1]}-k{c[2]}")
def test_k_grouped_pipeline_matches_float64(runs, case):
    run = runs[case]
    assert run.status == "ok", f"{run.status} after {run.seconds:.1f}s:\n{run.output[-4000:]}"
    assert run.result is not None and run.result["ok"], run.result
