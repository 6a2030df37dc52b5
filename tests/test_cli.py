"""The command line's CPU subcommands: report, check, demo without a GPU, bench without a GPU and bench --plot."""

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tilepipe.examples import pipeline_demo
from tilepipe.kernels.catalogue import MATMUL_PINGPONG, shipped_variants
from tilepipe.verify.compile import CompileError, compile_kernels
from tilepipe.verify.report import FIRST_CALLS, catalogue_rows, shape

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


@pytest.fixture(scope="module")
def report_all():
    return tilepipe_cli("report", "--all")


def table_rows(output: str) -> list[list[str]]:
    """The report table's rows, split at its column gaps (a label holds single spaces)."""
    lines = output.splitlines()
    end = lines.index("") if "" in lines else len(lines)
    return [re.split(r"\s{2,}", line.strip()) for line in lines[1:end]]


def test_report_lists_what_the_first_calls_run(report):
    assert report.returncode == 0, report.stderr[-3000:]
    lines = report.stdout.splitlines()
    assert lines[0].split()[:4] == ["kernel", "config", "target", "smemKB"]
    assert max(map(len, lines)) <= 120
    rows = {row[0]: row for row in table_rows(report.stdout)}
    for M, N, K in FIRST_CALLS:
        assert rows[f"matmul {shape(M, N, K)}"][2] == "sm_90a"
    assert "swap" in rows["matmul 16x4096x4096"][1]  # decode takes swap-AB's tile
    assert rows["addmm 4096³"][1] == rows["matmul 4096³"][1]
    assert {"fp8 per-tensor 4096³", "fp8 blockwise 4096x2048x7168", "sm100 nvfp4 4096³"} <= set(rows)
    sm100 = [row for row in rows.values() if row[2] == "sm_100a"]
    assert len(sm100) == 4 and all(int(row[4]) in (256, 512) for row in sm100)
    assert all(float(row[3]) <= 227 and row[6] == "0" for row in rows.values())  # smem KB, spills
    assert "never run" in report.stdout and "report --all" in report.stdout
    assert "compiled 11/11 kernels" in report.stderr


def test_report_all_lists_every_kernel_with_its_resources(report_all):
    assert report_all.returncode == 0, report_all.stderr[-3000:]
    lines = report_all.stdout.splitlines()
    assert max(map(len, lines[:lines.index("")])) <= 120  # the table; the storage plans below it are wider
    rows = table_rows(report_all.stdout)
    assert all("FAILED" not in row for row in rows)
    checked = [v for v in shipped_variants() if not v.kernel.startswith("pipeline_demo")]
    labels = [row[0] for row in rows]
    assert all(v.name in labels for v in checked)
    assert labels.count("sm100 block_scaled nvfp4") == 2  # each format at both tiles
    stress = sum(label.startswith("stress") for label in labels)
    assert sum(row[2] == "sm_100a" for row in rows) >= 15 and stress == 2 * len(pipeline_demo.STYLES)  # both targets
    pingpong = [row for row in rows if "pingpong" in row[0]]
    assert len(pingpong) == len(MATMUL_PINGPONG) and all(row[1] == "128x128x64 s6 pp D/64" for row in pingpong)
    scaled = [row for row in rows if row[0].startswith("sm100 block_scaled")]  # 3 formats x 2 tiles
    assert len(scaled) == 6 and all(int(row[3].split(".")[0]) <= 227 and row[4] == "512" and row[8] == "4"
                                    for row in scaled)  # 4 MMAs a k-step
    assert all(int(row[9]) == 4 + int(row[10]) for row in scaled)  # A, B, SFA, SFB loads; a store per TMEM load
    assert {row[10] for row in scaled} == {"8", "4"} and "operands.sfb" in report_all.stdout  # TMEM loads: BN / 32
    blockwise = [row for row in rows if row[0] == "sm100 matmul_fp8 blockwise"]
    assert len(blockwise) == 1 and blockwise[0][4] == "256" and blockwise[0][8] == "4"  # 4 MMAs a K tile
    assert "plan of sm100_blockwise_matmul_kernel" in report_all.stdout and "scale_ring.scales.full" in report_all.stdout
    assert "tensor memory plan of sm100_matmul_kernel" in report_all.stdout and "TMEM total" in report_all.stdout
    assert "shared-memory plan of matmul_kernel" in report_all.stdout and "pipelines.input.full" in report_all.stdout
    assert any(row[0] == "matmul bf16 D streamk" and " s8 " in f"{row[1]} " for row in rows)  # split-K's 64-row tile


def test_no_sm90a_kernel_of_the_report_serializes_its_wgmmas():
    """ptxas waits after every wgmma of a kernel (C7514) where any instruction reads an accumulator inside a pipeline
    stage: the first grouped kernel lost 7-11% to it, a half-height grouped tile 10% (docs/perf-log.md row 141). The
    bundled ptxas, run on each sm_90a kernel the compile report builds (the session's cached compiles), reports it
    for none."""
    rows = [row for row in catalogue_rows() if row.spec.target == "sm_90a"]
    reports = compile_kernels([row.spec for row in rows])
    assert not [report for report in reports if isinstance(report, CompileError)]
    logs = {row.label: report.ptxas_log for row, report in zip(rows, reports)}
    assert all("Compiling entry function" in log for log in logs.values())
    assert not [label for label, log in logs.items() if "C7514" in log or "serialized" in log]


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
