"""CPU tests of the autotune cache: the winner is the fastest candidate, stored on disk, and a second process
answers from the file without timing (the timing function here is a deterministic table, not a GPU)."""

import io
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tilepipe.host import configs
from tilepipe.host.configs import LARGE_16BIT, MEDIUM, SMALL
from tilepipe.tools import autotune

REPO = Path(__file__).resolve().parent.parent
TIMES = {LARGE_16BIT: 0.30, MEDIUM: 0.20, SMALL: 0.25}
CHILD = """
import json, sys
from tilepipe.host.configs import LARGE_16BIT, MEDIUM, SMALL
from tilepipe.tools import autotune
times = {LARGE_16BIT: 0.30, MEDIUM: 0.20, SMALL: 0.25}
best = autotune.tune(sys.argv[1], list(times), times.__getitem__)
print(json.dumps({"best": autotune.describe(best), **autotune.STATS}))
"""


@pytest.fixture
def cache_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("TILEPIPE_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(autotune, "STATS", {"timed": 0, "cache_hits": 0})
    monkeypatch.setattr(configs, "_ENTRIES", {})
    return tmp_path


def test_tune_picks_the_fastest_and_caches_it(cache_dir):
    bar = io.StringIO()
    assert autotune.tune("gpu X | 256x256x256", list(TIMES), TIMES.__getitem__, progress=bar) == MEDIUM
    assert autotune.STATS == {"timed": 3, "cache_hits": 0}
    assert bar.getvalue().count("\r") == 3 and "3/3" in bar.getvalue() and bar.getvalue().endswith("\n")
    stored = json.loads((cache_dir / "autotune.json").read_text())["gpu X | 256x256x256"]
    assert stored["config"]["block_n"] == MEDIUM.block_n and len(stored["ms"]) == 3
    assert autotune.tune("gpu X | 256x256x256", list(TIMES), lambda cfg: pytest.fail("timed again")) == MEDIUM
    assert autotune.STATS == {"timed": 3, "cache_hits": 1}
    # force re-times; another key is another problem
    assert autotune.tune("gpu X | 256x256x256", list(TIMES), {**TIMES, SMALL: 0.1}.__getitem__, force=True) == SMALL
    assert autotune.tune("gpu Y | 256x256x256", [LARGE_16BIT], TIMES.__getitem__) == LARGE_16BIT
    assert set(json.loads((cache_dir / "autotune.json").read_text())) == {"gpu X | 256x256x256", "gpu Y | 256x256x256"}


def test_failing_candidates_are_skipped(cache_dir):
    def time_ms(cfg):
        if cfg is not SMALL:
            raise RuntimeError("out of shared memory")
        return 1.0

    assert autotune.tune("k", [LARGE_16BIT, SMALL, MEDIUM], time_ms) == SMALL
    with pytest.raises(RuntimeError, match="every candidate failed"):
        autotune.tune("k2", [LARGE_16BIT], time_ms)


def test_a_second_process_reuses_the_cache(cache_dir):
    env = dict(os.environ, PYTHONPATH=str(REPO))
    runs = [json.loads(subprocess.run([sys.executable, "-c", CHILD, "gpu X | 512x512x512"], env=env, cwd=REPO,
                                      capture_output=True, text=True, check=True, timeout=120).stdout)
            for _ in range(2)]
    assert runs[0] == {"best": autotune.describe(MEDIUM), "timed": 3, "cache_hits": 0}
    assert runs[1] == {"best": autotune.describe(MEDIUM), "timed": 0, "cache_hits": 1}


def test_default_candidates_fit_shared_memory():
    import torch

    from tilepipe.kernels.matmul import matmul_plan
    for out_dtype, c_dtype in ((torch.bfloat16, "bf16"), (torch.float32, "fp32")):
        cands = autotune.default_candidates(out_dtype)
        small_m = autotune.default_candidates(out_dtype, M=8)
        assert len(set(cands)) == len(cands) >= 4 and set(cands) < set(small_m)
        assert any(cfg.cluster_m == 2 for cfg in cands) and not any(cfg.swap_ab for cfg in cands)
        assert sum(cfg.swap_ab for cfg in small_m) == 2  # swap-AB's 64- and 128-row tiles, B K-major only
        assert not any(cfg.swap_ab for cfg in autotune.default_candidates(out_dtype, M=8, b_kmajor=False))
        for cfg in small_m:
            assert matmul_plan.fn(cfg.tile_m, cfg.tile_n, cfg.block_k, cfg.stages, cfg.c_stages, "bf16", c_dtype,
                                  True, True, cluster_m=cfg.cluster_m, cluster_n=cfg.cluster_n,
                                  swap_ab=cfg.swap_ab, epilogue_n=cfg.epilogue_n).fits
