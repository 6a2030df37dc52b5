"""FP8 GEMMs with torch._scaled_mm's semantics: per-tensor, per-row and DeepSeek-style blockwise scales (on sm_100:
compiled for sm_100a on the CPU, never run), and the block-scaled MXFP8/MXFP4/NVFP4 GEMM (sm_100 only; likewise).

`matmul_fp8(a, b, scale_a, scale_b)` computes (a * scale_a) @ (b * scale_b) with the scales broadcast as
torch._scaled_mm does:

| scaling      | scale_a                  | scale_b                          | accumulation                        |
|--------------|--------------------------|----------------------------------|-------------------------------------|
| per-tensor   | 1 element                | 1 element                        | wgmma's fp8 precision over all of K |
| per-row      | (M, 1)                   | (1, N)                           | wgmma's fp8 precision over all of K |
| blockwise    | (M, ceil(K/128)): 1x128  | (ceil(K/128), ceil(N/128)): 128x128 | promoted to fp32 every 128 of K  |

Per-tensor and per-row accumulate like torch's `use_fast_accum=True` (Hopper's fp8 wgmma keeps fewer mantissa bits
than fp32); blockwise promotes each 128-wide K block's partial sum into an fp32 accumulator, as DeepGEMM does.
`matmul_block_scaled` takes torch._scaled_mm's MX/NV block scales (docs/block-scaled.md).
"""

import torch

from tilepipe.host.checks import (check_block_scaled, check_cluster, check_fp8_operands, check_no_overlap, check_out,
                                  check_out_dtype, check_swap_ab, elements_per_byte, scaling_of)
from tilepipe.host.configs import (SM100_BLOCKWISE_CONFIGS, MatmulConfig, fp8_config_for, fp8_schedule_for,
                                   sm100_block_scaled_config, sm100_blockwise_config, sm100_fp8_config)
from tilepipe.host.device import GL_DTYPES, block_scaled_target, device_index, device_target, sm_count
from tilepipe.host.gpus import device_model
from tilepipe.host.launch import (TMA_ALIGN_BYTES, LauncherCache, LaunchPlan, TmaOperand, persistent_grid,
                                  partial_descriptor, partial_tiles, scheduler_workspace, tensor_descriptor)
from tilepipe.host.plans import CallPlan, PlanCache
from tilepipe.host.staging import aligned_empty, tma_addressable, tma_ready
from tilepipe.kernels.sm100_block_scaled import FORMATS, block_scaled_blocks
from tilepipe.kernels.spec import BUILD_OPTIONS
from tilepipe.schedulers import KERNEL_SCHEDULE

FP8_SCHEDULES = ("static", "streamk", "splitk")
"""The schedules matmul_fp8's `scheduler` takes on sm_90a (fp8_schedule_for's candidates)."""


def matmul_fp8(a: torch.Tensor, b: torch.Tensor, scale_a: torch.Tensor, scale_b: torch.Tensor, *,
               out_dtype: torch.dtype = torch.bfloat16, out: torch.Tensor | None = None,
               config: MatmulConfig | None = None, scheduler: str | None = None) -> torch.Tensor:
    """(a * scale_a) @ (b * scale_b) on a Hopper GPU, as torch._scaled_mm(a, b, scale_a, scale_b, out_dtype=...). On an
    sm_100/sm_103 GPU (B200, B300) per-tensor and per-row scaling launch the sm_100a kernel
    (kernels/sm100_matmul.py: sm100_scaled_matmul_kernel) and blockwise scaling kernels/sm100_blockwise.py's, both
    compiled and checked on the CPU only, never run.

    a is (M, K) row-major and b is (K, N) column-major (`w.t()` of a row-major (N, K) weight): fp8 wgmma reads both
    operands K-major from shared memory, so other layouts are refused rather than transposed behind your back (a
    transpose is a full extra pass over the operand: pass `b.t().contiguous().t()` to pay it explicitly).
    Dtypes: float8_e4m3fn, or float8_e5m2 for one of the two. Scales are float32 (see the module table); D is
    bf16, fp16 or fp32, written into `out` when given. Rows that TMA cannot address (K not a multiple of 16) are
    staged through an aligned copy. Raises TypeError / ValueError naming the argument for bad input. `config`
    overrides the tile configuration (on sm_90a also a 2x1 or 1x2 cluster, static schedule); `scheduler` ("static",
    "streamk" or "splitk", sm_90a only) the schedule fp8_schedule_for picks.
    """
    if torch.compiler.is_compiling():  # an opaque custom op for the compiler (tilepipe.api.library)
        if config is not None or scheduler is not None:
            raise ValueError("config= and scheduler= are not supported under torch.compile")
        if out is None:
            return torch.ops.tilepipe.matmul_fp8(a, b, scale_a, scale_b, out_dtype=out_dtype)
        torch.ops.tilepipe.matmul_fp8_out(out, a, b, scale_a, scale_b, out_dtype=out_dtype)
        return out
    if scheduler is not None and scheduler not in FP8_SCHEDULES:
        raise ValueError(f"scheduler must be one of {FP8_SCHEDULES} or None, got {scheduler!r}")
    try:  # a repeated call geometry skips validation and configuration: see _Fp8Plan
        key = (a.shape, a.stride(), a.dtype, a.device, b.shape, b.stride(), b.dtype, b.device, scale_a.shape,
               scale_a.stride(), scale_a.dtype, scale_a.device, scale_b.shape, scale_b.stride(), scale_b.dtype,
               scale_b.device, out_dtype, None if out is None else (out.shape, out.stride(), out.dtype, out.device),
               config, scheduler)
        plan = _PLANS.get(key)
    except (AttributeError, TypeError):  # not tensors, or unhashable: the checks say which
        key = plan = None
    if plan is not None:
        result = plan.run((a, b, scale_a, scale_b), out)
        if result is not None:
            return result
    return _matmul_fp8(a, b, scale_a, scale_b, out_dtype, out, key, config, scheduler)


def _matmul_fp8(a: torch.Tensor, b: torch.Tensor, scale_a: torch.Tensor, scale_b: torch.Tensor,
                out_dtype: torch.dtype, out: torch.Tensor | None, key: tuple | None,
                config: MatmulConfig | None = None, scheduler: str | None = None) -> torch.Tensor:
    """matmul_fp8 with every check and staging copy, remembering a plan for the call's geometry (`key`) when the
    launch read the call's own tensors."""
    M, N, K, mode, out_dtype = check_matmul_fp8(a, b, scale_a, scale_b, out_dtype, out)
    if config is not None and not isinstance(config, MatmulConfig):
        raise TypeError(f"config must be a MatmulConfig, got {type(config).__name__}")
    if out is None:
        out = torch.empty((M, N), device=a.device, dtype=out_dtype)
    else:
        check_no_overlap(out, a, b, None)
    if M == 0 or N == 0:
        return out
    if K == 0:
        return out.zero_()
    target = out if tma_addressable(out) else aligned_empty(out.shape, out.dtype, out.device)
    device = device_index(a)
    arch = device_target(device)
    if scheduler is not None and arch == "sm_100a":
        raise ValueError("scheduler: the sm_100a FP8 GEMMs run the static schedule only")
    if config is not None and config.swap_ab and mode == "blockwise":
        raise ValueError("config: the blockwise FP8 kernel has no swap-AB variant (swap_ab=False)")
    if arch == "sm_100a" and mode == "blockwise":
        cfg, schedule = config or sm100_blockwise_config(out_dtype), "static"
        tile = SM100_BLOCKWISE_CONFIGS[0]
        if (cfg.block_m, cfg.block_n, cfg.block_k, cfg.c_stages) != (tile.block_m, tile.block_n, tile.block_k, 1):
            raise ValueError(f"config: the sm_100a blockwise FP8 kernel takes {tile.block_m} x {tile.block_n} x "
                             f"{tile.block_k} tiles and c_stages = 1 (one D buffer); got {cfg.block_m} x "
                             f"{cfg.block_n} x {cfg.block_k}, c_stages = {cfg.c_stages}")
    elif arch == "sm_100a":
        cfg, schedule = config or sm100_fp8_config(M, N, out_dtype, sm_count(device)), "static"
    else:
        cfg = config or fp8_config_for(M, N, K, mode == "blockwise", out_dtype, device_model(device))
        schedule = scheduler or ("static" if cfg.cluster.num_ctas > 1 else  # the scaled kernel's stream-K takes them
                                 fp8_schedule_for(M, N, K, cfg, mode == "blockwise", device_model(device)))
    check_cluster(cfg, schedule, arch, pair=False)  # the sm_100a FP8 GEMM has no two-CTA form
    check_swap_ab(cfg, True, arch)  # FP8's B is always K-major
    operands = (tma_ready(a), tma_ready(b.t()))
    if mode == "blockwise":  # the kernel reads scale_a^T (K blocks x M) and scale_b^T (N blocks x K blocks) by TMA
        scales = (tma_ready(scale_a.t()), tma_ready(scale_b.t()))
        launch = _launch_blockwise(*operands, *scales, target, device, cfg, schedule, arch)
    else:
        scales = (scale_a.reshape(-1).contiguous(), scale_b.reshape(-1).contiguous())
        launch = _launch_scaled(*operands, *scales, mode == "row", target, device, cfg, schedule, arch)
    if target is not out:
        out.copy_(target)
    elif launch is not None and key is not None and all(
            staged.data_ptr() == given.data_ptr() for staged, given in zip((*operands, *scales),
                                                                           (a, b, scale_a, scale_b))):
        _PLANS.remember(key, _Fp8Plan(launch, out, mode == "blockwise"))
    return out


class _Fp8Plan(CallPlan):
    """matmul_fp8's plan: inputs (a, b, scale_a, scale_b). The scaled kernel takes D's descriptor before the scale
    pointers; the blockwise kernel takes the scales' descriptors before D's."""

    __slots__ = ("blockwise", )

    def __init__(self, launch: LaunchPlan, out: torch.Tensor, blockwise: bool) -> None:
        super().__init__(launch, out)
        self.blockwise = blockwise

    def addresses(self, inputs: tuple, out: torch.Tensor) -> tuple[int, ...]:
        a, b, scale_a, scale_b = (t.data_ptr() for t in inputs)
        return (a, b, scale_a, scale_b, out.data_ptr()) if self.blockwise else (a, b, out.data_ptr(), scale_a, scale_b)

    def overlapping(self, inputs: tuple) -> tuple:
        return inputs[0], inputs[1], None


_PLANS = PlanCache()


def check_matmul_fp8(a: torch.Tensor, b: torch.Tensor, scale_a: torch.Tensor, scale_b: torch.Tensor,
                     out_dtype: torch.dtype, out: torch.Tensor | None) -> tuple[int, int, int, str, torch.dtype]:
    """Every check of matmul_fp8's arguments that needs no memory address (fake tensors pass through it too):
    (M, N, K, scaling mode, out dtype)."""
    check_fp8_operands(a, b)
    M, K = a.shape
    N = b.shape[1]
    mode = scaling_of(scale_a, scale_b, M, N, K)
    out_dtype = check_out_dtype(out_dtype if out is None else None, out, out_dtype)
    for name, t in (("a", a), ("b", b), ("scale_a", scale_a), ("scale_b", scale_b)):
        if t.device.type != "cuda":
            raise ValueError(f"{name} must be on a CUDA device, got {t.device}")
        if t.device != a.device:
            raise ValueError(f"{name} must be on a's device {a.device}, got {t.device}")
    if out is not None:
        check_out(out, (M, N), a.device)
    return M, N, K, mode, out_dtype


def _launch_scaled(a: torch.Tensor, b: torch.Tensor, scale_a: torch.Tensor, scale_b: torch.Tensor, per_row: bool,
                   out: torch.Tensor, device: int, cfg: MatmulConfig, schedule: str, arch: str) -> LaunchPlan | None:
    """Per-tensor or per-row scales: read by pointer (stride 0 or 1 along M and N); on sm_100a the Blackwell kernel,
    whose D blocks are its epilogue's sub-tiles. Swap-AB passes B, A and their scales in that order (the plan's
    slots keep the call's a, b, D, scale_a, scale_b order)."""
    from tilepipe.kernels.matmul import operand_blocks
    from tilepipe.kernels.sm100_matmul import sm100_operand_blocks

    stride = 1 if per_row else 0
    blocks = (sm100_operand_blocks if arch == "sm_100a" else operand_blocks)(cfg, True)  # a cluster's tiles, split
    first, second, scales, slots = ((b, a, (scale_b, scale_a), (1, 0, 2, 4, 3)) if cfg.swap_ab else  # or shared
                                    (a, b, (scale_a, scale_b), None))                                # over its CTAs
    tma = ((first, *blocks["a"]), (second, *blocks["b"]), (out, *blocks["c"]))
    kernel = "sm100_scaled_matmul_kernel" if arch == "sm_100a" else "scaled_matmul_kernel"
    return _launch(kernel, tma, scales, (stride, stride), per_row, device, cfg, schedule, slots)


def _launch_blockwise(a: torch.Tensor, b: torch.Tensor, sa_t: torch.Tensor, sb_t: torch.Tensor, out: torch.Tensor,
                      device: int, cfg: MatmulConfig, schedule: str, arch: str) -> LaunchPlan | None:
    """Blockwise scales: both transposed scale tensors are TMA operands, loaded with the tiles they scale, split or
    shared over a cluster as those are (sm_100a: the Blackwell kernel, which takes the same arguments)."""
    from tilepipe.kernels.matmul_fp8_blockwise import blockwise_blocks

    blocks = blockwise_blocks(cfg)
    tma = tuple((t, *blocks[name]) for t, name in ((a, "a"), (b, "b"), (sa_t, "sa"), (sb_t, "sb"), (out, "c")))
    kernel = "sm100_blockwise_matmul_kernel" if arch == "sm_100a" else "blockwise_matmul_kernel"
    return _launch(kernel, tma, (), (), None, device, cfg, schedule)


def matmul_block_scaled(a: torch.Tensor, b: torch.Tensor, scale_a: torch.Tensor, scale_b: torch.Tensor, *,
                        format: str = "mxfp8", out_dtype: torch.dtype = torch.bfloat16,
                        out: torch.Tensor | None = None) -> torch.Tensor:
    """(a * scale_a) @ (b * scale_b) with block scales along K, as torch._scaled_mm(a, b, scale_a, scale_b,
    out_dtype=...) takes MX and NV operands, on an sm_100/sm_103 GPU (B200, B300) only: the sm_100a kernel
    (kernels/sm100_block_scaled.py, tcgen05_mma_scaled) has been compiled and checked on the CPU, never run.

    `format` "mxfp8": a and b float8_e4m3fn or float8_e5m2, scales float8_e8m0fnu, one per 32 elements of K;
    "mxfp4": a and b float4_e2m1fn_x2 (two elements a byte along K: a is (M, K/2), b (K/2, N)), scales
    float8_e8m0fnu, one per 32; "nvfp4": a and b float4_e2m1fn_x2, scales float8_e4m3fn, one per 16. a is row-major,
    b column-major (`w.t()` of a row-major weight); each scale is a contiguous tensor in the packed 32x4x4 block order
    (rows padded to 128, scales along K to 4: torch's SWIZZLE_32_4_4). D is bf16, fp16 or fp32, written into `out`
    when given. Raises TypeError / ValueError naming the argument for bad input, RuntimeError on a GPU without
    block-scaled MMA (Hopper) naming it."""
    out_dtype = check_out_dtype(out_dtype if out is None else None, out, out_dtype)
    M, N, K = check_block_scaled(a, b, scale_a, scale_b, format)
    if out is None:
        out = torch.empty((M, N), device=a.device, dtype=out_dtype)
    else:
        check_out(out, (M, N), a.device)
        check_no_overlap(out, a, b, None)
    if M == 0 or N == 0:
        return out
    if K == 0:
        return out.zero_()
    device = device_index(a)
    block_scaled_target(torch.cuda.get_device_capability(device), torch.cuda.get_device_name(device))
    as_bytes = (lambda t: t.view(torch.uint8)) if elements_per_byte(a.dtype) == 2 else (lambda t: t)
    operands = tma_ready(as_bytes(a)), tma_ready(as_bytes(b.t()))
    cfg = sm100_block_scaled_config(M, N, format, GL_DTYPES[operands[0].dtype], out_dtype, sm_count(device))
    blocks, k_blocks = block_scaled_blocks(cfg, format), -(-K // (4 * FORMATS[format].vec))
    scales = [_packed_scales(s, k_blocks) for s in (scale_a, scale_b)]
    target = out if tma_addressable(out) else aligned_empty(out.shape, out.dtype, out.device)
    tma = ((operands[0], *blocks["a"]), (operands[1], *blocks["b"]), (scales[0], blocks["sfa"], (), "scales"),
           (scales[1], blocks["sfb"], (), "scales"), (target, *blocks["c"]))
    _launch("sm100_block_scaled_kernel", tma, (), (), format, device, cfg, "static")
    if target is not out:
        out.copy_(target)
    return out


def _packed_scales(scale: torch.Tensor, k_blocks: int) -> torch.Tensor:
    """A checked scale tensor as the kernel's TMA reads it, [1, rows / 128, k_blocks, 2, 256] (a 512-byte block per 128
    rows and 4 scales; e8m0 as bytes), at a 16-byte aligned address."""
    view = (scale.view(torch.uint8) if scale.dtype == torch.float8_e8m0fnu else scale).reshape(1, -1, k_blocks, 2, 256)
    return view if view.data_ptr() % TMA_ALIGN_BYTES == 0 else view.clone()


def _launch(kernel: str, tma: tuple[tuple, ...], pointers: tuple, extra: tuple, variant: object, device: int,
            cfg: MatmulConfig, schedule: str, slots: tuple[int, ...] | None = None) -> LaunchPlan | None:
    """Launch the FP8 kernel named `kernel` under `schedule` (static, stream-K or split-K: host/configs.py
    fp8_schedule_for) with its arguments in order: TMA operands (tensor, block, cga bases[, layout kind]), pointers,
    the scheduler's workspace, then M, N, K, the config's stage counts and GROUP_M, `extra` scalars, the kernel's
    schedule, (the sm_90a blockwise kernel) the cluster shape, (the scaled kernels) the cluster shape and swap-AB,
    and (the sm_90a kernels) stream-K's partial tiles.
    The first call per binary (kernel, config, dtypes, `variant`, schedule, device) goes through Triton's JIT, later
    ones through the fast launcher; those return the launch as a plan whose slots are the TMA operands and pointers,
    in order or as `slots` maps the plan's addresses to them (planned for this stream under stream-K)."""
    a, b, out = tma[0][0], tma[1][0], tma[-1][0]
    rows, K = a.shape  # the kernel's M and N (under swap-AB the problem's N and M)
    cols = b.shape[0]
    stream = torch._C._cuda_getCurrentRawStream(device)
    workspace = scheduler_workspace(device, stream, cfg) if schedule != "static" else None
    kernel_schedule = KERNEL_SCHEDULE.get(schedule, schedule)
    scalars = (rows, cols, K, cfg.stages, cfg.c_stages, cfg.group_m, *extra, kernel_schedule)
    if kernel == "blockwise_matmul_kernel":  # the sm_90a kernels take the cluster shape, the scaled ones swap-AB
        scalars += (cfg.cluster_m, cfg.cluster_n)
    elif kernel != "sm100_blockwise_matmul_kernel":
        scalars += (cfg.cluster_m, cfg.cluster_n, cfg.swap_ab)
    grid = persistent_grid(*out.shape, K, cfg, device, schedule)
    key = (kernel, variant, kernel_schedule, cfg, a.dtype, b.dtype, out.dtype, device)
    partials, area = partial_tiles(workspace if kernel_schedule == "streamk" else None, cfg)
    if not kernel.startswith("sm100"):  # the sm_90a kernels take stream-K's partial tiles last
        scalars += (partials, )
    args = (*(TmaOperand.of(t) for t, *_ in tma), *(p.data_ptr() for p in pointers),
            workspace.data_ptr() if workspace is not None else 0, *scalars)  # no stale tensors: an unread one is null
    launcher = _LAUNCHERS.launch(key, grid, stream, args)
    if launcher is not None:
        return LaunchPlan(launcher, grid, device, args, slots or tuple(range(len(tma) + len(pointers))),
                          None if workspace is None else stream)
    from tilepipe.kernels import matmul_fp8, matmul_fp8_blockwise, sm100_block_scaled, sm100_blockwise, sm100_matmul

    jit = {"scaled_matmul_kernel": matmul_fp8.scaled_matmul_kernel, "sm100_scaled_matmul_kernel":
           sm100_matmul.sm100_scaled_matmul_kernel, "blockwise_matmul_kernel":
           matmul_fp8_blockwise.blockwise_matmul_kernel,
           "sm100_blockwise_matmul_kernel": sm100_blockwise.sm100_blockwise_matmul_kernel,
           "sm100_block_scaled_kernel": sm100_block_scaled.sm100_block_scaled_kernel}[kernel]
    jit_scalars = scalars if kernel.startswith("sm100") else scalars[:-1] + (partial_descriptor(area, cfg, out.dtype), )
    launched = jit[grid](*(tensor_descriptor(*operand) for operand in tma), *pointers,
                         out if workspace is None else workspace,  # unread by static: any tensor types it
                         *jit_scalars, num_warps=cfg.num_warps, num_ctas=cfg.cluster.num_ctas, **BUILD_OPTIONS)
    _LAUNCHERS.remember(key, launched)
    return None


_LAUNCHERS = LauncherCache()
"""FP8 launchers by everything the binary is specialized on (kernel, config, dtypes, scaling, schedule, device)."""
