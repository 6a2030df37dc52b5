"""CPU tests of tilepipe.verify.compile: ahead-of-time builds for sm_90a and sm_100a, and failures that must not kill pytest."""

import textwrap
from pathlib import Path

import pytest
from triton.experimental.gluon import language as gl

from tilepipe.kernels.spec import KernelSpec, tdesc_signature
from tilepipe.verify.compile import (CompileError, KernelReport, _parse_ptxas_log, _Server, compile_kernel,
                                    compile_kernels)

PROBE = "tests.kernels.compile_probe"
STORE_SIG = {"out_ptr": "*fp32", "n": "i32", "BLOCK": "constexpr"}
TILE_LAYOUT = gl.NVMMASharedLayout.get_default_for([64, 64], gl.float16)
WGMMA_SIG = {"a_desc": tdesc_signature("fp16", [64, 64], TILE_LAYOUT),
             "b_desc": tdesc_signature("fp16", [64, 64], TILE_LAYOUT), "c_ptr": "*fp32"}


def store_spec(target: str = "sm_90a", **kw: object) -> KernelSpec:
    return KernelSpec(f"{PROBE}:store_probe", STORE_SIG, {"BLOCK": 512}, target=target, **kw)


# One batch for most tests (a child interpreter costs about a second). The aborting spec sits in the middle so
# the specs after it must survive the crash.
BATCH = {
    "store_sm90": store_spec("sm_90a"),
    "store_sm100": store_spec("sm_100a"),
    "wgmma_sm100": KernelSpec(f"{PROBE}:wgmma_probe", WGMMA_SIG, target="sm_100a"),
    "wgmma_sm90": KernelSpec(f"{PROBE}:wgmma_probe", WGMMA_SIG, target="sm_90a"),
    "assert_sm90": KernelSpec(f"{PROBE}:assert_probe", {"out_ptr": "*fp32"}),
    "store_unaligned": store_spec(divisible_by_16=()),
}


@pytest.fixture(scope="module")
def batch() -> dict[str, KernelReport | CompileError]:
    return dict(zip(BATCH, compile_kernels(list(BATCH.values()))))


@pytest.mark.parametrize("target", ["sm_90a", "sm_100a"])
def test_store_kernel(batch: dict, target: str) -> None:
    report = batch["store_sm90" if target == "sm_90a" else "store_sm100"]
    assert isinstance(report, KernelReport)
    assert (report.name, report.target, report.num_warps) == ("store_probe", target, 4)
    assert ".visible .entry store_probe" in report.ptx
    assert report.count("STG", "sass") >= 1
    assert report.count("tt.store", "ttgir") == 1
    assert report.shared == 0
    assert report.registers > 0
    assert report.spill_stores == report.spill_loads == 0


def test_pointer_alignment_hint(batch: dict) -> None:
    # By default pointers are assumed 16-byte aligned, as the JIT does for torch tensors; without it no vectors.
    assert batch["store_sm90"].count("st.global.v4") == 1
    assert batch["store_unaligned"].count("st.global.v4") == 0
    assert batch["store_unaligned"].count("st.global.b32") == 4


def test_wgmma_kernel_sm90(batch: dict) -> None:
    report = batch["wgmma_sm90"]
    assert isinstance(report, KernelReport)
    assert report.count("wgmma.mma_async") == 4  # 64x64x64 fp16 = 4 x m64n64k16
    assert report.count("cp.async.bulk.tensor") == 2
    assert report.count("HGMMA", "sass") == 4
    assert report.shared >= 2 * 64 * 64 * 2
    assert report.spill_stores == report.spill_loads == 0


def test_llvm_abort_is_a_compile_error(batch: dict) -> None:
    error = batch["wgmma_sm100"]
    assert isinstance(error, CompileError)
    assert "wgmma_probe for sm_100a" in str(error)
    assert "SIGABRT" in str(error)
    assert "LLVM ERROR: Cannot select" in str(error)


def test_python_error_carries_message_and_source_line(batch: dict) -> None:
    error = batch["assert_sm90"]
    assert isinstance(error, CompileError)
    assert "boom" in str(error)
    assert 'gl.static_assert(False, "boom")' in str(error)


def test_batch_survives_an_abort(batch: dict) -> None:
    kinds = {name: type(result).__name__ for name, result in batch.items()}
    assert kinds == {"store_sm90": "KernelReport", "store_sm100": "KernelReport", "wgmma_sm100": "CompileError",
                     "wgmma_sm90": "KernelReport", "assert_sm90": "CompileError", "store_unaligned": "KernelReport"}


def test_compile_kernel_raises() -> None:
    with pytest.raises(CompileError, match="boom"):
        compile_kernel(BATCH["assert_sm90"])


EDITED = '''
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language._core import builtin


@builtin
def magic(_semantic=None):
    return gl.constexpr({value})


@gluon.jit
def magic_probe(out_ptr):
    gl.store(out_ptr, magic())
'''


def test_edits_reach_the_compiler(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Triton leaves @builtin helpers out of its cache key, so a shared cache would serve the old kernel here.
    # This also checks that a module found only through the parent's sys.path imports in the child.
    monkeypatch.syspath_prepend(str(tmp_path))
    spec = KernelSpec("edited_probe:magic_probe", {"out_ptr": "*i32"})
    for value in (1234567, 7654321):
        (tmp_path / "edited_probe.py").write_text(textwrap.dedent(EDITED.format(value=value)))
        assert str(value) in compile_kernel(spec).ptx


def test_timeout_fails_every_spec(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TILEPIPE_COMPILE_CACHE", raising=False)  # the session's cache holds these specs built
    results = compile_kernels([store_spec(), store_spec("sm_100a")], timeout=0.2)
    assert all(isinstance(r, CompileError) and "timeout" in str(r) for r in results)


def test_the_report_cache_builds_a_spec_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A spec in the cache is not compiled again (no child starts), a failure is not kept, and the order holds."""
    monkeypatch.setenv("TILEPIPE_COMPILE_CACHE", str(tmp_path))
    specs = [store_spec(), KernelSpec(f"{PROBE}:assert_probe", {"out_ptr": "*fp32"}), store_spec("sm_100a")]
    first = compile_kernels(specs)
    assert isinstance(first[1], CompileError) and len(list(tmp_path.glob("*.json"))) == 2
    started = []
    monkeypatch.setattr("tilepipe.verify.compile._run_child", lambda batch, *rest: started.append(batch) or (
        [{"error": "compiled again"}] * len(batch), None))
    again = compile_kernels([specs[2], specs[1], specs[0]])
    assert [r.target for r in (again[0], again[2])] == ["sm_100a", "sm_90a"] and again[2].ptx == first[0].ptx
    assert started == [[specs[1]]] and "compiled again" in str(again[1])


def test_a_child_serves_the_next_call(monkeypatch: pytest.MonkeyPatch) -> None:
    """Children outlive their call (their start-up is paid once): two calls in a row start one child."""
    monkeypatch.delenv("TILEPIPE_COMPILE_CACHE", raising=False)
    monkeypatch.setenv("TILEPIPE_COMPILE_JOBS", "1")  # a setting no idle child was started with
    started = []
    start = _Server.__init__
    monkeypatch.setattr(_Server, "__init__", lambda self: started.append(self) or start(self))
    first, second = compile_kernels([store_spec()]), compile_kernels([store_spec("sm_100a")])
    assert isinstance(first[0], KernelReport) and isinstance(second[0], KernelReport) and len(started) == 1


def test_empty_batch() -> None:
    assert compile_kernels([]) == []


def test_tdesc_signature_matches_the_jit() -> None:
    assert WGMMA_SIG["a_desc"] == (
        "tensordesc<fp16[64, 64],NVMMASharedLayout(swizzle_byte_width=128, element_bitwidth=16, rank=2, "
        "transposed=False, fp4_padded=False, cga_layout=[])>")


@pytest.mark.parametrize("bad, error", [
    ({"fn": "no_colon"}, ValueError),
    ({"target": "sm_80"}, ValueError),
    ({"constexprs": {"NOT_AN_ARG": 1}}, ValueError),
    ({"divisible_by_16": ("nope", )}, ValueError),
    ({"constexprs": {"BLOCK": object()}}, TypeError),
])
def test_bad_spec_is_rejected_up_front(bad: dict, error: type) -> None:
    fields = {"fn": f"{PROBE}:store_probe", "signature": STORE_SIG, **bad}
    with pytest.raises(error):
        KernelSpec(**fields)


def test_count_rejects_unknown_source(batch: dict) -> None:
    with pytest.raises(ValueError):
        batch["store_sm90"].count("STG", "cubin")


def test_ptxas_log_takes_the_entry_function() -> None:
    log = textwrap.dedent("""\
        ptxas info    : 0 bytes gmem
        ptxas info    : Compiling entry function 'other' for 'sm_90a'
        ptxas info    : Function properties for other
            0 bytes stack frame, 8 bytes spill stores, 8 bytes spill loads
        ptxas info    : Used 40 registers, used 0 barriers
        ptxas info    : Compiling entry function 'kern' for 'sm_90a'
        ptxas info    : Function properties for helper
            16 bytes stack frame, 4 bytes spill stores, 4 bytes spill loads
        ptxas info    : Function properties for kern
            0 bytes stack frame, 12 bytes spill stores, 20 bytes spill loads
        ptxas info    : Used 168 registers, used 1 barriers
        """)
    assert _parse_ptxas_log(log, "kern") == (168, 12, 20)
    with pytest.raises(ValueError):
        _parse_ptxas_log(log, "missing")


def test_registers_come_from_tritons_ptxas_log_or_a_ptxas_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The registers and spills are read from the `ptxas -v` log Triton's own build prints; a spec whose kernel
    Triton serves from its cache (here: the same kernel with its alignment named) gets them from a ptxas run, equal."""
    monkeypatch.setenv("TILEPIPE_COMPILE_CACHE", str(tmp_path))
    monkeypatch.setenv("TILEPIPE_COMPILE_JOBS", "1")  # one child: the second spec finds the first's kernel
    built, served = compile_kernels([store_spec(), store_spec(divisible_by_16=("out_ptr", ))])
    assert built.ptx == served.ptx and built.registers > 0
    assert (built.registers, built.spill_stores, built.spill_loads) == (
        served.registers, served.spill_stores, served.spill_loads)
