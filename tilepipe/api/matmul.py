"""tilepipe.matmul and tilepipe.addmm: D = alpha * A @ B + beta * C on Hopper, and (compiled, never run here) on
datacenter Blackwell (addmm with torch.addmm's semantics)."""

import os

import torch

from tilepipe.host.checks import MatmulProblem, check_operands, validate_matmul
from tilepipe.host.choose import choose_matmul, halves_columns
from tilepipe.host.configs import MatmulConfig
from tilepipe.host.launch import launch_gemm
from tilepipe.host.plans import MatmulPlan, PlanCache, plan_gemm
from tilepipe.host.staging import stage_matmul
from tilepipe.probes.debug import DEBUG_VARIABLE, debug_requested


def matmul(a: torch.Tensor, b: torch.Tensor, *, out: torch.Tensor | None = None,
           out_dtype: torch.dtype | None = None, c: torch.Tensor | None = None, alpha: float = 1.0,
           beta: float = 0.0, config: MatmulConfig | None = None, scheduler: str | None = None,
           debug: bool | None = None, trace: str | os.PathLike | None = None) -> torch.Tensor:
    """D = alpha * (a @ b) + beta * c on a Hopper GPU; a is (M, K), b is (K, N): row-major, or a transposed (N, K)
    K-major tensor. On an sm_100/sm_103 GPU (B200, B300) it launches the sm_100a kernel (kernels/sm100_matmul.py:
    compiled and checked on the CPU only, never run) with the static scheduler; other GPUs raise RuntimeError
    naming the device.

    Inputs are bf16 or fp16 (both the same); D is bf16, fp16 or fp32 (default: the input dtype), written into
    `out` when given. `c` (M x N, D's dtype or fp32) is read only when beta != 0, as in torch.addmm; it may be
    `out` itself (an in-place residual). A `c` that is one row broadcast down the columns (stride 0 along M,
    e.g. `bias.expand(M, N)`) is read as a per-column bias: N values, no C tiles. `config` overrides the tile
    configuration (default: the autotuned one if `tilepipe.autotune` cached one for this shape, else a
    heuristic). `scheduler` ("static", "dynamic" or "streamk", tilepipe/schedulers/, or "splitk": stream-K's
    scheduler on tiles x splits programs; on sm_100 "static" or "clc") picks the tile scheduler; by default
    schedule_for picks per shape (static on sm_100). A config with a cluster runs on sm_90a under any of these
    schedulers (static unless told), on sm_100 static only. Raises TypeError / ValueError naming the argument for bad
    input.
    TMA needs unit inner strides and 16-byte aligned rows; a tensor without them (an inner size that is not a
    multiple of 16 bytes, a strided or broadcast view) is staged through an aligned copy, which costs one extra
    pass over that tensor but is never wrong. A and B whose rows start 16 bytes off a 32-byte sector (K = 8 mod 16)
    cost TMA about twice the L2 traffic; large GEMMs copy them to aligned rows first (`sector_aligned`). Under
    torch.compile this calls the custom op tilepipe::matmul.
    Debug mode (`debug=True`, or TILEPIPE_DEBUG=1 when `debug` is None) waits for the kernel and, if its roles stop
    making progress, names the stuck roles and ends the process (tilepipe.probes.debug). `trace=PATH` writes the
    launch's pipeline timeline to PATH (Chrome/Perfetto JSON) and PATH with .png (tilepipe.probes.timeline).
    """
    if torch.compiler.is_compiling():
        return _traced_matmul(a, b, out, out_dtype, c, alpha, beta, config)
    quiet = debug is None and trace is None and DEBUG_VARIABLE not in os.environ  # the common call: no env parse
    probe = None if quiet else probe_request(debug, trace)
    if probe is not None:
        return _matmul(a, b, out, out_dtype, c, alpha, beta, config, scheduler, None, probe)
    try:  # a repeated call geometry skips every step below: its launch, memoized (host/plans.py: MatmulPlan)
        key = (a.shape, a.stride(), a.dtype, a.device, b.shape, b.stride(), b.dtype, b.device, out_dtype,
               alpha.__class__, alpha, beta.__class__, beta, config, scheduler,
               None if out is None else (out.shape, out.stride(), out.dtype, out.device),
               None if c is None else True if c is out else (c.shape, c.stride(), c.dtype, c.device))
        plan = _PLANS.get(key)
    except (AttributeError, TypeError):  # not tensors, or unhashable scalars: the checks below say which
        key = plan = None
    if plan is not None:
        result = plan.run((a, b, c), out)
        if result is not None:
            return result
    return _matmul(a, b, out, out_dtype, c, alpha, beta, config, scheduler, key)


def _matmul(a: torch.Tensor, b: torch.Tensor, out: torch.Tensor | None, out_dtype: torch.dtype | None,
            c: torch.Tensor | None, alpha: float, beta: float, config: MatmulConfig | None, scheduler: str | None,
            key: tuple | None, probe: str | os.PathLike | bool | None = None, epilogue: object = None) -> torch.Tensor:
    """matmul's one pass down the host layers: validate, choose, stage, plan, launch; then a MatmulPlan for the call's
    geometry `key` (none for debug and trace launches: matmul() sends those here with no key), where the launch read
    the call's own tensors. `epilogue`: the sm_90a kernel's EPILOGUE function (kernels/epilogue_functions.py;
    api/linear.py passes its activations), None for matmul's; a gated one gives D half of B's columns (a new `out`
    only, K > 0)."""
    problem = validate_matmul(a, b, out, out_dtype, c, alpha, beta, config, scheduler, epilogue)
    if out is None:
        columns = problem.N // 2 if halves_columns(epilogue) else problem.N
        out = torch.empty((problem.M, columns), device=a.device, dtype=problem.out_dtype)
    if problem.M == 0 or problem.N == 0 or problem.K == 0:
        return _without_gemm(problem, out)
    choice = choose_matmul(problem)
    staged = stage_matmul(problem, choice.cfg, choice.b_kmajor, out)
    plan = plan_gemm(staged, problem.bias, problem.alpha, problem.beta, choice.b_kmajor, problem.device, choice.cfg,
                     choice.schedule, choice.arch, epilogue)
    launcher = launch_gemm(plan, probe)
    if staged.out is not out:
        out.copy_(staged.out)
    elif launcher is not None and key is not None and staged.a is a and staged.b.data_ptr() == b.data_ptr() and (
            staged.c is None or staged.c is problem.c):
        _PLANS.remember(key, MatmulPlan(plan, launcher, out))
    return out


def _without_gemm(problem: MatmulProblem, out: torch.Tensor) -> torch.Tensor:
    """D of a problem without a product (M, N or K zero): beta * C (or the bias row), else zeros."""
    if problem.M == 0 or problem.N == 0:
        return out
    residual = problem.c if problem.c is not None else problem.bias
    return out.copy_(residual * problem.beta) if residual is not None else out.zero_()


def _traced_matmul(a: torch.Tensor, b: torch.Tensor, out: torch.Tensor | None, out_dtype: torch.dtype | None,
                   c: torch.Tensor | None, alpha: float, beta: float, config: MatmulConfig | None) -> torch.Tensor:
    """matmul under torch.compile: the custom ops of tilepipe.api.library, which the compiler treats as opaque."""
    if config is not None:
        raise ValueError("config= is not supported under torch.compile: autotune the shape instead")
    if out is None:
        return torch.ops.tilepipe.matmul(a, b, c, out_dtype=out_dtype, alpha=alpha, beta=beta)
    torch.ops.tilepipe.matmul_out(out, a, b, c, out_dtype=out_dtype, alpha=alpha, beta=beta)
    return out


def addmm(input: torch.Tensor, mat1: torch.Tensor, mat2: torch.Tensor, *, beta: float = 1.0, alpha: float = 1.0,
          out: torch.Tensor | None = None) -> torch.Tensor:
    """torch.addmm: beta * input + alpha * (mat1 @ mat2), with `input` broadcastable to (M, N) and of mat1's dtype.

    A bias row ((N,) or (1, N)) is added in the epilogue from its N values; another broadcast input (a column)
    is expanded through an aligned copy before the fused GEMM.
    """
    c = addmm_residual(input, mat1, mat2)
    return matmul(mat1, mat2, out=out, out_dtype=mat1.dtype, c=c, alpha=alpha, beta=beta)


def addmm_residual(input: torch.Tensor, mat1: torch.Tensor, mat2: torch.Tensor) -> torch.Tensor:
    """addmm's checks: `input` expanded to the (M, N) residual C."""
    check_operands(mat1, mat2, ("mat1", "mat2"))
    if not isinstance(input, torch.Tensor):
        raise TypeError(f"input must be a torch.Tensor, got {type(input).__name__}")
    if input.dtype != mat1.dtype:
        raise TypeError(f"input must have mat1's dtype {mat1.dtype}, got {input.dtype}")
    if input.device != mat1.device:
        raise ValueError(f"input must be on mat1's device {mat1.device}, got {input.device}")
    shape = (mat1.shape[0], mat2.shape[1])
    try:
        return input.expand(shape)
    except RuntimeError:
        raise ValueError(f"input of shape {tuple(input.shape)} does not broadcast to {shape}") from None


def probe_request(debug: bool | None, trace: str | os.PathLike | None) -> str | os.PathLike | bool | None:
    """What the launch records: a trace path, True for debug mode, or None (the normal kernel)."""
    if trace is not None:
        if not isinstance(trace, (str, os.PathLike)):
            raise TypeError(f"trace must be a path, got {type(trace).__name__}")
        if debug:
            raise ValueError("debug and trace are separate modes: pass one of them")
        return trace
    return True if debug_requested(debug) else None


_PLANS = PlanCache()


def forget_plans() -> None:
    """Drop every cached call plan, so the next calls choose their configuration again (after autotuning)."""
    _PLANS.clear()
