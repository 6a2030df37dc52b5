"""CPU tests of `python -m tilepipe bench --shapes` (tilepipe.tools.bench_shapes): the table holds issue 20's rows,
every row gets a configuration and a predicted time, and the results writer's schema (fed made-up timings: a test
of the writer, not a result)."""

import json
import math

import pytest
import torch

from tilepipe.host import configs
from tilepipe.host.gpus import H100
from tilepipe.tools import bench_shapes
from tilepipe.tools.bench_shapes import SHAPE_TABLE, ShapeRow, format_shapes, plan, shapes_record

ISSUE_ROWS = {
    "decode bf16": {(M, N, K) for M in (1, 8, 32, 96) for N, K in ((4096, 4096), (14336, 4096), (4096, 14336),
                                                                    (6144, 4096))},
    "prefill bf16": {(4096, 4096, 4096), (4096, 14336, 4096), (4096, 4096, 14336), (16384, 6144, 4096)},
    "mid / ragged bf16": {(2560, 2560, 2560), (3584, 3584, 3584), (5120, 5120, 2560), (4000, 6000, 3500),
                          (1536, 8960, 1536), (2304, 2304, 9216)},
    "FP8 per-tensor": {(M, N, K) for M in (16, 2048, 8192) for N, K in ((14336, 4096), (4096, 14336))},
    "FP8 blockwise": {(M, N, K) for M in (64, 1024, 4096) for N, K in ((2048, 7168), (7168, 2048), (4608, 7168))},
}
"""Issue 20's table, written out again: the bench may add rows, never drop one."""


def test_the_table_holds_every_row_of_the_issue():
    assert set(ISSUE_ROWS) <= set(SHAPE_TABLE)  # families may be added too (mid-M bf16)
    for group, rows in ISSUE_ROWS.items():
        assert rows <= set(SHAPE_TABLE[group]), (group, rows - set(SHAPE_TABLE[group]))
        assert len(SHAPE_TABLE[group]) == len(set(SHAPE_TABLE[group]))
    assert sum(map(len, SHAPE_TABLE.values())) >= 50


@pytest.fixture
def h100(monkeypatch, tmp_path):
    """The H100's model and an empty autotune cache, without a GPU."""
    monkeypatch.setenv("TILEPIPE_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(configs, "device_model", lambda device: H100)
    monkeypatch.setattr(bench_shapes, "device_model", lambda device: H100)


def test_every_row_gets_a_configuration_and_a_predicted_time(h100):
    for group, rows in SHAPE_TABLE.items():
        for M, N, K in rows:
            cfg, schedule, predicted = plan(group, M, N, K, 0)
            assert schedule in predicted and all(0 < us < 1e5 and math.isfinite(us) for us in predicted.values())
            # the model's rule where it chooses (small M, per-tensor FP8): the fastest, or static within the bar
            if M <= configs.DECODE_M or group == "FP8 per-tensor":
                best = min(predicted.values())
                assert predicted[schedule] == best or (
                    schedule == "static" and predicted["static"] < configs.STREAMK_MIN_GAIN * best)
            if M <= configs.DECODE_M and not group.startswith("FP8"):
                assert cfg.block_m == 64
    cfg, schedule, _ = plan("decode bf16", 96, 4096, 14336, 0)
    assert schedule == "static" and cfg == configs.NARROW  # 128 narrow tiles in one wave (tests/test_matmul.py)
    cfg, schedule, _ = plan("decode bf16", 96, 14336, 4096, 0)
    assert schedule == "static" and cfg == configs.small_m_configs(torch.bfloat16)[0]  # 448 narrow tiles: not offered
    cfg, schedule, _ = plan("decode bf16", 1, 4096, 14336, 0)
    assert schedule == "static" and cfg.swap_ab  # swap-AB's 64 programs stream B whole (tests/test_swap_ab.py)


def fake_row(group: str, M: int, N: int, K: int) -> ShapeRow:
    """A row with made-up numbers, for the writer."""
    return ShapeRow(f"{M}x{N}x{K}", "matmul bf16 B kmajor", "cuBLAS (torch.matmul)", 500.0, 450.0, 1.1, 1e-3,
                    [1.1, 1.1], group, "64x128x64 s8 w4", "splitk", 128, 12.5, 11.0, 12.1,
                    {"static": {"predicted_us": 19.0, "measured_us": 20.0}})


def test_the_writer_records_every_row_its_prediction_what_is_missing_and_the_host_time():
    rows = [fake_row(group, *shape) for group, shapes in SHAPE_TABLE.items() for shape in shapes]
    dropped = rows.pop(3)
    environment = {"name": "unit", "command": "python -m tilepipe bench --shapes", "gpu": "none (unit test)",
                   "torch": torch.__version__, "triton": "3.9.0", "cuda": None}
    host = {"shape": "256^3", "us_per_call": {"tilepipe": 10.0, "torch": 12.0}}
    record = json.loads(json.dumps(shapes_record(environment, rows, host, 5, 60, 0.0)))
    assert {key: record[key] for key in environment} == environment
    assert record["missing"] == [f"{dropped.group} {dropped.shape}"]
    assert record["host_overhead"] == host and len(record["rows"]) == len(rows)
    assert all({"group", "shape", "config", "schedule", "predicted_us", "tilepipe_us", "baseline_us", "ratio",
                "schedules"} <= set(row) for row in record["rows"])
    text = format_shapes(rows, host)
    assert "decode bf16: 15 rows, geomean 1.100" in text and "tilepipe 10.0 us, torch.matmul 12.0 us" in text


def test_predicted_parts_name_the_bound_and_sum_to_the_prediction():
    """The table's `bound` column: a decode row sits at the DRAM floor, a large square on its wgmma rate, the
    64-row tile at N x K = 4096 x 14336 static on its 32 programs' operand stream; predict_us is the parts' sum."""
    cases = {(1, 4096, 4096, configs.swap_config(1, torch.bfloat16), "static"): "dram",
             (8192, 8192, 8192, configs.default_configs(torch.bfloat16)[0], "static"): "mma",
             (96, 4096, 14336, configs.small_m_configs(torch.bfloat16)[0], "static"): "stream"}
    for (M, N, K, cfg, schedule), bound in cases.items():
        parts = configs.predicted_parts(M, N, K, cfg, schedule, H100)
        assert bound in parts and not {"mma", "stream", "dram"} - {bound} & parts.keys(), (M, N, K, parts)
        assert math.isclose(sum(parts.values()), configs.predict_us(M, N, K, cfg, schedule, H100))
