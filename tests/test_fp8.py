"""CPU tests of the FP8 GEMMs: every variant compiled for sm_90a (fp8 wgmma, QGMMA, TMA, no spills), the shared
memory of every configuration, and input validation."""

import pytest
import torch

import tilepipe
from tilepipe.host.configs import MAX_STAGES, VECTOR_SCRATCH_BYTES, WS_SCRATCH_BYTES
from tilepipe.host.configs import fp8_configs as configs
from tilepipe.host.gpus import H100
from tilepipe.kernels.matmul_fp8 import fp8_plan, scaled_spec
from tilepipe.kernels.matmul_fp8_blockwise import blockwise_spec
from tilepipe.pipeline.storage import SMEM_LIMIT_BYTES, BlockwiseFP8TileStorage
from tilepipe.verify.compile import CompileError, compile_kernels

from tests.test_matmul import assert_partials_by_tma, tma_partial_boxes

LARGE, MEDIUM, SMALL = configs(False, torch.bfloat16)
MEDIUM_FP32, SMALL_FP32 = configs(False, torch.float32)
BLOCKWISE, BLOCKWISE_SMALL = configs(True, torch.bfloat16)
BLOCKWISE_FP32 = configs(True, torch.float32)[0]
CASES = [("scaled", LARGE, "fp8e4nv", "fp8e4nv", "bf16", False),
         ("scaled", LARGE, "fp8e4nv", "fp8e5", "bf16", True),
         ("scaled", MEDIUM, "fp8e4nv", "fp8e4nv", "bf16", True),
         ("scaled", MEDIUM_FP32, "fp8e5", "fp8e4nv", "fp32", True),
         ("scaled", SMALL, "fp8e4nv", "fp8e4nv", "fp16", False),
         ("blockwise", BLOCKWISE, "fp8e4nv", "fp8e4nv", "bf16", None),
         ("blockwise", BLOCKWISE_FP32, "fp8e4nv", "fp8e5", "fp32", None),
         ("blockwise", BLOCKWISE_SMALL, "fp8e5", "fp8e4nv", "bf16", None),
         ("scaled streamk", MEDIUM, "fp8e4nv", "fp8e4nv", "bf16", False),
         ("scaled streamk", SMALL_FP32, "fp8e4nv", "fp8e4nv", "fp32", True),
         ("blockwise streamk", BLOCKWISE_SMALL, "fp8e4nv", "fp8e4nv", "bf16", None),
         ("blockwise streamk", BLOCKWISE, "fp8e4nv", "fp8e4nv", "bf16", None)]
PTX_TYPES = {"fp8e4nv": "e4m3", "fp8e5": "e5m2"}


def spec(kind, cfg, a_dtype, b_dtype, c_dtype, per_row):
    schedule = "streamk" if kind.endswith("streamk") else "static"
    if kind.startswith("scaled"):
        return scaled_spec(cfg, a_dtype, b_dtype, c_dtype, per_row, schedule)
    return blockwise_spec(cfg, a_dtype, b_dtype, c_dtype, schedule)


@pytest.fixture(scope="module")
def reports():
    return compile_kernels([spec(*case) for case in CASES])


def case_id(case) -> str:
    kind, cfg, a, b, c, per_row = case
    scaling = "blockwise" if kind.startswith("blockwise") else ("row" if per_row else "tensor")
    schedule = "-streamk" if kind.endswith("streamk") else ""
    return f"{scaling}-{cfg.block_m}x{cfg.block_n}-{PTX_TYPES[a]}x{PTX_TYPES[b]}-{c}{schedule}"


@pytest.mark.parametrize("index", range(len(CASES)), ids=lambda i: case_id(CASES[i]))
def test_fp8_gemm_compiles_to_fp8_wgmma_tma_and_no_spills(reports, index):
    kind, cfg, a_dtype, b_dtype, c_dtype, per_row = CASES[index]
    report = reports[index]
    assert not isinstance(report, CompileError), report
    shape = f"m64n{cfg.block_n}k32.f32.{PTX_TYPES[a_dtype]}.{PTX_TYPES[b_dtype]}"
    assert report.count(f"wgmma.mma_async.sync.aligned.{shape}") > 0
    assert report.count("QGMMA", "sass") > 0  # Hopper's fp8 GMMA (HGMMA is the 16-bit one)
    # TMA loads per stage: A, B, and for blockwise the A-scale column and the B-scale box
    streamk = kind.endswith("streamk")
    partial_boxes = tma_partial_boxes(cfg.block_n, c_dtype) if streamk else 0  # stream-K's partial sums, loaded
    loads = report.count("cp.async.bulk.tensor.2d.shared::cta.global.mbarrier")
    assert loads == (4 if kind.startswith("blockwise") else 2) + partial_boxes
    assert report.count("cp.async.bulk.tensor.2d.global.shared::cta") >= 1
    assert report.count("setmaxnreg") > 0
    assert report.spill_stores == 0 and report.spill_loads == 0
    # stream-K: a contributor's release-signal, a finisher's acquire-spin and retiring store (pipeline/partials.py)
    assert (report.count("red.release.gpu.global.add"), report.count("st.relaxed.gpu.global")) == (streamk, ) * 2
    assert (report.count("ld.acquire.gpu.global") > 0) == streamk
    assert_partials_by_tma(report, partial_boxes, reads=kind.startswith("scaled"))  # the scales' loads
    planned = fp8_plan.fn(cfg.block_m, cfg.block_n, cfg.block_k, cfg.stages, cfg.c_stages, a_dtype, b_dtype, c_dtype,
                          kind.startswith("blockwise"), streamk=streamk)
    scratch = WS_SCRATCH_BYTES + (VECTOR_SCRATCH_BYTES if per_row else 0)  # + per-row scales' read-ahead conversion
    assert 0 <= report.shared - planned.total_bytes < scratch


def test_blockwise_keeps_one_wgmma_in_flight_while_promoting(reports):
    """ptxas serializes every wgmma when a partial sum in flight is read or copied; then no wait leaves one pending."""
    report = reports[CASES.index(next(c for c in CASES if c[0] == "blockwise"))]
    assert report.count("WARPGROUP.DEPBAR.LE gsb0, 0x1", "sass") > 0
    assert report.count("FFMA", "sass") >= 64  # the promotion acc += partial * scale, in registers


def test_blockwise_wgmma_waits_stay_in_their_warpgroup(reports):
    """Each warpgroup promotes its own partial sum after its wait: no partition-wide bar.sync follows a wgmma wait
    (triton 3.9 adds one unless the wait is warp-group-local; it cost 3-5% at K = 2048, docs/perf-log.md)."""
    report = reports[CASES.index(next(c for c in CASES if c[0] == "blockwise"))]
    lines = [line.strip() for line in report.ptx.splitlines()]
    lines = [line for line in lines if line and not line.startswith((".loc", "//"))]
    waits = [i for i, line in enumerate(lines) if line.startswith("wgmma.wait_group")]
    assert len(waits) >= 3
    assert not [lines[i + 1] for i in waits if lines[i + 1].startswith("bar.sync")]


@pytest.mark.parametrize("blockwise", (False, True))
@pytest.mark.parametrize("out_dtype", (torch.bfloat16, torch.float32))
def test_every_config_fills_shared_memory(blockwise, out_dtype):
    """Each tile takes the most stages that fit beside its output tile (and warp_specialize's scratch), up to 8."""
    c_dtype = "fp32" if out_dtype == torch.float32 else "bf16"
    limit = SMEM_LIMIT_BYTES["sm_90a"] - WS_SCRATCH_BYTES - VECTOR_SCRATCH_BYTES
    for cfg in configs(blockwise, out_dtype):
        def total(stages: int) -> int:
            return fp8_plan.fn(cfg.block_m, cfg.block_n, cfg.block_k, stages, cfg.c_stages, "fp8e4nv", "fp8e4nv",
                               c_dtype, blockwise).total_bytes
        assert total(cfg.stages) <= limit, cfg
        assert cfg.stages == MAX_STAGES or total(cfg.stages + 1) > limit, cfg
        assert cfg.stages >= 3, cfg  # at least two loads in flight while the wgmma reads a third stage


@pytest.mark.parametrize("block_m", (64, 128))
def test_blockwise_stages_keep_tma_destinations_128_byte_aligned(block_m):
    """TMA writes shared memory at 128-byte aligned addresses only: every stage of every part is a multiple."""
    storage = BlockwiseFP8TileStorage("fp8e4nv", "fp8e4nv", (block_m, 128), (128, 128), 5)
    assert [part.name for part in storage.parts()] == ["a", "b", "a_scales", "b_scales"]
    for part in storage.parts():
        assert (part.nbytes // part.stages) % 128 == 0, part


def test_fp32_output_drops_the_widest_tile():
    assert [(c.block_m, c.block_n) for c in configs(False, torch.float32)] == [(128, 128), (64, 128)]
    assert [(c.block_m, c.block_n) for c in configs(False, torch.bfloat16)] == [(128, 256), (128, 128), (64, 128)]


def fp8(*shape, dtype=torch.float8_e4m3fn):
    return torch.randn(*shape).to(dtype)


def one():
    return torch.ones(())


A, B = fp8(256, 512), fp8(384, 512).t()  # b = w.t(): column-major (K-major), as torch._scaled_mm wants


@pytest.mark.parametrize("call, error, message", [
    (lambda: tilepipe.matmul_fp8([[1.0]], B, one(), one()), TypeError, "a must be a torch.Tensor"),
    (lambda: tilepipe.matmul_fp8(A, B[None], one(), one()), ValueError, "b must be 2-D"),
    (lambda: tilepipe.matmul_fp8(A.to(torch.bfloat16), B, one(), one()), TypeError,
     "a must be float8_e4m3fn or float8_e5m2"),
    (lambda: tilepipe.matmul_fp8(A.to(torch.float8_e5m2), B.to(torch.float8_e5m2), one(), one()), TypeError,
     "cannot both be float8_e5m2"),
    (lambda: tilepipe.matmul_fp8(A, fp8(384, 256).t(), one(), one()), ValueError, "a.shape\\[1\\] must equal"),
    (lambda: tilepipe.matmul_fp8(A, B.contiguous(), one(), one()), ValueError,
     "b must be column-major .*fp8 wgmma reads B K-major"),
    (lambda: tilepipe.matmul_fp8(A.t().contiguous().t(), B, one(), one()), ValueError, "a must be row-major"),
    (lambda: tilepipe.matmul_fp8(A, B, one().double(), one()), TypeError, "scale_a must be float32"),
    (lambda: tilepipe.matmul_fp8(A, B, one(), 1.0), TypeError, "scale_b must be a torch.Tensor"),
    (lambda: tilepipe.matmul_fp8(A, B, torch.ones(256, 1), torch.ones(384, 1)), ValueError,
     "scale_a \\(256, 1\\) and scale_b \\(384, 1\\) match no scaling.*per-row \\(256, 1\\) and \\(1, 384\\)"),
    (lambda: tilepipe.matmul_fp8(A, B, torch.ones(256, 4), torch.ones(4, 2)), ValueError,
     "blockwise \\(256, 4\\) and \\(4, 3\\)"),
    (lambda: tilepipe.matmul_fp8(A, B, one(), one(), out_dtype=torch.int32), TypeError, "out_dtype must be"),
    (lambda: tilepipe.matmul_fp8(A, B, one(), one(), scheduler="dynamic"), ValueError,
     "scheduler must be one of \\('static', 'streamk', 'splitk'\\) or None, got 'dynamic'"),
    (lambda: tilepipe.matmul_fp8(A, B, one(), one()), ValueError, "a must be on a CUDA device"),
    (lambda: tilepipe.matmul_fp8(A, B, torch.ones(256, 4), torch.ones(4, 3)), ValueError,
     "a must be on a CUDA device"),  # blockwise shapes pass; the device check follows
])
def test_bad_input_names_the_argument(call, error, message):
    with pytest.raises(error, match=message):
        call()


def test_fp8_splits_k_where_few_tiles_hold_long_k():
    """fp8_schedule_for: split-K where few 64-row tiles hold long K (16 at N = 2048, K = 14336, M = 64; blockwise 16
    at K = 16384), static where the tiles fill the machine, K is short, or one program a tile streams its k-steps in
    less than the split's DRAM time and fixup (swap-AB's 32 or 64 tiles at M = 16 to 64; blockwise 16 at K = 7168:
    predict_us as calibrated on the H100 decode rows)."""
    from tilepipe.host.configs import fp8_config_for, fp8_configs, fp8_schedule_for

    def pick(M, N, K, blockwise=False):
        return fp8_schedule_for(M, N, K, fp8_config_for(M, N, K, blockwise, torch.bfloat16, H100), blockwise, H100)

    rows64 = fp8_configs(False, torch.bfloat16)[-1]  # the 64-row tile (matmul_fp8 takes swap-AB's at M = 64 now)
    assert fp8_schedule_for(64, 2048, 14336, rows64, False, H100) == pick(64, 2048, 16384, blockwise=True) == "splitk"
    assert pick(64, 2048, 14336) == "static" and fp8_config_for(64, 2048, 14336, False, torch.bfloat16, H100).swap_ab
    assert pick(16, 2048, 14336) == pick(16, 4096, 14336) == pick(64, 2048, 7168) == "static"
    assert pick(64, 2048, 7168, blockwise=True) == "static"
    assert pick(16, 14336, 4096) == pick(64, 7168, 2048) == pick(8192, 14336, 4096) == "static"
    assert pick(4096, 7168, 2048, blockwise=True) == "static"
    assert fp8_schedule_for(64, 2048, 7168, BLOCKWISE, True, H100) == "static"  # 16 tiles: one partial wave


def test_blockwise_128_row_tile_runs_stream_k_where_its_last_wave_is_nearly_empty():
    """The blockwise kernel's 128-row tile under stream-K where the best static tile is predicted
    blockwise_streamk_min_gain slower: the four probe shapes that measured 1.08-1.17x faster move, those that measured
    0.92-1.01x stay static (bench/results/archive/blockwise-streamk-probe-h100.json)."""
    from tilepipe.host.configs import fp8_config_for, fp8_schedule_for

    def choice(M, N, K):
        cfg = fp8_config_for(M, N, K, True, torch.bfloat16, H100)
        return cfg.block_m, fp8_schedule_for(M, N, K, cfg, True, H100)

    for shape in ((1024, 4608, 7168), (3072, 1536, 7168), (512, 4608, 7168), (1536, 1536, 7168)):
        assert choice(*shape) == (128, "streamk"), shape
    for shape in ((768, 4096, 7168), (1536, 4608, 7168), (1024, 7168, 16384), (2048, 4608, 7168), (1024, 7168, 4608)):
        assert choice(*shape)[1] == "static", shape
    assert choice(1024, 2048, 7168) == (128, "static")  # 128 tiles: one wave
