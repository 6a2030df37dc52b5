"""CPU tests of the blockwise FP8 GEMM for sm_100a (kernels/sm100_blockwise.py): compiled for sm_100a without a GPU, its
SASS instruction mix and per-K-tile PTX, shared memory and TMEM against the plan and the limits, its configuration,
and which kernel matmul_fp8 launches on an sm_100 GPU. Nothing here runs it: it has been compiled, never run."""

import pytest
import torch

from tests.test_sm100 import innermost_loop
from tilepipe.api import fp8 as fp8_api
from tilepipe.host.checks import scaling_of
from tilepipe.host.configs import GL_DTYPES, SM100_BLOCKWISE_CONFIGS, sm100_blockwise_config
from tilepipe.kernels.matmul_fp8_blockwise import blockwise_spec
from tilepipe.kernels.sm100_blockwise import sm100_blockwise_plan
from tilepipe.pipeline.storage import SmemBudgetError
from tilepipe.verify.compile import CompileError, compile_kernels

# (A dtype, B dtype, D dtype), each in the configuration matmul_fp8 takes for its D
CASES = [("fp8e4nv", "fp8e4nv", torch.bfloat16), ("fp8e4nv", "fp8e5", torch.float32),
         ("fp8e5", "fp8e4nv", torch.float16)]


@pytest.fixture(scope="module")
def reports():
    return compile_kernels([blockwise_spec(sm100_blockwise_config(out), a, b, GL_DTYPES[out], target="sm_100a")
                            for a, b, out in CASES])


@pytest.mark.parametrize("index", range(len(CASES)), ids=[f"{a}x{b}-{GL_DTYPES[out]}" for a, b, out in CASES])
def test_sm100_blockwise_instruction_mix(reports, index):
    """Per K tile BK/32 UTCQMMA (kind::f8f6f4, K = 32 each) and two tcgen05 commits (the MMAs' frees the input stage,
    the next hands the partial on); TMA loads of A, B, A's scale column and B's scale box (no other global load: the
    scales come by TMA), one TMEM load of the partial (8 warps, 64 columns each), one D store a tile; no wgmma, no
    spills; shared memory as planned and TMEM's two 128-column partial buffers, both within the limits."""
    a, b, out = CASES[index]
    cfg, report = sm100_blockwise_config(out), reports[index]
    assert not isinstance(report, CompileError), report
    assert report.target == "sm_100a" and cfg.num_warps == 8
    assert report.count("UTCQMMA", "sass") == cfg.block_k // 32 == report.count("tcgen05.mma.cta_group::1.kind::f8f6f4")
    assert report.count("HGMMA", "sass") == report.count("wgmma") == report.count("UTCHMMA", "sass") == 0
    assert report.count("UTCBAR", "sass") == 2 == report.count("tcgen05.commit")
    assert report.count("UTMALDG", "sass") == 4 and report.count("UTMASTG", "sass") == 1
    assert report.count("LDTM", "sass") == 1 == report.count("tcgen05.ld.sync")
    assert report.count("ld.global") == 0 and report.spill_stores == report.spill_loads == 0
    plan = sm100_blockwise_plan.fn(128, 128, cfg.stages, a, b, GL_DTYPES[out])
    assert 0 <= report.shared - plan.total_bytes < 256 and report.shared <= 227 * 1024
    assert report.tmem == plan.tmem_columns == 256 <= 512


@pytest.mark.parametrize("index", range(len(CASES)), ids=[f"{a}x{b}-{GL_DTYPES[out]}" for a, b, out in CASES])
def test_sm100_blockwise_per_k_tile(reports, index):
    """One K tile of each role. MMA: a wait for a free partial buffer and one for the input stage, BK/32 MMAs, two
    commits. Load: the scale stage (one wait, one expect, two boxes), then the input stage (the same, A and B).
    Epilogue: waits for the partial and the scale stage, one TMEM load, then frees both, each after a 256-thread
    bar.sync (the scale stage after a proxy fence: TMA refills what the threads read)."""
    ptx = reports[index].ptx
    mma = innermost_loop(ptx, "tcgen05.mma.")
    assert sum("tcgen05.mma." in line for line in mma) == 4
    assert sum("tcgen05.commit" in line for line in mma) == 2
    assert sum("mbarrier.try_wait" in line for line in mma) == 2
    load = innermost_loop(ptx, "cp.async.bulk.tensor.2d.shared")
    assert sum("cp.async.bulk.tensor.2d.shared" in line for line in load) == 4
    assert sum("expect_tx" in line for line in load) == 2 and sum("mbarrier.try_wait" in line for line in load) == 2
    promote = innermost_loop(ptx, "tcgen05.ld.sync")
    assert sum("tcgen05.ld.sync" in line for line in promote) == 1
    assert sum("mbarrier.try_wait" in line for line in promote) == 2
    assert sum("mbarrier.arrive" in line for line in promote) == 2
    assert sum("bar.sync \t0, 256;" in line for line in promote) == 2
    assert sum("fence.proxy.async" in line for line in promote) == 1


def test_sm100_blockwise_stages_fill_shared_memory():
    """As many stages as fit beside D's one 128 x 128 buffer and the scale ring (at most SM100_BLOCKWISE_CONFIGS'):
    5 with a 16-bit D, 4 with fp32; one more is over the limit."""
    for out, stages in ((torch.bfloat16, 5), (torch.float16, 5), (torch.float32, 4)):
        cfg = sm100_blockwise_config(out)
        assert cfg.stages == stages <= SM100_BLOCKWISE_CONFIGS[0].stages
        assert (cfg.block_m, cfg.block_n, cfg.block_k, cfg.c_stages) == (128, 128, 128, 1)
        with pytest.raises(SmemBudgetError, match="shared memory plan needs"):
            sm100_blockwise_plan.fn(128, 128, stages + 1, "fp8e4nv", "fp8e4nv", GL_DTYPES[out])


def test_plan_declares_the_scale_ring_from_load_to_epilogue():
    plan = sm100_blockwise_plan.fn(128, 128, 4, "fp8e4nv", "fp8e4nv", "bf16")
    rings = {use.name: (use.count, use.producer, use.consumer) for use in plan.barrier_map()}
    assert rings["scale_ring.scales.full"] == (4, "load", "epilogue")
    assert rings["pipelines.output.full"] == (2, "mma", "epilogue")  # the two TMEM partial buffers


@pytest.fixture
def sm100_launch(monkeypatch):
    """matmul_fp8 as on an sm_100 GPU, on CPU tensors: the device checks and the launch stubbed, the launch recorded."""
    launched = []
    monkeypatch.setattr("tilepipe.host.checks.check_matmul_fp8", lambda a, b, sa, sb, out_dtype, out: fp8_args(
        a, b, sa, sb, out_dtype))
    monkeypatch.setattr("tilepipe.host.checks.device_index", lambda t: 0)
    monkeypatch.setattr("tilepipe.host.choose.device_target", lambda device: "sm_100a")
    monkeypatch.setattr("tilepipe.host.choose.sm_count", lambda device: 148)
    monkeypatch.setattr("tilepipe.host.launch.sm_count", lambda device: 148)
    monkeypatch.setattr(torch._C, "_cuda_getCurrentRawStream", lambda device: 0, raising=False)
    monkeypatch.setattr(fp8_api, "launch_fp8", lambda plan: launched.append((plan.kernel, [t[1] for t in plan.tma],
                                                                             plan.cfg, plan.key[2])))
    return launched


def fp8_args(a, b, sa, sb, out_dtype):
    """check_matmul_fp8's result without its CUDA device checks."""
    return a.shape[0], b.shape[1], a.shape[1], scaling_of(sa, sb, a.shape[0], b.shape[1], a.shape[1]), out_dtype


@pytest.mark.parametrize("out_dtype", (torch.bfloat16, torch.float32))
def test_matmul_fp8_launches_the_sm100_blockwise_kernel(sm100_launch, out_dtype):
    M, N, K = 300, 520, 1000
    a = torch.zeros(M, K).to(torch.float8_e4m3fn)
    b = torch.zeros(N, K).to(torch.float8_e4m3fn).t()
    fp8_api.matmul_fp8(a, b, torch.ones(-(-K // 128), M).t(), torch.ones(-(-K // 128), -(-N // 128)),
                       out_dtype=out_dtype)
    (kernel, blocks, cfg, schedule), = sm100_launch
    assert (kernel, cfg, schedule) == ("sm100_blockwise_matmul_kernel", sm100_blockwise_config(out_dtype), "static")
    assert blocks == [(128, 128), (128, 128), (1, 128), (1, 32), (128, 128)]


def test_sm100_blockwise_refuses_other_tiles(sm100_launch):
    a = torch.zeros(256, 256).to(torch.float8_e4m3fn)
    config = SM100_BLOCKWISE_CONFIGS[0].__class__(128, 256, 128, stages=4, c_stages=1, num_warps=8)
    with pytest.raises(ValueError, match="128 x 128 x 128 tiles"):
        fp8_api.matmul_fp8(a, a.t(), torch.ones(2, 256).t(), torch.ones(2, 2), config=config)
    assert not sm100_launch
