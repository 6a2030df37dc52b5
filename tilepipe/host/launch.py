"""Low-overhead launches of a compiled Gluon kernel whose arguments include TMA descriptors.

Triton's own launch path (`kernel.run`: argument binding and specialization, the `TensorDescriptor`
objects, and one `cuTensorMapEncodeTiled` per descriptor on every launch) costs far more host time than a small
GEMM takes on the GPU. `FastLauncher` calls Triton's shared C launcher directly and caches each encoded tensor
map by what it encodes (address, shape, strides, box, dtype), so a repeated launch is a dictionary lookup per
operand plus the C call. A tensor map holds no reference to its tensor; reusing one for new memory with the same
address and geometry is exactly right, since that is all it encodes.

This reaches into triton 3.9's launcher (`CudaLauncher`: one C `launch` for every kernel, taking the kernel's
argument annotations and signature and its arguments as one tuple; `make_tensordesc_arg` for the tensor map
layout); `FastLauncher.create` returns None when the compiled kernel does not look as expected, and callers then
use `kernel.run`.
"""

import os
from importlib import import_module
from collections import OrderedDict
from contextlib import contextmanager
from functools import cache
from typing import NamedTuple

import torch

from tilepipe.host.configs import MatmulConfig, schedule_programs
from tilepipe.host.device import GL_DTYPES, nvmma_layout, sm_count
from tilepipe.kernels.spec import BUILD_OPTIONS

_MAP_CACHE_SIZE = 4096
_BOUND_PER_PLAN = 64
TMA_ALIGN_BYTES = 16
"""A TMA descriptor's base address and row strides must be multiples of this."""


def check_tma_starts(tensors: dict[str, torch.Tensor]) -> None:
    """ValueError naming the first of `tensors` (by argument name) whose address is off TMA_ALIGN_BYTES: TMA reads or
    writes it from there."""
    for name, t in tensors.items():
        if t.data_ptr() % TMA_ALIGN_BYTES:
            raise ValueError(f"{name} must start on {TMA_ALIGN_BYTES} bytes (TMA reads and writes it), got address "
                             f"{t.data_ptr():#x}")


class TmaOperand(NamedTuple):
    """What a TMA descriptor parameter encodes of its tensor (the box comes from the compiled kernel's metadata)."""
    address: int
    shape: tuple[int, ...]
    strides: tuple[int, ...]

    @classmethod
    def of(cls, t: torch.Tensor) -> "TmaOperand":
        return cls(t.data_ptr(), tuple(t.shape), t.stride())


class FastLauncher:
    """Launch one compiled kernel straight through its C launcher, with cached TMA descriptor encodings."""

    def __init__(self, kernel, raw_launch, metas: list[dict]) -> None:
        self.kernel, self.raw_launch, self.metas = kernel, raw_launch, metas
        self.maps: OrderedDict[tuple, object] = OrderedDict()
        launcher = kernel._run
        # function, cooperative, pdl, metadata; no launch metadata or hooks (see launch_hooks_active); the global
        # scratch (device-built tensor maps: `scratch`) filled in per launch, no profile scratch (create refuses
        # kernels that need one); then how the C launcher reads the argument tuple
        self.prefix = (kernel.function, launcher.launch_cooperative_grid, launcher.launch_pdl,
                       kernel.packed_metadata, None, None, None, None, None, launcher.arg_annotations,
                       launcher.kernel_signature)
        self.scratch = launcher.global_scratch_size * launcher.num_ctas  # bytes a program

    @classmethod
    def create(cls, kernel) -> "FastLauncher | None":
        """A fast launcher for `kernel` (a CompiledKernel launched once), or None if triton's internals differ."""
        try:
            from triton.runtime import driver

            kernel._init_handles()
            launcher = kernel._run
            raw_launch = driver.active.utils.launch  # the C launcher every kernel's CudaLauncher calls
            metas = list(getattr(kernel.metadata, "tensordesc_meta", None) or ())  # none without TMA descriptors
            launcher.arg_annotations, launcher.kernel_signature  # the 3.9 ABI's per-kernel parts must exist
            launcher.global_scratch_size, launcher.num_ctas  # the global scratch a program takes (__init__)
            extras = (launcher.profile_scratch_size, getattr(launcher, "gsan_enabled", False))
        except (AttributeError, ValueError, TypeError):
            return None
        if extras != (0, False) or not callable(raw_launch):  # profile scratch, sanitizer: kernel.run
            return None  # (a cluster launch needs nothing more: the C launcher reads num_ctas from the metadata)
        return cls(kernel, raw_launch, metas)

    def __call__(self, grid: tuple[int, int, int], stream: int, args: tuple) -> None:
        """Launch with `args` in kernel order (TmaOperand entries for the descriptor parameters)."""
        bound = self.bind(args)
        if self.scratch:  # this stream's global scratch, a slice a program
            bound = (*bound[:7], global_scratch(self.scratch * grid[0] * grid[1] * grid[2], 0, stream), *bound[8:])
        self.raw_launch(*grid, stream, *bound)

    def bind(self, args: tuple) -> tuple:
        """The C launcher's arguments after grid and stream: the prefix, then the kernel arguments as one tuple, in
        which a TmaOperand becomes its encoded tensor map, shape and strides. The result can be kept and launched
        again through raw_launch while the operands' addresses stay valid."""
        flat, operand = [], 0
        for arg in args:
            if isinstance(arg, TmaOperand):
                flat.append(self._tensor_map(*arg, operand))
                flat.extend(arg.shape)
                flat.extend(arg.strides)
                operand += 1
            else:
                flat.append(arg)
        return (*self.prefix, tuple(flat))

    def _tensor_map(self, address: int, shape: tuple, strides: tuple, operand: int):
        """The encoded tensor map of this geometry for descriptor parameter `operand`, with the kernel's box (the
        hardware box: Triton splits a tile wider than the swizzle into several boxes)."""
        key = (address, shape, strides, operand)
        tensor_map = self.maps.get(key)
        if tensor_map is None:
            from triton.backends.nvidia.driver import TMA_DTYPE_DEVICE_TO_HOST
            from triton.runtime import driver

            meta = self.metas[operand]
            tensor_map = driver.active.utils.fill_tma_descriptor_tiled(address, meta["swizzle"], meta["elem_size"],
                                                                 TMA_DTYPE_DEVICE_TO_HOST[meta["elem_type"]],
                                                                 meta["block_size"], list(shape), list(strides), 0)
            self.maps[key] = tensor_map
            if len(self.maps) > _MAP_CACHE_SIZE:
                self.maps.popitem(last=False)
        return tensor_map


def global_scratch(nbytes: int, alignment: int, stream: int) -> torch.Tensor:
    """`nbytes` of global scratch for launches on `stream` (on the current device; torch's blocks are aligned beyond
    any `alignment` Triton asks): where a kernel builds its tensor maps (pipeline/descriptors.py). One per stream and
    size, kept: launches that share it must not overlap, and CUDA graphs keep its address. Triton's allocator
    signature, so its JIT launches take it too (jit_scratch)."""
    key = (stream, nbytes)
    buffer = _SCRATCH.get(key)
    if buffer is None:
        buffer = _SCRATCH[key] = torch.empty(nbytes, dtype=torch.uint8, device="cuda")
    return buffer


_SCRATCH: dict[tuple[int, int], torch.Tensor] = {}


@contextmanager
def jit_scratch():
    """Triton's launches inside take their global scratch from global_scratch (a user's allocator is left as it was
    outside)."""
    from triton.runtime import _allocation

    token = _allocation._allocator.set(global_scratch)
    try:
        yield
    finally:
        _allocation._allocator.reset(token)


class LaunchPlan:
    """One call geometry's launch: a fast launcher, its grid, its kernel arguments, and the argument slots that carry
    the call's tensors (TMA operands, or plain pointers). `bind` fills the slots for a tuple of tensor addresses once;
    `bound` keeps the result, so a repeated tuple costs a dictionary lookup and the C call. A kernel with a
    per-stream workspace is planned for that `stream` only."""

    __slots__ = ("launcher", "grid", "device", "args", "slots", "stream", "bound")

    def __init__(self, launcher: FastLauncher, grid: tuple[int, int, int], device: int, args: tuple,
                 slots: tuple[int, ...], stream: int | None = None) -> None:
        self.launcher, self.grid, self.device, self.args, self.slots = launcher, grid, device, args, slots
        self.stream = stream
        self.bound: dict[tuple[int, ...], tuple] = {}

    def bind(self, addresses: tuple[int, ...]) -> tuple | None:
        """The C launcher's arguments for these tensor addresses (one per slot), kept in `bound`; None where a TMA
        address is not 16-byte aligned (the call must take the full path)."""
        args = list(self.args)
        for slot, address in zip(self.slots, addresses):
            if isinstance(args[slot], TmaOperand):
                if address % TMA_ALIGN_BYTES:
                    return None
                args[slot] = args[slot]._replace(address=address)
            else:
                args[slot] = address
        if len(self.bound) >= _BOUND_PER_PLAN:
            self.bound.clear()
        bound = self.bound[addresses] = self.launcher.bind(tuple(args))
        return bound


def launch_hooks_active() -> bool:
    """Whether a Triton launch hook (e.g. a profiler) is installed: then launches must go through kernel.run."""
    runtime = _triton_runtime()
    # triton keeps each hook as a HookChain, empty by default
    return bool(runtime.launch_enter_hook.calls or runtime.launch_exit_hook.calls)


@cache
def _triton_runtime():
    """triton.knobs.runtime, imported on first use (importing triton takes a while)."""
    from triton import knobs

    return knobs.runtime


class LauncherCache(dict):
    """FastLaunchers by everything a kernel's binary is specialized on: the first launch of a key goes through
    Triton's JIT (and `remember`s its kernel), later ones through the cached launcher."""

    def launch(self, key: tuple, grid: tuple[int, int, int], stream: int, args: tuple) -> FastLauncher | None:
        """Launch through the cached launcher of `key`; None (nothing launched) without one, or while a Triton
        launch hook wants the JIT path."""
        launcher = self.get(key)
        if launcher is None or launch_hooks_active():
            return None
        launcher(grid, stream, args)
        return launcher

    def remember(self, key: tuple, kernel) -> None:
        """Keep a fast launcher of `kernel` (a CompiledKernel just launched) for `key`, where Triton allows one."""
        fast = FastLauncher.create(kernel)
        if fast is not None:
            self[key] = fast


class GemmLaunch(NamedTuple):
    """One launch of the 16-bit GEMM (host/plans.py: plan_gemm): the binary's key, the grid, the stream and the fast
    launcher's arguments (for `device`), and what Triton's JIT takes instead on a binary's first launch: the operand tensors
    (the kernel's A and B, D, C: D where there is none), the bias row and scheduler workspace (or None), the
    scalars, stream-K's partial tiles and the dynamic scheduler's ticket rows (or None), and the tile constexprs."""
    key: tuple
    grid: tuple[int, int, int]
    device: int
    stream: int
    args: tuple
    operands: tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]
    bias: torch.Tensor | None
    workspace: torch.Tensor | None
    scalars: tuple
    partials: torch.Tensor | None
    tickets: torch.Tensor | None
    tiling: dict
    cfg: MatmulConfig
    arch: str
    b_kmajor: bool


def launch_gemm(plan: GemmLaunch, probe: str | os.PathLike | bool | None = None) -> FastLauncher | None:
    """Launch the GEMM of `plan.arch` (matmul_kernel or its ping-pong form, or sm100_matmul_kernel, which takes the
    same arguments with D in sub-tile boxes): the first call per binary through Triton's JIT, later ones through its
    FastLauncher, which this returns (None when there is none yet). Debug and trace launches (`probe`: launch_probed)
    always go through the JIT, to their own binaries."""
    launcher = _GEMMS.launch(plan.key, plan.grid, plan.stream, plan.args) if probe is None else None
    if launcher is not None:
        return launcher
    from tilepipe.kernels.matmul import matmul_kernel, operand_blocks
    from tilepipe.kernels.matmul_pingpong import matmul_pingpong_kernel
    from tilepipe.kernels.sm100_matmul import sm100_matmul_kernel, sm100_operand_blocks

    cfg, grid = plan.cfg, plan.grid
    kernel, blocks = ((sm100_matmul_kernel, sm100_operand_blocks(cfg, plan.b_kmajor)) if plan.arch == "sm_100a" else
                      (matmul_pingpong_kernel if cfg.pingpong else matmul_kernel, operand_blocks(cfg, plan.b_kmajor)))
    first, second, out, source = plan.operands
    jit_args = (tensor_descriptor(first, *blocks["a"]), tensor_descriptor(second, *blocks["b"]),
                tensor_descriptor(out, *blocks["c"]), tensor_descriptor(source, *blocks["c"]),
                out if plan.bias is None else plan.bias, out if plan.workspace is None else plan.workspace,
                *plan.scalars)  # unused pointers: any tensor types them
    options = dict(num_warps=cfg.num_warps, num_ctas=cfg.cluster.num_ctas, **BUILD_OPTIONS)
    descs = dict(partial_desc=partial_descriptor(plan.partials, cfg, out.dtype),
                 ticket_desc=ticket_descriptor(plan.tickets), **plan.tiling)
    if probe is not None:
        launch_probed(lambda buf, mode: kernel[grid](*jit_args, buf, mode, **descs, **options),
                      grid[0], probe, first.device, cfg.cluster.num_ctas)
        return None
    _GEMMS.remember(plan.key, kernel[grid](*jit_args, **descs, **options))
    return None


class Fp8Launch(NamedTuple):
    """One launch of an FP8 GEMM (host/plans.py: plan_fp8_kernel): the kernel's name, the binary's key, the grid, the
    stream and the fast launcher's arguments (for `device`) with the slots of the call's tensors in them, and what
    Triton's JIT takes instead on a binary's first launch: the TMA operands (tensor, block, cga bases[, layout
    kind]), the pointer tensors, the scheduler workspace (or None), the scalars (the sm_90a kernels' last: stream-K's
    partial tiles as a TMA operand, `partials` the tensor it covers, or None)."""
    kernel: str
    key: tuple
    grid: tuple[int, int, int]
    device: int
    stream: int
    args: tuple
    slots: tuple[int, ...]
    tma: tuple[tuple, ...]
    pointers: tuple
    workspace: torch.Tensor | None
    scalars: tuple
    partials: torch.Tensor | None
    cfg: MatmulConfig


def launch_fp8(plan: Fp8Launch) -> FastLauncher | None:
    """Launch the FP8 kernel `plan.kernel` (kernels/matmul_fp8.py, matmul_fp8_blockwise.py, or the sm_100a
    sm100_matmul.py, sm100_blockwise.py, sm100_block_scaled.py): the first call per binary through Triton's JIT,
    later ones through its FastLauncher, which this returns (None when there is none yet)."""
    launcher = _FP8_GEMMS.launch(plan.key, plan.grid, plan.stream, plan.args)
    if launcher is not None:
        return launcher
    from tilepipe.kernels import matmul_fp8, matmul_fp8_blockwise, sm100_block_scaled, sm100_blockwise, sm100_matmul

    jit = {"scaled_matmul_kernel": matmul_fp8.scaled_matmul_kernel, "sm100_scaled_matmul_kernel":
           sm100_matmul.sm100_scaled_matmul_kernel, "blockwise_matmul_kernel":
           matmul_fp8_blockwise.blockwise_matmul_kernel,
           "sm100_blockwise_matmul_kernel": sm100_blockwise.sm100_blockwise_matmul_kernel,
           "sm100_block_scaled_kernel": sm100_block_scaled.sm100_block_scaled_kernel}[plan.kernel]
    cfg, out = plan.cfg, plan.tma[-1][0]
    scalars = (plan.scalars if plan.kernel.startswith("sm100") else
               plan.scalars[:-1] + (partial_descriptor(plan.partials, cfg, out.dtype), ))
    launched = jit[plan.grid](*(tensor_descriptor(*operand) for operand in plan.tma), *plan.pointers,
                              out if plan.workspace is None else plan.workspace,  # unread by static: any tensor
                              *scalars, num_warps=cfg.num_warps, num_ctas=cfg.cluster.num_ctas, **BUILD_OPTIONS)
    _FP8_GEMMS.remember(plan.key, launched)
    return None


class GroupedLaunch(NamedTuple):
    """One launch of a grouped GEMM kernel (plan_grouped, plan_grouped_fp8, plan_grouped_wgrad): the kernel
    ("module:name"), the binary's key, the grid, the stream and the fast launcher's arguments, and what Triton's JIT
    takes instead on a binary's first launch: the TMA operands (tensor, block[, cga bases]), then the kernel's other
    arguments in its order (pointers as tensors, scalars, constexprs), and its warps."""
    kernel: str
    key: tuple
    grid: tuple[int, int, int]
    stream: int
    args: tuple
    tma: tuple[tuple, ...]
    rest: tuple
    num_warps: int


def launch_grouped(plan: GroupedLaunch) -> None:
    """Launch a grouped GEMM kernel: the first call per binary (`plan.key`) through Triton's JIT, later ones through
    its FastLauncher."""
    cache = _GROUPED.get(plan.kernel)
    if cache is None:
        cache = _GROUPED[plan.kernel] = LauncherCache()
    if cache.launch(plan.key, plan.grid, plan.stream, plan.args) is not None:
        return
    module, name = plan.kernel.split(":")
    kernel = getattr(import_module(module), name)
    with jit_scratch():
        cache.remember(plan.key, kernel[plan.grid](*(tensor_descriptor(*operand) for operand in plan.tma),
                                                   *plan.rest, num_warps=plan.num_warps, **BUILD_OPTIONS))


_GROUPED: dict[str, LauncherCache] = {}
"""The grouped kernels' launchers, a cache per kernel, by everything its binary is specialized on (config, dtypes,
operand layouts, rows' layout, epilogue, device): not sizes, offs or scales."""


def persistent_grid(M: int, N: int, K: int, cfg: MatmulConfig, device: int, schedule: str = "static"
                    ) -> tuple[int, int, int]:
    """One program per SM (a cluster's program per cluster of SMs), or per tile when there are fewer tiles than
    that; stream-K: one per SM; split-K: tiles x splits; cluster launch control (sm_100a): one per tile, running
    programs take over pending ones (host/configs.py: schedule_programs)."""
    return schedule_programs(M, N, K, cfg, sm_count(device), schedule), 1, 1


def tensor_descriptor(t: torch.Tensor, block: tuple[int, ...], cga: tuple = (), kind: str = "tile"):
    """A TMA descriptor of `t` in `block` tiles, with the NVMMA layout the kernels' storage gives such a tile (in a
    cluster kernel: split or shared over the CTAs as `cga` says; `kind` "scales": a block-scale box's)."""
    from triton.experimental.gluon.nvidia.hopper import TensorDescriptor

    return TensorDescriptor(t, t.shape, t.stride(), block, nvmma_layout(block, GL_DTYPES[t.dtype], cga, kind))


_GEMMS = LauncherCache()
"""GEMM launchers by (config, dtypes, B layout, epilogue, kernel scheduler, device, target): everything the binary is
specialized on, since the GEMMs do not specialize on M, N and K and the descriptors' types follow from the config and
dtypes. Without one (Triton internals not as expected) every call goes through the JIT."""

_FP8_GEMMS = LauncherCache()
"""FP8 launchers by everything the binary is specialized on (kernel, config, dtypes, scaling, schedule, device)."""

_WORKSPACES: dict[tuple[int, int, int], torch.Tensor] = {}


def workspace_words(sms: int, cfg: MatmulConfig) -> int:
    """The int32 words of scheduler_workspace on `sms` SMs: FLAG_WORDS flags, one per CTA, then one fp32 block_m x
    block_n partial tile per SM. A cluster's program holds its CTAs' blocks and flags (slot p: tile_m x tile_n), and
    at most sms / num_ctas programs run, so clusters and single CTAs take the same words. The dynamic scheduler's
    counter (word 0) and, in a cluster, its ticket rows (schedulers/dynamic.py) fit in the same words."""
    from tilepipe.kernels.matmul import SCHEDULER_STAGES
    from tilepipe.pipeline.partials import FLAG_WORDS
    from tilepipe.schedulers.dynamic import TICKET_BASE, TICKET_WORDS, ticket_rows

    if sms > FLAG_WORDS.value:
        raise RuntimeError(f"stream-K has flags for {FLAG_WORDS.value} CTAs; this GPU has {sms} SMs")
    tickets = TICKET_BASE.value + ticket_rows(sms, SCHEDULER_STAGES) * TICKET_WORDS.value
    return max(FLAG_WORDS.value + sms * cfg.block_m * cfg.block_n, tickets)


def scheduler_workspace(device: int, stream: int, cfg: MatmulConfig) -> torch.Tensor:
    """The int32 workspace of the dynamic and stream-K schedulers for launches of `cfg`'s tiles on `stream`: the
    dynamic scheduler's tile counter is word 0; stream-K uses workspace_words (tilepipe/pipeline/partials.py), 17 MB
    for 128 x 256 on an H100. Zeroed once, then left at zero by every launch. One per stream, since launches that
    share it must not overlap, and per CTA block size, since cached plans keep its address. Created while a CUDA graph
    is being captured, its zeroing is captured too (harmless: zero is its resting value)."""
    key = (device, stream, cfg.block_m * cfg.block_n)
    workspace = _WORKSPACES.get(key)
    if workspace is None:
        words = workspace_words(sm_count(device), cfg)
        workspace = _WORKSPACES[key] = torch.zeros(words, dtype=torch.int32, device=f"cuda:{device}")
    return workspace


_PARTIALS: dict[tuple[int, int, int], tuple[TmaOperand, torch.Tensor]] = {}


def partial_tiles(workspace: torch.Tensor | None, cfg: MatmulConfig) -> tuple[TmaOperand | None, torch.Tensor | None]:
    """Stream-K's partial tiles in `workspace` (after its flags): a TMA operand and the fp32 tensor it covers, one
    tile of `cfg` per slot, for `partial_descriptor`; (None, None) without them (no workspace, or the dynamic
    scheduler's). Cached per workspace: a repeated launch does no tensor arithmetic for them."""
    if workspace is None:
        return None, None
    key = (workspace.data_ptr(), cfg.tile_m, cfg.tile_n)
    found = _PARTIALS.get(key)
    if found is None:
        from tilepipe.pipeline.partials import FLAG_WORDS

        area = workspace[FLAG_WORDS.value:].view(torch.float32).view(-1, cfg.tile_n)
        found = _PARTIALS[key] = (TmaOperand.of(area), area)
    return found


def partial_descriptor(area: torch.Tensor | None, cfg: MatmulConfig, out_dtype: torch.dtype):
    """The JIT's descriptor over partial_tiles' tensor, in boxes of one output stage's bytes of `out_dtype` D
    (pipeline/partials.py: partial_box), split over a cluster's CTAs as D's tile is; None without one."""
    if area is None:
        return None
    from tilepipe.pipeline.partials import partial_box

    return tensor_descriptor(area, partial_box(cfg.tile_m, cfg.epilogue_cols, out_dtype.itemsize * 8), cfg.cluster.c)


_TICKETS: dict[tuple[int, int], tuple[TmaOperand, torch.Tensor]] = {}


def ticket_slots(workspace: torch.Tensor | None, cfg: MatmulConfig, schedule: str, sms: int
                 ) -> tuple[TmaOperand | None, torch.Tensor | None]:
    """The dynamic scheduler's ticket rows in `workspace` for a cluster launch on `sms` SMs (schedulers/dynamic.py:
    a [rows, TICKET_WORDS] int32 tensor from word TICKET_BASE, one row per cluster and ring slot): a TMA operand and
    the tensor, for ticket_descriptor; (None, None) for any other launch. Cached per workspace."""
    if workspace is None or schedule != "dynamic" or cfg.cluster.num_ctas == 1:
        return None, None
    from tilepipe.kernels.matmul import SCHEDULER_STAGES
    from tilepipe.schedulers.dynamic import TICKET_BASE, TICKET_WORDS, ticket_rows

    rows = ticket_rows(sms // cfg.cluster.num_ctas, SCHEDULER_STAGES)
    key = (workspace.data_ptr(), rows)
    if key not in _TICKETS:
        area = workspace[TICKET_BASE.value:TICKET_BASE.value + rows * TICKET_WORDS.value].view(rows, TICKET_WORDS.value)
        _TICKETS[key] = TmaOperand.of(area), area
    return _TICKETS[key]


def ticket_descriptor(area: torch.Tensor | None):
    """The JIT's descriptor over ticket_slots' tensor: one row a box, replicated in both CTAs of the cluster."""
    if area is None:
        return None
    return tensor_descriptor(area, (1, area.shape[1]), ((0, 0), ))


def launch_probed(launch, programs: int, probe: str | os.PathLike | bool, device: torch.device, ctas: int = 1) -> None:
    """`launch(probe_buf, PROBE)` in debug mode (under the hang watchdog) or trace mode (then saves the timeline);
    records are per CTA: `ctas` per program in a cluster launch."""
    from tilepipe.pipeline import probe as probes
    from tilepipe.probes import debug, timeline

    if probe is True:
        records = debug.progress_buffer(programs * ctas)
        debug.watch("matmul_kernel", records, lambda: launch(records, probes.DEBUG), ctas=ctas)
        return
    events = timeline.events_for(programs * ctas)
    buffer = timeline.trace_buffer(programs * ctas, events, device)
    launch(buffer, events)
    timeline.save(buffer, probe, "matmul_kernel", ctas=ctas)
