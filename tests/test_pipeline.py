"""CPU tests of tilepipe.pipeline: compile the pipeline kernels for sm_90a / sm_100a and check what the code holds."""

import re
from pathlib import Path

import pytest

from tests.kernels import misuse_kernels
from tilepipe.examples.pipeline_demo import STYLES, stress_spec, wgmma_plan, wgmma_spec
from tilepipe.kernels.spec import KernelSpec
from tilepipe.verify.compile import CompileError, compile_kernels

STAGES = (1, 2, 4, 8)
STRESS_CASES = [(style, stages, consumers, target) for target in ("sm_90a", "sm_100a") for style in STYLES
                for stages in STAGES for consumers in (1, 2)]


@pytest.fixture(scope="module")
def stress_reports():
    reports = compile_kernels([stress_spec(*case) for case in STRESS_CASES])
    return dict(zip(STRESS_CASES, reports))


@pytest.mark.parametrize("case", STRESS_CASES, ids=lambda c: "-".join(map(str, c)))
def test_stress_kernel_barriers(stress_reports, case):
    style, stages, consumers, target = case
    report = stress_reports[case]
    assert not isinstance(report, CompileError), report
    assert report.count("mbarrier.init") == 2 * stages  # one full/empty pair per stage, from one declaration
    assert report.count("mbarrier.try_wait.parity") >= 2
    # one producer arrive on full, one consumer arrive on empty per consumer role, whatever the API style
    # ("mixed" signals from both sides of an `if`; LLVM may or may not merge the two sites)
    arrives = report.count("mbarrier.arrive")
    assert arrives == 1 + consumers if style != "mixed" else 1 + consumers <= arrives <= 2 * (1 + consumers)
    assert report.count("setmaxnreg") > 0
    assert report.spill_stores == 0 and report.spill_loads == 0


TRY = "mbarrier.try_wait.parity.shared::cta.b64 p,"
"""The non-blocking try of try_wait_* / try_acquire_* (a blocking wait's loop names its predicate `complete`)."""


def test_api_styles_emit_the_same_protocol(stress_reports):
    """Handles and contexts compile to the same barrier operations as the direct API, besides the tries."""
    pure = ("direct", "handles", "contexts")
    for target in ("sm_90a", "sm_100a"):
        for stages in STAGES:
            for consumers in (1, 2):
                counts = {}
                for style in pure:
                    report = stress_reports[(style, stages, consumers, target)]
                    waits = report.count("mbarrier.try_wait.parity") - report.count(TRY)
                    counts[style] = (report.count("mbarrier.init"), waits, report.count("mbarrier.arrive"))
                assert len(set(counts.values())) == 1, (target, stages, consumers, counts)


@pytest.mark.parametrize("style", ["direct", "handles"])
def test_try_acquire_is_a_real_non_blocking_test(stress_reports, style):
    """The producer and every consumer but the first try before they wait: one try_wait each, whose answer only
    predicates the wait that follows it (the GPU stress tests run these kernels)."""
    for target in ("sm_90a", "sm_100a"):
        for consumers in (1, 2):
            report = stress_reports[(style, 2, consumers, target)]
            assert report.count(TRY) == consumers, (target, consumers)
            assert report.count("selp.u32") == consumers
    assert stress_reports[("contexts", 2, 2, "sm_90a")].count(TRY) == 0


def test_wgmma_consumer_with_release_lag():
    reports = compile_kernels([wgmma_spec(stages) for stages in (2, 4, 8)])
    for stages, report in zip((2, 4, 8), reports):
        assert not isinstance(report, CompileError), report
        assert report.count("wgmma.mma_async") > 0 and report.count("HGMMA", "sass") > 0
        assert report.count("cp.async.bulk.tensor") == 2
        assert report.count("mbarrier.arrive.expect_tx") == 1
        assert report.count("mbarrier.init") == 2 * stages
        assert report.spill_stores == 0
        # the loader's expect_tx, the lagged release in the main loop, one predicated release in flush_releases
        assert report.count("mbarrier.arrive") == 3
        # the plan's bytes, plus the small scratch warp_specialize uses to pass captures and warp indices
        planned = wgmma_plan.fn(stages, [128, 64], [64, 64], "fp16").total_bytes
        assert 0 <= report.shared - planned < 256, (report.shared, planned)


def _marked_line(bug: str) -> str:
    path = Path(misuse_kernels.__file__)
    for number, line in enumerate(path.read_text().splitlines(), 1):
        if re.search(rf"#.*\bBUG:{bug}\b", line):
            return f"{path}:{number}"
    raise AssertionError(f"no marker for {bug}")


MISUSE_MESSAGES = {
    "never_released": r"producer stage of pipeline 'misuse' acquired at {line} in role 'misuse_producer "
                      r"\(partition 1\)' is never released",
    "released_twice": r"producer stage of pipeline 'misuse' acquired at .* is released twice: first at .*, "
                      r"again at {line}",
    "released_in_branch": r"acquired at .* is released at {line} inside a nested branch or loop",
    "no_signal": r"acquired at .* is released at {line} without signalling its peers",
    "dropped_release": r"The result of stage.release is not being used",
    "arrival_count": r"pipeline 'misuse' declares 1 consumer arrival\(s\) per stage, but 2 role\(s\) signal its "
                     r"'empty' barriers: 'misuse_consumer \(partition 0\)' \({line}\), 'misuse_consumer "
                     r"\(partition 2\)' \({line}\)",
    "lag_too_deep": r"pipeline 'misuse': a release lag of 1 needs at least 2 stages \(has 1\)",
    "with_on_expression": r"needs the pipeline in a plain local variable",
    "turn_alone": r"pipeline 'misuse' declares 1 consumer arrival\(s\) per stage, but 3/2 role\(s\) signal its "
                  r"'empty' barriers: 'misuse_consumer \(partition 0\)' \({line}\), 'misuse_consumer "
                  r"\(partition 2\)' \({line}\) taking 2 turns",
    "pass_over_untaken": r"pipeline 'misuse': pass_over\(\) skips other roles' turns; declare them with "
                         r"taking_turns\(\)",
}


@pytest.fixture(scope="module")
def misuse_errors():
    specs = [KernelSpec("tests.kernels.misuse_kernels:misuse_kernel", {"n": "i32", "BUG": "constexpr"},
                        {"BUG": bug}) for bug in misuse_kernels.BUGS]
    return dict(zip(misuse_kernels.BUGS, compile_kernels(specs)))


@pytest.mark.parametrize("bug", misuse_kernels.BUGS)
def test_misuse_is_a_compile_error_naming_the_line(misuse_errors, bug):
    error = misuse_errors[bug]
    assert isinstance(error, CompileError), f"{bug} compiled"
    pattern = MISUSE_MESSAGES[bug].format(line=re.escape(_marked_line(bug)))
    assert re.search(pattern, str(error)), str(error)[-3000:]


def test_prev_copy_is_not_loop_carried():
    """The root cause of the `prev = s` hangs, visible in the IR: the unfixed kernel stores a constant 0."""
    sig = {"out_ptr": "*i32", "n": "i32", "FIXED": "constexpr"}
    broken, fixed = compile_kernels([KernelSpec("tests.kernels.prev_copy:prev_copy", sig, {"FIXED": flag})
                                     for flag in (False, True)])
    store = re.compile(r"tt\.store %\w+, (%\S+)")
    assert re.search(r"tt\.store %\w+, %c0_i32", broken.ttgir), broken.ttgir
    assert "scf.for" not in broken.ttgir  # prev not carried: the loop computes nothing that is stored
    assert "scf.for" in fixed.ttgir and not re.search(r"tt\.store %\w+, %c0_i32", fixed.ttgir)
    assert store.search(fixed.ttgir)


def test_try_wait_outcomes_kernel_compiles_with_six_real_tries():
    """The GPU test that sees both answers (tests/kernels/try_wait_outcomes.py) asks six non-blocking tries, two of
    them with the suspend hint."""
    from tilepipe.kernels.spec import KernelSpec
    from tilepipe.verify.compile import compile_kernel

    report = compile_kernel(KernelSpec("tests.kernels.try_wait_outcomes:try_wait_outcomes", {"out_ptr": "*i32"}))
    assert report.count(TRY) == 6
    hinted = re.findall(r"mbarrier\.try_wait\.parity\.shared::cta\.b64 p, \[%r\d+\], %r\d+, %r\d+;", report.ptx)
    assert len(hinted) == 2  # the suspend hint: try_wait's fourth operand
