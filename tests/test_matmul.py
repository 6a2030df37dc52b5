"""CPU tests of the GEMM: compile every configuration for sm_90a, check the config choice and input validation."""

import math
import re
from dataclasses import replace

import pytest
import torch

import tilepipe
from tilepipe.host import staging
from tilepipe.host.configs import (FP32_SOURCE_CONFIGS, LARGE_16BIT, LARGE_FP32, LARGE_SUBTILED_FP32,
                                   MEDIUM, MEDIUM_FP32_SOURCE, NARROW, SMALL, SPLIT_MIN_STEPS, VECTOR_SCRATCH_BYTES,
                                   choose_config, predict_us, schedule_for, schedule_programs, small_m_config,
                                   small_m_configs, tile_count, tile_us)
from tilepipe.host.gpus import H100
from tilepipe.kernels.matmul import matmul_plan, matmul_spec
from tilepipe.verify.compile import CompileError, compile_kernels

# (config, input dtype, D dtype, B K-major, with C, C's dtype when not D's, per-column bias dtype, schedule)
CONFIGS = ((LARGE_16BIT, ("bf16", "fp16")), (LARGE_FP32, ("fp32", )), (SMALL, ("bf16", "fp32")))
# fp16 and bf16 operands (and a 16-bit D of either) compile to the same PTX up to the type's name
# (test_16bit_types_change_only_the_type_names): bf16 takes every B layout and C, fp16 its own D's and one layout of
# each fp32 D
CASES = [(cfg, dtype, c_dtype, kmajor, has_c, None, None, "static")
         for cfg, c_dtypes in CONFIGS
         for dtype in ("bf16", "fp16") for c_dtype in c_dtypes for kmajor in (True, False) for has_c in (False, True)
         if dtype == "bf16" and c_dtype != "fp16" or dtype == c_dtype or c_dtype == "fp32" and has_c and not kmajor]
CASES += [(cfg, "bf16", "bf16", kmajor, True, "fp32", None, "static") for cfg in (MEDIUM_FP32_SOURCE, SMALL)
          for kmajor in (True, False)]  # fp32 C, 16-bit D: C in source stages of its own
CASES += [(LARGE_16BIT, "bf16", "bf16", True, False, None, bias, "static") for bias in ("bf16", "fp32")]
# the dynamic and stream-K schedules: every configuration, with and without the epilogue-load role, both B layouts
CASES += [(cfg, "bf16", c_dtypes[-1], not has_c, has_c, None, None, schedule) for cfg, c_dtypes in CONFIGS
          for has_c in (False, True) for schedule in ("dynamic", "streamk")]
CASES += [(MEDIUM_FP32_SOURCE, "bf16", "bf16", True, True, "fp32", None, "streamk"),
          (LARGE_16BIT, "bf16", "bf16", True, False, None, "bf16", "streamk")]
# small M's 64-row tiles with shared memory filled with stages, under stream-K's kernel (split-K) and static
DECODE, DECODE_FP32 = small_m_configs(torch.bfloat16)[0], small_m_configs(torch.float32)[0]
CASES += [(DECODE, "bf16", "bf16", True, False, None, None, "streamk"), (DECODE, "bf16", "bf16", True, True, None,
                                                                         None, "streamk"),
          (DECODE, "bf16", "bf16", True, False, None, "bf16", "streamk"), (DECODE, "fp16", "fp16", False, False, None,
                                                                           None, "static"),
          (DECODE_FP32, "bf16", "fp32", True, False, None, None, "streamk")]
# the narrow 64x64 tile of M = 65-128 (static; with C and an fp32 D: the largest output stages it takes)
CASES += [(NARROW, "bf16", "bf16", True, False, None, None, "static"),
          (NARROW, "fp16", "fp32", False, True, None, None, "static")]
# the 128x256 tile for an fp32 D (its D in sub-tiles), plain and with C, and fitted MEDIUM (five stages, fp32 D)
CASES += [(LARGE_SUBTILED_FP32, "bf16", "fp32", kmajor, has_c, None, None, "static")
          for kmajor, has_c in ((True, False), (False, True))]
CASES += [(replace(MEDIUM, stages=5), "bf16", "fp32", True, True, None, None, "static")]


def tma_partial_boxes(tile_n: int, c_dtype: str) -> int:
    """TMA boxes of one fp32 partial tile `tile_n` wide (pipeline/partials.py): sub-tiles of an output stage of
    `c_dtype` D, each split into 128-byte-wide boxes."""
    bits = {"fp32": 32}.get(c_dtype, 16)
    return 32 // bits * max(1, tile_n * bits // 32 * 4 // 128)


def assert_partials_by_tma(report, partial_boxes: int, reads: bool = False) -> None:
    """Stream-K's partial sums (`partial_boxes` TMA boxes each way, 0 without stream-K) move by TMA: UTMASTG out of
    and UTMALDG into shared memory; the only other global accesses are the slot flag's 4-byte acquire and retiring
    store and release add (no wide STG/LDG loop over a tile), and, where the epilogue `reads` a bias or scales, its
    loads."""
    assert report.count("cp.async.bulk.tensor.2d.global.shared::cta") >= 1 + partial_boxes  # D and the partials
    assert report.count("UTMASTG", "sass") >= report.count("cp.async.bulk.tensor.2d.global.shared::cta")
    assert report.count("UTMALDG", "sass") >= report.count("cp.async.bulk.tensor.2d.shared::cta.global.mbarrier")
    for wide in ("STG.E.64", "STG.E.128") + (() if reads else ("LDG.E.64", "LDG.E.128")):
        assert report.count(wide, "sass") == 0, wide
    streamk = partial_boxes > 0
    assert report.count("STG.E", "sass") == report.count("STG.E.STRONG.GPU", "sass") == streamk  # the flag's retire
    assert report.count("REDG.E.ADD.S32.STRONG.GPU", "sass") == streamk  # the contributor's release
    assert report.count("fence.proxy.async.global") == 2 * streamk  # async-proxy writes -> release; acquire -> reads


@pytest.fixture(scope="module")
def reports():
    return dict(zip(range(len(CASES)), compile_kernels([matmul_spec(*case[:7], schedule=case[7]) for case in CASES])))


@pytest.mark.parametrize("index", range(len(CASES)), ids=lambda i: "{0.block_m}x{0.block_n}-{1}-{2}-{3}{4}{5}{6}{7}".format(
    *CASES[i][:3], "kmajor" if CASES[i][3] else "rowmajor", "-residual" if CASES[i][4] else "",
    f"-{CASES[i][5]}C" if CASES[i][5] else "", f"-{CASES[i][6]}bias" if CASES[i][6] else "",
    "" if CASES[i][7] == "static" else f"-{CASES[i][7]}"))
def test_gemm_compiles_to_wgmma_tma_and_no_spills(reports, index):
    cfg, dtype, c_dtype, kmajor, has_c, source_dtype, bias_dtype, schedule = CASES[index]
    report = reports[index]
    assert not isinstance(report, CompileError), report
    assert report.count("wgmma.mma_async") > 0 and report.count("HGMMA", "sass") > 0
    # TMA boxes are at most 128 bytes wide with a 128-byte swizzle: A and a K-major B take BK/64 boxes (one at BK = 64,
    # two for NARROW's BK = 128), a row-major B tile BN/64
    a_boxes = cfg.block_k * 2 // 128
    b_boxes = a_boxes if kmajor else cfg.block_n * 2 // 128
    c_boxes = cfg.block_n * (4 if "fp32" in (c_dtype, source_dtype) else 2) // 128 if has_c else 0  # C loads
    partial_boxes = tma_partial_boxes(cfg.block_n, c_dtype) if schedule == "streamk" else 0  # each stored and loaded
    loads = report.count("cp.async.bulk.tensor.2d.shared::cta.global.mbarrier")
    assert loads == a_boxes + b_boxes + c_boxes + partial_boxes
    assert report.count("cp.async.bulk.tensor.2d.global.shared::cta") >= 1  # C store (split into 128-byte-wide boxes)
    assert report.count("setmaxnreg") > 0
    assert report.spill_stores == 0 and report.spill_loads == 0
    planned = matmul_plan.fn(cfg.block_m, cfg.block_n, cfg.block_k, cfg.stages, cfg.c_stages, dtype, c_dtype, kmajor,
                             has_c, source_dtype, dynamic=schedule == "dynamic", streamk=schedule == "streamk",
                             epilogue_n=cfg.epilogue_n)
    assert planned.fits
    assert ("src" in str(planned)) == (source_dtype is not None)  # fp32 C gets source stages of its own
    # only the bias is read without TMA (stream-K's partial sums travel by TMA too)
    assert (report.count("ld.global") > 0) == (bias_dtype is not None)
    # + warp_specialize's capture scratch, and with a bias its read-ahead's layout conversion
    assert 0 <= report.shared - planned.total_bytes < 256 + (VECTOR_SCRATCH_BYTES if bias_dtype else 0)
    # the dynamic scheduler draws tickets with one atomic add and leaves the counter at zero with one exchange
    dynamic, streamk = schedule == "dynamic", schedule == "streamk"
    assert report.count("atom.global.gpu.acq_rel.add") == report.count("atom.global.gpu.acq_rel.exch") == dynamic
    # stream-K: a contributor's release-signal, a finisher's acquire-spin and retiring store (pipeline/partials.py)
    assert (report.count("red.release.gpu.global.add"), report.count("st.relaxed.gpu.global")) == (streamk, ) * 2
    assert (report.count("ld.acquire.gpu.global") > 0) == streamk
    assert_partials_by_tma(report, partial_boxes, reads=bias_dtype is not None)
    assert report.num_warps == cfg.num_warps + 4  # up to 4 one-warp roles: one warpgroup of workers either way


def test_16bit_types_change_only_the_type_names(reports):
    """Each fp16 case's PTX is its bf16 twin's (a 16-bit D's dtype following the operands') line for line once the
    types and the kernel's name are spelled alike: what the cases assert holds for the other 16-bit type, which
    CASES therefore compiles for fewer layouts."""
    def spelled_alike(ptx: str) -> str:
        return re.sub(r"matmul_kernel\w*", "matmul_kernel", ptx).replace("bf16", "f16")

    twins = [(index, CASES.index(twin)) for index, (cfg, dtype, c_dtype, *rest) in enumerate(CASES)
             if dtype == "fp16" and (twin := (cfg, "bf16", "bf16" if c_dtype == "fp16" else c_dtype, *rest)) in CASES]
    assert len(twins) == 6  # the 128x256 tile's four layouts with fp16 D, an fp32 D's for 128x128 and 64x128
    for index, twin in twins:
        assert spelled_alike(reports[index].ptx) == spelled_alike(reports[twin].ptx), CASES[index]


def test_config_fills_the_machine():
    assert choose_config(8192, 8192, torch.bfloat16, 132) == LARGE_16BIT
    assert choose_config(8192, 8192, torch.float32, 132) == LARGE_FP32
    assert choose_config(2048, 2048, torch.bfloat16, 132) == LARGE_16BIT  # 128 tiles on 132 SMs
    assert choose_config(1024, 1024, torch.bfloat16, 132) == SMALL  # 32 large tiles would leave 100 SMs idle
    assert choose_config(1408, 1408, torch.bfloat16, 132) == MEDIUM  # 121 tiles of 128x128: 92%
    assert choose_config(1536, 1536, torch.bfloat16, 132) == SMALL  # none reaches 75%: the best-filled one
    assert choose_config(8192, 8192, torch.bfloat16, 132, FP32_SOURCE_CONFIGS) == MEDIUM_FP32_SOURCE


def test_streamk_is_picked_where_whole_tiles_waste_part_of_a_wave():
    """schedule_for (H100 measurements in bench/results/archive/scheduler-h100-v5.json): stream-K at 133 tiles of K = 4096
    (1.07x static) and 288 tiles of K = 8192 (1.11x the 128x128 static default); at 198 tiles of K = 8192 (1.155x) and
    450 of K = 4096 (1.018x; bench/results/archive/whole-wave-tiles-h100.json); static for short tiles, full waves, fewer tiles
    than SMs, and where the saved part of a wave leaves too little to gain."""
    pick = schedule_for
    assert pick(896, 4864, 4096, LARGE_16BIT, H100) == "streamk"  # 133 tiles
    assert pick(2304, 4096, 8192, LARGE_16BIT, H100) == "streamk"  # 288 tiles
    assert pick(896, 4864, 1024, LARGE_16BIT, H100) == "static"  # 12 us tiles: the 20 us fixup outweighs the wave
    assert pick(8192, 8192, 1024, LARGE_16BIT, H100) == "static"  # 15.5 waves: measured 0.96x static
    assert pick(3840, 3840, 4096, LARGE_16BIT, H100) == "streamk"  # 450 tiles: 1.018x static (0.996x under 3.6)
    assert pick(2304, 2816, 8192, LARGE_16BIT, H100) == "streamk"  # 198 tiles: 1.155x static, 1.034x 128x128 static
    assert pick(1536, 2816, 4096, LARGE_16BIT, H100) == "static"  # exactly 132 tiles
    assert pick(2048, 2048, 2048, LARGE_16BIT, H100) == "static"  # 128 tiles


def test_small_m_tiles_fill_shared_memory_with_stages():
    """Small M's 64-row tile takes more stages than SMALL (bytes in flight for a memory-bound GEMM), as many as fit."""
    for out, cfg in ((torch.bfloat16, DECODE), (torch.float32, DECODE_FP32)):
        assert (cfg.block_m, cfg.block_n, cfg.num_warps) == (64, 128, 4) and cfg.stages > SMALL.stages
        more = matmul_plan.fn(64, 128, 64, cfg.stages + 1, 1, "bf16", "fp32" if out == torch.float32 else "bf16",
                              True, True)
        assert not more.fits


def test_matmul_fills_its_64_and_128_row_tiles_with_stages_after_choosing_them(monkeypatch):
    """Where config_for's choice ends at SMALL or MEDIUM it runs as many stages as fit (H100: 1.00-1.20x,
    bench/results/archive/small-m-stages-moves-h100.json, medium-stages-moves-h100.json); the pieced and ping-pong comparisons
    still weigh SMALL's six (fitted before them, the 64-row tile took 256x11008x4096 from the pieced 128x192, which
    ran 1.09x faster there), and an fp32 C's own stages leave no room for more."""
    from tilepipe.host import configs
    from tilepipe.host.configs import PIECED_SUBTILED_16BIT, config_for

    monkeypatch.setattr(configs, "device_model", lambda device: H100)
    monkeypatch.setattr(configs, "cached_config", lambda *args: None)

    def choice(M, N, K, out=torch.bfloat16, **kw):
        return config_for(M, N, K, torch.bfloat16, out, True, 0, **kw)

    assert choice(256, 4096, 4096) == replace(SMALL, stages=8) == DECODE
    assert choice(1024, 1024, 8192, torch.float32) == DECODE_FP32
    assert choice(1408, 1408, 4096, torch.float32) == replace(MEDIUM, stages=5)  # 66 tiles of 128x256: half a wave
    assert choice(4096, 4096, 4096, torch.float32) == LARGE_SUBTILED_FP32  # an fp32 D's 128x256 tile (row 93)
    assert choice(4096, 4096, 4096, torch.float32, has_c=True) == LARGE_SUBTILED_FP32
    assert choice(8192, 8192, 1024, torch.float32, has_c=True) == replace(MEDIUM, stages=5)  # C sub-tiles, 16 k-steps
    assert choice(2560, 4096, 14336, torch.float32) == replace(MEDIUM, stages=5)  # 320 wide tiles: emptier waves
    assert choice(512, 4096, 4096, has_c=True) == replace(MEDIUM, stages=6)
    assert choice(256, 11008, 4096) == PIECED_SUBTILED_16BIT
    assert choice(4096, 4096, 4096, own_source=True) in FP32_SOURCE_CONFIGS


def test_small_m_takes_split_k_where_its_programs_would_stream_longer_than_dram():
    """Decode shapes: 64-row tiles; split-K where one program a tile would stream its k-steps for longer than all
    bytes take from DRAM plus the split's fixup (32 tiles x 4 splits at N x K = 4096 x 14336: 60.8 us against 69.6
    static on the H100, bench/results/archive/shapes-h100.json), static where DRAM bounds the tiles already (4096 x 4096:
    static 25.3 against split-K 28.1 us; 112 tiles at 14336 x 4096)."""
    for M in (1, 8, 32, 64):
        cfg = small_m_config(M, 4096, 14336, torch.bfloat16, H100)
        assert cfg == DECODE and schedule_for(M, 4096, 14336, cfg, H100) == "splitk"
        assert schedule_programs(M, 4096, 14336, cfg, H100.sms, "splitk") == 128
        for N, K in ((4096, 4096), (14336, 4096)):
            assert schedule_for(M, N, K, small_m_config(M, N, K, torch.bfloat16, H100), H100) == "static"
    assert predict_us(1, 4096, 14336, DECODE, "splitk", H100) < 0.7 * predict_us(1, 4096, 14336, MEDIUM, "static",
                                                                                  H100)


def test_split_k_grid_splits_every_tile_evenly():
    """tiles x splits programs, at most the SMs, each tile's k-steps split at least SPLIT_MIN_STEPS each; no split
    where the tiles already fill half the machine or K is short."""
    sms = 132
    for M, N, K in ((1, 4096, 4096), (17, 520, 8200), (100, 264, 1000), (64, 9000, 4096), (1, 128, 128)):
        tiles, k_tiles = tile_count(M, N, DECODE), -(-K // DECODE.block_k)
        programs = schedule_programs(M, N, K, DECODE, sms, "splitk")
        splits = programs // tiles
        assert programs <= sms and (programs % tiles == 0 or programs == sms)
        assert splits == 1 or k_tiles // splits >= SPLIT_MIN_STEPS
        assert splits == max(1, min(sms // tiles, k_tiles // SPLIT_MIN_STEPS))


def test_predicted_time_agrees_with_the_tile_model_where_compute_bound():
    """At 8192^3 the model is schedule_for's: whole waves of full-rate tiles (plus the launch); stream-K at 133
    tiles costs the tiles' share of the SMs plus its fixup."""
    waves = -(-tile_count(8192, 8192, LARGE_16BIT) // H100.sms)
    assert predict_us(8192, 8192, 8192, LARGE_16BIT, "static", H100) == pytest.approx(
        waves * tile_us(LARGE_16BIT, 8192, H100) + H100.launch_us)
    static, split = (predict_us(896, 4864, 4096, LARGE_16BIT, s, H100) for s in ("static", "streamk"))
    assert static == pytest.approx(2 * tile_us(LARGE_16BIT, 4096, H100) + H100.launch_us) and split < static


def test_predicted_time_is_within_10_percent_of_the_h100_scheduler_bench():
    """Calibration: predict_us against every static and stream-K row of
    bench/results/archive/scheduler-h100-v7.json (H100, the tile and schedule each ran), except K = 3000, whose rows start off 32-byte sectors (13-18% slower there:
    docs/perf-log.md rows 17-18, not in the model)."""
    import json
    from pathlib import Path

    record = json.loads((Path(__file__).parents[1] / "bench/results/archive/scheduler-h100-v7.json").read_text())
    tiles = {"64x128": SMALL, "128x128": MEDIUM, "128x256": LARGE_16BIT}
    checked = 0
    for row in record["rows"]:
        M, N, K = map(int, row["shape"].split("x"))
        if "tiles of" not in row["variant"] or row["variant"].startswith("dynamic") or K % 16:
            continue
        cfg = tiles[row["variant"].split("tiles of ")[1].rstrip(")")]
        measured = 2.0 * M * N * K / row["tilepipe_tflops"] * 1e-6
        predicted = predict_us(M, N, K, cfg, "streamk" if "streamk" in row["variant"] else "static", H100)
        assert 0.9 < measured / predicted < 1.1, (row["shape"], row["variant"], measured, predicted)
        checked += 1
    assert checked >= 20


DECODE_ERROR = 0.15
"""How far (measured / predicted - 1) a decode-row timing may be from predict_us."""
CHOICE_SLACK = 1.03
"""How much slower (measured) the model's tile and schedule may be than the fastest of those timed on a row."""
NOT_MODELLED = {("96x14336x4096", "streamk"): "224 tiles in two rows, 1.7 a program: the two tiles of a B panel run "
                                              "at different times, so B streams from DRAM about twice (94 us)"}


def test_predicted_time_is_within_15_percent_of_the_h100_decode_rows():
    """Calibration of small M (the decode terms of predict_us: the H100's dram_bytes_per_us, l2_dirty_bytes,
    sm_dram_bytes_per_us, streamk_fixup_us) against the 16 "decode bf16" rows of bench/results/archive/shapes-h100.json (H100,
    M = 1 to 96): every schedule timed on the chosen 64-row tile within DECODE_ERROR, but NOT_MODELLED; and the tile
    and schedule the model picks (small_m_config, schedule_for) the measured fastest of those timed, the old choice
    ("before: ...") included, or within CHOICE_SLACK of it."""
    import json
    from pathlib import Path

    from tilepipe.tools.bench_shapes import describe

    record = json.loads((Path(__file__).parents[1] / "bench/results/archive/shapes-h100.json").read_text())
    rows = [row for row in record["rows"] if row["group"] == "decode bf16"]
    assert len(rows) == 16
    for row in rows:
        M, N, K = map(int, row["shape"].split("x"))
        cfg = small_m_config(M, N, K, torch.bfloat16, H100)
        narrow = cfg == NARROW  # chosen since this run: its choice is checked on its own timings (next test)
        cfg = DECODE if narrow else cfg
        assert describe(cfg) == row["config"], row["shape"]
        measured = {name: timing["measured_us"] for name, timing in row["schedules"].items()}
        for schedule, us in measured.items():
            if not schedule.startswith("before") and (row["shape"], schedule) not in NOT_MODELLED:
                predicted = predict_us(M, N, K, cfg, schedule, H100)
                assert abs(us / predicted - 1) < DECODE_ERROR, (row["shape"], schedule, us, predicted)
        chosen = schedule_for(M, N, K, cfg, H100)
        assert narrow or measured[chosen] <= CHOICE_SLACK * min(measured.values()), (row["shape"], chosen, measured)


def test_narrow_tile_is_taken_where_it_ran_within_choice_slack_of_the_fastest():
    """NARROW (64x64, M = 65-128, one wave of its tiles) against the tile small M took before it, on the four M = 96
    decode rows of bench/results/archive/issue20-clusters-probe-h100.json (H100, one process, interleaved with torch): where
    small_m_config takes it, it ran within CHOICE_SLACK of the faster of the two; where it does not (more tiles than
    SMs), it ran slower."""
    import json
    from pathlib import Path

    record = json.loads((Path(__file__).parents[1] / "bench/results/archive/issue20-clusters-probe-h100.json").read_text())
    times = {(row["shape"], row["variant"]): 2.0 * math.prod(map(int, row["shape"].split("x"))) /
             row["tilepipe_tflops"] * 1e-6 for row in record["rows"]}
    taken = 0
    for N, K in ((4096, 4096), (14336, 4096), (4096, 14336), (6144, 4096)):
        shape = f"96x{N}x{K}"
        narrow, before = times[shape, "64x64 s10 w4 static"], times[shape, "default"]
        if small_m_config(96, N, K, torch.bfloat16, H100, b_kmajor=True) == NARROW:
            assert narrow <= CHOICE_SLACK * min(narrow, before), (shape, narrow, before)
            taken += 1
        else:
            assert narrow > before, (shape, narrow, before)
    assert taken == 2  # N = 4096: 128 narrow tiles


def test_dynamic_plan_declares_every_other_role_as_a_ring_consumer():
    plain = matmul_plan.fn(128, 256, 64, 3, 1, "bf16", "bf16", True, False, dynamic=True)
    residual = matmul_plan.fn(128, 256, 64, 3, 1, "bf16", "bf16", True, True, dynamic=True)
    ring = {use.name: use for use in residual.barrier_map()}
    assert ring["pipelines.clc.empty"].arrivals == 4 and ring["pipelines.clc.full"].arrivals == 1
    assert {use.name: use for use in plain.barrier_map()}["pipelines.clc.empty"].arrivals == 3
    assert ring["pipelines.clc_throttle.full"].producer == "load"  # the load role paces the scheduler
    static = matmul_plan.fn(128, 256, 64, 3, 1, "bf16", "bf16", True, True, dynamic=False)
    assert residual.total_bytes - static.total_bytes < 256 and residual.fits  # ring + throttle + responses: tiny


def test_bad_scheduler_names_the_argument():
    with pytest.raises(ValueError, match="scheduler must be one of"):
        tilepipe.matmul(t(4, 8), t(8, 4), scheduler="fast")


def t(*shape, dtype=torch.bfloat16):
    return torch.randn(*shape).to(dtype)


@pytest.mark.parametrize("call, error, message", [
    (lambda: tilepipe.matmul(t(4, 8), t(8, 4)), ValueError, "a must be on a CUDA device"),
    (lambda: tilepipe.matmul(t(4, 8, 2), t(8, 4)), ValueError, "a must be 2-D"),
    (lambda: tilepipe.matmul(t(4, 8), t(8)), ValueError, "b must be 2-D"),
    (lambda: tilepipe.matmul(t(4, 8, dtype=torch.float32), t(8, 4)), TypeError, "a must be bfloat16 or float16"),
    (lambda: tilepipe.matmul(t(4, 8), t(8, 4, dtype=torch.float8_e4m3fn)), TypeError, "b must be bfloat16 or float16"),
    (lambda: tilepipe.matmul([[1.0]], t(8, 4)), TypeError, "a must be a torch.Tensor"),
])
def test_bad_input_names_the_argument(call, error, message):
    with pytest.raises(error, match=message):
        call()


@pytest.mark.skipif(not torch.cuda.is_available(), reason="shape/dtype checks after the device check need CUDA")
@pytest.mark.gpu
def test_bad_cuda_input_names_the_argument():
    a, b = t(4, 8).cuda(), t(8, 4).cuda()
    with pytest.raises(ValueError, match="a.shape\\[1\\] must equal b.shape\\[0\\]"):
        tilepipe.matmul(a, t(7, 4).cuda())
    with pytest.raises(TypeError, match="same dtype"):
        tilepipe.matmul(a, b.half())
    with pytest.raises(ValueError, match="out must have shape"):
        tilepipe.matmul(a, b, out=torch.empty(4, 5, device="cuda", dtype=torch.bfloat16))
    with pytest.raises(TypeError, match="out_dtype must be"):
        tilepipe.matmul(a, b, out_dtype=torch.int32)
    with pytest.raises(ValueError, match="out must not share memory with a"):
        tilepipe.matmul(a[:, :4], b[:4].contiguous(), out=a[:, 4:])
    assert tilepipe.matmul(a[:, :0], b[:0]).abs().sum() == 0  # K = 0: zeros, no kernel
    c = torch.randn(4, 4, device="cuda", dtype=torch.bfloat16)
    assert torch.equal(tilepipe.matmul(a[:, :0], b[:0], c=c, beta=2.0), c * 2)  # K = 0 with C: beta * C
    with pytest.raises(ValueError, match="beta is nonzero but c is None"):
        tilepipe.matmul(a, b, beta=1.0)
    with pytest.raises(TypeError, match="c must have the output dtype"):
        tilepipe.matmul(a, b, c=c.half(), beta=1.0)
    with pytest.raises(TypeError, match="c must have the output dtype"):
        tilepipe.matmul(a, b, out_dtype=torch.float32, c=c, beta=1.0)
    with pytest.raises(ValueError, match="c must have shape"):
        tilepipe.matmul(a, b, c=c[:3], beta=1.0)
    with pytest.raises(TypeError, match="alpha must be a real number"):
        tilepipe.matmul(a, b, alpha="2")
    with pytest.raises(ValueError, match="does not broadcast"):
        tilepipe.addmm(torch.zeros(3, device="cuda", dtype=torch.bfloat16), a, b)
    assert tilepipe.matmul(a[:0], b).shape == (0, 4)


def test_restaging_copy_compiles_to_16_byte_vectors():
    from tilepipe.kernels.restage import restage_spec
    from tilepipe.verify.compile import compile_kernel

    report = compile_kernel(restage_spec())
    assert report.count("ld.global.v4.b32") > 0 and report.count("st.global.v4.b32") > 0
    assert report.count("ld.global.b16") == 0 and report.spill_stores == 0


@pytest.mark.parametrize("shape, restaged", [
    ((7168, 5120, 3000), 2),  # 6000-byte rows: ~25% of a 333 us GEMM against ~59 us of copying
    ((8192, 8192, 1000), 2),
    ((2048, 2048, 3000), 0),  # one wave of 37 us tiles: the copy (20 us) costs more than it saves
    ((7168, 5120, 3072), 0),  # rows on whole lines
    ((7168, 5120, 4000), 0),  # 8000-byte rows: on 32-byte sectors, nothing to save
])
def test_rows_off_sectors_are_restaged_where_the_model_says_it_pays(monkeypatch, shape, restaged):
    monkeypatch.setattr(staging, "device_model", lambda device: H100)
    monkeypatch.setattr(staging, "restaged", lambda t, device: "restaged")
    M, N, K = shape
    a, b = torch.empty(M, K, dtype=torch.bfloat16), torch.empty(N, K, dtype=torch.bfloat16)
    views = staging.sector_aligned(a, b, M, N, K, LARGE_16BIT, 0)
    assert sum(view == "restaged" for view in views if isinstance(view, str)) == restaged


def test_rows_off_sectors_with_a_partial_last_vector_are_not_restaged():
    """The copy moves whole 16-byte vectors and ends its last block at the last column: a row of 299 bf16 values
    would make that block start off a vector boundary (a misaligned-address fault the H100 sweep found, call 88)."""
    padded = torch.empty(300, 312, dtype=torch.bfloat16)  # 624-byte rows: 16 bytes off a sector
    assert staging.off_sectors(padded[:, :304]) and not staging.off_sectors(padded[:, :299])
