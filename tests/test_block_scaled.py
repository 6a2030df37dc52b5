"""CPU tests of the block-scaled GEMM for sm_100a (MXFP8, MXFP4, NVFP4): compiled for sm_100a without a GPU, its SASS
instruction mix per k-step, its shared and tensor memory against the plan and the limits, the plan's refusals, the
packed scale layout against the kernel's view of it, and matmul_block_scaled's argument checks. Nothing here runs a
kernel: the block-scaled GEMM has been compiled, never run."""

import pytest
import torch

from tests.test_sm100 import innermost_loop
from tilepipe.api.fp8 import matmul_block_scaled
from tilepipe.host.block_scales import block_scaled_operands, pack_block_scales
from tilepipe.host.configs import (SM100_BLOCK_SCALED_CONFIGS, sm100_block_scaled_config, sm100_block_scaled_fitted)
from tilepipe.host.device import block_scaled_target
from tilepipe.kernels.sm100_block_scaled import FORMATS, block_scaled_spec
from tilepipe.kernels.sm100_matmul import EPILOGUE_N, sm100_plan
from tilepipe.pipeline.storage import (BlockScaledTileStorage, SmemBudgetError, SmemPlan, TmemAccumulatorStorage,
                                       packed_scale_box)
from tilepipe.verify.compile import CompileError, compile_kernels

LARGE, MEDIUM = SM100_BLOCK_SCALED_CONFIGS
# (format, config, A dtype, B dtype, D dtype), configs fitted as matmul_block_scaled launches them
CASES = [("mxfp8", LARGE, "fp8e4nv", "fp8e4nv", "bf16"), ("mxfp8", MEDIUM, "fp8e4nv", "fp8e5", "fp32"),
         ("mxfp4", LARGE, "uint8", "uint8", "bf16"), ("mxfp4", MEDIUM, "uint8", "uint8", "fp32"),
         ("nvfp4", LARGE, "uint8", "uint8", "bf16"), ("nvfp4", MEDIUM, "uint8", "uint8", "fp16")]
CASES = [(fmt, sm100_block_scaled_fitted(cfg, fmt, a, out), a, b, out) for fmt, cfg, a, b, out in CASES]
MMA = {"mxfp8": ("UTCQMMA", "kind::mxf8f6f4.block_scale.block32", 32),  # SASS, PTX, K of one MMA instruction
       "mxfp4": ("UTCOMMA gdesc", "kind::mxf4.block_scale.block32", 64),  # no .4X: block32 scales
       "nvfp4": ("UTCOMMA.4X", "kind::mxf4nvf4.block_scale.block16", 64)}


def case_id(case) -> str:
    fmt, cfg, a, b, out = case
    return f"{fmt}-{cfg.block_m}x{cfg.block_n}x{cfg.stages}-{a}x{b}-{out}"


def plan_of(fmt: str, cfg, dtype: str, out: str):
    return sm100_plan.fn(cfg.block_m, cfg.block_n, cfg.block_k, cfg.stages, cfg.c_stages, dtype, out, True,
                         scales=FORMATS[fmt].scales(cfg.block_k))


@pytest.fixture(scope="module")
def reports():
    return compile_kernels([block_scaled_spec(cfg, fmt, a, b, out) for fmt, cfg, a, b, out in CASES])


@pytest.mark.parametrize("index", range(len(CASES)), ids=[case_id(case) for case in CASES])
def test_block_scaled_instruction_mix(reports, index):
    """Per k-step (K = 128 stored elements: 128 e4m3 or 256 e2m1) 4 block-scaled MMAs of the format's kind (no
    other format's, in PTX or SASS); one
    tcgen05.cp per 128 rows of SFA and SFB per packed scale block; 4 TMA loads (A, B, SFA, SFB); a commit per input
    stage and one per tile (UTCBAR x 2); the plain epilogue (BN / EPI_N TMEM loads and TMA stores); no other MMA, no
    spills; shared memory as planned, TMEM as planned, both within the limits."""
    fmt, cfg, a, b, out = CASES[index]
    report = reports[index]
    assert not isinstance(report, CompileError), report
    sass, ptx, mma_k = MMA[fmt]
    k_elements = cfg.block_k * FORMATS[fmt].per_element
    assert report.count(sass, "sass") == k_elements // mma_k == report.count(f"tcgen05.mma.cta_group::1.{ptx}") == 4
    assert report.count("UTCHMMA", "sass") == report.count("kind::f8f6f4") == report.count("wgmma") == 0
    assert all(report.count(o_sass, "sass") == report.count(o_ptx) == 0
               for other, (o_sass, o_ptx, _) in MMA.items() if other != fmt)
    copies = (cfg.block_m + cfg.block_n) // 128 * FORMATS[fmt].k_blocks(cfg.block_k)
    assert report.count("UTCCP.T.S.4x32dp128bit", "sass") == copies == report.count("tcgen05.cp.cta_group::1.warpx4")
    assert report.count("UTMALDG", "sass") == 4 and report.count("UTMALDG.5D", "sass") == 2
    assert report.count("UTCBAR", "sass") == 2 == report.count("tcgen05.commit")
    subtiles = cfg.block_n // EPILOGUE_N
    assert report.count("LDTM", "sass") == subtiles == report.count("UTMASTG", "sass")
    assert report.spill_stores == report.spill_loads == 0 and report.count("ld.global") == 0
    plan = plan_of(fmt, cfg, a, out)
    assert 0 <= report.shared - plan.total_bytes < 256 and report.shared <= 227 * 1024
    assert report.tmem == plan.tmem_columns == 512
    assert plan.accumulators.stages == (1 if cfg.block_n == 256 else 2)


@pytest.mark.parametrize("index", range(len(CASES)), ids=[case_id(case) for case in CASES])
def test_block_scaled_per_k_step(reports, index):
    """One k-step of the MMA role: one wait for the stage, the scale copies, 4 MMAs, one commit (the last MMA's, which
    frees the stage and covers the copies before it). One k-step of the load role: one wait, one expect, the A and B
    boxes (2-D) and the two scale boxes (5-D). Per tile, the plain epilogue's named barriers (2 a sub-tile + 1); in all,
    each role's waits (epilogue 1, load 1, MMA 2) and the drains (a wait per input stage, per accumulator)."""
    fmt, cfg, a, _, out = CASES[index]
    ptx = reports[index].ptx
    assert reports[index].count("bar.sync \t0, 128;") == 2 * cfg.block_n // EPILOGUE_N + 1
    assert reports[index].count("mbarrier.try_wait") == 4 + cfg.stages + plan_of(fmt, cfg, a, out).accumulators.stages
    mma_step = innermost_loop(ptx, "tcgen05.mma.")
    assert sum("tcgen05.mma." in line for line in mma_step) == 4
    assert sum("tcgen05.cp." in line for line in mma_step) == (cfg.block_m + cfg.block_n) // 128 * FORMATS[
        fmt].k_blocks(cfg.block_k)
    assert sum("tcgen05.commit" in line for line in mma_step) == 1
    assert sum("mbarrier.try_wait" in line for line in mma_step) == 1
    load_step = innermost_loop(ptx, "cp.async.bulk.tensor.5d.shared")
    assert sum("cp.async.bulk.tensor.2d.shared" in line for line in load_step) == 2
    assert sum("cp.async.bulk.tensor.5d.shared" in line for line in load_step) == 2
    assert sum("mbarrier.try_wait" in line for line in load_step) == 1
    assert sum("expect_tx" in line for line in load_step) == 1


def test_tmem_counts_the_scale_buffers():
    """Each TMEM scale buffer takes 32 columns (Triton's unit); two 256-column accumulators with them need 576, which
    rounds to 1024: the plan keeps one accumulator at BN = 256, two at 128, and refuses the over-limit plan."""
    storage = BlockScaledTileStorage("fp8e4nv", "fp8e4nv", (128, 128), (256, 128), 4, "uint8", 1)
    assert [part.columns for part in storage.tmem_parts()] == [32, 32]
    over = SmemPlan("sm_100a", tiles=storage, acc=TmemAccumulatorStorage(2, 128, 256))
    with pytest.raises(SmemBudgetError, match="TMEM plan needs 1024 columns but sm_100a allows 512") as error:
        over.check()
    assert "tiles.sfa" in str(error.value) and "tiles.sfb" in str(error.value)
    assert SmemPlan("sm_100a", tiles=storage, acc=TmemAccumulatorStorage(1, 128, 256)).tmem_columns == 512
    for block_n, stages in ((256, 1), (128, 2)):
        assert plan_of("nvfp4", sm100_block_scaled_fitted(MEDIUM.__class__(128, block_n, 128, stages=2, c_stages=2),
                                                          "nvfp4", "uint8", "bf16"), "uint8",
                       "bf16").accumulators.stages == stages


def test_stages_fit_the_shared_memory():
    """NVFP4's scale boxes are 4 times MXFP8's, MXFP4's twice: 4 stages of 128x256 fit with MXFP8 and MXFP4, 3 with
    NVFP4 (4 would need 237 KB); more stages than fit are refused."""
    assert [sm100_block_scaled_config(8192, 8192, fmt, FORMATS[fmt].dtype, torch.bfloat16, 148).stages
            for fmt in ("mxfp8", "mxfp4", "nvfp4")] == [4, 4, 3]
    assert sm100_block_scaled_config(1024, 1024, "mxfp8", "fp8e4nv", torch.bfloat16, 148) == MEDIUM
    with pytest.raises(SmemBudgetError, match="shared memory plan needs 237"):
        plan_of("nvfp4", LARGE, "uint8", "bf16")
    with pytest.raises(ValueError, match="whole blocks of 128 rows"):
        packed_scale_box(64, 1)


def test_packed_scales_are_what_the_kernel_unpacks():
    """pack_block_scales writes torch._scaled_mm's SWIZZLE_32_4_4 order; each TMA box of it, viewed as the kernel
    views it (tiles.py: _mma_scales, reshape / permute / reshape), is the tile's rows x scales matrix."""
    scales = torch.randint(0, 256, (300, 9), dtype=torch.uint8)
    padded = torch.zeros(384, 12, dtype=torch.uint8)
    padded[:300, :9] = scales
    boxes = pack_block_scales(scales).view(1, 3, 3, 2, 256)
    for row_block in range(3):
        for k_block in range(3):
            box = boxes[:, row_block:row_block + 1, k_block:k_block + 1]
            seen = box.reshape(1, 1, 32, 4, 4).permute(0, 3, 2, 1, 4).reshape(128, 4)
            assert torch.equal(seen, padded[128 * row_block:128 * (row_block + 1), 4 * k_block:4 * (k_block + 1)])


def test_random_operands_dequantize_to_their_reference():
    """The GPU tests' operands: packed scales of torch's element count, and a reference that is the dequantized
    product (checked here against a direct sum over a few entries)."""
    for fmt, K in (("mxfp8", 96), ("mxfp4", 200), ("nvfp4", 100)):
        a, b, sa, sb, reference = block_scaled_operands(130, 7, K, fmt, device="cpu")
        groups = -(-K // (4 * FORMATS[fmt].vec)) * 4
        assert sa.numel() == 256 * groups and sb.numel() == 128 * groups and b.stride(0) == 1
        assert reference.shape == (130, 7) and torch.isfinite(reference).all()


def cpu_operands(fmt: str = "mxfp8", M: int = 130, N: int = 7, K: int = 96):
    return block_scaled_operands(M, N, K, fmt, device="cpu")[:4]


@pytest.mark.parametrize("edit, error, message", [
    (lambda a, b, sa, sb: (a, b, sa, sb, {"format": "mxfp6"}), ValueError, "format must be one of"),
    (lambda a, b, sa, sb: (a.float(), b, sa, sb, {}), TypeError, "a must be torch.float8_e4m3fn or"),
    (lambda a, b, sa, sb: (a, b, sa, sb, {"format": "nvfp4"}), TypeError, "a must be torch.float4_e2m1fn_x2"),
    (lambda a, b, sa, sb: (a, b, sa.view(torch.uint8), sb, {}), TypeError, "scale_a must be torch.float8_e8m0fnu"),
    (lambda a, b, sa, sb: (a, b, sa, sb[:-4], {}), ValueError, "scale_b must have 512 elements"),
    (lambda a, b, sa, sb: (a, b, sa.view(2, -1).t(), sb, {}), ValueError, "scale_a must be contiguous"),
    (lambda a, b, sa, sb: (a.t().contiguous().t(), b, sa, sb, {}), ValueError, "a must be row-major"),
    (lambda a, b, sa, sb: (a, b.contiguous(), sa, sb, {}), ValueError, "b must be column-major"),
    (lambda a, b, sa, sb: (a[:, :64], b, sa, sb, {}), ValueError, "a.shape.1. must equal b.shape.0."),
    (lambda a, b, sa, sb: (a, b, sa, sb, {"out_dtype": torch.int8}), TypeError, "out_dtype must be"),
    (lambda a, b, sa, sb: (a, b, [1], sb, {}), TypeError, "scale_a must be a torch.Tensor"),
    (lambda a, b, sa, sb: (a, b, sa, sb, {}), ValueError, "a must be on a CUDA device"),
])
def test_bad_arguments_name_themselves(edit, error, message):
    a, b, sa, sb, kwargs = edit(*cpu_operands())
    with pytest.raises(error, match=message):
        matmul_block_scaled(a, b, sa, sb, **kwargs)


def test_fp4_formats_differ_in_their_scales():
    """MXFP4 and NVFP4 take the same packed e2m1 data; their scales differ in dtype (e8m0, e4m3) and in the K each
    covers (32, 16), and each format refuses the other's (the triple (format, data, scales) names the argument)."""
    mx, nv = cpu_operands("mxfp4", K=200), cpu_operands("nvfp4", K=100)  # 7 scales of 32 and of 16, padded to 8
    for fmt, (a, b, sa, sb) in (("mxfp4", mx), ("nvfp4", nv)):
        with pytest.raises(ValueError, match="a must be on a CUDA device"):  # every format check passed
            matmul_block_scaled(a, b, sa, sb, format=fmt)
    with pytest.raises(TypeError, match="scale_a must be torch.float8_e4m3fn for format 'nvfp4'"):
        matmul_block_scaled(*mx, format="nvfp4")
    with pytest.raises(TypeError, match="scale_a must be torch.float8_e8m0fnu for format 'mxfp4'"):
        matmul_block_scaled(*nv, format="mxfp4")
    e8m0 = [s.view(torch.float8_e8m0fnu) for s in nv[2:]]  # K = 100: 4 scales of 32 a row, where NVFP4 has 8 of 16
    with pytest.raises(ValueError, match="scale_b must have 512 elements for format 'mxfp4'.*one per 32.*got 1024"):
        matmul_block_scaled(nv[0], nv[1], e8m0[0][:1024], e8m0[1], format="mxfp4")
    with pytest.raises(TypeError, match="a must be torch.float4_e2m1fn_x2 for format 'mxfp4'"):
        matmul_block_scaled(*cpu_operands(), format="mxfp4")


@pytest.mark.parametrize("capability, name, words", [
    ((9, 0), "NVIDIA H100", ("needs a datacenter Blackwell GPU", "H100 is sm_90 (Hopper)")),
    ((12, 0), "NVIDIA GeForce RTX 5090", ("RTX 5090 is sm_120", )), ((8, 0), "NVIDIA A100", ("A100 is sm_80", ))])
def test_block_scaled_refuses_other_gpus_naming_them(capability, name, words):
    with pytest.raises(RuntimeError) as error:
        block_scaled_target(capability, name)
    assert all(word in str(error.value) for word in words)
    assert block_scaled_target((10, 0)) == block_scaled_target((10, 3)) == "sm_100a"
