"""Torch-facing functions: validate tensors, choose a configuration, build TMA descriptors, launch."""

from dataclasses import dataclass
from functools import cache

import torch

from tilepipe.launch import FastLauncher, TmaOperand, launch_hooks_active
from tilepipe.storage import Part

_GL_DTYPES = {torch.bfloat16: "bf16", torch.float16: "fp16", torch.float32: "fp32"}
INPUT_DTYPES = (torch.bfloat16, torch.float16)
OUTPUT_DTYPES = (torch.bfloat16, torch.float16, torch.float32)
TMA_ALIGN_BYTES = 16


@dataclass(frozen=True)
class MatmulConfig:
    """Tile shape and stage counts of the warp-specialized GEMM (num_warps counts the MMA role's warps)."""
    block_m: int
    block_n: int
    block_k: int
    stages: int
    c_stages: int = 1
    group_m: int = 8
    num_warps: int = 8


LARGE_16BIT = MatmulConfig(128, 256, 64, stages=3)
MEDIUM = MatmulConfig(128, 128, 64, stages=4)
LARGE_FP32 = MEDIUM  # fp32 C tiles are twice as large: the largest fp32 tile is the medium one
SMALL = MatmulConfig(64, 128, 64, stages=6, num_warps=4)  # one wgmma warpgroup
MIN_WAVE_EFFICIENCY = 0.75
SCHEDULERS = ("static", "dynamic")
DEFAULT_SCHEDULER = "static"
"""The static scheduler was as fast or faster on every shape measured on an H100, partial last waves included
(bench/results/scheduler-h100.json: the dynamic one at 0.88-0.99x); docs/scheduler.md says why."""


@cache
def choose_config(M: int, N: int, out_dtype: torch.dtype, sms: int) -> MatmulConfig:
    """The largest tile whose persistent waves keep at least 75% of the SMs busy, else the best-filled one.

    Wave efficiency = tiles / (SMs x waves): 1024^3 has 32 tiles of 128x256 on 132 SMs (24%) but 128 of 64x128.
    """
    candidates = [MEDIUM, SMALL] if out_dtype == torch.float32 else [LARGE_16BIT, MEDIUM, SMALL]

    def efficiency(cfg: MatmulConfig) -> float:
        tiles = -(-M // cfg.block_m) * -(-N // cfg.block_n)
        return tiles / (-(-tiles // sms) * sms)

    return next((cfg for cfg in candidates if efficiency(cfg) >= MIN_WAVE_EFFICIENCY), max(candidates, key=efficiency))


def matmul(a: torch.Tensor, b: torch.Tensor, *, out: torch.Tensor | None = None,
           out_dtype: torch.dtype | None = None, c: torch.Tensor | None = None, alpha: float = 1.0,
           beta: float = 0.0, scheduler: str | None = None) -> torch.Tensor:
    """D = alpha * (a @ b) + beta * c on a Hopper GPU; a is (M, K), b is (K, N): row-major, or a transposed (N, K)
    K-major tensor.

    Inputs are bf16 or fp16 (both the same); D is bf16, fp16 or fp32 (default: the input dtype), written into
    `out` when given. `c` (M x N, D's dtype) is read only when beta != 0, as in torch.addmm; it may be `out`
    itself (an in-place residual). Raises TypeError / ValueError naming the argument for bad input.
    TMA needs unit inner strides and 16-byte aligned rows; a tensor without them (an inner size that is not a
    multiple of 16 bytes, a strided or broadcast view) is staged through an aligned copy, which costs one extra
    pass over that tensor but is never wrong.
    `scheduler` ("static" or "dynamic", tilepipe/scheduler.py; default DEFAULT_SCHEDULER) picks the tile scheduler.
    """
    if scheduler is not None and scheduler not in SCHEDULERS:
        raise ValueError(f"scheduler must be one of {SCHEDULERS} or None, got {scheduler!r}")
    _check_operands(a, b)
    out_dtype = _check_out_dtype(out_dtype, out, a.dtype)
    M, K = a.shape
    N = b.shape[1]
    alpha, beta = _check_scalar(alpha, "alpha"), _check_scalar(beta, "beta")
    if beta != 0.0 and c is None:
        raise ValueError("beta is nonzero but c is None: pass c, or leave beta at 0")
    c = c if beta != 0.0 else None
    if c is not None:
        _check_residual(c, (M, N), out_dtype, a.device)
    if out is None:
        out = torch.empty((M, N), device=a.device, dtype=out_dtype)
    else:
        _check_result_shaped(out, "out", (M, N), a.device)
        for name, t in (("a", a), ("b", b)) + ((("c", c), ) if c is not None and c is not out else ()):
            if _overlaps(out, t):
                raise ValueError(f"out must not share memory with {name}" + (" (except by being c itself)"
                                                                             if name == "c" else ""))
    if M == 0 or N == 0:
        return out
    if K == 0:
        return out.copy_(c).mul_(beta) if c is not None else out.zero_()
    b_kmajor = b.stride(0) == 1 and b.stride(1) != 1
    b_view = _tma_ready(b.t() if b_kmajor else b)
    target = out if _tma_addressable(out) else _aligned_empty(out.shape, out.dtype, out.device)
    source = None if c is None else (target if c is out else _tma_ready(c))
    if source is target and target is not out:
        target.copy_(out)
    device = _device_index(a)
    cfg = choose_config(M, N, out_dtype, _sm_count(device))
    dynamic = (scheduler or DEFAULT_SCHEDULER) == "dynamic"
    _launch(_tma_ready(a), b_view, target, source, alpha, beta, b_kmajor, device, cfg, dynamic)
    if target is not out:
        out.copy_(target)
    return out


def addmm(input: torch.Tensor, mat1: torch.Tensor, mat2: torch.Tensor, *, beta: float = 1.0, alpha: float = 1.0,
          out: torch.Tensor | None = None) -> torch.Tensor:
    """torch.addmm: beta * input + alpha * (mat1 @ mat2), with `input` broadcastable to (M, N) and of mat1's dtype.

    A broadcast input (a bias row or column) is expanded through an aligned copy before the fused GEMM.
    """
    _check_operands(mat1, mat2)
    if not isinstance(input, torch.Tensor):
        raise TypeError(f"input must be a torch.Tensor, got {type(input).__name__}")
    if input.dtype != mat1.dtype:
        raise TypeError(f"input must have mat1's dtype {mat1.dtype}, got {input.dtype}")
    shape = (mat1.shape[0], mat2.shape[1])
    try:
        c = input.expand(shape)
    except RuntimeError:
        raise ValueError(f"input of shape {tuple(input.shape)} does not broadcast to {shape}") from None
    return matmul(mat1, mat2, out=out, out_dtype=mat1.dtype, c=c, alpha=alpha, beta=beta)


def _launch(a: torch.Tensor, b: torch.Tensor, out: torch.Tensor, c: torch.Tensor | None, alpha: float,
            beta: float, b_kmajor: bool, device: int, cfg: MatmulConfig, dynamic: bool) -> None:
    """Launch the GEMM: the first call per configuration through Triton's JIT, later ones through FastLauncher."""
    M, K = a.shape
    N = out.shape[1]
    dtype, c_dtype = _GL_DTYPES[a.dtype], _GL_DTYPES[out.dtype]
    a_block = (cfg.block_m, cfg.block_k)
    b_block = (cfg.block_n, cfg.block_k) if b_kmajor else (cfg.block_k, cfg.block_n)
    c_block = (cfg.block_m, cfg.block_n)
    has_c = c is not None
    source = c if has_c else out  # without C the kernel never reads its descriptor
    scalars = (M, N, K, alpha, beta, cfg.stages, cfg.c_stages, cfg.group_m, b_kmajor, has_c, dynamic)
    grid = (min(-(-M // cfg.block_m) * -(-N // cfg.block_n), _sm_count(device)), 1, 1)
    key = (cfg, dtype, c_dtype, b_kmajor, has_c, dynamic, device)
    stream = torch._C._cuda_getCurrentRawStream(device)
    counter = tile_counter(device, stream)
    launcher = _LAUNCHERS.get(key)
    if launcher is not None and not launch_hooks_active():
        launcher(grid, stream, (TmaOperand(a), TmaOperand(b), TmaOperand(out), TmaOperand(source), counter, *scalars))
        return
    from triton.experimental.gluon.nvidia.hopper import TensorDescriptor

    from tilepipe.kernels.matmul import matmul_kernel

    def desc(t: torch.Tensor, block: tuple[int, int], dt: str) -> TensorDescriptor:
        return TensorDescriptor(t, t.shape, t.stride(), block, _layout(block, dt))

    kernel = matmul_kernel[grid](desc(a, a_block, dtype), desc(b, b_block, dtype), desc(out, c_block, c_dtype),
                                 desc(source, c_block, c_dtype), counter, *scalars, num_warps=cfg.num_warps)
    fast = FastLauncher.create(kernel)
    if fast is not None:
        _LAUNCHERS[key] = fast


_LAUNCHERS: dict[tuple, FastLauncher] = {}
"""GEMM launchers by (config, dtypes, B layout, residual, scheduler, device): everything the binary is specialized
on, since matmul_kernel does not specialize on M, N and K and the descriptors' types follow from the config and dtypes.
Without one (Triton internals not as expected) every call goes through the JIT."""


_COUNTERS: dict[tuple[int, int], torch.Tensor] = {}


def tile_counter(device: int, stream: int) -> torch.Tensor:
    """The dynamic scheduler's tile counter for launches on `stream`: zeroed once, then left at zero by every
    launch (tilepipe/scheduler.py). One per stream, since launches that share a counter must not overlap.
    Created while a CUDA graph is being captured, its zeroing is captured too (harmless: zero is its resting value)."""
    counter = _COUNTERS.get((device, stream))
    if counter is None:
        counter = _COUNTERS[device, stream] = torch.zeros(1, dtype=torch.int32, device=f"cuda:{device}")
    return counter


@cache
def _layout(block: tuple[int, int], dtype: str):
    """The NVMMA shared layout of a tile, by the same rule the kernel's storage uses."""
    return Part("tile", dtype, block, 1).layout


def _device_index(t: torch.Tensor) -> int:
    return t.device.index if t.device.index is not None else torch.cuda.current_device()


@cache
def _sm_count(device_index: int) -> int:
    return torch.cuda.get_device_properties(device_index).multi_processor_count


def _check_operands(a: torch.Tensor, b: torch.Tensor) -> None:
    operands = (("a", a), ("b", b))
    for name, t in operands:
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
    for name, t in operands:
        if t.dim() != 2:
            raise ValueError(f"{name} must be 2-D, got shape {tuple(t.shape)}")
    for name, t in operands:
        if t.dtype not in INPUT_DTYPES:
            raise TypeError(f"{name} must be bfloat16 or float16, got {t.dtype}")
    for name, t in operands:
        if t.device.type != "cuda":
            raise ValueError(f"{name} must be on a CUDA device, got {t.device}")
    if a.dtype != b.dtype:
        raise TypeError(f"a and b must have the same dtype, got {a.dtype} and {b.dtype}")
    if a.device != b.device:
        raise ValueError(f"a and b must be on the same device, got {a.device} and {b.device}")
    if a.shape[1] != b.shape[0]:
        raise ValueError(f"a is {tuple(a.shape)} and b is {tuple(b.shape)}: a.shape[1] must equal b.shape[0]")


def _check_out_dtype(out_dtype: torch.dtype | None, out: torch.Tensor | None, default: torch.dtype) -> torch.dtype:
    if out is not None:
        if not isinstance(out, torch.Tensor):
            raise TypeError(f"out must be a torch.Tensor, got {type(out).__name__}")
        if out_dtype is not None and out.dtype != out_dtype:
            raise TypeError(f"out has dtype {out.dtype} but out_dtype is {out_dtype}")
        out_dtype = out.dtype
    out_dtype = out_dtype or default
    if out_dtype not in OUTPUT_DTYPES:
        raise TypeError(f"out_dtype must be bfloat16, float16 or float32, got {out_dtype}")
    return out_dtype


def _check_scalar(value: float, name: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{name} must be a real number, got {type(value).__name__}")
    return float(value)


def _check_residual(c: torch.Tensor, shape: tuple[int, int], dtype: torch.dtype, device: torch.device) -> None:
    if not isinstance(c, torch.Tensor):
        raise TypeError(f"c must be a torch.Tensor, got {type(c).__name__}")
    _check_result_shaped(c, "c", shape, device)
    if c.dtype != dtype:
        raise TypeError(f"c must have the output dtype {dtype}, got {c.dtype}")


def _check_result_shaped(t: torch.Tensor, name: str, shape: tuple[int, int], device: torch.device) -> None:
    """`out` and `c` are M x N tensors on the operands' device."""
    if tuple(t.shape) != shape:
        raise ValueError(f"{name} must have shape {shape}, got {tuple(t.shape)}")
    if t.device != device:
        raise ValueError(f"{name} must be on {device}, got {t.device}")


def _overlaps(x: torch.Tensor, y: torch.Tensor) -> bool:
    """Whether the address spans of two 2-D tensors intersect."""
    if x.numel() == 0 or y.numel() == 0:
        return False
    x0, y0 = x.data_ptr(), y.data_ptr()
    (xr, xc), (xs0, xs1) = x.shape, x.stride()
    (yr, yc), (ys0, ys1) = y.shape, y.stride()
    x1 = x0 + ((xr - 1) * xs0 + (xc - 1) * xs1 + 1) * x.element_size()
    y1 = y0 + ((yr - 1) * ys0 + (yc - 1) * ys1 + 1) * y.element_size()
    return x0 < y1 and y0 < x1


def _tma_addressable(t: torch.Tensor) -> bool:
    """Unit inner stride, 16-byte aligned row stride and base address: what a TMA descriptor needs."""
    size = t.element_size()
    return (t.stride(1) == 1 and (t.stride(0) * size) % TMA_ALIGN_BYTES == 0
            and t.data_ptr() % TMA_ALIGN_BYTES == 0)


def _aligned_empty(shape: torch.Size, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """An uninitialised (rows, cols) view whose rows start at 16-byte aligned offsets."""
    rows, cols = shape
    per_row = TMA_ALIGN_BYTES // dtype.itemsize
    return torch.empty((rows, -(-cols // per_row) * per_row), dtype=dtype, device=device)[:, :cols]


def _tma_ready(t: torch.Tensor) -> torch.Tensor:
    """`t` itself when TMA can address it, else an aligned copy."""
    if _tma_addressable(t):
        return t
    staged = _aligned_empty(t.shape, t.dtype, t.device)
    staged.copy_(t)
    return staged
