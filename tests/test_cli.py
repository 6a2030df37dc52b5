"""The command line's CPU subcommands: report, check, demo without a GPU, bench without a GPU and bench --plot."""

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tilepipe.kernels.catalogue import shipped_variants

REPO = Path(__file__).resolve().parent.parent


def tilepipe_cli(*args: str, timeout: float = 900) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(REPO))
    return subprocess.run([sys.executable, "-m", "tilepipe", *args], cwd=REPO, env=env, capture_output=True,
                          text=True, timeout=timeout)


def needs_no_gpu():
    import torch

    if torch.cuda.is_available():
        pytest.skip("tests the behaviour without a GPU")


@pytest.fixture(scope="module")
def report():
    return tilepipe_cli("report")


def test_report_lists_every_kernel_with_its_resources(report):
    assert report.returncode == 0, report.stderr[-3000:]
    lines = report.stdout.splitlines()
    assert lines[0].split()[:4] == ["kernel", "target", "smem", "B"]
    rows = [line for line in lines if line.startswith(("stress_kernel", "wgmma_kernel", "matmul_kernel",
                                                       "scaled_matmul_kernel", "blockwise_matmul_kernel",
                                                       "sm100_matmul_kernel"))]
    matmul_variants = [v for v in shipped_variants() if v.kernel == "matmul_kernel" and "pingpong" not in v.options]
    pingpong = [line for line in lines if line.startswith("matmul_pingpong_kernel")]  # its own kernel: plain, +bias
    assert len(pingpong) == 2 and all("TILE=(128, 128)" in row and "EPILOGUE_N=64" in row for row in pingpong)
    assert sum("sm_100a" in row for row in rows) >= 3
    assert sum(row.startswith("matmul_kernel") for row in rows) == len(matmul_variants) + 4  # each at one tile, + 4
    assert sum("TILE=" in row for row in rows) == sum(  # pieced tiles and D in sub-tiles (+ an fp32 D's 128x256)
        "tile" in v.options or "epilogue_n" in v.options for v in matmul_variants) + 1 > 1
    assert sum(bool(re.search(r"EPILOGUE_N=\d", row)) for row in rows) == sum(
        "epilogue_n" in v.options for v in matmul_variants) + 1 > 1
    assert any("STAGES=8" in row and "SCHEDULE=streamk" in row for row in rows)  # small M's tile under split-K
    assert any("SCHEDULE=dynamic" in row for row in rows) and any("SCHEDULE=streamk" in row for row in rows)
    assert any("HAS_BIAS=True" in row for row in rows)
    # 4 + 2 clusters of each FP8 kernel + 2 swap-AB
    assert sum(row.startswith(("scaled_matmul_kernel", "blockwise_matmul_kernel")) for row in rows) == 10
    assert sum(row.startswith("blockwise_matmul_kernel") and ("CLUSTER_M=2" in row or "CLUSTER_N=2" in row)
               for row in rows) == 2
    sm100 = [row.split() for row in rows if row.startswith("sm100_matmul_kernel")]  # each epilogue + the medium tile
    assert len(sm100) == sum(v.kernel.startswith("sm100_matmul_kernel") for v in shipped_variants()) + 1
    assert sum("CLUSTER_M=2" in " ".join(row) for row in sm100) == 1  # the two-CTA form
    assert all(row[-9] == "sm_100a" and int(row[-8]) <= 227 * 1024 and row[-7] in ("256", "512") for row in sm100)
    assert "tensor memory plan of sm100_matmul_kernel" in report.stdout and "TMEM total" in report.stdout
    scaled = [row.split() for row in lines if row.startswith("sm100_block_scaled_kernel")]  # 3 formats x 2 tiles
    assert len(scaled) == 6 and all(row[-9] == "sm_100a" and int(row[-8]) <= 227 * 1024 and row[-7] == "512"
                                    and row[-3] == "4" for row in scaled)  # 4 MMAs a k-step
    assert all(int(row[-2]) == 4 + int(row[-1]) for row in scaled)  # A, B, SFA, SFB loads; a store per TMEM load
    assert {row[-1] for row in scaled} == {"8", "4"} and "operands.sfb" in report.stdout  # TMEM loads: BN / 32
    blockwise = [row.split() for row in lines if row.startswith("sm100_blockwise_matmul_kernel")]
    assert len(blockwise) == 1 and blockwise[0][-9] == "sm_100a"  # 4 MMAs a K tile, into 2 x 128 TMEM columns
    assert int(blockwise[0][-8]) <= 227 * 1024 and blockwise[0][-7] == "256" and blockwise[0][-3] == "4"
    assert "plan of sm100_blockwise_matmul_kernel" in report.stdout and "scale_ring.scales.full" in report.stdout
    assert all("FAILED" not in row for row in rows)
    assert "shared-memory plan of matmul_kernel" in report.stdout and "pipelines.input.full" in report.stdout


def test_check_runs_the_protocol_checker_on_every_shipped_kernel():
    result = tilepipe_cli("check", timeout=300)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    lines = result.stdout.splitlines()
    assert lines[0].split() == ["kernel", "config", "cases", "states", "traced", "result"]
    kernels = {line.split("  ")[0] for line in lines[1:] if line.strip()}
    assert {"matmul", "matmul +C", "matmul_fp8 blockwise", "pipeline_demo stress"} <= kernels
    assert all(line.rstrip().endswith(" ok") for line in lines[1:] if line.strip())


def test_demo_without_a_gpu_falls_back_to_the_report(report):
    needs_no_gpu()
    result = tilepipe_cli()
    assert result.returncode == 0
    assert result.stdout.startswith("no CUDA GPU here") and report.stdout in result.stdout


@pytest.mark.parametrize("args", [(), ("--shapes", )], ids=["bench", "bench --shapes"])
def test_bench_without_a_gpu_exits_2(args):
    needs_no_gpu()
    result = tilepipe_cli("bench", *args, timeout=120)
    assert result.returncode == 2 and "needs a CUDA GPU" in result.stderr


def test_bench_plot_redraws_a_results_file(tmp_path):
    results = tmp_path / "run.json"
    shutil.copy(REPO / "tests" / "fixtures" / "matmul-bench-result.json", results)
    result = tilepipe_cli("bench", "--plot", str(results), timeout=120)
    assert result.returncode == 0, result.stderr
    png = results.with_suffix(".png")
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 10_000
    assert json.loads(results.read_text())["rows"]
