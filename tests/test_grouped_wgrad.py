"""CPU tests of grouped_mm's 2D x 2D (weight-gradient) form: argument checks on fake CUDA tensors (the path
torch.compile traces), the dispatch from tilepipe.grouped_mm, the kernel compiled for sm_90a in the MoE layouts and the
other two, and its protocol model-checked (and a seeded wrong count caught)."""

from dataclasses import replace

import pytest
import torch
from torch._subclasses.fake_tensor import FakeTensorMode

import tilepipe
from tests.test_checker import with_pipeline
from tilepipe.host.choose import wgrad_config
from tilepipe.host.configs import LARGE_SUBTILED_16BIT, LARGE_SUBTILED_FP32
from tilepipe.kernels.grouped_wgrad import wgrad_spec
from tilepipe.verify.checker import check
from tilepipe.verify.compile import compile_kernels
from tilepipe.verify.protocols import wgrad_protocols


def empty(*shape, dtype=torch.bfloat16, device="cuda", strides=None) -> torch.Tensor:
    if strides is not None:
        return torch.empty_strided(shape, strides, dtype=dtype, device=device)
    return torch.empty(*shape, dtype=dtype, device=device)


def valid() -> dict:
    """A MoE backward's weight gradient: X (1000 tokens, 64) and dY (1000, 32) over 4 experts: a = X.t() (M-major),
    b = dY (row-major); made in FakeTensorMode."""
    return dict(a=empty(1000, 64).t(), b=empty(1000, 32), offs=empty(4, dtype=torch.int32))


BAD = [  # (argument changes, error, message naming the argument)
    (lambda: dict(offs=empty(4, dtype=torch.int64)), TypeError, "^offs must be int32"),
    (lambda: dict(offs=empty(4, dtype=torch.int32, device="cpu")), ValueError, "^offs must be on a's device"),
    (lambda: dict(offs=empty(4, 1, dtype=torch.int32)), ValueError, "^offs must be 1-D"),
    (lambda: dict(offs=empty(8, dtype=torch.int32, strides=(2, ))), ValueError, "^offs must be contiguous"),
    (lambda: dict(b=empty(1000, 32, device="cpu")), ValueError, "^b must be on a's device"),
    (lambda: dict(b=empty(1000, 32, dtype=torch.float16)), TypeError, "^b must have a's dtype"),
    (lambda: dict(b=empty(999, 32)), ValueError, r"^a is \(64, 1000\) and b is \(999, 32\): b.shape\[0\] must equal"),
    (lambda: dict(b=empty(1000, 30)), ValueError, "^b must be row-major"),  # rows of 60 bytes
    (lambda: dict(b=empty(1000, 32, strides=(64, 2))), ValueError, "^b must be row-major"),  # neither layout
    (lambda: dict(b=empty(30, 1000).t()), ValueError, "^N = 30: D's rows must be a multiple of 16 bytes"),  # K-major
    (lambda: dict(a=empty(1000, 60).t()), ValueError, "^a must be row-major"),  # M-major, M = 60 not a multiple of 8
    (lambda: dict(a=empty(64, 1000, dtype=torch.float32)), TypeError, "^a must be bfloat16 or float16"),
    (lambda: dict(a=empty(64, 1000, strides=(1, 1))), ValueError, "^a must be row-major"),
    (lambda: dict(a=empty(64, 1000, device="cpu"), b=empty(1000, 32, device="cpu"),
                  offs=empty(4, dtype=torch.int32, device="cpu")), ValueError, "^a must be on a CUDA device"),
    (lambda: dict(out=empty(4, 64, 33)), ValueError, r"^out must have shape \(4, 64, 32\)"),
    (lambda: dict(out=empty(4, 32, 64).transpose(1, 2)), ValueError, "^out must be row-major"),
    (lambda: dict(out=empty(64, 4, 32).transpose(0, 1)), ValueError, "^out must be row-major"),  # groups not packed
    (lambda: dict(out=empty(4, 64, 32, dtype=torch.int32)), TypeError, "^out must be bfloat16, float16 or float32"),
    (lambda: dict(out_dtype=torch.int8), TypeError, "^out_dtype must be"),
    (lambda: dict(a=empty(64, 1000, strides=(1001, 1))), ValueError, "^a must be row-major"),  # rows off 16 bytes
]


@pytest.mark.parametrize("changes, error, message", BAD, ids=[entry[2].strip("^")[:40] for entry in BAD])
def test_bad_input_names_the_argument(changes, error, message):
    """The fake implementation (what torch.compile traces) runs every check the eager op runs before its launch."""
    with FakeTensorMode():
        arguments = {**valid(), **changes()}
        a, b, offs = (arguments.pop(name) for name in ("a", "b", "offs"))
        with pytest.raises(error, match=message):
            if "out" in arguments:
                torch.ops.tilepipe.grouped_mm_wgrad_out(arguments.pop("out"), a, b, offs, **arguments)
            else:
                torch.ops.tilepipe.grouped_mm_wgrad(a, b, offs, **arguments)


@pytest.mark.parametrize("a_kmajor, b_kmajor", [(False, False), (True, True), (True, False), (False, True)])
def test_fake_result_is_one_m_by_n_per_group(a_kmajor, b_kmajor):
    """Every layout torch._grouped_mm takes for 2-D operands: D is (G, M, N), of a's dtype or out_dtype; a K-major a
    takes any M."""
    with FakeTensorMode():
        a = empty(62, 1000) if a_kmajor else empty(1000, 64).t()
        b = empty(32, 1000).t() if b_kmajor else empty(1000, 32)
        offs = empty(4, dtype=torch.int32)
        assert torch.ops.tilepipe.grouped_mm_wgrad(a, b, offs).shape == (4, a.shape[0], 32)
        assert torch.ops.tilepipe.grouped_mm_wgrad(a, b, offs, out_dtype=torch.float32).dtype == torch.float32
        out = empty(4, a.shape[0], 32, dtype=torch.float32)  # an fp32 out and no out_dtype: D is out's dtype
        assert torch.ops.tilepipe.grouped_mm_wgrad_out(out, a, b, offs) is None


def test_grouped_mm_dispatches_2d_operands_and_refuses_an_epilogue():
    """tilepipe.grouped_mm with 2-D a and b is the weight gradient (under torch.compile: its custom op); it takes no
    bias or activation, and says so before anything is written."""
    from torch._dynamo.testing import CompileCounterWithBackend

    torch._dynamo.reset()
    counter = CompileCounterWithBackend("aot_eager")
    with FakeTensorMode():
        a, b, offs = valid().values()
        with pytest.raises(ValueError, match="^grouped_mm's 2D x 2D .* takes no bias or activation"):
            tilepipe.grouped_mm(a, b, offs, activation="silu")
        d = torch.compile(lambda a, b, offs: tilepipe.grouped_mm(a, b, offs), fullgraph=True, backend=counter)(a, b,
                                                                                                          offs)
    assert d.shape == (4, 64, 32) and counter.frame_count == 1
    assert "tilepipe.grouped_mm_wgrad" in counter.graphs[0].code


def test_cpu_tensors_are_refused_before_anything_is_written():
    a, b, offs = torch.randn(16, 8).bfloat16(), torch.randn(8, 8).bfloat16(), torch.tensor([3, 8], dtype=torch.int32)
    out = torch.full((2, 16, 8), float("nan"), dtype=torch.bfloat16)
    with pytest.raises(ValueError, match="^a must be on a CUDA device"):
        tilepipe.grouped_mm(a, b, offs, out=out)
    assert torch.isnan(out).all()
    with pytest.raises(TypeError, match="^offs must be a torch.Tensor"):
        tilepipe.grouped_mm(a, b, [3, 8])


def test_config_is_the_128x256_tile_with_d_in_sub_tiles():
    assert wgrad_config(torch.bfloat16) == wgrad_config(torch.float16) == LARGE_SUBTILED_16BIT
    assert wgrad_config(torch.float32) == LARGE_SUBTILED_FP32


SPECS = {"bf16 A M-major B N-major": wgrad_spec(LARGE_SUBTILED_16BIT, "bf16", "bf16", False, False),
         "fp16 fp32 A K-major B K-major": wgrad_spec(LARGE_SUBTILED_FP32, "fp16", "fp32", True, True),
         "bf16 A K-major B N-major": wgrad_spec(LARGE_SUBTILED_16BIT, "bf16", "bf16", True, False)}


@pytest.fixture(scope="module")
def reports():
    return dict(zip(SPECS, compile_kernels(list(SPECS.values()))))


@pytest.mark.parametrize("name", SPECS)
def test_kernel_compiles_for_sm90_without_spills(reports, name):
    """wgmma main loop (MN-major operands transposed in the instruction), TMA loads and stores, the masked register
    store of a tile past a group's M rows, descriptors re-cut at a group's K end on the device and fenced for TMA,
    the zeroing of a first step's rows before its group (K-major operands) fenced for the wgmmas and behind the MMA
    warps' barrier, no spills, and shared memory within the 227 KB a block may take."""
    report = reports[name]
    assert not isinstance(report, Exception), report
    assert report.target == "sm_90a" and report.spill_stores == report.spill_loads == 0
    wgmmas = [line for line in report.ptx.splitlines() if "wgmma.mma_async" in line]
    assert len(wgmmas) == 4  # BK = 64: four k16 instructions a step
    a_kmajor, b_kmajor = SPECS[name].constexprs["A_KMAJOR"], SPECS[name].constexprs["B_KMAJOR"]
    assert all(line.rstrip(";").endswith(f"1, 1, {int(not a_kmajor)}, {int(not b_kmajor)}") for line in wgmmas)
    assert report.count("cp.async.bulk.tensor.2d.global.shared") >= 1  # D's TMA store
    assert report.count("st.global") >= 1  # a spilling tile's masked rows
    assert report.count("tensormap.replace.tile.global_dim") >= 2 and report.count("fence.proxy.tensormap") >= 1
    if a_kmajor or b_kmajor:
        assert report.count("fence.proxy.async.shared::cta") >= 1 and report.count("bar.sync \t0, 256") >= 1
    assert report.count("setmaxnreg") >= 2
    assert report.shared <= 227 * 1024


@pytest.mark.parametrize("name", SPECS)
def test_wgmmas_stay_in_flight(reports, name):
    """The zeroing inside the main loop touches no accumulator: ptxas keeps a wgmma in flight (no C7514)."""
    log = reports[name].ptxas_log
    assert "Compiling entry function 'grouped_wgrad_kernel'" in log, log
    assert "C7514" not in log and "serialized" not in log, log


@pytest.fixture(scope="module")
def protocols():
    return wgrad_protocols()


def test_protocol_passes_and_matches_the_traced_kernel(protocols):
    """Tiles of 0 (an empty group), 1, stages and stages + 1 k-steps."""
    assert [p.config.split(" stages")[0] for p in protocols] == ["grouped_mm wgrad"]
    for protocol in protocols:
        result = check(protocol, trace=True)
        assert result.ok and result.traced and result.cases >= 12 and result.states > 0, result


def test_seeded_wrong_arrive_count_deadlocks_the_load_role(protocols):
    result = check(replace(with_pipeline(protocols[0], "input", consumer_arrivals=2), trace=None))
    assert not result.ok
    assert any(f.kind == "deadlock" and (f.role, f.pipeline) == ("load", "input") for f in result.findings)


def test_a_kernel_with_global_scratch_keeps_the_fast_launcher():
    """The weight-gradient kernel builds tensor maps in global scratch. Its fast launcher passes each stream's own
    scratch (a program's share times the grid) in the C launcher's global-scratch slot, one buffer per stream kept
    for the next launch; Triton's own launches inside jit_scratch take the same buffers, and a user's allocator is
    back in place after them."""
    from types import SimpleNamespace

    from triton.runtime import _allocation

    from tests.launch_record import fake_h200
    from tilepipe.host import launch

    calls = []
    run = SimpleNamespace(launch_cooperative_grid=False, launch_pdl=False, arg_annotations=(), kernel_signature=b"",
                          global_scratch_size=128, num_ctas=1)
    fast = launch.FastLauncher(SimpleNamespace(function=1, packed_metadata=2, _run=run), lambda *a: calls.append(a),
                               [])
    with fake_h200():
        for stream in (7, 9, 7):
            fast((132, 1, 1), stream, (5, ))
    scratch = [call[4 + 7] for call in calls]  # after the grid and stream, the prefix's global-scratch slot
    assert [s.numel() for s in scratch] == [132 * 128] * 3 and [call[-1] for call in calls] == [(5, )] * 3
    assert scratch[0] is scratch[2] and scratch[1] is not scratch[0]
    mine = _allocation._allocator.get()
    with launch.jit_scratch():
        assert _allocation._allocator.get() is launch.global_scratch
    assert _allocation._allocator.get() is mine
    launch._SCRATCH.clear()  # CPU tensors made under the fake device
