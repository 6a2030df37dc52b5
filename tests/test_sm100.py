"""CPU tests of the sm_100a (Blackwell) GEMMs (16-bit and FP8): compiled for sm_100a without a GPU, its SASS instruction mix, its shared
and tensor memory against the plan and the limits, the plan's refusals, and which kernel a GPU gets. Nothing here runs
a kernel: the sm_100a GEMM has been compiled, never run."""

import re
from dataclasses import replace

import pytest
import torch

from tilepipe.host.checks import check_cluster, check_schedule
from tilepipe.host.configs import (GL_DTYPES, SM100_CONFIGS, SM100_FP8_CONFIGS, choose_config, sm100_config,
                                   sm100_fitted, sm100_fp8_config)
from tilepipe.host.device import gemm_target
from tilepipe.kernels.matmul_fp8 import scaled_spec
from tilepipe.kernels.sm100_matmul import EPILOGUE_N, sm100_matmul_spec, sm100_operand_blocks, sm100_plan
from tilepipe.pipeline.storage import SmemBudgetError
from tilepipe.verify.compile import CompileError, compile_kernels

LARGE, MEDIUM = SM100_CONFIGS
# (config, input dtype, D dtype, B K-major, with C, C's dtype when not D's, bias dtype, scheduler)
CASES = [(LARGE, "bf16", "bf16", True, False, None, None, "static"),
         (LARGE, "fp16", "fp16", False, False, None, None, "static"),
         (LARGE, "bf16", "bf16", True, False, None, "bf16", "static"),
         (LARGE, "bf16", "fp32", True, False, None, None, "static"),
         (MEDIUM, "bf16", "bf16", True, False, None, None, "static"),
         (MEDIUM, "fp16", "fp32", False, False, None, "fp32", "static"),
         (LARGE, "bf16", "bf16", True, True, None, None, "static"),
         (LARGE, "fp16", "fp16", False, True, "fp32", None, "static"),
         (MEDIUM, "bf16", "fp32", True, True, None, None, "static"),
         (LARGE, "bf16", "bf16", True, False, None, None, "clc"),
         (LARGE, "bf16", "bf16", True, True, None, None, "clc"),
         (MEDIUM, "fp16", "fp16", False, False, None, "fp16", "clc")]
CASES = [(sm100_fitted(cfg, dtype, c_dtype, has_c, source, schedule == "clc"), dtype, c_dtype, kmajor, has_c, source,
          bias, schedule) for cfg, dtype, c_dtype, kmajor, has_c, source, bias, schedule in CASES]  # as launched
OVER_SMEM = LARGE.__class__(128, 256, 64, stages=5, c_stages=2, num_warps=4)  # 240 KB of operand stages


def case_id(case) -> str:
    cfg, dtype, c_dtype, kmajor, has_c, source, bias, schedule = case
    return f"{cfg.block_m}x{cfg.block_n}x{cfg.stages}-{dtype}-{c_dtype}-{'kmajor' if kmajor else 'rowmajor'}" + (
        f"-{source or c_dtype}C" if has_c else "") + (f"-{bias}bias" if bias else "") + f"-{schedule}"


@pytest.fixture(scope="module")
def reports():
    specs = [sm100_matmul_spec(*case[:7], schedule=case[7]) for case in CASES]
    return compile_kernels(specs + [sm100_matmul_spec(OVER_SMEM, "bf16", "bf16", True)])


@pytest.mark.parametrize("index", range(len(CASES)), ids=[case_id(case) for case in CASES])
def test_sm100_gemm_instruction_mix(reports, index):
    """Per k-step BK/16 UTCHMMA (K = 16 each) and the A and B TMA loads; one tcgen05 commit frees each input stage and
    one per tile hands the accumulator over (UTCBAR x 2); the epilogue reads BN / EPI_N TMEM sub-tiles (LDTM) and
    TMA-stores each (with C, the epilogue-load role TMA-loads each C sub-tile); no spills; smem and TMEM as planned
    and within the limits."""
    cfg, dtype, c_dtype, kmajor, has_c, source, bias, schedule = CASES[index]
    report = reports[index]
    assert not isinstance(report, CompileError), report
    assert report.target == "sm_100a"
    assert report.count("UTCHMMA", "sass") == cfg.block_k // 16 == report.count("tcgen05.mma.cta_group::1.kind::f16")
    assert report.count("HGMMA", "sass") == 0 and report.count("wgmma") == 0
    assert report.count("UTCBAR", "sass") == 2 == report.count("tcgen05.commit")
    b_boxes = 1 if kmajor else cfg.block_n * 2 // 128  # TMA boxes are at most 128 bytes wide (128-byte swizzle)
    subtiles = cfg.block_n // EPILOGUE_N
    assert report.count("UTMALDG", "sass") == 1 + b_boxes + (subtiles if has_c else 0)  # C: one box per sub-tile
    assert report.count("LDTM", "sass") == subtiles == report.count("tcgen05.ld.sync")
    assert report.count("UTMASTG", "sass") == subtiles
    assert report.spill_stores == report.spill_loads == 0
    assert (report.count("ld.global") > 0) == (bias is not None)  # only the bias is read without TMA
    plan = sm100_plan.fn(cfg.block_m, cfg.block_n, cfg.block_k, cfg.stages, cfg.c_stages, dtype, c_dtype, kmajor,
                         src_dtype=(source or c_dtype) if has_c else None, clc=schedule == "clc")
    assert 0 <= report.shared - plan.total_bytes < 256  # + warp_specialize's capture scratch
    assert report.shared <= 227 * 1024
    assert report.tmem == plan.tmem_columns == 2 * cfg.block_n <= 512  # double-buffered accumulators
    # CLC: the scheduler's one try_cancel per loop trip (UGETNEXTWORKID), its own read of whether it cancelled, and
    # each reader's (epilogue, load, mma, epilogue-load) whether and which; the MMA role never asks which tile
    clc = schedule == "clc"
    assert report.count("UGETNEXTWORKID", "sass") == clc == report.count("clusterlaunchcontrol.try_cancel")
    readers = 3 + has_c
    assert report.count("query_cancel.is_canceled") == (1 + readers if clc else 0)
    assert report.count("query_cancel.get_first_ctaid") == (readers - 1 if clc else 0)


def innermost_loop(ptx: str, marker: str) -> list[str]:
    """The PTX lines of the innermost loop (a `$L__` label up to a branch back to it) that holds `marker`."""
    lines = ptx.splitlines()
    labels = {match.group(1): i for i, line in enumerate(lines) if (match := re.match(r"(\$L__\w+):", line.strip()))}
    loops = [(labels[match.group(1)], i) for i, line in enumerate(lines)
             if (match := re.search(r"\bbra(?:\.uni)?\s+(\$L__\w+);", line)) and labels.get(match.group(1), i + 1) <= i]
    start, end = min(((a, b) for a, b in loops if any(marker in line for line in lines[a:b + 1])),
                     key=lambda loop: loop[1] - loop[0])
    return lines[start:end + 1]


@pytest.mark.parametrize("index", [i for i, case in enumerate(CASES) if not case[4]],
                         ids=[case_id(case) for case in CASES if not case[4]])
def test_sm100_gemm_per_k_step_and_per_tile(reports, index):
    """What docs/blackwell-vs-upstream.md compares with the upstream Gluon tutorials, where it sits. One k-step of the
    MMA role: one wait for the stage, BK/16 MMAs and one commit (the last MMA's, which frees the stage); the
    accumulator's commit is the tile's, outside that loop. One k-step of the load role: one wait, one expect, the A
    box and B's boxes. Per tile, the epilogue waits once and makes two named barriers per sub-tile (after the store
    wait, before the TMA store) plus one before freeing the accumulator. Static schedule: each role's mbarrier waits
    (epilogue 1, load 1, MMA 2) plus the drains at role exit (a wait per input stage, per accumulator)."""
    cfg, dtype, c_dtype, kmajor, has_c, source, bias, schedule = CASES[index]
    ptx = reports[index].ptx
    mma_step = innermost_loop(ptx, "tcgen05.mma.")
    assert sum("tcgen05.mma." in line for line in mma_step) == cfg.block_k // 16
    assert sum("tcgen05.commit" in line for line in mma_step) == 1
    assert sum("mbarrier.try_wait" in line for line in mma_step) == 1
    load_step = innermost_loop(ptx, "cp.async.bulk.tensor.2d.shared")
    b_boxes = 1 if kmajor else cfg.block_n * 2 // 128
    assert sum("cp.async.bulk.tensor.2d.shared" in line for line in load_step) == 1 + b_boxes
    assert sum("mbarrier.try_wait" in line for line in load_step) == 1
    assert sum("expect_tx" in line for line in load_step) == 1
    subtiles = cfg.block_n // EPILOGUE_N
    clc = schedule == "clc"
    assert reports[index].count("bar.sync \t0, 128;") == 2 * subtiles + 1 + clc  # CLC: the epilogue frees a ring slot
    assert reports[index].count("tcgen05.wait::ld") == subtiles
    if not clc:
        assert reports[index].count("mbarrier.try_wait") == 4 + cfg.stages + 2


def test_plan_over_the_smem_limit_is_a_compile_error(reports):
    with pytest.raises(SmemBudgetError, match="shared memory plan needs"):
        sm100_plan.fn(128, 256, 64, OVER_SMEM.stages, 2, "bf16", "bf16", True)
    error = reports[-1]
    assert isinstance(error, CompileError) and "shared memory plan needs" in str(error) and "operands.a" in str(error)


def test_accumulators_are_double_buffered_where_tmem_allows():
    for block_n, stages, columns in ((256, 2, 512), (128, 2, 256), (64, 2, 128)):
        plan = sm100_plan.fn(128, block_n, 64, 2, 2, "bf16", "bf16", True)
        assert plan.accumulators.stages == stages and plan.tmem_columns == columns
        assert plan.pipelines.output.stages == stages  # one accumulator pipeline stage per TMEM accumulator


@pytest.mark.parametrize("c_dtype", ["bf16", "fp16", "fp32"])
def test_every_sm100_config_fits(c_dtype):
    for cfg in SM100_CONFIGS:
        assert sm100_plan.fn(cfg.block_m, cfg.block_n, cfg.block_k, cfg.stages, cfg.c_stages, "bf16", c_dtype,
                             True).fits
    assert choose_config(8192, 8192, torch.bfloat16, 148, SM100_CONFIGS) == LARGE  # 2048 tiles: full waves
    assert choose_config(1024, 1024, torch.bfloat16, 148, SM100_CONFIGS) == MEDIUM  # 64 tiles of 128 x 128


def test_c_stages_take_operand_stages_only_where_needed():
    """A bf16 C sub-tile ring fits beside 4 stages of 128 x 256; an fp32 one (or an fp32 D with C) leaves 3."""
    bf16, fp32 = torch.bfloat16, torch.float32
    assert sm100_config(8192, 8192, bf16, bf16, 148) == LARGE
    assert sm100_config(8192, 8192, bf16, bf16, 148, bf16) == LARGE
    assert sm100_config(8192, 8192, bf16, bf16, 148, fp32).stages == 3
    assert sm100_config(8192, 8192, bf16, fp32, 148, fp32).stages == 3
    assert sm100_config(1024, 1024, bf16, bf16, 148, fp32).stages == 5


@pytest.mark.parametrize("capability, target", [((9, 0), "sm_90a"), ((10, 0), "sm_100a"), ((10, 3), "sm_100a")])
def test_gemm_target_by_capability(capability, target):
    assert gemm_target(capability) == target


@pytest.mark.parametrize("capability, name, words", [
    ((12, 0), "NVIDIA GeForce RTX 5090", ("RTX 5090 is sm_120", "consumer Blackwell")),
    ((10, 1), "NVIDIA Thor", ("Thor is sm_101", )), ((8, 0), "NVIDIA A100", ("A100 is sm_80", ))])
def test_other_gpus_get_an_error_naming_the_device(capability, name, words):
    with pytest.raises(RuntimeError) as error:
        gemm_target(capability, name)
    assert all(word in str(error.value) for word in words) and "sm_90" in str(error.value)


@pytest.mark.parametrize("arch, scheduler, ok", [("sm_100a", None, True), ("sm_100a", "clc", True),
                                                 ("sm_100a", "streamk", False), ("sm_100a", "dynamic", False),
                                                 ("sm_90a", "dynamic", True), ("sm_90a", "clc", False)])
def test_each_gemm_takes_its_own_schedulers(arch, scheduler, ok):
    if ok:
        check_schedule(scheduler, arch)
        return
    with pytest.raises(ValueError, match=f"scheduler '{scheduler}' is not built for {arch}"):
        check_schedule(scheduler, arch)


def test_sm100_shares_the_launch_path():
    """The sm_100a GEMM takes matmul_kernel's arguments (CLUSTER_M/N included, 1 for one CTA per program) with C and
    D in EPILOGUE_N-column boxes; clusters other than its two-CTA pair (tests/test_sm100_pair.py) are refused, by
    matmul as by the spec builder, and the sm_90a checks are unchanged."""
    spec = sm100_matmul_spec(MEDIUM, "bf16", "bf16", True)
    assert spec.constexprs["CLUSTER_M"] == spec.constexprs["CLUSTER_N"] == 1 and spec.options["num_ctas"] == 1
    assert sm100_operand_blocks(MEDIUM, True)["c"] == ((MEDIUM.block_m, EPILOGUE_N), ())
    wide = MEDIUM.__class__(128, 128, 64, stages=4, num_warps=4, cluster_n=2)
    with pytest.raises(ValueError, match="2x1 pair of its two-CTA MMA"):
        sm100_matmul_spec(wide, "bf16", "bf16", True)
    with pytest.raises(ValueError, match="1x2 cluster is built for sm_90a"):
        check_cluster(wide, "static", "sm_100a")
    check_cluster(wide, "static", "sm_90a")
    check_cluster(wide, "dynamic", "sm_90a")
    with pytest.raises(ValueError, match="scheduler 'dynamic' does not hand out cluster tiles yet; on sm_100a"):
        check_cluster(replace(wide, cluster_m=2, cluster_n=1), "dynamic", "sm_100a")


# ---- the FP8 GEMM on sm_100a (sm100_scaled_matmul_kernel: compiled, never run) -----------------------------------

# (config, A dtype, B dtype, D dtype, per-row scales)
FP8_CASES = [(SM100_FP8_CONFIGS[0], "fp8e4nv", "fp8e4nv", "bf16", False),
             (SM100_FP8_CONFIGS[0], "fp8e4nv", "fp8e5", "fp32", True),
             (SM100_FP8_CONFIGS[1], "fp8e5", "fp8e4nv", "fp16", True)]
FP8_CASES = [(sm100_fitted(cfg, a, out), a, b, out, per_row) for cfg, a, b, out, per_row in FP8_CASES]


@pytest.fixture(scope="module")
def fp8_reports():
    return compile_kernels([scaled_spec(cfg, a, b, out, per_row, target="sm_100a")
                            for cfg, a, b, out, per_row in FP8_CASES])


@pytest.mark.parametrize("index", range(len(FP8_CASES)),
                         ids=[f"{c[0].block_n}-{c[1]}x{c[2]}-{c[3]}-{'row' if c[4] else 'tensor'}" for c in FP8_CASES])
def test_sm100_fp8_gemm_instruction_mix(fp8_reports, index):
    """tcgen05's f8f6f4 MMA (UTCQMMA, K = 32 each: BK/32 a k-step, A and B of their own fp8 formats), the same commits,
    TMA and TMEM sub-tile reads as the 16-bit GEMM, the scales read by pointer in the epilogue (the only non-TMA
    global loads), no spills, and shared memory and TMEM within the limits."""
    cfg, a, b, out, per_row = FP8_CASES[index]
    report = fp8_reports[index]
    assert not isinstance(report, CompileError), report
    assert report.count("UTCQMMA", "sass") == cfg.block_k // 32 == report.count("tcgen05.mma.cta_group::1.kind::f8f6f4")
    assert report.count("UTCHMMA", "sass") == 0 and report.count("wgmma") == 0
    assert report.count("UTCBAR", "sass") == 2 == report.count("tcgen05.commit")
    subtiles = cfg.block_n // EPILOGUE_N
    assert report.count("UTMALDG", "sass") == 2 and report.count("UTMASTG", "sass") == subtiles
    assert report.count("LDTM", "sass") == subtiles
    assert report.count("ld.global") > 0 and report.spill_stores == report.spill_loads == 0
    plan = sm100_plan.fn(cfg.block_m, cfg.block_n, cfg.block_k, cfg.stages, cfg.c_stages, a, out, True, b_dtype=b)
    assert 0 <= report.shared - plan.total_bytes < 256 and report.shared <= 227 * 1024
    assert report.tmem == plan.tmem_columns <= 512


def test_sm100_fp8_config_fits_each_output_dtype():
    """sm100_fp8_config keeps the wave heuristic's tile and as many stages as fit beside D's sub-tile buffers."""
    for out in (torch.bfloat16, torch.float32):
        cfg = sm100_fp8_config(8192, 8192, out, 148)
        assert (cfg.block_m, cfg.block_n, cfg.block_k) == (128, 256, 128)
        assert sm100_plan.fn(128, 256, 128, cfg.stages, cfg.c_stages, "fp8e4nv", GL_DTYPES[out], True).total_bytes \
            <= 227 * 1024
