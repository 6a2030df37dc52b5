"""CPU tests of the custom ops: fake implementations, torch.compile(fullgraph=True) tracing on fake CUDA tensors,
and the register helper on a CPU op (so torch.library.opcheck can run it for real)."""

import pytest
import torch
from torch._subclasses.fake_tensor import FakeTensorMode

import tilepipe
from tilepipe.api.library import register


@pytest.fixture
def fake():
    with FakeTensorMode(allow_non_fake_inputs=True) as mode:
        yield lambda *shape, dtype=torch.bfloat16: torch.empty(*shape, device="cuda", dtype=dtype)
    del mode


def test_fake_matmul_gives_shape_dtype_device(fake):
    a, w = fake(64, 32), fake(48, 32)
    for out_dtype in (None, torch.float16, torch.float32):
        result = torch.ops.tilepipe.matmul(a, w.t(), out_dtype=out_dtype)
        assert result.shape == (64, 48) and result.dtype == (out_dtype or torch.bfloat16)
        assert result.device.type == "cuda"
    c = fake(64, 48, dtype=torch.float32)
    assert torch.ops.tilepipe.matmul(a, w.t(), c, out_dtype=torch.float32, beta=1.0).dtype == torch.float32
    assert torch.ops.tilepipe.addmm(fake(48), a, w.t()).shape == (64, 48)
    assert torch.ops.tilepipe.matmul_out(fake(64, 48), a, w.t()) is None


@pytest.mark.parametrize("call, error, message", [
    (lambda f: torch.ops.tilepipe.matmul(f(64, 32), f(64, 32)), ValueError, "a.shape\\[1\\] must equal b.shape\\[0\\]"),
    (lambda f: torch.ops.tilepipe.matmul(f(64, 32), f(32, 8, dtype=torch.float16)), TypeError, "same dtype"),
    (lambda f: torch.ops.tilepipe.matmul(f(64, 32, dtype=torch.float32), f(32, 8)), TypeError, "a must be bfloat16"),
    (lambda f: torch.ops.tilepipe.matmul(f(64, 32), f(32, 8), beta=1.0), ValueError, "beta is nonzero but c is None"),
    (lambda f: torch.ops.tilepipe.matmul_out(f(64, 9), f(64, 32), f(32, 8)), ValueError, "out must have shape"),
    (lambda f: torch.ops.tilepipe.matmul(f(64, 32), f(32, 8), out_dtype=torch.int32), TypeError, "out_dtype must"),
    (lambda f: torch.ops.tilepipe.addmm(f(7), f(64, 32), f(32, 8)), ValueError, "does not broadcast"),
])
def test_fake_matmul_rejects_bad_input(fake, call, error, message):
    with pytest.raises(error, match=message):
        call(fake)


def test_real_cpu_input_names_the_device():
    with pytest.raises(ValueError, match="a must be on a CUDA device"):
        torch.ops.tilepipe.matmul(torch.randn(4, 8).bfloat16(), torch.randn(8, 4).bfloat16())


def model(x: torch.Tensor, w1: torch.Tensor, w2: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
    """A two-layer MLP on tilepipe ops: matmul, addmm with a bias row, and an in-place residual through out=."""
    h = torch.relu(tilepipe.addmm(bias, x, w1.t()))
    y = tilepipe.matmul(h, w2.t(), out_dtype=torch.float32)
    return tilepipe.matmul(h, w2.t(), out=y, c=y, beta=0.5)


def test_compile_fullgraph_traces_the_ops(fake):
    from torch._dynamo.testing import CompileCounterWithBackend

    torch._dynamo.reset()
    counter = CompileCounterWithBackend("aot_eager")
    compiled = torch.compile(model, fullgraph=True, backend=counter)
    x, w1, w2, bias = fake(64, 32), fake(96, 32), fake(48, 96, dtype=torch.bfloat16), fake(96)
    y = compiled(x, w1, w2, bias)
    assert y.shape == (64, 48) and y.dtype == torch.float32 and y.device.type == "cuda"
    assert counter.frame_count == 1
    code = counter.graphs[0].code
    assert "tilepipe.addmm" in code or "tilepipe.matmul" in code, code
    assert "tilepipe.matmul_out" in code, code


def test_config_under_compile_is_an_error(fake):
    torch._dynamo.reset()
    fn = torch.compile(lambda a, b: tilepipe.matmul(a, b, config=tilepipe.MatmulConfig(64, 128, 64, 6)),
                       fullgraph=True, backend="aot_eager")
    with pytest.raises(Exception, match="config= is not supported under torch.compile"):
        fn(fake(64, 32), fake(32, 48))


def _scale(x: torch.Tensor, y: torch.Tensor | None = None, *, alpha: float = 1.0,
           out: torch.Tensor | None = None) -> torch.Tensor:
    result = alpha * x if y is None else alpha * x + y
    return result if out is None else out.copy_(result)


def _scale_like(x, y=None, *, alpha=1.0, out=None):
    if out is not None and out.shape != x.shape:
        raise ValueError(f"out must have shape {tuple(x.shape)}")
    return out if out is not None else torch.empty_like(x)


@pytest.fixture(scope="module")
def scale_op():
    return register("_test_scale", "Tensor x, Tensor? y=None", "float alpha=1.0", _scale, _scale_like)


def test_register_makes_a_functional_and_an_out_op(scale_op):
    x, y = torch.randn(5, 3), torch.randn(5, 3)
    torch.testing.assert_close(torch.ops.tilepipe._test_scale(x, y, alpha=2.0), 2 * x + y)
    out = torch.full((5, 3), float("nan"))
    assert torch.ops.tilepipe._test_scale_out(out, x, alpha=3.0) is None
    torch.testing.assert_close(out, 3 * x)
    torch.library.opcheck(scale_op.functional, (x, y), {"alpha": 2.0})
    torch.library.opcheck(scale_op.out, (torch.empty(5, 3), x, y), {"alpha": 2.0})
    with pytest.raises(ValueError, match="out must have shape"):
        with FakeTensorMode(allow_non_fake_inputs=True):
            torch.ops.tilepipe._test_scale_out(torch.empty(2, 2), torch.empty(5, 3))


def test_fake_matmul_fp8_gives_shape_dtype_and_checks(fake):
    a, w = fake(64, 128, dtype=torch.float8_e4m3fn), fake(96, 128, dtype=torch.float8_e4m3fn)
    one = fake(1, dtype=torch.float32)
    result = torch.ops.tilepipe.matmul_fp8(a, w.t(), one, one, out_dtype=torch.float16)
    assert result.shape == (64, 96) and result.dtype == torch.float16 and result.device.type == "cuda"
    assert torch.ops.tilepipe.matmul_fp8_out(fake(64, 96), a, w.t(), one, one) is None
    with pytest.raises(ValueError, match="b must be column-major"):
        torch.ops.tilepipe.matmul_fp8(a, fake(128, 96, dtype=torch.float8_e4m3fn), one, one)


def test_compile_fullgraph_traces_matmul_fp8(fake):
    from torch._dynamo.testing import CompileCounterWithBackend

    torch._dynamo.reset()
    counter = CompileCounterWithBackend("aot_eager")
    compiled = torch.compile(lambda a, w, s: torch.relu(tilepipe.matmul_fp8(a, w.t(), s, s)), fullgraph=True,
                             backend=counter)
    y = compiled(fake(64, 128, dtype=torch.float8_e4m3fn), fake(96, 128, dtype=torch.float8_e4m3fn),
                 fake(1, dtype=torch.float32))
    assert y.shape == (64, 96) and y.dtype == torch.bfloat16 and counter.frame_count == 1
    assert "tilepipe.matmul_fp8" in counter.graphs[0].code


def test_outputs_of_grad_inputs_have_a_backward_that_raises(scale_op):
    x = torch.randn(5, 3, requires_grad=True)
    y = torch.ops.tilepipe._test_scale(x, alpha=2.0)
    torch.testing.assert_close(y.detach(), 2 * x.detach())
    assert y.requires_grad
    with pytest.raises(RuntimeError, match="tilepipe::_test_scale, which has no derivative formula"):
        y.sum().backward()
    with torch.no_grad():
        assert not torch.ops.tilepipe._test_scale(x).requires_grad
    with pytest.raises(RuntimeError, match="does not support automatic differentiation"):
        torch.ops.tilepipe._test_scale_out(torch.empty(5, 3), x)


def test_out_op_bumps_the_version_of_out(scale_op):
    """As for any in-place write, so autograd can tell a saved `out` was changed (a Triton kernel's write is not seen
    by torch: the op bumps it)."""
    out = torch.empty(5, 3)
    version = out._version
    torch.ops.tilepipe._test_scale_out(out, torch.randn(5, 3))
    assert out._version > version


def test_a_dispatch_mode_still_sees_the_op(scale_op):
    """The Autograd kernel calls the op's kernel directly only where nothing intercepts the call: a dispatch mode (a
    tracer) still sees the op."""
    from torch.utils._python_dispatch import TorchDispatchMode

    seen = []

    class Recorder(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            seen.append(str(func))
            return func(*args, **(kwargs or {}))

    x = torch.randn(4, 2)
    with Recorder():
        torch.testing.assert_close(torch.ops.tilepipe._test_scale(x, alpha=3.0), 3 * x)
    assert "tilepipe._test_scale.default" in seen


@pytest.mark.filterwarnings("ignore:Error detected in NoBackwardBackward")  # aot_autograd's anomaly mode, tracing it
def test_compiling_a_call_that_wants_grad_names_the_missing_backward(scale_op):
    """torch.compile traces the backward of a call whose input requires grad: the op says it has none (as custom_op's
    do without a formula), and compiles under no_grad."""
    torch._dynamo.reset()
    compiled = torch.compile(lambda x: torch.ops.tilepipe._test_scale(x, alpha=2.0).sin(), backend="aot_eager",
                             fullgraph=True)
    x = torch.randn(4, 3, requires_grad=True)
    with pytest.raises(Exception, match="tilepipe::_test_scale, which has no derivative formula"):
        compiled(x)
    with torch.no_grad():
        torch.testing.assert_close(compiled(x), (2 * x).sin())
