"""CPU tests of the ping-pong GEMM (kernels/matmul_pingpong.py, host/configs.py PINGPONG_16BIT): the plan's stages,
the kernel compiled for sm_90a (two 4-warp MMA partitions with 232 registers each, a wgmma pair a k-step, a TMA store
per sub-tile, no spills), the turn order's protocol checks, the host's refusals and matmul's choice."""

import re
from dataclasses import replace

import pytest
import torch

from tilepipe.host.checks import check_pingpong
from tilepipe.host import configs
from tilepipe.host.configs import LARGE_SUBTILED_16BIT, MEDIUM, PINGPONG_16BIT, MatmulConfig
from tilepipe.host.gpus import H100
from tilepipe.kernels.matmul import matmul_spec, operand_blocks
from tilepipe.kernels.matmul_pingpong import pingpong_plan
from tilepipe.verify.compile import CompileError, compile_kernels

WHOLE = MatmulConfig(128, 128, 64, stages=5, num_warps=4, pingpong=True)  # a whole 32 KiB output stage a turn


def test_each_turn_has_its_own_output_stages_beside_one_operand_ring():
    plan = pingpong_plan.fn(128, 128, 64, 6, 1, "bf16", "bf16", True, 64)
    tiles = {p.storage: (p.part.tile, p.part.stages) for p in plan.placed if p.part.kind == "tile"}
    assert tiles == {"operands": ((128, 64), 6), "c_tiles0": ((128, 64), 1), "c_tiles1": ((128, 64), 1)}
    assert plan.total_bytes + configs.WS_SCRATCH_BYTES + configs.VECTOR_SCRATCH_BYTES <= plan.limit_bytes
    assert operand_blocks(PINGPONG_16BIT, True) == {"a": ((128, 64), ()), "b": ((128, 64), ()), "c": ((128, 64), ())}
    assert PINGPONG_16BIT.tiling() == {"TILE": (128, 128), "EPILOGUE_N": 64}


CASES = [(PINGPONG_16BIT, "bf16", True, None), (PINGPONG_16BIT, "fp16", False, "fp16"), (WHOLE, "bf16", True, None)]


@pytest.fixture(scope="module")
def compiled():
    specs = [matmul_spec(cfg, dtype, dtype, kmajor, bias_dtype=bias) for cfg, dtype, kmajor, bias in CASES]
    return list(zip(CASES, compile_kernels(specs)))


def test_two_mma_warpgroups_take_232_registers_each(compiled):
    """Both MMA partitions (the default one and a 4-warp worker) run at 232 registers, the three one-warp roles at 40:
    a 128x128 fp32 accumulator is 128 a thread. No spills."""
    for case, report in compiled:
        assert not isinstance(report, CompileError), report
        assert report.spill_stores == report.spill_loads == 0, case
        assert report.num_warps == 12, case  # 4 + 4 MMA warps, the load and two store warps in a third warpgroup
        assert report.shared <= 227 * 1024, case
        assert re.findall(r"setmaxnreg\.dec\.sync\.aligned\.u32\s+232;", report.ptx), case
        assert re.findall(r"setmaxnreg\.inc\.sync\.aligned\.u32\s+232;", report.ptx), case


def test_each_turn_stores_its_own_sub_tiles(compiled):
    """A k-step is one 128x128x64 wgmma sequence per turn (two 64-row instructions of k16 each, in each MMA role's
    loop); each store role TMA-stores its turn's output stages, two 128x64 boxes a tile (a sub-tile each, or the
    whole stage's two 128-byte swizzle boxes)."""
    for (cfg, *_), report in compiled:
        stores = re.findall(r"cp\.async\.bulk\.tensor\.2d\.global\.shared::cta\S*", report.ptx)
        assert len(stores) == 2 * 2, (cfg, stores)
        assert report.count("wgmma.mma_async") == 2 * 8, cfg  # per MMA role: 2 row halves x 4 k16 steps


def test_pingpong_is_refused_where_it_is_not_built():
    check_pingpong(PINGPONG_16BIT, "static", "sm_90a", False)
    check_pingpong(MEDIUM, "streamk", "sm_100a", True)  # not ping-pong: nothing to refuse
    refusals = [((PINGPONG_16BIT, "static", "sm_90a", True), "c: config.pingpong takes no C tile"),
                ((PINGPONG_16BIT, "streamk", "sm_90a", False), "scheduler 'streamk'"),
                ((PINGPONG_16BIT, "dynamic", "sm_90a", False), "static scheduler"),
                ((PINGPONG_16BIT, "static", "sm_100a", False), "sm_90a (Hopper) only"),
                ((replace(PINGPONG_16BIT, num_warps=8), "static", "sm_90a", False), "num_warps=4"),
                ((replace(PINGPONG_16BIT, cluster_m=2), "static", "sm_90a", False), "cluster"),
                ((replace(PINGPONG_16BIT, block_m=192), "static", "sm_90a", False), "power-of-two sides")]
    for args, message in refusals:
        with pytest.raises(ValueError, match=re.escape(message)):
            check_pingpong(*args)


def test_matmul_takes_the_ping_pong_tile_where_its_hidden_epilogues_win(monkeypatch):
    """Where the ping-pong round predicts it PINGPONG_MIN_GAIN faster (1.00-1.19x measured on the 66 grid shapes it
    moves, bench/results/archive/pingpong-moves-h100.json): short K (the epilogue a larger share of a tile), and 128x128's own
    waves at few rows. Not with C, a scheduler other than static, an fp32 D, rows off 32-byte sectors, long K (4096:
    1.05x slower, pingpong-survey-h100.json), nor on two rows of tiles against another tile than 128x128."""
    monkeypatch.setattr(configs, "device_model", lambda device: H100)
    monkeypatch.setattr(configs, "cached_config", lambda *args: None)

    def chosen(M, N, K, out_dtype=torch.bfloat16, **options):
        return configs.config_for(M, N, K, torch.bfloat16, out_dtype, True, 0, **options)

    for shape in ((1536, 8960, 1536), (4096, 4096, 1024), (8192, 8192, 1024), (512, 4096, 4096), (384, 5120, 2560)):
        assert chosen(*shape) == PINGPONG_16BIT, shape
        assert configs.schedule_for(*shape, PINGPONG_16BIT, H100) == "static"
    # with C the wave round's 128x128 (its stages filled): 1.094x the pieced 192x128 on the H200
    # (bench/results/archive/choices-wave-round-h200.json)
    assert chosen(1536, 8960, 1536, has_c=True) == replace(MEDIUM, stages=6)
    assert chosen(384, 5120, 2560, has_c=True) == replace(MEDIUM, stages=6)  # with its stages filled (perf-log row 89)
    for scheduler in ("dynamic", "streamk", "splitk"):
        assert not chosen(4096, 4096, 1024, scheduler=scheduler).pingpong, scheduler
    assert chosen(4096, 4096, 1024, scheduler="static").pingpong
    assert not chosen(4096, 4096, 1024, torch.float32).pingpong
    assert chosen(4096, 4096, 1032).cluster_m == 2  # K = 8 mod 16: rows off sectors, the 2x1 cluster's
    for shape in ((4096, 4096, 4096), (2560, 2560, 2560), (2304, 2304, 9216), (129, 14336, 4096), (384, 8960, 1536)):
        assert not chosen(*shape).pingpong, shape
    assert chosen(129, 14336, 4096) == LARGE_SUBTILED_16BIT  # two rows: 0.68x measured against it
    # the fit behind the rule: a cooperative tile's epilogue costs epilogue_steps of its k-steps, a 128x128 k-step
    # pingpong_step_cost; at equal waves the ping-pong tile wins at K = 1024 and loses at 4096
    assert configs.mma_step_cost(PINGPONG_16BIT, H100) == H100.pingpong_step_cost > 1
    assert configs.mma_step_cost(MEDIUM, H100) == H100.pingpong_step_cost and configs.mma_step_cost(configs.SMALL, H100) > 1
    assert configs.mma_step_cost(MEDIUM, H100, in_bytes=1) == 1.0  # fitted on 16-bit tiles only


def test_the_ping_pong_tile_replaces_the_cooperative_128x128_under_static(monkeypatch):
    """Where matmul's choice is the cooperative 128x128 tile run static, the ping-pong tile takes its place whatever the
    prediction: the same tiles in the same waves, six operand stages against four and the epilogues hidden (20 of 22
    grid shapes 1.08-1.18x faster, bench/results/archive/pingpong-same-tile-moves-h100.json). Not with C."""
    monkeypatch.setattr(configs, "device_model", lambda device: H100)
    monkeypatch.setattr(configs, "cached_config", lambda *args: None)
    for shape in ((256, 6144, 4096), (129, 8192, 8192), (1024, 2048, 8192)):  # 1.18x, 1.10x, 1.16x
        assert configs.choose_config(shape[0], shape[1], torch.bfloat16, 132) == MEDIUM
        incumbent = configs.predicted(*shape, MEDIUM, "static", H100)
        assert configs.pingpong_round(*shape, H100, incumbent).winner.config == PINGPONG_16BIT
        if shape[0] == 256:  # a pieced tile on more programs takes the tie at the DRAM floor first (perf-log row 95)
            assert configs.config_for(*shape, torch.bfloat16, torch.bfloat16, True, 0).block_n == 96
            continue
        plain = configs.config_for(*shape, torch.bfloat16, torch.bfloat16, True, 0)
        # just over 128 rows the tile round's 64x192 on one warpgroup came first (perf-log row 138)
        assert plain == (configs.NARROW_WIDE_PIECED_16BIT if shape[0] == 129 else PINGPONG_16BIT), shape
        with_c = configs.config_for(*shape, torch.bfloat16, torch.bfloat16, True, 0, has_c=True)
        assert with_c == replace(MEDIUM, stages=6), shape  # the cooperative tile, its stages filled (perf-log row 89)


def test_the_checker_proves_the_turn_order_and_finds_its_absence():
    """Both MMA roles pass over each other's stages of one input ring: with the turn order every case is clean (and
    matches what tracing the kernel records); without it a role's cursor runs ahead of the ring's phases and its
    parity wait passes on another lap's fill (phase aliasing), which the checker names."""
    from dataclasses import replace as replaced

    from tilepipe.verify.checker import check
    from tilepipe.verify.protocols import pingpong_protocols, scoped_roles

    protocol = pingpong_protocols()[0]
    assert check(protocol, trace=True).ok, check(protocol).findings
    unordered = replaced(protocol, roles=scoped_roles(protocol.roles, ("input", "output0", "output1")), trace=None)
    kinds = {finding.kind for finding in check(unordered).findings}
    assert "phase-aliasing" in kinds, kinds


def test_the_ping_pong_tile_is_timed_static_only():
    """bench --shapes times the chosen tile under each schedule schedule_candidates names: static alone here."""
    assert configs.schedule_candidates(1536, 8960, 1536, PINGPONG_16BIT, 132) == ("static", )
