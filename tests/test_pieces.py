"""CPU tests of tiles with a side held as pieces (tilepipe/pipeline/pieces.py: 96, 160, 192): their pieces and TMA
boxes, their shared-memory plan and swizzles, the sm_90a GEMM compiled with them (a wgmma per pair of pieces, one
commit group each, the descriptors' boxes, with C too), the host's refusals and matmul's choice."""

import re
from dataclasses import replace

import pytest
import torch

from tilepipe.host.checks import check_pieced
from tilepipe.host import configs
from tilepipe.host.configs import LARGE_16BIT, PIECED_16BIT, PIECED_SUBTILED_16BIT, PIECED_WHOLE_16BIT, MatmulConfig
from tilepipe.host.gpus import H100
from tilepipe.kernels.matmul import matmul_plan, matmul_spec, operand_blocks
from tilepipe.pipeline.pieces import TilePieces, row_side_ok, side_pieces
from tilepipe.verify.compile import CompileError, compile_kernels

SQUARE = MatmulConfig(192, 192, 64, stages=3)


def test_each_side_has_its_power_of_two_pieces():
    assert side_pieces(256) == (256, ) and side_pieces(192) == (128, 64)
    assert side_pieces(160) == (128, 32) and side_pieces(96) == (64, 32)
    with pytest.raises(ValueError, match=re.escape("power of two or one of [96, 160, 192]")):
        side_pieces(224)
    assert row_side_ok(192) and row_side_ok(64) and not row_side_ok(160) and not row_side_ok(96)  # 32-row pieces
    assert TilePieces(128, 160).box == (128, 32) and TilePieces(160, 64).box == (32, 64)
    assert TilePieces(128, 96).shapes == [((0, 0), (128, 64)), ((0, 64), (128, 32))]
    assert TilePieces(192, 192).shapes == [((0, 0), (128, 128)), ((0, 128), (128, 64)), ((128, 0), (64, 128)),
                                           ((128, 128), (64, 64))]
    assert TilePieces(192, 192).box == (64, 64) and TilePieces(128, 192).box == (128, 64)
    assert not TilePieces(128, 256).pieced and TilePieces(192, 64).pieced
    assert operand_blocks(PIECED_WHOLE_16BIT, True) == {"a": ((64, 64), ()), "b": ((128, 64), ()), "c": ((64, 128), ())}
    assert operand_blocks(PIECED_SUBTILED_16BIT, False) == {"a": ((128, 64), ()), "b": ((64, 64), ()),
                                                            "c": ((128, 32), ())}  # D in 128x32 sub-tiles


def test_the_plan_holds_an_array_per_piece():
    plan = matmul_plan.fn(192, 192, 64, 3, 1, "bf16", "bf16", True)
    tiles = {placed.part.name: (placed.part.tile, placed.part.stages) for placed in plan.placed
             if placed.part.kind == "tile"}
    assert tiles == {"a0": ((128, 64), 3), "a1": ((64, 64), 3), "b0": ((128, 64), 3), "b1": ((64, 64), 3),
                     "c0": ((128, 128), 1), "c1": ((128, 64), 1), "c2": ((64, 128), 1), "c3": ((64, 64), 1)}
    assert plan.total_bytes <= plan.limit_bytes
    with pytest.raises(ValueError, match="without clusters"):
        matmul_plan.fn(192, 128, 64, 4, 1, "bf16", "bf16", True, cluster_m=2)


@pytest.fixture(scope="module")
def compiled():
    cases = [(cfg, kmajor) for cfg in (*PIECED_16BIT, SQUARE) for kmajor in (True, False)]
    specs = [matmul_spec(cfg, "bf16", "bf16", kmajor) for cfg, kmajor in cases]
    specs.append(matmul_spec(PIECED_WHOLE_16BIT, "bf16", "bf16", False, bias_dtype="bf16", schedule="dynamic"))
    specs.append(matmul_spec(PIECED_SUBTILED_16BIT, "bf16", "bf16", True, has_c=True))
    return list(zip(cases + [(PIECED_WHOLE_16BIT, False), (PIECED_SUBTILED_16BIT, True)], compile_kernels(specs)))


def test_each_pair_of_pieces_is_its_own_wgmma_and_commit_group(compiled):
    """A k-step (BK = 64: four k16 steps) issues one wgmma per pair of A and B pieces at the piece's width (a 64-row
    piece's columns split over two warpgroups; one warpgroup's whole), each its own commit group, so the MMA role's
    wait for all but one k-step's groups frees exactly the stage read a k-step before."""
    for (cfg, _), report in compiled:
        assert not isinstance(report, CompileError), report
        split = lambda rows: 2 if rows == 64 and cfg.num_warps == 8 else 1  # noqa: E731
        widths = [cols // split(rows) for _, (rows, cols) in TilePieces(cfg.block_m, cfg.block_n).shapes]
        shapes = re.findall(r"wgmma\.mma_async\.sync\.aligned\.m64n(\d+)k16", report.ptx)
        assert sorted(map(int, shapes)) == sorted(w for w in widths for _ in range(4)), (cfg, shapes)
        assert report.count("wgmma.commit_group.sync.aligned") == len(widths), cfg
        assert report.shared <= 227 * 1024


def test_pieces_move_in_their_descriptors_boxes(compiled):
    """A's, B's and D's TMA boxes per tile (and C's, in D's boxes): the boxes of operand_blocks covering each piece
    (a 128-column bf16 box is two hardware boxes: wider than the 128-byte swizzle); D in sub-tiles, a box each."""
    expected = {(192, 128, True): 3 + 1 + 3 * 2, (192, 128, False): 3 + 2 + 3 * 2, (128, 192, True): 1 + 3 + 6,
                (128, 192, False): 1 + 3 + 6, (192, 192, True): 3 + 3 + 9, (192, 192, False): 3 + 3 + 9,
                (128, 160, True): 1 + 5 + 5, (128, 160, False): 1 + 5 + 5, (128, 96, True): 1 + 3 + 3,
                (128, 96, False): 1 + 3 + 3, (64, 192, True): 1 + 3 + 3, (64, 192, False): 1 + 3 + 3}
    # a 32-wide piece: B and D in 32-wide boxes; 128x192: D in 6 sub-tiles
    for (cfg, kmajor), report in compiled[:-2]:
        assert report.count("cp.async.bulk.tensor") == expected[cfg.block_m, cfg.block_n, kmajor], (cfg, kmajor)
        assert report.spill_stores == report.spill_loads == 0, cfg
    with_c = compiled[-1][1]  # 128x192 with C: C loaded into the sub-tile stages in D's boxes too
    assert with_c.count("cp.async.bulk.tensor") == expected[128, 192, True] + 6


def test_pieced_tiles_are_refused_where_they_are_not_built():
    check_pieced(PIECED_WHOLE_16BIT, "dynamic", "sm_90a", False, torch.bfloat16)
    check_pieced(LARGE_16BIT, "streamk", "sm_90a", True, torch.float32)  # not pieced: nothing to refuse
    check_pieced(configs.NARROW_PIECED_16BIT, "dynamic", "sm_90a", False, torch.float16)  # 64x96 on 4 warps
    refusals = [((PIECED_WHOLE_16BIT, "static", "sm_90a", True, torch.bfloat16), "c: a 192x128 tile takes a C of D's"),
                ((PIECED_SUBTILED_16BIT, "streamk", "sm_90a", False, torch.bfloat16), "scheduler 'streamk'"),
                ((PIECED_WHOLE_16BIT, "static", "sm_100a", False, torch.bfloat16), "sm_90a"),
                ((PIECED_WHOLE_16BIT, "static", "sm_90a", False, torch.float32), "out_dtype"),
                ((MatmulConfig(192, 128, 64, 4, cluster_m=2), "static", "sm_90a", False, torch.bfloat16), "cluster"),
                ((MatmulConfig(96, 128, 64, 4), "static", "sm_90a", False, torch.bfloat16), "config.block_m"),
                ((MatmulConfig(160, 128, 64, 4), "static", "sm_90a", False, torch.bfloat16), "config.block_m"),
                ((MatmulConfig(128, 224, 64, 4), "static", "sm_90a", False, torch.bfloat16), "config.block_n"),
                ((MatmulConfig(192, 160, 64, 3), "static", "sm_90a", False, torch.bfloat16),
                 "config.block_m must be 128"),
                ((MatmulConfig(64, 160, 64, 3, num_warps=4), "static", "sm_90a", False, torch.bfloat16),
                 "config.block_m must be 128"),
                ((MatmulConfig(32, 96, 64, 3, num_warps=4), "static", "sm_90a", False, torch.bfloat16),
                 "config.block_m must be 64 or 128"),
                ((MatmulConfig(64, 96, 64, 3), "static", "sm_90a", False, torch.bfloat16), "num_warps=4"),
                ((MatmulConfig(128, 96, 64, 3, num_warps=4), "static", "sm_90a", False, torch.bfloat16), "num_warps=8")]
    for args, message in refusals:
        with pytest.raises(ValueError, match=re.escape(message)):
            check_pieced(*args)


def test_matmul_takes_a_pieced_tile_where_it_fills_the_waves(monkeypatch):
    """1536x8960x1536: 420 tiles of 128x256 run 4 waves on 132 SMs, 560 of 192x128 run 5 of three quarters the time
    (3.75 against 4.0; 128x192's 564 too, and above M = 1280 192x128 takes the tie); 2304x2816x8192: 216 tiles of
    192x128 in two waves against 128x256 under stream-K (both
    measured faster: bench/results/archive/pieced-tiles-h100.json); and where 128x256 runs stream-K predicted no faster. Not
    with an fp32 C, not off 32-byte sectors (the 2x1 cluster's), and not where the largest tile's waves are full or its
    stream-K is predicted faster (5120x5120x2560). With C (the ping-pong tile, which takes 1536x8960x1536 without C,
    takes none)."""
    monkeypatch.setattr(configs, "device_model", lambda device: H100)
    monkeypatch.setattr(configs, "cached_config", lambda *args: None)
    # 1536x8960x1536 with C: the wave round's 128x128 (stages filled) since, 1.094x the 192x128 on the H200
    # (bench/results/archive/choices-wave-round-h200.json)
    assert configs.config_for(1536, 8960, 1536, torch.bfloat16, torch.bfloat16, True, 0, has_c=True) == replace(
        configs.MEDIUM, stages=6)
    assert configs.config_for(2304, 2816, 8192, torch.bfloat16, torch.bfloat16, True, 0, has_c=True) == PIECED_WHOLE_16BIT
    for shape in ((1536, 8960, 1536), (2304, 2816, 8192)):
        assert not TilePieces(*(lambda c: (c.block_m, c.block_n))(
            configs.config_for(*shape, torch.bfloat16, torch.bfloat16, True, 0, own_source=True))).pieced
        assert configs.schedule_for(*shape, PIECED_16BIT[0], H100) == "static"
    assert configs.config_for(4096, 4000, 3500, torch.bfloat16, torch.bfloat16, True, 0).cluster_m == 2  # off sectors
    # against stream-K a pieced tile needs only be predicted no slower (its prediction is the more reliable one):
    # 1.24x and 1.22x stream-K measured here (bench/results/archive/pieced-vs-streamk-h100.json)
    for shape, pieced in (((512, 11008, 4096), PIECED_SUBTILED_16BIT), ((1536, 4096, 11008), PIECED_WHOLE_16BIT)):
        assert configs.schedule_for(*shape, LARGE_16BIT, H100) == "streamk", shape
        assert configs.config_for(*shape, torch.bfloat16, torch.bfloat16, True, 0) == pieced, shape
    assert tile_round(1536, 4096, 11008, LARGE_16BIT, "streamk") == PIECED_WHOLE_16BIT
    streamk_us, pieced_us = (configs.predict_us(1536, 4096, 11008, cfg, schedule, H100)
                             for cfg, schedule in ((LARGE_16BIT, "streamk"), (PIECED_16BIT[0], "static")))
    assert pieced_us <= streamk_us < configs.PIECED_MIN_GAIN * pieced_us  # not 5% faster: taken as no slower
    # a grid of at most 4 rows of 128-row tiles counts stream-K's split k-steps at streamk_few_rows_cost (1.18-1.24x
    # measured for the pieced tile that this picks at M = 384: bench/results/archive/streamk-few-rows-h100.json)
    assert configs.streamk_step_cost(384, 14336, LARGE_16BIT, H100) == H100.streamk_few_rows_cost > 1
    assert all(configs.streamk_step_cost(M, N, LARGE_16BIT, H100) == 1 for M, N in ((640, 14336), (96, 4096)))
    assert configs.config_for(384, 14336, 4096, torch.bfloat16, torch.bfloat16, True, 0) == PIECED_16BIT[0]
    # 128x160 over 128x256 under stream-K there: 77.5 -> 72.1 us (bench/results/archive/tile-widths-moves-h100.json)
    assert configs.config_for(384, 12288, 4096, torch.bfloat16, torch.bfloat16, True, 0) == PIECED_16BIT[2]
    # against stream-K the largest tile's own static waves (D in sub-tiles) count too: 1.23x at 256x28672x8192
    # (where 128x160, predicted 3% faster than both, then measured 3% slower than D in sub-tiles)
    assert tile_round(256, 28672, 8192, LARGE_16BIT, "streamk") == PIECED_16BIT[2]
    with monkeypatch.context() as patched:
        patched.setattr(configs, "PIECED_16BIT", PIECED_16BIT[:2])
        assert tile_round(256, 28672, 8192, LARGE_16BIT, "streamk") == configs.LARGE_SUBTILED_16BIT
    assert configs.schedule_for(256, 28672, 8192, configs.LARGE_SUBTILED_16BIT, H100) == "static"
    # against the wave heuristic's 128x128 and 64x128 tiles as well (1.13-1.73x on the 23 grid shapes this moves:
    # bench/results/archive/wave-heuristic-moves-h100.json), not where those are predicted no slower (320x4096x4096 with C:
    # not 192 wide, where 128x128 measured best, but 96, one wave of 129 tiles: 33.9 us against 128x128's 37.4 in
    # wave-heuristic-survey-h100.json and tile-widths-moves-h100.json) nor for an fp32 D
    assert configs.choose_config(640, 4096, torch.bfloat16, 132) == configs.SMALL
    assert configs.config_for(640, 4096, 11008, torch.bfloat16, torch.bfloat16, True, 0) == PIECED_16BIT[2]
    assert configs.config_for(320, 4096, 4096, torch.bfloat16, torch.bfloat16, True, 0, has_c=True) == PIECED_16BIT[3]
    assert not configs.config_for(640, 4096, 11008, torch.bfloat16, torch.float32, True, 0).pieced
    for scheduler in ("streamk", "splitk"):  # asked for by the caller: not built for a pieced tile
        chosen = configs.config_for(640, 4096, 11008, torch.bfloat16, torch.bfloat16, True, 0, False, scheduler)
        assert not chosen.pieced, scheduler
    assert configs.config_for(640, 4096, 11008, torch.bfloat16, torch.bfloat16, True, 0, scheduler="dynamic").pieced
    for shape in ((8192, 8192, 8192), (4096, 4096, 4096), (2560, 2560, 2560), (5120, 5120, 2560)):
        assert not TilePieces(*(lambda c: (c.block_m, c.block_n))(
            configs.config_for(*shape, torch.bfloat16, torch.bfloat16, True, 0))).pieced, shape


def tile_round(M, N, K, cfg, schedule):
    """The tile round's winner where `cfg` under `schedule` is the incumbent (B row-major: no DRAM-floor tie)."""
    incumbent = configs.predicted(M, N, K, cfg, schedule, H100)
    return configs.fastest((*configs.pieced_candidates(M, N, K, H100, incumbent, False, False), incumbent)).config


def test_every_piece_is_swizzled_as_the_box_that_moves_it():
    """A 32-wide piece (64 bytes of bf16) makes every piece of its tile 64-byte swizzled, the TMA box's swizzle; the
    192 tiles' 64-wide boxes keep 128 bytes."""
    for tile, swizzle in (((128, 160), 64), ((128, 96), 64), ((128, 192), 128)):
        plan = matmul_plan.fn(*tile, 64, 3, 1, "bf16", "bf16", False)
        parts = {placed.part.name: placed.part for placed in plan.placed if placed.part.kind == "tile"}
        pieces = [part for name, part in parts.items() if name[0] in "bc"]
        assert len(pieces) == 4 and {part.layout.swizzle_byte_width for part in pieces} == {swizzle}, tile


def test_matmul_takes_the_widths_between_where_they_fill_the_waves(monkeypatch):
    """128x160 and 128x96 where predicted PIECED_MIN_GAIN faster than the choice before them (bench/results/archive/
    tile-widths-moves-h100.json: 50 of the 56 grid shapes this moves ran faster, median 1.116x)."""
    monkeypatch.setattr(configs, "device_model", lambda device: H100)
    monkeypatch.setattr(configs, "cached_config", lambda *args: None)
    wide, narrow = PIECED_16BIT[2:4]
    assert (wide.block_n, narrow.block_n) == (160, 96)
    for shape in ((640, 4096, 14336), (1024, 5120, 5120), (1280, 2048, 8192)):  # 1.12x, 1.12x, 1.12x
        assert configs.config_for(*shape, torch.bfloat16, torch.bfloat16, True, 0) == wide, shape
    for shape in ((384, 4096, 14336), (640, 2048, 7168), (256, 4608, 7168)):  # 1.17x, 1.26x, 1.23x
        assert configs.config_for(*shape, torch.bfloat16, torch.bfloat16, True, 0) == narrow, shape
    cost = lambda cfg: configs.mma_step_cost(cfg, H100)  # noqa: E731
    assert cost(narrow) > cost(wide) > cost(PIECED_16BIT[1])


def test_a_tie_at_the_dram_floor_goes_to_the_tile_on_more_programs(monkeypatch):
    """128x96 (128 programs) against the 128x128 tile (96) at 256x6144x4096: both at the model's DRAM floor, the
    same predicted time; 128x96 ran 1.02-1.04x faster (bench/results/archive/dram-tie-moves-h100.json). Not where the pieced
    tile runs no more programs or more than one wave, off the DRAM floor, nor with C over a last row of tiles half
    empty or less (160x6144x4096 with C: 0.94x)."""
    monkeypatch.setattr(configs, "device_model", lambda device: H100)
    monkeypatch.setattr(configs, "cached_config", lambda *args: None)
    narrow = PIECED_16BIT[3]
    cooperative = configs.with_stages_that_fit(configs.MEDIUM, torch.bfloat16)
    assert configs.predict_us(256, 6144, 4096, narrow, "static", H100) == configs.predict_us(
        256, 6144, 4096, cooperative, "static", H100)
    assert configs.dram_tie_pays(256, 6144, 4096, H100, cooperative, narrow, has_c=True)
    assert not configs.dram_tie_pays(256, 6144, 4096, H100, narrow, cooperative, has_c=False)  # fewer programs
    assert not configs.dram_tie_pays(2048, 6144, 4096, H100, cooperative, narrow, has_c=False)  # compute-bound
    assert not configs.dram_tie_pays(512, 8192, 1024, H100, LARGE_16BIT, PIECED_16BIT[2], has_c=False)  # 208 tiles
    assert configs.dram_tie_pays(160, 6144, 4096, H100, cooperative, narrow, has_c=False)
    assert not configs.dram_tie_pays(160, 6144, 4096, H100, cooperative, narrow, has_c=True)  # 32 of 128 rows
    for has_c in (False, True):
        assert configs.config_for(256, 6144, 4096, torch.bfloat16, torch.bfloat16, True, 0, has_c=has_c) == narrow


def test_small_m_takes_the_64x96_tile_where_it_wins_the_tie_on_more_programs(monkeypatch):
    """NARROW_PIECED_16BIT (64x96 on one warpgroup) where its tiles, one wave, outnumber the choice's at the DRAM
    floor: 128x6144x4096 (128 programs against the 64x128 tile's 96; 31.11 -> 30.27 us) and 192x4096x4096 (129 against
    96; 26.39 -> 24.58: bench/results/archive/narrow-pieced-probe-h100.json). Not where NARROW already runs 128 programs, past
    one wave (N = 14336), for an fp32 D, nor with C over a half-empty last row (M = 96)."""
    monkeypatch.setattr(configs, "device_model", lambda device: H100)
    monkeypatch.setattr(configs, "cached_config", lambda *args: None)
    narrow_pieced = configs.NARROW_PIECED_16BIT
    assert (narrow_pieced.block_m, narrow_pieced.block_n, narrow_pieced.num_warps) == (64, 96, 4)

    def chosen(M, N, K, out_dtype=torch.bfloat16, has_c=False):
        return configs.config_for(M, N, K, torch.bfloat16, out_dtype, True, 0, has_c=has_c)

    for shape in ((128, 6144, 4096), (192, 4096, 4096), (96, 6144, 4096)):
        assert chosen(*shape) == narrow_pieced, shape
    assert chosen(128, 6144, 4096, has_c=True) == narrow_pieced
    assert chosen(96, 6144, 4096, has_c=True) != narrow_pieced  # 32 of the last row's 64
    assert chosen(96, 4096, 4096) == configs.NARROW and chosen(96, 14336, 4096) != narrow_pieced
    assert chosen(128, 6144, 4096, torch.float32) != narrow_pieced
    assert configs.variant_config({"tile": (64, 96)}, torch.bfloat16, None) == narrow_pieced


def test_just_over_128_rows_takes_the_64x192_tile_on_one_warpgroup():
    """NARROW_WIDE_PIECED_16BIT: at 129x8192x8192 its three rows of 64-row tiles (129 tiles, one wave) compute 192 rows
    where the ping-pong tile's two rows of 128 compute 256 (H200: 53.5 -> 50.3 us, archive/wide64-probe-h200.json);
    not at 256 rows, nor where its tiles leave a wave short (N = 4096). A catalogue variant names it with its warps."""
    from tilepipe.host.gpus import gpu_models

    h200, wide = gpu_models()["h200"], configs.NARROW_WIDE_PIECED_16BIT
    assert (wide.block_m, wide.block_n, wide.num_warps, wide.pieced) == (64, 192, 4, True) and wide in PIECED_16BIT

    def chosen(M, N, K):
        return configs.modelled_config(M, N, K, torch.bfloat16, torch.bfloat16, True, h200)

    assert chosen(129, 8192, 8192) == chosen(192, 8192, 8192) == wide
    assert wide not in (chosen(256, 8192, 8192), chosen(129, 4096, 4096), chosen(129, 4096, 14336))
    assert configs.variant_config({"tile": (64, 192)}, torch.bfloat16, None) == wide
    check_pieced(wide, "dynamic", "sm_90a", False, torch.bfloat16)
    with pytest.raises(ValueError, match="num_warps=4"):
        check_pieced(replace(wide, num_warps=8), "static", "sm_90a", False, torch.bfloat16)


def test_no_pieced_tile_is_taller_than_the_problem():
    """A pieced tile taller than M cannot move inside D, and its last row piece loads boxes mostly past A's last row:
    192x128 at 129x14336x4096 ran 55.7 us where 64x192 ran 49.3
    (bench/results/archive/choices-tall-pieced-ab-h200.json). From 192 rows it competes again."""
    from tilepipe.host.gpus import gpu_models

    h200 = gpu_models()["h200"]
    incumbent = configs.predicted(129, 14336, 4096, configs.MEDIUM, "static", h200)
    for M in (129, 160, 191):
        tiles = [c.config for c in configs.pieced_candidates(M, 14336, 4096, h200, incumbent, True, False)]
        assert tiles and all(tile.block_m <= M for tile in tiles), M
        assert configs.modelled_config(M, 14336, 4096, torch.bfloat16, torch.bfloat16, True, h200).block_m <= M
    tiles = [c.config for c in configs.pieced_candidates(192, 14336, 4096, h200, incumbent, True, False)]
    assert configs.PIECED_WHOLE_16BIT in tiles


def test_the_64x96_tile_challenges_the_tile_round_with_b_kmajor():
    """NARROW_PIECED_16BIT in the tile round, handicapped, with B K-major and not with C over a half-empty last row:
    on the H200 129x4096x14336 K-major 52.9 -> 47.9 us against 64x128, row-major 0.82x and with C at M = 129 0.89x,
    which it leaves out (bench/results/archive/choices-narrow-round-ab-h200.json)."""
    from tilepipe.host.gpus import gpu_models

    h200, narrow = gpu_models()["h200"], configs.NARROW_PIECED_16BIT

    def chosen(M, N, K, b_kmajor=True, has_c=False):
        return configs.modelled_config(M, N, K, torch.bfloat16, torch.bfloat16, b_kmajor, h200, has_c=has_c)

    assert chosen(129, 4096, 14336) == chosen(192, 4096, 14336, has_c=True) == narrow
    assert narrow not in (chosen(129, 4096, 14336, b_kmajor=False), chosen(129, 4096, 14336, has_c=True))
    assert configs.c_past_edge(129, narrow, True) and not configs.c_past_edge(129, narrow, False)
    assert not configs.c_past_edge(192, narrow, True) and not configs.c_past_edge(161, narrow, True)
