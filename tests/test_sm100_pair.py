"""CPU tests of the sm_100a GEMM's two-CTA form (sm100_matmul_kernel with a 2x1 cluster: cta_group::2 MMAs over a
256-row pair tile): compiled for sm_100a without a GPU, its SASS instruction mix, where the compiler puts the cluster
barriers, its per-CTA shared memory and TMEM against the plan and the limits, its pipeline declarations, and what the
host accepts. Nothing here runs a kernel: the two-CTA form has been compiled, never run."""

import re
from dataclasses import replace

import pytest

from tilepipe.host.checks import check_cluster
from tilepipe.host.configs import SM100_CONFIGS, SM100_PAIR_CONFIGS, sm100_fitted
from tilepipe.kernels.sm100_matmul import EPILOGUE_N, sm100_matmul_spec, sm100_operand_blocks, sm100_plan
from tilepipe.pipeline.storage import InputPipelineStorage
from tilepipe.verify.compile import CompileError, compile_kernels

PAIR = SM100_PAIR_CONFIGS[0]
# (config, input dtype, D dtype, B K-major, bias dtype)
CASES = [(sm100_fitted(PAIR, "bf16", "bf16"), "bf16", "bf16", True, None),
         (sm100_fitted(PAIR, "fp16", "fp32"), "fp16", "fp32", False, None),
         (sm100_fitted(PAIR, "bf16", "bf16"), "bf16", "bf16", True, "bf16")]
IDS = ["bf16-kmajor", "fp16-fp32-rowmajor", "bf16-bias"]
SMEM_LIMIT = 227 * 1024


@pytest.fixture(scope="module")
def reports():
    return compile_kernels([sm100_matmul_spec(cfg, dtype, out, kmajor, bias_dtype=bias)
                            for cfg, dtype, out, kmajor, bias in CASES])


def loops(ptx: str) -> tuple[list[str], list[tuple[int, int]]]:
    """The PTX lines and its loops: (a `$L__` label, the branch back to it)."""
    lines = ptx.splitlines()
    labels = {match.group(1): i for i, line in enumerate(lines) if (match := re.match(r"(\$L__\w+):", line.strip()))}
    back = [(i, re.search(r"\bbra(?:\.uni)?\s+(\$L__\w+);", line)) for i, line in enumerate(lines)]
    return lines, [(labels[match.group(1)], i) for i, match in back if match and labels.get(match.group(1), i + 1) <= i]


def innermost(lines: list[str], spans: list[tuple[int, int]], holds) -> list[str]:
    """The lines of the innermost loop with a line for which `holds` is true (none: [])."""
    inside = [(a, b) for a, b in spans if any(holds(i, line) for i, line in enumerate(lines[a:b + 1], a))]
    if not inside:
        return []
    start, end = min(inside, key=lambda span: span[1] - span[0])
    return lines[start:end + 1]


@pytest.mark.parametrize("index", range(len(CASES)), ids=IDS)
def test_two_cta_instruction_mix(reports, index):
    """Per k-step BK/16 two-CTA MMAs (UTCHMMA.2CTA, K = 16 each) and each CTA's A box and B half-boxes (UTMALDG.2CTA:
    they complete on the lead CTA's barrier); two commits, multicast to the pair (the input release, the accumulator
    hand-off); the epilogue's BN / EPI_N TMEM loads and stores of its own 128 rows; no spills; shared memory and TMEM
    per CTA as planned and within the limits."""
    cfg, dtype, out, kmajor, bias = CASES[index]
    report = reports[index]
    assert not isinstance(report, CompileError), report
    steps = cfg.block_k // 16
    assert report.count("UTCHMMA.2CTA", "sass") == report.count("UTCHMMA", "sass") == steps
    assert report.count("tcgen05.mma.cta_group::2.kind::f16") == steps and report.count("cta_group::1") == 0
    assert report.count("UTCBAR.2CTA.MULTICAST", "sass") == report.count("UTCBAR", "sass") == 2
    assert report.count("tcgen05.commit.cta_group::2.mbarrier::arrive::one.shared::cluster.multicast::cluster") == 2
    b_boxes = 1 if kmajor else cfg.block_n // 2 * 2 // 128  # each CTA's BN / 2 columns in 128-byte boxes
    assert report.count("UTMALDG.2D.2CTA", "sass") == report.count("UTMALDG", "sass") == 1 + b_boxes
    subtiles = cfg.block_n // EPILOGUE_N
    assert report.count("LDTM", "sass") == subtiles == report.count("UTMASTG", "sass")
    assert report.spill_stores == report.spill_loads == 0
    plan = sm100_plan.fn(cfg.tile_m, cfg.block_n, cfg.block_k, cfg.stages, cfg.c_stages, dtype, out, kmajor,
                         cluster_m=2)
    assert 0 <= report.shared - plan.total_bytes < 256 and report.shared <= SMEM_LIMIT
    assert report.tmem == plan.tmem_columns == 2 * cfg.block_n == 512  # per CTA: two accumulators of its 128 rows


@pytest.mark.parametrize("index", range(len(CASES)), ids=IDS)
def test_two_cta_per_k_step_and_cluster_barriers(reports, index):
    """One k-step of the MMA role: one wait (the lead CTA's, on the pair barrier), BK/16 MMAs and one commit; of the
    load role: one wait, one expect on the lead CTA's barrier (shared::cluster), each CTA's boxes. The cluster barriers
    are the compiler's (after the barrier inits, around the TMEM allocation and release, mirrored in the workers'
    dispatch loop): none sits in a loop that issues an MMA or a TMA load or waits on an mbarrier."""
    cfg, dtype, out, kmajor, bias = CASES[index]
    lines, spans = loops(reports[index].ptx)
    mma_step = innermost(lines, spans, lambda i, line: "tcgen05.mma." in line)
    assert sum("tcgen05.mma." in line for line in mma_step) == cfg.block_k // 16
    assert sum("tcgen05.commit" in line for line in mma_step) == 1
    assert sum("mbarrier.try_wait" in line for line in mma_step) == 1
    load_step = innermost(lines, spans, lambda i, line: "cp.async.bulk.tensor.2d.cta_group::2" in line)
    assert sum("cp.async.bulk.tensor.2d.cta_group::2" in line for line in load_step) == 1 + (
        1 if kmajor else cfg.block_n // 2 * 2 // 128)
    assert sum("mbarrier.try_wait" in line for line in load_step) == 1
    assert sum("mbarrier.arrive.expect_tx.shared::cluster" in line for line in load_step) == 1
    cluster_barriers = [i for i, line in enumerate(lines) if re.search(r"barrier\.cluster\.(arrive|wait)", line)]
    assert len(cluster_barriers) == 10  # 5 arrive/wait pairs: default warps and the workers' mirrors
    work = re.compile(r"tcgen05\.mma|cp\.async\.bulk\.tensor|mbarrier\.try_wait")
    for i in cluster_barriers:
        loop = innermost(lines, spans, lambda j, line: j == i)
        assert not any(work.search(line) for line in loop), lines[i]


def test_two_cta_plan_counts_per_cta_memory_and_declares_the_pair():
    """Each CTA holds 128 rows of A and half of B's columns a stage (32 KB at 256 x 256 x 64): six stages fit beside
    the sub-tile buffers where the one-CTA 128 x 256 tile takes four; TMEM columns are per CTA. The pair's input
    ring waits on a pair barrier (both CTAs' loads, counted twice) and is released per CTA by the lead CTA's commit;
    the accumulator ring the other way round."""
    plan = sm100_plan.fn(256, 256, 64, 6, 2, "bf16", "bf16", True, cluster_m=2)
    assert {p.part.name: p.part.nbytes for p in plan.placed if p.storage == "operands"} == {"a": 6 * 16384,
                                                                                              "b": 6 * 16384}
    assert plan.fits and plan.tmem_columns == 512 and plan.accumulators.cta_rows == 128
    assert sm100_fitted(SM100_CONFIGS[0], "bf16", "bf16").stages == 4 and sm100_fitted(PAIR, "bf16", "bf16").stages == 6
    uses = {use.name: use for use in plan.barrier_map()}
    assert (uses["pipelines.input.full"].kind, uses["pipelines.input.full"].arrivals) == ("pair_barrier", 2)
    assert (uses["pipelines.input.empty"].kind, uses["pipelines.input.empty"].arrivals) == ("barrier", 1)
    assert (uses["pipelines.output.full"].kind, uses["pipelines.output.empty"].kind) == ("barrier", "pair_barrier")
    assert "input.full (pair)" in str(plan)
    with pytest.raises(ValueError, match="pair_mma"):
        InputPipelineStorage(4, pair_mma="both")
    with pytest.raises(ValueError, match="static schedule"):
        sm100_plan.fn(256, 256, 64, 6, 2, "bf16", "bf16", True, clc=True, cluster_m=2)


def test_host_takes_the_pair_and_refuses_the_rest():
    """tilepipe.matmul takes a 2x1 config on sm_100a under the static schedule, without C; a 1x2 cluster, another
    scheduler, C with a pair or a clustered FP8 config raise ValueError naming what to change."""
    check_cluster(PAIR, "static", "sm_100a")
    blocks = sm100_operand_blocks(PAIR, True)
    assert blocks == {"a": ((256, 64), ((1, 0), )), "b": ((256, 64), ((1, 0), )), "c": ((256, EPILOGUE_N), ((1, 0), ))}
    assert sm100_operand_blocks(PAIR, False)["b"] == ((64, 256), ((0, 1), ))
    spec = sm100_matmul_spec(PAIR, "bf16", "bf16", True)
    assert spec.constexprs["CLUSTER_M"] == 2 and spec.options["num_ctas"] == 2
    wide = replace(PAIR, cluster_m=1, cluster_n=2)
    with pytest.raises(ValueError, match="cluster_n = 2"):
        check_cluster(wide, "static", "sm_100a")
    with pytest.raises(ValueError, match="cluster_n = 2"):
        sm100_operand_blocks(wide, True)
    with pytest.raises(ValueError, match="scheduler 'clc'"):
        check_cluster(PAIR, "clc", "sm_100a")
    with pytest.raises(ValueError, match="^c: the two-CTA"):
        check_cluster(PAIR, "static", "sm_100a", has_c=True)
    with pytest.raises(ValueError, match="cluster_m = cluster_n = 1"):
        check_cluster(PAIR, "static", "sm_100a", pair=False)
