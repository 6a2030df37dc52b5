"""GPU: custom ops under torch.compile and CUDA graphs, the host fast path, and the autotune cache across two
processes (tests/gpu/torch_cases.py, each case in its own process under a timeout)."""

import pytest

from tests.gpu.guarded import assert_ok, run_cases
from tilepipe.probes.debug import run_guarded

CASES = ["compile", "cudagraph", "repeat", "fp8", "fp8_repeat"]
TIMEOUT_S = 240


@pytest.fixture(scope="module")
def runs():
    return {case: run for (case, ), run in run_cases("tests.gpu.torch_cases", [(case, ) for case in CASES],
                                                     TIMEOUT_S).items()}


@pytest.mark.gpu
@pytest.mark.parametrize("case", CASES)
def test_torch_integration(runs, case):
    assert_ok(runs[case])


@pytest.mark.gpu
def test_autotune_cache_across_two_processes(tmp_path, monkeypatch):
    monkeypatch.setenv("TILEPIPE_CACHE_DIR", str(tmp_path))
    first, second = (run_guarded(["-m", "tests.gpu.torch_cases", "autotune"], TIMEOUT_S) for _ in range(2))
    for run in (first, second):
        assert_ok(run)
    assert (first.result["timed"], first.result["cache_hits"]) == (2, 0)
    assert (second.result["timed"], second.result["cache_hits"]) == (0, 1)
    assert second.result["best"] == first.result["best"] == second.result["config_before"]
    assert "autotune 256x256x256" in first.output and "2/2" in first.output
