"""tilepipe.tools.counters without a GPU: ncu's CSV parsed into one record per kernel with units normalised, and the
committed H100 counters files read back through the same table, and the `--shapes` / `--tiles` options."""

import json
from pathlib import Path

import subprocess
import sys

import pytest

from tilepipe.tools.counters import FORMS, METRICS, RESULTS_DIR, parse, parse_shapes, table, tile_options

HEADER = ('"ID","Process ID","Process Name","Host Name","Kernel Name","Context","Stream","Block Size","Grid Size",'
          '"Device","CC","Section Name","Metric Name","Metric Unit","Metric Value"')


def csv_row(kernel_id: int, name: str, metric: str, unit: str, value: str) -> str:
    return (f'"{kernel_id}","7","python3","host","{name}","1","7","(384, 1, 1)","(132, 1, 1)","0","9.0",'
            f'"Command line profiler metrics","{metric}","{unit}","{value}"')


def test_parse_normalises_units_and_keeps_launch_order():
    lines = ["==PROF== Connected to process 7", HEADER,
             csv_row(1, "nvjet_sm90_tst_320x128", METRICS["time_us"], "msecond", "1.42"),
             csv_row(1, "nvjet_sm90_tst_320x128", METRICS["sm_ghz"], "cycle/nsecond", "1.56"),
             csv_row(1, "nvjet_sm90_tst_320x128", METRICS["dram_bytes"], "Gbyte", "1.38"),
             csv_row(0, "matmul_kernel", METRICS["time_us"], "usecond", "47.17"),
             csv_row(0, "matmul_kernel", METRICS["sm_ghz"], "Ghz", "1.68"),
             csv_row(0, "matmul_kernel", METRICS["l2_sectors"], "sector", "6,644,459"),
             csv_row(0, "matmul_kernel", METRICS["dram_bytes"], "Mbyte", "38.1"),
             "==PROF== Disconnected from process 7"]
    ours, theirs = parse("\n".join(lines))
    assert ours["kernel"] == "matmul_kernel" and theirs["kernel"] == "nvjet_sm90_tst_320x128"
    assert ours["time_us"] == 47.17 and abs(theirs["time_us"] - 1420.0) < 1e-6
    assert ours["sm_ghz"] == 1.68 and theirs["sm_ghz"] == 1.56
    assert ours["l2_sectors"] == 6644459.0
    assert abs(ours["dram_bytes"] - 38.1e6) < 1 and abs(theirs["dram_bytes"] - 1.38e9) < 1e3


@pytest.mark.parametrize("name", ["archive/counters-h100", "archive/counters-mid-m-h100"])
def test_committed_h100_counters_pair_our_kernel_with_cublas(name):
    """Each committed file's metrics (the columns of its day: counters-h100 predates the L1 and DRAM throughput
    columns) for our kernel and cuBLAS's, through the same table."""
    record = json.loads((RESULTS_DIR / f"{name}.json").read_text())
    assert "H100" in record["gpu"] and set(record["metrics"].items()) <= set(METRICS.items())
    for row in record["rows"]:
        assert row["ours"]["kernel"].endswith(("matmul_kernel", "matmul_pingpong_kernel"))
        assert row["theirs"]["kernel"].startswith(("nvjet", "sm90"))
        assert set(record["metrics"]) <= set(row["ours"]) and set(record["metrics"]) <= set(row["theirs"])
    text = table(record["rows"])
    assert text.count("tilepipe") == len(record["rows"]) and "nvjet" in text


def test_shapes_and_tiles_options():
    assert parse_shapes("768x4096x4096, 2x3x4") == [(768, 4096, 4096), (2, 3, 4)]
    assert parse_shapes("2048x14336x4096:tensor,64x2048x7168:Blockwise") == [(2048, 14336, 4096, "tensor"),
                                                                             (64, 2048, 7168, "blockwise")]
    with pytest.raises(ValueError, match="scaling"):
        parse_shapes("8x8x8:rowwise")
    for bad in ("1x2", "0x4x4", "axbxc"):
        with pytest.raises(ValueError, match="MxNxK"):
            parse_shapes(bad)
    assert {"pingpong", "128x192", "192x128", "128x256-2x1", "2x1", "2x1-split"} <= set(tile_options())
    assert FORMS["2x1-split"] == {"cluster_m": 2, "split_multicast": True}  # issue 42's form of the chosen tile
    for args, message in ((["--tiles", "128x192"], "--tiles needs --shapes"),
                          (["--shapes", "8x8x8", "--tiles", "nope"], "unknown"), (["--shapes", "8x8"], "MxNxK")):
        done = subprocess.run([sys.executable, "-m", "tilepipe.tools.counters", *args], capture_output=True, text=True)
        assert done.returncode == 2 and message in done.stderr, done.stderr[-500:]
