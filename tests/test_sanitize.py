"""CPU tests of the sanitizer check (tilepipe/verify/sanitize.py): its report parser, grouping and allow-list,
that its driver can launch every shipped variant on a machine it tells has few SMs, and that the tilepipe-free
reproduction kernels (scripts/sanitize_repro.py) compile for sm_90a with the hand-offs they stand for."""

import sys

import pytest

from tilepipe.kernels.catalogue import shipped_variants
from tilepipe.verify import sanitize
from tilepipe.verify.sanitize import MARK, Group, explain, group, load_allow_list, parse

RACECHECK = f"""========= COMPUTE-SANITIZER
{MARK} variant matmul fp16 dynamic
========= Error: Race reported between Write access at matmul_kernel+0x1f30 in /w/tilepipe/schedulers/dynamic.py:118
=========     and Read access at matmul_kernel+0x2a40 in /w/tilepipe/schedulers/dynamic.py:62 [384 hazards]
=========
{MARK} done matmul fp16 dynamic ok=True
{MARK} variant matmul +C dynamic
========= Error: Race reported between Write access at matmul_kernel+0x1f70 in /w/tilepipe/schedulers/dynamic.py:118
=========     and Read access at matmul_kernel+0x2a80 in /w/tilepipe/schedulers/dynamic.py:62 [12 hazards]
=========
========= ERROR: Race reported between Read access at 0x00000100 in /w/tilepipe/kernels/matmul.py:110:matmul_kernel
=========     and Write access at 0x00000080 in /w/tilepipe/pipeline/roles.py:52:matmul_kernel [7 hazards]
=========
========= RACECHECK SUMMARY: 3 hazards displayed (3 errors, 0 warnings)
"""
MEMCHECK = f"""{MARK} variant matmul_fp8 scaled
========= Invalid __global__ write of size 4 bytes
=========     at scaled_matmul_kernel+0x2c0 in /w/tilepipe/kernels/gemm_roles.py:40
=========     by thread (0,0,0) in block (1,0,0)
=========     Address 0x7f0000 is out of bounds
=========     Saved host backtrace up to driver entry point at kernel launch time
=========         Host Frame: [0x2fe] in /usr/lib/libcuda.so.1:12
=========
========= Program hit cudaErrorInvalidValue (error 1) due to "invalid argument" on CUDA API call to cuFuncGetAttribute.
=========     Saved host backtrace up to driver entry point at error
=========
========= ERROR SUMMARY: 2 errors
"""


def test_racecheck_reports_group_by_kernel_and_source_lines_across_variants():
    reports = parse("racecheck", RACECHECK)
    assert len(reports) == 3
    first = reports[0]
    assert first.what == "Error: Race reported between Write access / and Read access"
    assert first.kernels == ("matmul_kernel", ) and first.hazards == 384 and first.variant == "matmul fp16 dynamic"
    assert first.locations == ("schedulers/dynamic.py:118", "schedulers/dynamic.py:62")
    groups = group(reports)
    assert [(g.reports, g.hazards, g.variants) for g in groups] == [
        (2, 396, ["matmul fp16 dynamic", "matmul +C dynamic"]), (1, 7, ["matmul +C dynamic"])]
    assert groups[1].kernels == ("matmul_kernel", )  # the older 'file:line:kernel' form
    assert groups[1].locations == ("kernels/matmul.py:110", "pipeline/roles.py:52")


def test_memcheck_reports_keep_device_lines_and_drop_host_frames():
    invalid, api = parse("memcheck", MEMCHECK)
    assert invalid.what == "Invalid __global__ write of size # bytes"
    assert invalid.kernels == ("scaled_matmul_kernel", ) and invalid.locations == ("kernels/gemm_roles.py:40", )
    assert api.kernels == () and api.locations == () and "cuFuncGetAttribute" in api.what
    assert api.variant == "matmul_fp8 scaled"


def test_the_sanitizers_own_counts_are_read():
    assert sanitize.claimed(RACECHECK) == 3 and sanitize.claimed(MEMCHECK) == 2
    assert sanitize.claimed("========= ERROR SUMMARY: 0 errors") == 0


def test_a_group_is_explained_only_by_an_entry_naming_its_tool_kernels_and_lines():
    ring = group(parse("racecheck", RACECHECK))[0]
    entry = dict(ring.entry(), verdict="tool limitation: reproduced by smem_ring", reason="mbarrier-ordered")
    assert explain(ring, [entry]) == "tool limitation: reproduced by smem_ring: mbarrier-ordered"
    for change in ({"tool": "synccheck"}, {"locations": ["schedulers/dynamic.py:118"]}, {"kernels": ["other"]},
                   {"what": "Warning: Race reported"}):
        assert explain(ring, [{**entry, **change}]) is None, change


def test_an_entry_names_a_kernels_entry_line_by_its_def_and_follows_it():
    """Racecheck places Triton's warp_specialize dispatch at the kernel's def line: 'def MODULE:FUNCTION' is that
    line, wherever the function now starts."""
    import inspect

    from tilepipe.kernels.matmul import matmul_kernel

    lines, first = inspect.getsourcelines(matmul_kernel.fn)
    line = first + next(i for i, text in enumerate(lines) if text.startswith("def "))
    assert sanitize.resolve("def tilepipe.kernels.matmul:matmul_kernel") == f"matmul.py:{line}"
    entry = {"tool": "racecheck", "kernels": ["matmul_kernel"], "locations": ["def tilepipe.kernels.matmul:matmul_kernel"],
             "verdict": "tool limitation", "reason": "dispatch word"}
    at_def = Group("racecheck", "Error: Race", ("matmul_kernel", ), (f"matmul.py:{line}", ))
    assert explain(at_def, [entry]) == "tool limitation: dispatch word"
    assert explain(Group("racecheck", "Error: Race", ("matmul_kernel", ), (f"matmul.py:{line + 1}", )), [entry]) is None


def test_an_api_error_is_named_by_what_it_says():
    api = [g for g in group(parse("memcheck", MEMCHECK)) if not g.kernels][0]
    entry = {"tool": "memcheck", "kernels": [], "locations": [], "what": api.what, "verdict": "benign", "reason": "why"}
    assert explain(api, [entry]) == "benign: why"
    assert explain(api, [{**entry, "what": "Program hit something else"}]) is None


def test_an_explanation_by_a_repro_holds_only_if_the_repro_reported_the_same_tool():
    found = {"tool": "racecheck", "reason": "tool limitation: reproduced by scripts/sanitize_repro.py smem_ring: x"}
    seen = [{"tool": "racecheck", "variants": ["repro smem_ring"]}]
    sanitize.require_reproduced(found, seen)
    assert found["reason"] is not None
    for repro_groups in ([], [{"tool": "memcheck", "variants": ["repro smem_ring"]}],
                         [{"tool": "racecheck", "variants": ["repro tma_ring"]}]):
        found = {"tool": "racecheck", "reason": "tool limitation: reproduced by scripts/sanitize_repro.py smem_ring"}
        sanitize.require_reproduced(found, repro_groups)
        assert found["reason"] is None and found["unreproduced"] == "smem_ring"


def test_the_allow_list_loads_and_every_entry_gives_its_reason(tmp_path):
    load_allow_list()
    todo = tmp_path / "allow.json"
    todo.write_text('{"entries": [%s]}' % str(Group("racecheck", "x", ("k", ), ("a.py:1", )).entry()).replace(
        "'", '"'))
    with pytest.raises(ValueError, match="TODO"):
        load_allow_list(todo)


def test_the_driver_launches_every_shipped_variant():
    """A variant added to the catalogue without a launch in the driver fails here (drift)."""
    for index, variant in enumerate(shipped_variants()):
        assert callable(sanitize.launcher(variant, index)), variant


def test_every_fused_variant_has_its_torch_reference():
    """The driver's reference for each activation and gated epilogue of the catalogue is its own torch function (a
    merged table of both kinds lost every plain activation: StopIteration on the H200, 2026-11-28e)."""
    import torch

    from tilepipe.api.linear import TORCH_ACTIVATIONS
    from tilepipe.kernels.epilogue_functions import epilogue_function

    x = torch.linspace(-4, 4, 9)
    for variant in shipped_variants():
        name = variant.options.get("epilogue", "").rpartition(":")[2]
        if variant.kernel == "matmul_kernel" and name and not name.startswith("quantize"):
            act = {"swiglu": "silu", "geglu": "gelu", "geglu_tanh": "gelu_tanh", "reglu": "relu"}.get(name, name)
            got = sanitize.torch_activation(epilogue_function(variant.options["epilogue"]))
            assert torch.equal(got(x), TORCH_ACTIVATIONS[act](x)), variant.name


def test_few_sms_shrinks_every_persistent_grid(monkeypatch):
    import tilepipe  # noqa: F401
    from tilepipe.host import configs, launch

    for name, module in list(sys.modules.items()):
        if name.startswith("tilepipe.") and hasattr(module, "sm_count"):
            monkeypatch.setattr(module, "sm_count", module.sm_count)  # restored after the test
    sanitize.few_sms(2)
    cfg = configs.LARGE_16BIT
    assert launch.persistent_grid(4096, 4096, 4096, cfg, 0) == (2, 1, 1)
    assert launch.persistent_grid(4096, 4096, 4096, cfg, 0, "streamk") == (2, 1, 1)


def test_find_sanitizer_prefers_the_environment_and_fails_clearly(monkeypatch, tmp_path):
    tool = tmp_path / "compute-sanitizer"
    tool.write_text("#!/bin/sh\n")
    tool.chmod(0o755)
    monkeypatch.setenv("COMPUTE_SANITIZER", str(tool))
    assert sanitize.find_sanitizer() == str(tool)
    monkeypatch.delenv("COMPUTE_SANITIZER")
    monkeypatch.setenv("PATH", str(tmp_path / "nowhere"))
    monkeypatch.setattr(sanitize.os, "access", lambda path, mode: False)
    with pytest.raises(FileNotFoundError, match="set COMPUTE_SANITIZER"):
        sanitize.find_sanitizer()


def test_repro_kernels_compile_with_the_hand_offs_they_stand_for(monkeypatch):
    from triton.experimental.gluon import language as gl

    from tilepipe.kernels.spec import KernelSpec, tdesc_signature
    from tilepipe.verify.compile import CompileError, compile_kernels

    monkeypatch.syspath_prepend(str(sanitize.REPO_ROOT / "scripts"))
    layout = gl.NVMMASharedLayout.get_default_for([64, 64], gl.float16)
    specs = [KernelSpec("sanitize_repro:capture_kernel", {"out_ptr": "*i32", "value": "i32"}),
             *(KernelSpec("sanitize_repro:tma_ring_kernel", {"desc": tdesc_signature("fp16", [64, 64], layout),
                                                             "out_ptr": "*fp16", "n_tiles": "i32",
                                                             "FENCE": "constexpr"}, {"FENCE": fence})
               for fence in (False, True)),
             KernelSpec("sanitize_repro:smem_ring_kernel", {"out_ptr": "*i32", "n_items": "i32"}),
             KernelSpec("sanitize_repro:oversized_smem_kernel", {"x_ptr": "*fp32", "out_ptr": "*fp32"})]
    capture, tma_ring, fenced, smem_ring, oversized = compile_kernels(specs)
    for report in (capture, tma_ring, fenced, smem_ring, oversized):
        assert not isinstance(report, CompileError), report
    assert oversized.shared > 48 * 1024 and oversized.count("mbarrier") == 0  # over the loader's 48 KB line only
    assert tma_ring.count("fence.proxy.async") == 0 < fenced.count("fence.proxy.async")
    assert capture.count("barrier.sync") > 0 and capture.count("mbarrier") == 0  # the capture hand-off only
    assert tma_ring.count("cp.async.bulk.tensor.2d.shared::cta.global.mbarrier") == 1
    assert tma_ring.count("mbarrier.try_wait") >= 2 and tma_ring.count("mbarrier.arrive") >= 1
    assert smem_ring.count("cp.async.bulk") == 0 and smem_ring.count("st.shared") > 0
    assert smem_ring.count("mbarrier.arrive") >= 2  # the producer's full and the consumers' empty arrivals


def test_an_entry_names_any_line_of_a_function_and_kernels_it_covers():
    """'in MODULE:FUNCTION' names every line of that function (the ring slot's store in _publish wherever it moves);
    an entry listing several kernels explains a group of any of them, and not a line outside the function."""
    import inspect

    from tilepipe.schedulers.dynamic import _publish

    lines, first = inspect.getsourcelines(_publish.fn)
    entry = {"tool": "racecheck", "kernels": ["grouped_matmul_kernel", "matmul_kernel"],
             "locations": ["in tilepipe.schedulers.dynamic:_publish"], "verdict": "tool limitation", "reason": "ring"}
    for kernel in ("matmul_kernel", "grouped_matmul_kernel"):
        inside = Group("racecheck", "Error: Race", (kernel, ), (f"dynamic.py:{first + len(lines) - 2}", ))
        assert explain(inside, [entry]) == "tool limitation: ring"
    outside = Group("racecheck", "Error: Race", ("matmul_kernel", ), (f"dynamic.py:{first + len(lines) + 3}", ))
    assert explain(outside, [entry]) is None
    assert explain(Group("racecheck", "Error: Race", ("other_kernel", ), inside.locations), [entry]) is None
