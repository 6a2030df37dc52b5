"""tilepipe.tools.counters without a GPU: ncu's CSV parsed into one record per kernel with units normalised, and the
committed H100 counters file read back through the same table."""

import json
from pathlib import Path

from tilepipe.tools.counters import METRICS, RESULTS_DIR, parse, table

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


def test_committed_h100_counters_pair_our_kernel_with_cublas():
    record = json.loads((RESULTS_DIR / "counters-h100.json").read_text())
    assert "H100" in record["gpu"] and record["metrics"] == METRICS
    for row in record["rows"]:
        assert row["ours"]["kernel"].endswith("matmul_kernel")
        assert row["theirs"]["kernel"].startswith(("nvjet", "sm90"))
        assert set(METRICS) <= set(row["ours"]) and set(METRICS) <= set(row["theirs"])
    text = table(record["rows"])
    assert text.count("tilepipe") == len(record["rows"]) and "nvjet" in text
