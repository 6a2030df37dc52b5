"""CPU tests of D written in sub-tiles (MatmulConfig.epilogue_n, host/configs.py LARGE_SUBTILED_16BIT): the plan's
stages, the sm_90a GEMM compiled with them under every schedule (a TMA store per sub-tile, no data moved between
threads to split the accumulator, no spills), stream-K's partial sums in sub-tile stages, the host's refusals and
matmul's choice."""

import re
from dataclasses import replace

import pytest
import torch

from tilepipe.host.checks import check_subtiles
from tilepipe.host import configs
from tilepipe.host.configs import LARGE_16BIT, LARGE_SUBTILED_16BIT, PIECED_WHOLE_16BIT, MatmulConfig
from tilepipe.host.gpus import H100
from tilepipe.kernels.matmul import matmul_plan, matmul_spec, operand_blocks
from tilepipe.verify.compile import CompileError, compile_kernels
from tilepipe.verify.protocols import partial_subtiles

SUB = LARGE_SUBTILED_16BIT


def test_sub_tile_stages_make_room_for_a_fourth_operand_stage():
    def tiles(plan):
        return {p.storage: (p.part.tile, p.part.stages) for p in plan.placed if p.part.kind == "tile"}

    sub = matmul_plan.fn(128, 256, 64, 4, 2, "bf16", "bf16", True, epilogue_n=64)
    assert tiles(sub) == {"operands": ((128, 64), 4), "c_tiles": ((128, 64), 2)}
    assert sub.total_bytes + configs.WS_SCRATCH_BYTES + configs.VECTOR_SCRATCH_BYTES <= sub.limit_bytes
    whole = matmul_plan.fn(128, 256, 64, 4, 1, "bf16", "bf16", True)
    assert whole.total_bytes > whole.limit_bytes  # four stages beside a whole 64 KiB output stage do not fit
    assert configs.fitted_stages(SUB, torch.bfloat16, 2) == 4
    assert operand_blocks(SUB, True) == {"a": ((128, 64), ()), "b": ((256, 64), ()), "c": ((128, 64), ())}
    assert SUB.tiling() == {"TILE": (128, 256), "EPILOGUE_N": 64}
    assert LARGE_16BIT.tiling() == {"TILE": None, "EPILOGUE_N": None}


CASES = [("static", {}), ("static", dict(has_c=True)), ("static", dict(bias_dtype="bf16")), ("dynamic", {}),
         ("streamk", {}), ("streamk", dict(has_c=True))]


@pytest.fixture(scope="module")
def compiled():
    """Each case with D in sub-tiles, and with LARGE_16BIT's whole output stage."""
    specs = [matmul_spec(cfg, "bf16", "bf16", True, schedule=schedule, **options) for cfg in (SUB, LARGE_16BIT)
             for schedule, options in CASES]
    reports = compile_kernels(specs)
    return list(zip(CASES, reports[:len(CASES)], reports[len(CASES):]))


def test_each_sub_tile_is_a_tma_store_of_its_own(compiled):
    """The store role issues one TMA store per 128x64 sub-tile, four a tile (the 128x256 tile's whole-stage store
    is the same four boxes: a 64-column bf16 box is one 128-byte swizzle row); stream-K's partial sums add eight
    16 KiB fp32 sub-tiles (128x32) to the slot. The accumulator is split in registers: no more shuffles than the
    whole-stage kernel's (the dynamic scheduler's tile id), no local memory."""
    for (schedule, options), report, whole in compiled:
        assert not isinstance(report, CompileError), report
        assert report.spill_stores == report.spill_loads == 0, (schedule, options)
        assert report.count("SHFL", "sass") == whole.count("SHFL", "sass"), (schedule, options)
        assert report.count("STL", "sass") == 0, (schedule, options)
        assert report.shared <= 227 * 1024
        stores = re.findall(r"cp\.async\.bulk\.tensor\.2d\.global\.shared::cta\S*", report.ptx)
        assert len(stores) == (4 if schedule != "streamk" else 4 + 8), (schedule, options, stores)


def test_partial_sums_travel_in_sub_tile_stages():
    assert partial_subtiles("bf16") == 2 and partial_subtiles("bf16", 4) == 8 and partial_subtiles("fp32", 2) == 2


def test_sub_tiles_are_refused_where_they_are_not_built():
    check_subtiles(SUB, "sm_90a")
    check_subtiles(LARGE_16BIT, "sm_100a")  # whole D: nothing to refuse
    refusals = [(replace(SUB, epilogue_n=48), "power of two of at least 16 that divides block_n = 256"),
                (replace(SUB, epilogue_n=512), "divides block_n"), (replace(SUB, epilogue_n=8), "at least 16"),
                (replace(SUB, cluster_m=2), "cluster"), (replace(PIECED_WHOLE_16BIT, epilogue_n=64), "rows in pieces"),
                (MatmulConfig(64, 64, 128, 6, num_warps=4, swap_ab=True, epilogue_n=32), "swap-AB")]
    for cfg, message in refusals:
        with pytest.raises(ValueError, match=re.escape(message)):
            check_subtiles(cfg, "sm_90a")
    with pytest.raises(ValueError, match="sm_90a"):
        check_subtiles(SUB, "sm_100a")


def test_matmul_writes_the_largest_tile_in_sub_tiles_where_it_runs_static(monkeypatch):
    """Static 128x256 tiles take LARGE_SUBTILED_16BIT (bench/results/archive/subtile-ab-h100.json); stream-K keeps the whole
    output stage (its partial sums would travel in eight sub-tiles: no faster there), and so do the 2x1 cluster (off
    32-byte sectors) and the pieced tiles."""
    monkeypatch.setattr(configs, "device_model", lambda device: H100)
    monkeypatch.setattr(configs, "cached_config", lambda *args: None)

    def chosen(M, N, K):
        return configs.config_for(M, N, K, torch.bfloat16, torch.bfloat16, True, 0)

    for shape in ((4096, 4096, 4096), (3584, 3584, 3584), (16384, 6144, 4096)):
        assert chosen(*shape) == SUB and configs.schedule_for(*shape, SUB, H100) == "static", shape
    # 2560^3: the cooperative 128x128 tile under stream-K, 1.10-1.12x the static sub-tiled 128x256 on the H200
    # (bench/results/choices-streamk-round-h200.json)
    assert chosen(2560, 2560, 2560) == configs.with_stages_that_fit(configs.MEDIUM, torch.bfloat16)
    assert configs.schedule_for(2560, 2560, 2560, chosen(2560, 2560, 2560), H100) == "streamk"
    assert chosen(5120, 5120, 2560) == LARGE_16BIT and configs.schedule_for(5120, 5120, 2560, LARGE_16BIT, H100) == \
        "streamk"
    assert chosen(4000, 6000, 3500).cluster_m == 2
    with_c = configs.config_for(2304, 2816, 8192, torch.bfloat16, torch.bfloat16, True, 0, has_c=True)
    assert with_c == PIECED_WHOLE_16BIT
    assert chosen(4096, 4096, 4096).epilogue_n is not None
    # an fp32 D: its own 128x256 tile in 128x32 sub-tiles (perf-log row 93)
    assert configs.config_for(4096, 4096, 4096, torch.bfloat16, torch.float32, True, 0) == configs.LARGE_SUBTILED_FP32
