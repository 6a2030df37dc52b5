"""Torch-facing functions: validate tensors, choose a configuration, build TMA descriptors, launch."""

import os
from dataclasses import dataclass
from functools import cache

import torch

from tilepipe.debug import debug_requested
from tilepipe.launch import (TMA_ALIGN_BYTES, FastLauncher, LauncherCache, LaunchPlan, TmaOperand,
                             launch_hooks_active)
from tilepipe.storage import Part

_GL_DTYPES = {torch.bfloat16: "bf16", torch.float16: "fp16", torch.float32: "fp32", torch.float8_e4m3fn: "fp8e4nv",
              torch.float8_e5m2: "fp8e5"}
"""Gluon's names of the dtypes the kernels read and write."""
INPUT_DTYPES = (torch.bfloat16, torch.float16)
OUTPUT_DTYPES = (torch.bfloat16, torch.float16, torch.float32)


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
MEDIUM_FP32_SOURCE = MatmulConfig(128, 128, 64, stages=3)  # a 16-bit D with fp32 C: C needs its own 64 KiB stage
SMALL = MatmulConfig(64, 128, 64, stages=6, num_warps=4)  # one wgmma warpgroup
FP32_SOURCE_CONFIGS = (MEDIUM_FP32_SOURCE, SMALL)
MIN_WAVE_EFFICIENCY = 0.75
SCHEDULERS = ("static", "dynamic", "streamk")
STREAMK_MIN_GAIN = 1.05
"""schedule_for picks stream-K where the static schedule is predicted at least this much slower."""
STREAMK_FIXUP_US = 10.0
"""What stream-K's partial tiles add to a launch over an even split of the k-steps: ~8 us with the per-warp protocol
(H200 A/B: 62.3 against 53.3 us without the fixup at 133 tiles, 36.9 against 29.2 at 2048^3; docs/perf-log.md row
14), rounded up; it was 15-21 us on the H100 with the per-thread one (scheduler-h100-v5.json)."""
SECTOR_BYTES, LINE_BYTES = 32, 128
RESTAGE_GAIN = 0.25
"""What rows off 32-byte sectors cost a GEMM whose A and B both have them, as a share of its aligned time: H100,
K = 3000 and 1000, 20-50% (docs/perf-log.md rows 17-18 and 22); the low side, so restaging errs towards not copying."""
COPY_BYTES_PER_US = 2.5e6
"""What the restaging copy moves, reads plus writes (~2.5 TB/s on an H100)."""
SM_FLOPS = 700e12 / 132
"""One SM's share of the H100's sustained bf16 rate (about 700 TFLOP/s at 8192^3), to turn a tile into microseconds."""


@cache
def choose_config(M: int, N: int, out_dtype: torch.dtype, sms: int,
                  candidates: tuple[MatmulConfig, ...] | None = None) -> MatmulConfig:
    """The largest tile whose persistent waves keep at least 75% of the SMs busy, else the best-filled one.

    Wave efficiency = tiles / (SMs x waves): 1024^3 has 32 tiles of 128x256 on 132 SMs (24%) but 128 of 64x128.
    `candidates` (largest first) replaces the default tiles: for an fp32 C with a 16-bit D (FP32_SOURCE_CONFIGS),
    or for other kernels (e.g. FP8).
    """
    candidates = candidates or default_configs(out_dtype)

    def efficiency(cfg: MatmulConfig) -> float:
        tiles = _tiles(M, N, cfg)
        return tiles / (-(-tiles // sms) * sms)

    return next((cfg for cfg in candidates if efficiency(cfg) >= MIN_WAVE_EFFICIENCY), max(candidates, key=efficiency))


def default_configs(out_dtype: torch.dtype) -> tuple[MatmulConfig, ...]:
    """The tiles matmul chooses from, largest first."""
    return (MEDIUM, SMALL) if out_dtype == torch.float32 else (LARGE_16BIT, MEDIUM, SMALL)


def schedule_for(M: int, N: int, K: int, cfg: MatmulConfig, sms: int) -> str:
    """The tile scheduler matmul uses when not told (tilepipe/scheduler.py): stream-K with `cfg`'s tiles where an even
    split of the k-steps plus its fixup (STREAMK_FIXUP_US) is predicted STREAMK_MIN_GAIN faster than whole tiles, in
    waves, of `cfg` or of MEDIUM (its wave count may be lower), else static.

    Predictions count full-rate tile times (SM_FLOPS); SMALL tiles are left out of the comparison since they run
    well below that rate (64x128 measured 0.83 of it at 896x4864x4096, where stream-K won). A partial wave of fewer
    tiles than SMs stays static (smaller tiles fill it without a fixup). The dynamic scheduler is never picked: with
    equal tiles it cannot beat the static order (docs/scheduler.md)."""
    tiles = _tiles(M, N, cfg)
    if tiles <= sms or tiles % sms == 0:
        return "static"
    whole = min(-(-_tiles(M, N, c) // sms) * _tile_us(c, K) for c in (cfg, MEDIUM))
    split = tiles / sms * _tile_us(cfg, K) + STREAMK_FIXUP_US
    return "streamk" if whole >= STREAMK_MIN_GAIN * split else "static"


def _tiles(M: int, N: int, cfg: MatmulConfig) -> int:
    return -(-M // cfg.block_m) * -(-N // cfg.block_n)


def _tile_us(cfg: MatmulConfig, K: int) -> float:
    """One tile's time at the full rate of an SM."""
    return 2.0 * cfg.block_m * cfg.block_n * K / SM_FLOPS * 1e6


def matmul(a: torch.Tensor, b: torch.Tensor, *, out: torch.Tensor | None = None,
           out_dtype: torch.dtype | None = None, c: torch.Tensor | None = None, alpha: float = 1.0,
           beta: float = 0.0, config: MatmulConfig | None = None, scheduler: str | None = None,
           debug: bool | None = None, trace: str | os.PathLike | None = None) -> torch.Tensor:
    """D = alpha * (a @ b) + beta * c on a Hopper GPU; a is (M, K), b is (K, N): row-major, or a transposed (N, K)
    K-major tensor.

    Inputs are bf16 or fp16 (both the same); D is bf16, fp16 or fp32 (default: the input dtype), written into
    `out` when given. `c` (M x N, D's dtype or fp32) is read only when beta != 0, as in torch.addmm; it may be
    `out` itself (an in-place residual). A `c` that is one row broadcast down the columns (stride 0 along M,
    e.g. `bias.expand(M, N)`) is read as a per-column bias: N values, no C tiles. `config` overrides the tile
    configuration (default: the autotuned one if `tilepipe.autotune` cached one for this shape, else a
    heuristic). `scheduler` ("static", "dynamic" or "streamk", tilepipe/scheduler.py) picks the tile scheduler;
    by default schedule_for picks per shape. Raises TypeError / ValueError naming the argument for bad input.
    TMA needs unit inner strides and 16-byte aligned rows; a tensor without them (an inner size that is not a
    multiple of 16 bytes, a strided or broadcast view) is staged through an aligned copy, which costs one extra
    pass over that tensor but is never wrong. A and B whose rows start 16 bytes off a 32-byte sector (K = 8 mod 16)
    cost TMA about twice the L2 traffic; large GEMMs copy them to aligned rows first (`_sector_aligned`). Under
    torch.compile this calls the custom op tilepipe::matmul.
    Debug mode (`debug=True`, or TILEPIPE_DEBUG=1 when `debug` is None) waits for the kernel and, if its roles stop
    making progress, names the stuck roles and ends the process (tilepipe.debug). `trace=PATH` writes the launch's
    pipeline timeline to PATH (Chrome/Perfetto JSON) and PATH with .png (tilepipe.timeline).
    """
    if torch.compiler.is_compiling():
        return _traced_matmul(a, b, out, out_dtype, c, alpha, beta, config)
    if scheduler is not None and scheduler not in SCHEDULERS:
        raise ValueError(f"scheduler must be one of {SCHEDULERS} or None, got {scheduler!r}")
    probe = _probe_request(debug, trace)
    if probe is not None:
        return _matmul(a, b, out, out_dtype, c, alpha, beta, config, scheduler, None, probe)
    try:  # a repeated call geometry skips validation and configuration: see _Plan
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
            key: tuple | None, probe: str | os.PathLike | bool | None = None) -> torch.Tensor:
    """matmul with every check, staging copies where TMA needs them, and a _Plan for the call's geometry (none for
    debug and trace launches: matmul() sends those here with no key)."""
    M, N, K, out_dtype, c, alpha, beta = check_matmul(a, b, out, out_dtype, c, alpha, beta, config)
    if out is None:
        out = torch.empty((M, N), device=a.device, dtype=out_dtype)
    else:
        _check_no_overlap(out, a, b, c)
    bias = None
    if c is not None and c is not out and _is_column_bias(c):
        bias, c = c[0], None
    if M == 0 or N == 0:
        return out
    if K == 0:
        residual = c if c is not None else bias
        return out.copy_(residual * beta) if residual is not None else out.zero_()
    b_kmajor = b.stride(0) == 1 and b.stride(1) != 1
    target = out if _tma_addressable(out) else _aligned_empty(out.shape, out.dtype, out.device)
    source = None if c is None else (target if c is out else _tma_ready(c))
    if source is target and target is not out:
        target.copy_(out)
    device = _device_index(a)
    own_source = source is not None and source.dtype != out_dtype
    cfg = config or config_for(M, N, K, a.dtype, out_dtype, b_kmajor, device, own_source)
    schedule = scheduler or schedule_for(M, N, K, cfg, _sm_count(device))
    a_view, b_view = _sector_aligned(_tma_ready(a), _tma_ready(b.t() if b_kmajor else b), M, N, K, cfg, device)
    launcher, grid, args = _launch(a_view, b_view, target, source, bias, alpha, beta, b_kmajor, device, cfg, schedule,
                                   probe)
    if target is not out:
        out.copy_(target)
    elif launcher is not None and key is not None and a_view is a and (
            b_view.data_ptr() == b.data_ptr() and (source is None or source is c)):
        stream = None if schedule == "static" else torch._C._cuda_getCurrentRawStream(device)
        slots = (0, 1, 2, 3, 4) if bias is not None else (0, 1, 2, 3)  # A, B, D, C descriptors[, bias pointer]
        _PLANS.remember(key, _Plan(LaunchPlan(launcher, grid, device, args, slots, stream), out,
                                   c is not None and c is not out, bias is not None))
    return out


def check_matmul(a: torch.Tensor, b: torch.Tensor, out: torch.Tensor | None, out_dtype: torch.dtype | None,
                 c: torch.Tensor | None, alpha: float, beta: float, config: MatmulConfig | None = None
                 ) -> tuple[int, int, int, torch.dtype, torch.Tensor | None, float, float]:
    """Every check of matmul's arguments that needs no memory address (so fake tensors pass through it too):
    (M, N, K, out dtype, c or None when beta is 0, alpha, beta)."""
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
    if out is not None:
        _check_result_shaped(out, "out", (M, N), a.device)
    if config is not None and not isinstance(config, MatmulConfig):
        raise TypeError(f"config must be a MatmulConfig, got {type(config).__name__}")
    return M, N, K, out_dtype, c, alpha, beta


def _check_no_overlap(out: torch.Tensor, a: torch.Tensor, b: torch.Tensor, c: torch.Tensor | None) -> None:
    for name, t in (("a", a), ("b", b)) + ((("c", c), ) if c is not None and c is not out else ()):
        if _overlaps(out, t):
            raise ValueError(f"out must not share memory with {name}" + (" (except by being c itself)"
                                                                         if name == "c" else ""))


def _traced_matmul(a: torch.Tensor, b: torch.Tensor, out: torch.Tensor | None, out_dtype: torch.dtype | None,
                   c: torch.Tensor | None, alpha: float, beta: float, config: MatmulConfig | None) -> torch.Tensor:
    """matmul under torch.compile: the custom ops of tilepipe.library, which the compiler treats as opaque."""
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


def config_for(M: int, N: int, K: int, dtype: torch.dtype, out_dtype: torch.dtype, b_kmajor: bool,
               device: int, own_source: bool = False) -> MatmulConfig:
    """The configuration matmul uses: the one tilepipe.autotune cached for this problem on this GPU, else the
    largest tile where schedule_for runs it under stream-K, else the wave-efficiency heuristic. An fp32 C with a
    16-bit D (`own_source`) needs its own smaller tiles."""
    from tilepipe.tuning import cached_config

    cached = None if own_source else cached_config(M, N, K, dtype, out_dtype, b_kmajor, device)
    if cached is not None:
        return cached
    sms = _sm_count(device)
    candidates = FP32_SOURCE_CONFIGS if own_source else default_configs(out_dtype)
    if schedule_for(M, N, K, candidates[0], sms) == "streamk":
        return candidates[0]
    return choose_config(M, N, out_dtype, sms, candidates)


def addmm_residual(input: torch.Tensor, mat1: torch.Tensor, mat2: torch.Tensor) -> torch.Tensor:
    """addmm's checks: `input` expanded to the (M, N) residual C."""
    _check_operands(mat1, mat2)
    if not isinstance(input, torch.Tensor):
        raise TypeError(f"input must be a torch.Tensor, got {type(input).__name__}")
    if input.dtype != mat1.dtype:
        raise TypeError(f"input must have mat1's dtype {mat1.dtype}, got {input.dtype}")
    shape = (mat1.shape[0], mat2.shape[1])
    try:
        return input.expand(shape)
    except RuntimeError:
        raise ValueError(f"input of shape {tuple(input.shape)} does not broadcast to {shape}") from None


def _probe_request(debug: bool | None, trace: str | os.PathLike | None) -> str | os.PathLike | bool | None:
    """What the launch records: a trace path, True for debug mode, or None (the normal kernel)."""
    if trace is not None:
        if not isinstance(trace, (str, os.PathLike)):
            raise TypeError(f"trace must be a path, got {type(trace).__name__}")
        if debug:
            raise ValueError("debug and trace are separate modes: pass one of them")
        return trace
    return True if debug_requested(debug) else None


def _launch(a: torch.Tensor, b: torch.Tensor, out: torch.Tensor, c: torch.Tensor | None, bias: torch.Tensor | None,
            alpha: float, beta: float, b_kmajor: bool, device: int, cfg: MatmulConfig, schedule: str = "static",
            probe: str | os.PathLike | bool | None = None) -> tuple[FastLauncher | None, tuple[int, int, int], tuple]:
    """Launch the GEMM: the first call per configuration through Triton's JIT, later ones through FastLauncher.
    Returns the fast launcher (None if there is none yet), the grid and the kernel's arguments. Debug and trace
    launches (`probe`, from _probe_request) always go through the JIT, to their own binaries."""
    M, K = a.shape
    N = out.shape[1]
    has_c, has_bias = c is not None, bias is not None
    source = c if has_c else out  # without C the kernel never reads its descriptor
    scalars = (M, N, K, alpha, beta, cfg.stages, cfg.c_stages, cfg.group_m, b_kmajor, has_c, has_bias, schedule)
    grid = persistent_grid(M, N, cfg, device, schedule)
    stream = torch._C._cuda_getCurrentRawStream(device)
    workspace = scheduler_workspace(device, stream) if schedule != "static" else None
    # the bias pointer and the workspace are never read without a bias or by the static scheduler: null ones keep
    # cached plans free of stale tensors
    args = (TmaOperand.of(a), TmaOperand.of(b), TmaOperand.of(out), TmaOperand.of(source),
            bias.data_ptr() if has_bias else 0, workspace.data_ptr() if workspace is not None else 0, *scalars, None, 0)
    key = (cfg, a.dtype, out.dtype, source.dtype, bias.dtype if has_bias else None, b_kmajor, has_c, schedule, device)
    launcher = _LAUNCHERS.launch(key, grid, stream, args) if probe is None else None
    if launcher is not None:
        return launcher, grid, args
    from tilepipe.kernels.matmul import matmul_kernel

    b_block = (cfg.block_n, cfg.block_k) if b_kmajor else (cfg.block_k, cfg.block_n)
    c_block = (cfg.block_m, cfg.block_n)
    jit_args = (tensor_descriptor(a, (cfg.block_m, cfg.block_k)), tensor_descriptor(b, b_block),
                tensor_descriptor(out, c_block), tensor_descriptor(source, c_block), bias if has_bias else out,
                workspace if workspace is not None else out, *scalars)  # unused pointers: any tensor types them
    if probe is not None:
        _launch_probed(lambda buf, mode: matmul_kernel[grid](*jit_args, buf, mode, num_warps=cfg.num_warps,
                                                             enable_fp_fusion=True),
                       grid[0], probe, a.device)
        return None, grid, args
    _LAUNCHERS.remember(key, matmul_kernel[grid](*jit_args, num_warps=cfg.num_warps, enable_fp_fusion=True))
    return None, grid, args


def persistent_grid(M: int, N: int, cfg: MatmulConfig, device: int, schedule: str = "static") -> tuple[int, int, int]:
    """One program per SM, or per tile when there are fewer tiles than SMs (stream-K splits k-steps: one per SM)."""
    sms = _sm_count(device)
    return (sms if schedule == "streamk" else min(_tiles(M, N, cfg), sms)), 1, 1


def tensor_descriptor(t: torch.Tensor, block: tuple[int, int]):
    """A TMA descriptor of `t` in `block` tiles, with the NVMMA layout the kernels' storage gives such a tile."""
    from triton.experimental.gluon.nvidia.hopper import TensorDescriptor

    return TensorDescriptor(t, t.shape, t.stride(), block, _layout(block, _GL_DTYPES[t.dtype]))


def _launch_probed(launch, programs: int, probe: str | os.PathLike | bool, device: torch.device) -> None:
    """`launch(probe_buf, PROBE)` in debug mode (under the hang watchdog) or trace mode (then saves the timeline)."""
    from tilepipe import debug, probe as probes, timeline

    if probe is True:
        records = debug.progress_buffer(programs)
        debug.watch("matmul_kernel", records, lambda: launch(records, probes.DEBUG))
        return
    events = timeline.events_for(programs)
    buffer = timeline.trace_buffer(programs, events, device)
    launch(buffer, events)
    timeline.save(buffer, probe, "matmul_kernel")


_LAUNCHERS = LauncherCache()
"""GEMM launchers by (config, dtypes, B layout, epilogue, scheduler, device): everything the binary is specialized
on, since matmul_kernel does not specialize on M, N and K and the descriptors' types follow from the config and
dtypes.
Without one (Triton internals not as expected) every call goes through the JIT."""


class CallPlan:
    """A call geometry that passed every check and needed no staging copy (the key in its op's plan table), with its
    launch (`LaunchPlan`): a repeated call reads only its tensors' addresses. Subclasses say which address fills each
    tensor slot of the kernel and which inputs the output must not overlap; that check runs once per new address
    tuple."""

    __slots__ = ("launch", "out_shape", "out_dtype", "out_device")

    def __init__(self, launch: LaunchPlan, out: torch.Tensor) -> None:
        self.launch, self.out_dtype, self.out_device = launch, out.dtype, out.device
        self.out_shape = tuple(out.shape)  # torch.empty parses a tuple faster than a torch.Size

    def run(self, inputs: tuple, out: torch.Tensor | None) -> torch.Tensor | None:
        """Launch for these tensors and return the output (allocated when `out` is None), or None when the full path
        must run instead: an unaligned TMA address, another stream than the workspace's, or a Triton launch hook."""
        launch = self.launch
        stream = torch._C._cuda_getCurrentRawStream(launch.device)
        if launch_hooks_active() or launch.stream not in (None, stream):
            return None
        fresh = out is None
        if fresh:
            out = torch.empty(self.out_shape, dtype=self.out_dtype, device=self.out_device)
        addresses = self.addresses(inputs, out)
        bound = launch.bound.get(addresses)
        if bound is None:
            if not fresh:
                _check_no_overlap(out, *self.overlapping(inputs))
            bound = launch.bind(addresses)
            if bound is None:
                return None
        launch.launcher.raw_launch(*launch.grid, stream, *bound)
        return out

    def addresses(self, inputs: tuple, out: torch.Tensor) -> tuple[int, ...]:
        raise NotImplementedError

    def overlapping(self, inputs: tuple) -> tuple:
        """(a, b, c or None): the inputs `out` must not overlap."""
        raise NotImplementedError


class _Plan(CallPlan):
    """matmul's plan: inputs (a, b, c). The C descriptor reads `out` when there is no separate C; with a bias row
    (`bias`) the call's `c` is that row broadcast, and its address is the bias pointer argument."""

    __slots__ = ("separate_c", "bias")

    def __init__(self, launch: LaunchPlan, out: torch.Tensor, separate_c: bool, bias: bool) -> None:
        super().__init__(launch, out)
        self.separate_c, self.bias = separate_c, bias

    def addresses(self, inputs: tuple, out: torch.Tensor) -> tuple[int, ...]:
        a, b, c = inputs
        d = out.data_ptr()
        addresses = (a.data_ptr(), b.data_ptr(), d, c.data_ptr() if self.separate_c else d)
        return addresses + (c.data_ptr(), ) if self.bias else addresses

    def overlapping(self, inputs: tuple) -> tuple:
        a, b, c = inputs
        return a, b, c if self.separate_c or self.bias else None


class PlanCache(dict):
    """CallPlans by call geometry; cleared when it reaches LIMIT entries (a program seldom has that many)."""

    LIMIT = 1024

    def remember(self, key: tuple, plan: CallPlan) -> None:
        if len(self) >= self.LIMIT:
            self.clear()
        self[key] = plan


_PLANS = PlanCache()


def forget_plans() -> None:
    """Drop every cached call plan, so the next calls choose their configuration again (after autotuning)."""
    _PLANS.clear()


_WORKSPACES: dict[tuple[int, int], torch.Tensor] = {}


def scheduler_workspace(device: int, stream: int) -> torch.Tensor:
    """The int32 workspace of the dynamic and stream-K schedulers for launches on `stream`: the dynamic scheduler's
    tile counter is word 0; stream-K uses FLAG_WORDS flags and then one fp32 partial tile (up to 128 x 256) per SM
    (tilepipe/partials.py), 17 MB on an H100. Zeroed once, then left at zero by every launch. One per stream, since
    launches that share it must not overlap. Created while a CUDA graph is being captured, its zeroing is captured
    too (harmless: zero is its resting value)."""
    workspace = _WORKSPACES.get((device, stream))
    if workspace is None:
        from tilepipe.partials import FLAG_WORDS

        sms = _sm_count(device)
        if sms > FLAG_WORDS.value:
            raise RuntimeError(f"stream-K has flags for {FLAG_WORDS.value} programs; this GPU has {sms} SMs")
        words = FLAG_WORDS.value + sms * LARGE_16BIT.block_m * LARGE_16BIT.block_n
        workspace = _WORKSPACES[device, stream] = torch.zeros(words, dtype=torch.int32, device=f"cuda:{device}")
    return workspace


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
    if c.dtype != dtype and not (c.dtype == torch.float32 and dtype.itemsize == 2):
        raise TypeError(f"c must have the output dtype {dtype} or float32, got {c.dtype}")


def _is_column_bias(c: torch.Tensor) -> bool:
    """One row broadcast to every row (stride 0 along M) and contiguous along N: a per-column bias."""
    return c.stride(0) == 0 and (c.stride(1) == 1 or c.shape[1] == 1)


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
    """An uninitialised (rows, cols) view whose rows start on 128-byte lines (TMA needs 16 bytes; whole lines also
    keep its loads off partial sectors)."""
    rows, cols = shape
    per_line = LINE_BYTES // dtype.itemsize
    return torch.empty((rows, -(-cols // per_line) * per_line), dtype=dtype, device=device)[:, :cols]


def _off_sectors(t: torch.Tensor) -> bool:
    """Rows that start off 32-byte L2 sectors (TMA then pulls about twice the sectors: docs/perf-log.md rows 17-18),
    of a tensor the restaging copy can take (16-bit, at least its BLOCK_C columns)."""
    from tilepipe.kernels.restage import BLOCK_C

    return (((t.stride(0) * t.element_size()) % SECTOR_BYTES != 0 or t.data_ptr() % SECTOR_BYTES != 0)
            and t.element_size() == 2 and t.shape[1] >= BLOCK_C and t.shape[0] > 0)


def _sector_aligned(a: torch.Tensor, b: torch.Tensor, M: int, N: int, K: int, cfg: MatmulConfig,
                    device: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The GEMM's A and B (as TMA reads them), with those whose rows start off sectors copied to 128-byte aligned
    rows where the model says the GEMM saves more than the copy costs: RESTAGE_GAIN of its predicted time (in
    waves of full-rate tiles), scaled by the share of the tile loads those operands make, against COPY_BYTES_PER_US
    for reading and writing them."""
    off = [_off_sectors(a), _off_sectors(b)]
    if not any(off):
        return a, b
    share = (cfg.block_m * off[0] + cfg.block_n * off[1]) / (cfg.block_m + cfg.block_n)
    gemm_us = -(-_tiles(M, N, cfg) // _sm_count(device)) * _tile_us(cfg, K)
    copy_us = sum(2 * t.numel() * t.element_size() for t, o in zip((a, b), off) if o) / COPY_BYTES_PER_US
    if RESTAGE_GAIN * share * gemm_us <= copy_us:
        return a, b
    return _restaged(a, device) if off[0] else a, _restaged(b, device) if off[1] else b


def _restaged(t: torch.Tensor, device: int) -> torch.Tensor:
    """A copy of `t` (on `device`) whose rows start on 128-byte lines (tilepipe/kernels/restage.py)."""
    from tilepipe.kernels.restage import BLOCK_C, BLOCK_R, restage_rows_kernel

    rows, cols = t.shape
    staged = _aligned_empty(t.shape, t.dtype, t.device)
    grid = (-(-rows // BLOCK_R), -(-cols // BLOCK_C), 1)
    args = (t.data_ptr(), staged.data_ptr(), rows, cols, t.stride(0), staged.stride(0), BLOCK_R, BLOCK_C)
    key = (t.dtype, device)
    if _RESTAGERS.launch(key, grid, torch._C._cuda_getCurrentRawStream(device), args) is None:
        _RESTAGERS.remember(key, restage_rows_kernel[grid](t, staged, *args[2:], num_warps=4,
                                                           enable_fp_fusion=True))
    return staged


_RESTAGERS = LauncherCache()
"""The restaging copy's launchers by dtype and device (sizes and strides are not specialized)."""


def _tma_ready(t: torch.Tensor) -> torch.Tensor:
    """`t` itself when TMA can address it, else an aligned copy."""
    if _tma_addressable(t):
        return t
    staged = _aligned_empty(t.shape, t.dtype, t.device)
    staged.copy_(t)
    return staged
