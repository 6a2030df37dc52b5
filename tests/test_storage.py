"""CPU tests of tilepipe.pipeline.storage: plans for the GEMM family, the budget error, stage search, compiled sizes."""

import re

import pytest

from tests.kernels.storage_kernels import KINDS, SM100_ONLY, plan
from tilepipe.kernels.spec import KernelSpec
from tilepipe.pipeline.storage import (ClcPipelineStorage, InputPipelineStorage, OutputTileStorage, Part,
                                       SmemBudgetError, SmemLayouts, SmemPlan, StandardTileStorage,
                                       TmemAccumulatorStorage, device_limit, largest_stages)
from tilepipe.verify.compile import CompileError, compile_kernels

STAGES = (2, 4)


def matmul_plan(stages: int) -> SmemPlan:
    return plan.fn("matmul", stages)


def test_matmul_plan_parts_and_bytes():
    p = matmul_plan(3)
    a, b, c = 3 * 128 * 64 * 2, 3 * 256 * 64 * 2, 128 * 256 * 2
    barriers = 2 * 3 * 8 + 2 * 1 * 8  # input pairs + output pair
    assert p.total_bytes == a + b + c + barriers
    assert {f"{x.storage}.{x.part.name}": x.part.nbytes for x in p.placed} == {
        "tiles.a": a, "tiles.b": b, "c_tiles.c": c, "pipelines.input.barriers": 48, "pipelines.output.barriers": 16}
    for placed in p.placed:
        assert placed.offset % placed.part.alignment == 0
    assert all(x.part.alignment == 1024 for x in p.placed if x.part.kind == "tile")  # 128-byte swizzle atoms


def test_stage_count_sets_barrier_count():
    for stages, group in ((4, 1), (4, 2), (6, 3)):
        storage = InputPipelineStorage(stages, k_group_size=group)
        assert storage.parts()[0].nbytes == 2 * (stages // group) * 8
        assert [(u.name, u.count) for u in storage.barriers()] == [("input.full", stages // group),
                                                                   ("input.empty", stages // group)]
    clc = ClcPipelineStorage(3, ("load", "mma", "epilogue"))
    assert sum(p.nbytes for p in clc.parts()) == 2 * 3 * 8 + 2 * 3 * 8 + 3 * 16
    assert [u.arrivals for u in clc.barriers()] == [1, 3, 1, 1]  # every other role releases a scheduler slot


def test_plan_prints_table_and_barrier_map():
    text = str(plan.fn("scheduled", 4))
    for row in ("tiles.a", "tiles.b", "c_tiles.c", "pipelines.input.barriers", "pipelines.clc.response", "raw.barriers",
                "total"):
        assert row in text
    assert re.search(r"pipelines\.clc\.empty\s+2\s+3\s+load\+mma\+epilogue\s+scheduler", text)
    assert re.search(r"pipelines\.input\.full\s+2\s+1\s+load\s+mma", text)  # 4 stages in k-groups of 2


def test_plan_that_does_not_fit_lists_every_part():
    too_big = plan.fn("residual", 3)
    assert not too_big.fits
    with pytest.raises(SmemBudgetError) as error:
        too_big.check()
    message = str(error.value)
    assert f"needs {too_big.total_bytes} B but sm_90a allows {227 * 1024} B" in message
    for placed in too_big.placed:
        assert f"{placed.storage}.{placed.part.name}" in message and str(placed.part.nbytes) in message
    assert plan.fn("residual", 2).check().fits


def test_largest_stages_that_fit():
    per_stage = 128 * 64 * 2 + 256 * 64 * 2 + 16
    fixed = 128 * 256 * 2 + 16
    assert largest_stages(matmul_plan) == (227 * 1024 - fixed) // per_stage == 3
    best = largest_stages(lambda s: plan.fn("scheduled", s), multiple_of=2)
    assert plan.fn("scheduled", best).fits and not plan.fn("scheduled", best + 2).fits
    assert largest_stages(lambda s: SmemPlan("sm_90a", 1024, tiles=StandardTileStorage("bf16", "bf16", (128, 64),
                                                                                          (128, 64), s))) == 0


def test_tmem_columns_are_counted_beside_shared_memory():
    """sm_100a accumulators take TMEM columns, not shared memory; the plan rounds them as Triton allocates them."""
    p = plan.fn("tmem", 2)
    assert p.tmem_columns == 512 and p.tmem_limit == 512 and p.fits
    assert p.total_bytes == plan.fn("matmul", 2).total_bytes - 128 * 256 * 2  # the same parts, less the C tile
    text = str(p)
    assert re.search(r"tmem\.acc\s+128x256\s+fp32\s+2\s+512", text) and "TMEM total" in text
    assert "TMEM" not in str(plan.fn("matmul", 2))
    for stages, block_n, columns in ((1, 256, 256), (1, 96, 128), (1, 16, 32), (3, 128, 512)):
        assert SmemPlan("sm_100a", acc=TmemAccumulatorStorage(stages, 128, block_n)).tmem_columns == columns
    assert SmemPlan("sm_100a").tmem_columns == 0


@pytest.mark.parametrize("target, stages, block_n, needs", [("sm_100a", 3, 256, 1024), ("sm_100a", 2, 384, 1024),
                                                            ("sm_90a", 1, 64, 64)])
def test_plan_over_the_tmem_limit_is_refused_with_its_parts(target, stages, block_n, needs):
    over = SmemPlan(target, tiles=StandardTileStorage("bf16", "bf16", (128, 64), (block_n, 64), 1),
                    acc=TmemAccumulatorStorage(stages, 128, block_n))
    assert over.total_bytes <= over.limit_bytes and not over.fits
    with pytest.raises(SmemBudgetError) as error:
        over.check()
    message = str(error.value)
    assert f"TMEM plan needs {needs} columns but {target} allows {512 if target == 'sm_100a' else 0}" in message
    assert "shared memory plan needs" not in message  # only the limit that is exceeded is named
    assert all(row in message for row in ("tiles.a", "tiles.b", "acc.acc", "TMEM total"))
    assert largest_stages(lambda s: SmemPlan("sm_100a", acc=TmemAccumulatorStorage(s, 128, 256))) == 2


@pytest.mark.parametrize("bad, message", [
    (lambda: Part("x", "fp64x", (8, 8), 1), "unsupported shared-memory dtype"),
    (lambda: OutputTileStorage("bf16", (128, 0), 1).parts(), "tile dimensions must be positive"),
    (lambda: StandardTileStorage("bf16", "bf16", (128, 64), (128, 64), 0).parts(), "stages must be a positive int"),
    (lambda: InputPipelineStorage(3, k_group_size=2), "not a whole number of k-groups"),
    (lambda: SmemPlan("sm_80"), "unknown target"),
])
def test_bad_declarations_are_refused(bad, message):
    with pytest.raises((ValueError, TypeError), match=message):
        bad()


CASES = [(kind, stages, target) for kind in KINDS for stages in STAGES for target in ("sm_90a", "sm_100a")
         if target == "sm_100a" or kind not in SM100_ONLY]


@pytest.fixture(scope="module")
def compiled():
    specs = [KernelSpec("tests.kernels.storage_kernels:storage_kernel", {"KIND": "constexpr", "STAGES": "constexpr"},
                        {"KIND": kind, "STAGES": stages}, target=target) for kind, stages, target in CASES]
    return dict(zip(CASES, compile_kernels(specs)))


@pytest.mark.parametrize("case", CASES, ids=lambda c: "-".join(map(str, c)))
def test_compiled_kernel_uses_the_planned_shared_memory(compiled, case):
    """The kernel allocates its plan through the same declaration; Triton's allocation equals the plan's bytes."""
    kind, stages, target = case
    report = compiled[case]
    assert not isinstance(report, CompileError), report
    the_plan = plan.fn(kind, stages)
    assert report.shared == the_plan.total_bytes
    barriers = sum(u.count for u in the_plan.barrier_map() if u.arrivals)  # raw barriers are left to the kernel
    assert report.count("mbarrier.init") == barriers


def test_smem_layouts_match_the_storage_parts():
    layouts = SmemLayouts(128, 256, 64, "bf16", "fp32")
    tiles = StandardTileStorage("bf16", "bf16", (128, 64), (256, 64), 2).parts()
    assert (layouts.a, layouts.b) == (tiles[0].layout, tiles[1].layout)
    assert layouts.a.swizzle_byte_width == 128 and layouts.c == OutputTileStorage("fp32", (128, 256), 1).parts()[0].layout


def test_limit_comes_from_the_target_without_a_gpu():
    import torch

    if torch.cuda.is_available():
        pytest.skip("a GPU is present: the limit is the device's")
    assert device_limit("sm_90a") == device_limit("sm_100a") == 227 * 1024
    assert matmul_plan(2).limit_bytes == 227 * 1024
    assert SmemPlan("sm_90a", 4096).limit_bytes == 4096
