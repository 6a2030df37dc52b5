"""CPU tests of debug and trace modes: what the probes compile to, the hang report, and the timeline converter."""

import io
import json
import os
import re
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

import numpy as np
import pytest

from tilepipe.host import configs
from tilepipe.kernels.matmul import matmul_spec
from tilepipe.kernels.spec import KernelSpec
from tilepipe.pipeline import probe
from tilepipe.probes import debug, timeline
from tilepipe.verify.compile import CompileError, KernelReport, compile_kernels

REPO = Path(__file__).resolve().parent.parent
PTX_BASELINE_REF = "d9d66f4"
"""A commit whose matmul kernel is today's without the probes: 31ab8b7 (the bias/fp32-C epilogue and the scheduler
interface, on the pipeline layer from before probes existed) with the triton 3.9 port (4a98d0c, branch
ptx-baseline-39) and the edge tiles moved inside D ported (d9d66f4), merged into main's history with `-s ours`. The
current kernel with PROBE=0 must compile to the same PTX instructions. When matmul.py's kernel changes, build such a
commit again (the kernel and its pipeline layer without the probe lines) and point this at it."""

# (config, dtype, out dtype, B K-major, with C): the largest tile, and the small tile with the fused residual.
MATMULS = {"bf16": ("LARGE_16BIT", "bf16", "bf16", True, False), "residual": ("SMALL", "fp16", "fp32", False, True)}
HANG = "tests.kernels.hang_kernels:ring_kernel"


def hang_spec(bug: int, mode: int) -> KernelSpec:
    return KernelSpec(HANG, {"out_ptr": "*i32", "items": "i32", "probe_buf": probe.buffer_signature(mode),
                             "STAGES": "constexpr", "BUG": "constexpr", "PROBE": "constexpr"},
                      {"STAGES": 2, "BUG": bug, "PROBE": mode, **({} if mode else {"probe_buf": None})})


MODES = {"off": probe.OFF, "debug": probe.DEBUG, "trace": 64}
SPECS = {(kernel, mode): matmul_spec(getattr(configs, cfg), *args, probe=value) for kernel, (cfg, *args) in MATMULS.items()
         for mode, value in MODES.items()}
SPECS.update({("hang", bug, mode): hang_spec(bug, value) for bug in (0, 1, 2) for mode, value in MODES.items()})


@pytest.fixture(scope="module")
def reports() -> dict:
    return dict(zip(SPECS, compile_kernels(list(SPECS.values()))))


def _instructions(ptx: str) -> str:
    """The PTX without line info (.loc/.file, and the $L__tmp labels the debug sections point at, one per inlined
    call) and debug sections, which move with any edit to a source file or to how its helpers are split."""
    code = ptx.split("\t.section\t.debug", 1)[0]
    debug_only = (lambda line: line.startswith((".loc", ".file")) or re.fullmatch(r"\$L__tmp\d+:", line))
    return "\n".join(line for line in code.splitlines() if not debug_only(line.strip()))


def _params(ptx: str) -> int:
    return len(re.findall(r"\.param \.", ptx.split(")", 1)[0]))


@pytest.fixture(scope="module")
def baseline_ptx() -> dict[str, str]:
    """The matmul kernels compiled from PTX_BASELINE_REF's sources, in a child interpreter rooted there."""
    with tempfile.TemporaryDirectory(prefix="tilepipe-baseline-") as tmp:
        archive = subprocess.run(["git", "-C", str(REPO), "archive", PTX_BASELINE_REF], capture_output=True)
        if archive.returncode:
            pytest.skip(f"git cannot produce {PTX_BASELINE_REF}: {archive.stderr.decode()[-300:]}")
        with tarfile.open(fileobj=io.BytesIO(archive.stdout)) as tar:
            tar.extractall(tmp, filter="data")
        script = ("import json, sys\nfrom tilepipe import ops\nfrom tilepipe.compile import compile_kernels\n"
                  "from tilepipe.kernels.matmul import matmul_spec\n"
                  "specs = [matmul_spec(getattr(ops, cfg), *rest) for cfg, *rest in json.loads(sys.argv[1])]\n"
                  "print(json.dumps([report.ptx for report in compile_kernels(specs)]))\n")
        done = subprocess.run([sys.executable, "-c", script, json.dumps(list(MATMULS.values()))], cwd=tmp,
                              capture_output=True, text=True, timeout=600, env={**os.environ, "PYTHONPATH": tmp})
        assert done.returncode == 0, done.stderr[-3000:]
        return dict(zip(MATMULS, json.loads(done.stdout.splitlines()[-1])))


@pytest.mark.parametrize("kernel", MATMULS)
def test_probe_off_ptx_is_the_uninstrumented_kernel(reports, baseline_ptx, kernel):
    """Debug mode costs nothing when off: the same PTX instructions as the kernel before the probes existed."""
    off = reports[kernel, "off"]
    assert isinstance(off, KernelReport)
    assert _instructions(off.ptx) == _instructions(baseline_ptx[kernel])


@pytest.mark.parametrize("kernel", [*MATMULS, "hang"])
def test_each_mode_adds_exactly_its_probe_code(reports, kernel):
    """Off: no probe code, no extra parameter. Debug: 14 write-through stores per wait (13 before, 1 after) and no
    timer. Trace: %globaltimer before and after each wait and at each step, %smid once per wait."""
    key = (lambda mode: (kernel, mode)) if kernel != "hang" else (lambda mode: ("hang", 0, mode))
    off, dbg, trace = (reports[key(mode)] for mode in MODES)
    for report in (off, dbg, trace):
        assert isinstance(report, KernelReport), report
        assert report.spill_stores == 0
    waits = off.count("mbarrier.try_wait")
    assert waits >= 2 and dbg.count("mbarrier.try_wait") == trace.count("mbarrier.try_wait") == waits
    assert (off.count("%globaltimer"), off.count("%smid"), off.count("st.global.wt")) == (0, 0, 0)
    assert dbg.count("st.global.wt") == 14 * waits and dbg.count("%globaltimer") == 0
    assert trace.count("%smid") == waits and trace.count("%globaltimer") >= 2 * waits
    assert _params(dbg.ptx) == _params(trace.ptx) == _params(off.ptx) + 1


@pytest.mark.parametrize("bug", [1, 2])
def test_broken_kernels_pass_the_protocol_checker(reports, bug):
    """The hang tests' bugs go through the direct API, which the trace-time checker cannot see: they compile."""
    assert all(isinstance(reports["hang", bug, mode], KernelReport) for mode in MODES)


def test_probe_needs_a_buffer_exactly_when_on():
    spec = KernelSpec(HANG, {"out_ptr": "*i32", "items": "i32", "probe_buf": "constexpr", "STAGES": "constexpr",
                             "BUG": "constexpr", "PROBE": "constexpr"},
                      {"STAGES": 2, "BUG": 0, "PROBE": 1, "probe_buf": None})
    error = compile_kernels([spec])[0]
    assert isinstance(error, CompileError) and "probe_buf must be None exactly when PROBE is 0" in str(error)


# ---- host side: names, the hang report, switches -------------------------------------------------


def test_names_round_trip():
    for bits in (32, 64):
        assert probe.unpack_name(probe.pack_name("epilogue_load", bits), bits) == "epilogue_load"
        assert probe.unpack_name(probe.pack_name("a_very_long_pipeline_name", bits), bits) == "a_very_long_pipe"
    assert probe.role_name("mma_role") == "mma" and probe.role_name("scheduler") == "scheduler"


def _progress_record(status, side, stage, phase, iteration, pipeline, role):
    words = [status, side, stage, phase, iteration, 0, 0, 0]
    return words + probe.pack_name(pipeline, 32) + probe.pack_name(role, 32)


def test_hang_report_names_the_stuck_roles_and_pipelines():
    records = np.zeros((3, probe.MAX_ROLES, probe.PROGRESS_WORDS), np.int32)
    for program in range(2):
        records[program, 0] = _progress_record(probe.WAITING, probe.CONSUMER, 1, 0, 7, "input", "mma")
        records[program, 1] = _progress_record(probe.WAITING, probe.PRODUCER, 0, 1, 9, "input", "load")
        records[program, 2] = _progress_record(probe.PASSED, probe.CONSUMER, 0, 1, 3, "output", "store")
    report = debug.hang_report("matmul_kernel", debug.read_progress(records), 5.2, 3)
    assert "kernel 'matmul_kernel' made no progress for 5.2 s (3 programs)" in report
    assert "stuck roles: load, mma" in report
    assert ("role mma (partition 0): STUCK waiting at pipeline 'input' as consumer, waits for the producer's fill "
            "(full barrier), stage 1, phase 0, iteration 7  [2 program(s)]") in report
    assert "role load (partition 1): STUCK waiting at pipeline 'input' as producer" in report
    assert "role store (partition 2): last wait passed (running or done): pipeline 'output'" in report
    assert "1 program(s) recorded no wait at all" in report


def test_debug_switches(monkeypatch):
    monkeypatch.delenv("TILEPIPE_DEBUG", raising=False)
    assert not debug.debug_requested(None)
    monkeypatch.setenv("TILEPIPE_DEBUG", "1")
    assert debug.debug_requested(None) and not debug.debug_requested(False)
    with pytest.raises(TypeError, match="debug must be a bool"):
        debug.debug_requested(1)
    monkeypatch.setenv("TILEPIPE_DEBUG_STALL_S", "0.5")
    assert debug.stall_seconds() == 0.5
    monkeypatch.setenv("TILEPIPE_DEBUG_STALL_S", "soon")
    with pytest.raises(ValueError, match="TILEPIPE_DEBUG_STALL_S"):
        debug.stall_seconds()


def test_matmul_checks_the_probe_arguments_first():
    import torch

    import tilepipe

    a = torch.randn(8, 8)
    with pytest.raises(TypeError, match="trace must be a path"):
        tilepipe.matmul(a, a, trace=3)
    with pytest.raises(ValueError, match="debug and trace are separate modes"):
        tilepipe.matmul(a, a, debug=True, trace="t.json")


# ---- the timeline converter, on a synthetic buffer -------------------------------------------------


def _synthetic_trace(events: int = 8) -> np.ndarray:
    """Two programs on SMs 5 and 9; mma waits 30 ns then holds 70 ns per input stage; load waits 10 ns, holds 20."""
    buffer = np.zeros((2, probe.MAX_ROLES, probe.MAX_PIPELINES, events + 1, probe.TRACE_WORDS), np.int64)
    for program, sm in enumerate((5, 9)):
        roles = ((0, "mma", probe.CONSUMER, 30, 70), (1, "load", probe.PRODUCER, 10, 20))
        for partition, role, side, wait, hold in roles:
            buffer[program, partition, 0, 0] = probe.pack_name("input", 64) + probe.pack_name(role, 64)
            t = 1_000_000 + 7 * program
            for i in range(4):
                meta = (i % 2) | ((i // 2) % 2) << 8 | side << 9 | sm << 32
                buffer[program, partition, 0, 1 + i] = [t, t + wait, t + wait + hold, meta]
                t += wait + hold
    return buffer


def test_decode_recovers_every_acquisition():
    spans, truncated = timeline.decode(_synthetic_trace())
    assert not truncated and len(spans) == 16
    first = next(s for s in spans if s.role == "mma" and s.program == 1 and s.iteration == 3)
    assert (first.sm, first.partition, first.pipeline, first.side, first.stage, first.phase) == (9, 0, "input", 1, 1, 1)
    assert first.acquired - first.wait_start == 30 and first.released - first.acquired == 70
    assert timeline.decode(_synthetic_trace(events=4))[1]  # every slot used: later acquisitions may be missing


def test_wait_fractions():
    spans, _ = timeline.decode(_synthetic_trace())
    fractions = timeline.wait_fractions(spans)
    assert fractions["mma"]["input"] == pytest.approx(0.3)
    assert fractions["load"]["input"] == pytest.approx(1 / 3)


def test_chrome_trace_and_png(tmp_path):
    summary = timeline.save(_synthetic_trace(), tmp_path / "t.json", "demo_kernel")
    assert summary["kernel"] == "demo_kernel" and not summary["truncated"]
    trace = json.loads((tmp_path / "t.json").read_text())
    slices = [e for e in trace["traceEvents"] if e["ph"] == "X"]
    assert len(slices) == 32  # a wait and a hold per acquisition
    waits = [e for e in slices if e["cat"] == "wait" and e["pid"] == 5 and e["tid"] == 0]
    assert [w["ts"] for w in waits] == [0.0, 0.1, 0.2, 0.3] and all(w["dur"] == 0.03 for w in waits)
    names = {(e["pid"], e["args"]["name"]) for e in trace["traceEvents"] if e["ph"] == "M"}
    assert {(5, "SM 5"), (5, "mma"), (9, "load")} <= names
    assert timeline.spans_of(trace) == timeline.decode(_synthetic_trace())[0]
    assert (tmp_path / "t.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    redrawn = tmp_path / "again.png"
    subprocess.run([sys.executable, "-m", "tilepipe.probes.timeline", str(tmp_path / "t.json"), str(redrawn), "1"], check=True,
                   cwd=REPO)
    assert redrawn.stat().st_size > 1000


def test_cluster_trace_has_a_lane_per_cta(tmp_path):
    """In a cluster launch the buffer holds one region per CTA: the two regions are program 0's CTAs 0 and 1."""
    spans, _ = timeline.decode(_synthetic_trace(), ctas=2)
    assert {(s.sm, s.program, s.cta) for s in spans} == {(5, 0, 0), (9, 0, 1)}
    timeline.save(_synthetic_trace(), tmp_path / "c.json", "demo_kernel", ctas=2)
    trace = json.loads((tmp_path / "c.json").read_text())
    names = {(e["pid"], e["args"]["name"]) for e in trace["traceEvents"] if e["name"] == "process_name"}
    assert names == {(5, "SM 5 CTA 0"), (9, "SM 9 CTA 1")}
    assert {e["args"]["cta"] for e in trace["traceEvents"] if e["ph"] == "X" and e["pid"] == 9} == {1}


def test_trace_buffer_size_is_bounded():
    assert timeline.events_for(4) == timeline.DEFAULT_EVENTS
    per_event = 132 * probe.MAX_ROLES * probe.MAX_PIPELINES * probe.TRACE_WORDS * 8
    assert (timeline.events_for(132) + 1) * per_event <= timeline.MAX_BUFFER_BYTES
