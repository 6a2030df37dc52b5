"""Swap-AB (issue 20): small M computed as D^T = B^T A^T, so M is the wgmma's narrow N side. CPU checks: the compiled
instruction mix, the tile count and choice, the argument checks, and the choice against the H100 decode timings."""

import json
import re
from pathlib import Path

import pytest
import torch

from tilepipe.host.checks import check_swap_ab
from tilepipe.host.configs import (DECODE_M, MatmulConfig, schedule_for, small_m_config, swap_config,
                                   tile_count)
from tilepipe.host.gpus import H100
from tilepipe.kernels.matmul import matmul_spec, operand_blocks
from tilepipe.tools.bench_shapes import describe
from tilepipe.verify.compile import compile_kernels

from tests.test_matmul import assert_partials_by_tma, tma_partial_boxes

RESULTS = Path(__file__).parents[1] / "bench/results/archive/decode-swap-h100.json"
CHOICE_SLACK = 1.03
"""How much slower (measured) the chosen tile and schedule may be than the fastest of those timed on a row."""


@pytest.fixture(scope="module")
def compiled():
    specs = {"plain M=1": matmul_spec(swap_config(1, torch.bfloat16), "bf16", "bf16", True),
             "+C M=32": matmul_spec(swap_config(32, torch.bfloat16), "bf16", "bf16", True, has_c=True),
             "+bias M=96 split-K": matmul_spec(swap_config(96, torch.float32), "bf16", "fp32", True,
                                               bias_dtype="bf16", schedule="streamk")}
    return dict(zip(specs, compile_kernels(list(specs.values()))))


def test_swap_ab_compiles_to_narrow_wgmmas_and_one_transposed_store(compiled):
    """64 rows of N by the M tile's 8, 32 or 128 columns: wgmma 64xWIDTHx16, BK / 16 = 8 of them a k-step (the loop
    may be unrolled twice), two TMA boxes a stage for each operand (BK = 128 is 256 bytes, two 128-byte swizzle
    rows) and one for C, one D store a tile (64 columns of N: two boxes in fp32), within shared memory, no
    spills; under split-K (stream-K's kernel) the partial sums' TMA boxes both ways, and no other global traffic
    (test_matmul.assert_partials_by_tma)."""
    for name, width in (("plain M=1", 8), ("+C M=32", 32), ("+bias M=96 split-K", 128)):
        report = compiled[name]
        assert sorted(set(re.findall(r"HGMMA\.(\d+x\d+x\d+)", report.sass))) == [f"64x{width}x16"], name
        assert report.count("wgmma.mma_async") in (8, 16), name
        partial_boxes = tma_partial_boxes(width, "fp32") if "split-K" in name else 0  # the fp32 tile, 64 x 128
        stores = report.count("cp.async.bulk.tensor.2d.global.shared::cta")
        assert stores == (2 if "M=96" in name else 1) + partial_boxes, (name, stores)  # M=96's D is fp32
        loads = report.count("cp.async.bulk.tensor.2d.shared::cta.global.mbarrier")
        assert loads == (5 if name.startswith("+C") else 4) + partial_boxes, (name, loads)
        assert report.shared <= 227 * 1024 and report.spill_stores == report.spill_loads == 0, name
        if "split-K" in name:
            assert_partials_by_tma(report, partial_boxes)


def test_swap_ab_tiles_d_transposed():
    """The kernel's A is the problem's B^T (block_m rows of N), its B the problem's A (block_n rows of M), and D's
    TMA block the transposed tile; the scheduler counts D^T's tiles."""
    cfg = swap_config(8, torch.bfloat16)
    assert (cfg.block_m, cfg.block_n, cfg.block_k, cfg.num_warps, cfg.swap_ab) == (64, 8, 128, 4, True)
    blocks = operand_blocks(cfg, True)
    assert blocks["a"][0] == (64, 128) and blocks["b"][0] == (8, 128) and blocks["c"][0] == (8, 64)
    assert tile_count(1, 4096, cfg) == 64 and tile_count(20, 4096, cfg) == 3 * 64
    assert [swap_config(M, torch.bfloat16).block_n for M in (1, 8, 9, 32, 33, 96, DECODE_M)] == [8, 8, 16, 32, 64,
                                                                                                  128, 128]


def test_small_m_takes_swap_ab_only_with_b_kmajor_up_to_64_rows():
    """predict_us's swap_floor_us makes swap-AB's tile the faster predicted while its width is at most 64."""
    for M in (1, 8, 32, 48, 64):
        for N, K in ((4096, 4096), (14336, 4096), (4096, 14336), (6144, 4096)):
            cfg = small_m_config(M, N, K, torch.bfloat16, H100, b_kmajor=True)
            assert cfg == swap_config(M, torch.bfloat16) and schedule_for(M, N, K, cfg, H100) == "static"
            assert not small_m_config(M, N, K, torch.bfloat16, H100, b_kmajor=False).swap_ab  # row-major B
    assert not small_m_config(65, 4096, 4096, torch.bfloat16, H100, b_kmajor=True).swap_ab
    assert not small_m_config(96, 4096, 4096, torch.bfloat16, H100, b_kmajor=True).swap_ab


def test_swap_ab_choice_is_the_fastest_timed_on_the_h100_decode_rows():
    """bench/results/archive/decode-swap-h100.json (H100, every decode bf16 row timed with the 64x128 tile under each
    schedule, the old 128x128 choice, and swap-AB's 64- and 128-row tiles; decode-mid-m-h100.json: M = 48 to 128, also
    a 128x64 tile): where matmul now takes swap-AB (M <= 64, B K-major) its tile under schedule_for's
    schedule was timed, and within CHOICE_SLACK of the fastest timed."""
    rows = [row for path in (RESULTS, RESULTS.parent / "decode-mid-m-h100.json")
            for row in json.loads(path.read_text())["rows"] if row["group"] == "decode bf16"]
    assert len(rows) == 32
    swapped = 0
    for row in rows:
        M, N, K = map(int, row["shape"].split("x"))
        cfg = small_m_config(M, N, K, torch.bfloat16, H100, b_kmajor=True)
        if not cfg.swap_ab:  # M = 96, 128: swap-AB's split-K 2-4% faster at K = 14336 only, slower elsewhere
            continue
        measured = {name: timing["measured_us"] for name, timing in row["schedules"].items()}
        key = f"{describe(cfg)} {schedule_for(M, N, K, cfg, H100)}"
        assert measured[key] <= CHOICE_SLACK * min(measured.values()), (row["shape"], key, measured)
        swapped += 1
    assert swapped == 20  # M = 1, 8, 32, 48, 64


@pytest.mark.parametrize("cfg, b_kmajor, arch, message", [
    (swap_config(8, torch.bfloat16), False, "sm_90a", "needs b K-major"),
    (swap_config(8, torch.bfloat16), True, "sm_100a", "built for sm_90a"),
    (MatmulConfig(64, 8, 128, stages=4, num_warps=4, cluster_m=2, swap_ab=True), True, "sm_90a", "cluster"),
])
def test_swap_ab_refuses_what_it_is_not_built_for(cfg, b_kmajor, arch, message):
    with pytest.raises(ValueError, match=message):
        check_swap_ab(cfg, b_kmajor, arch)
    check_swap_ab(MatmulConfig(64, 128, 64, stages=4, num_warps=4), False, arch)  # no swap: nothing to refuse


def test_fp8_swap_ab_compiles_to_narrow_fp8_wgmmas(compiled_fp8):
    """The per-tensor/per-row FP8 kernel with swap-AB: wgmma 64xWIDTHx32 e4m3 (QGMMA), BK / 32 = 4 a k-step, one TMA
    box a stage for each operand (BK = 128 bytes), one D store a tile, no spills; under stream-K the partial sums'
    boxes both ways (two 64 x 16 fp32 halves of the 64 x 32 tile), and no other global traffic."""
    for schedule, report in compiled_fp8.items():
        partial_boxes = tma_partial_boxes(32, "bf16") if schedule == "streamk" else 0
        assert sorted(set(re.findall(r"QGMMA\.(\d+x\d+x\d+)", report.sass))) == ["64x32x32"], schedule
        assert report.count("wgmma.mma_async") in (4, 8), schedule
        assert report.count("cp.async.bulk.tensor.2d.shared::cta.global.mbarrier") == 2 + partial_boxes, schedule
        assert report.count("cp.async.bulk.tensor.2d.global.shared::cta") == 1 + partial_boxes, schedule
        assert report.shared <= 227 * 1024 and report.spill_stores == report.spill_loads == 0, schedule
        assert_partials_by_tma(report, partial_boxes, reads=True)  # the scales' loads


@pytest.fixture(scope="module")
def compiled_fp8():
    from tilepipe.kernels.matmul_fp8 import scaled_spec

    cfg = swap_config(32, torch.bfloat16, kernel="scaled")
    specs = {schedule: scaled_spec(cfg, "fp8e4nv", "fp8e4nv", "bf16", True, schedule)
             for schedule in ("static", "streamk")}
    return dict(zip(specs, compile_kernels(list(specs.values()))))


def test_fp8_takes_swap_ab_for_small_m_per_tensor_and_per_row():
    """matmul_fp8's choice (fp8_config_for): swap-AB's tile by predicted time up to M = 64 for per-tensor/per-row
    scales, never for the blockwise kernel; on the H100 swap-AB's tile ran faster than the 64-row tile on every row
    timed (bench/results/archive/shapes-h100-v5.json: M = 16; fp8-mid-m-h100.json: M = 48 and 64, 1.03-1.15x)."""
    from tilepipe.host.configs import fp8_config_for

    for M in (1, 16, 48, 64):
        assert fp8_config_for(M, 4096, 4096, False, torch.bfloat16, H100) == swap_config(M, torch.bfloat16,
                                                                                        kernel="scaled")
    assert not fp8_config_for(65, 4096, 4096, False, torch.bfloat16, H100).swap_ab
    assert not fp8_config_for(16, 4096, 4096, True, torch.bfloat16, H100).swap_ab
    rows = [row for name in ("shapes-h100-v5.json", "fp8-mid-m-h100.json")
            for row in json.loads((RESULTS.parent / name).read_text())["rows"]
            if row["group"] == "FP8 per-tensor" and int(row["shape"].split("x")[0]) <= 64]
    assert len(rows) == 6
    for row in rows:
        timed = {name: t["measured_us"] for name, t in row["schedules"].items() if t.get("measured_us")}
        swapped = [us for name, us in timed.items() if "swap-AB" in name]
        assert len(timed) == 2 and swapped[0] == min(timed.values()), (row["shape"], timed)
