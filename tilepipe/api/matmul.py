"""tilepipe.matmul and tilepipe.addmm: D = alpha * A @ B + beta * C on Hopper, and (compiled, never run here) on
datacenter Blackwell (addmm with torch.addmm's semantics)."""

import os

import torch

from tilepipe.host.checks import (check_no_overlap, check_operands, check_out, check_out_dtype, check_residual,
                                  check_scalar, is_column_bias)
from tilepipe.host.configs import NARROW_PIECED_16BIT, MatmulConfig, config_for, schedule_for, sm100_config
from tilepipe.host.device import device_index, device_target, sm_count
from tilepipe.host.gpus import device_model
from tilepipe.host.launch import (FastLauncher, LauncherCache, LaunchPlan, TmaOperand, launch_probed, persistent_grid,
                                  partial_descriptor, partial_tiles, scheduler_workspace, tensor_descriptor,
                                  ticket_descriptor, ticket_slots)
from tilepipe.host.plans import CallPlan, PlanCache
from tilepipe.host.staging import aligned_empty, sector_aligned, tma_addressable, tma_ready
from tilepipe.kernels.epilogue_functions import columns_in
from tilepipe.kernels.spec import BUILD_OPTIONS
from tilepipe.pipeline.pieces import PIECES, is_power_of_two, row_side_ok, side_pieces
from tilepipe.probes.debug import DEBUG_VARIABLE, debug_requested
from tilepipe.schedulers import CLUSTER_SCHEDULES, KERNEL_SCHEDULE, SCHEDULES, SM100_SCHEDULERS


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
    if scheduler is not None and scheduler not in (*SCHEDULES, *SM100_SCHEDULERS):
        raise ValueError(f"scheduler must be one of {SCHEDULES} (sm_100: {SM100_SCHEDULERS}) or None, got "
                         f"{scheduler!r}")
    quiet = debug is None and trace is None and DEBUG_VARIABLE not in os.environ  # the common call: no env parse
    probe = None if quiet else probe_request(debug, trace)
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
            key: tuple | None, probe: str | os.PathLike | bool | None = None, epilogue: object = None) -> torch.Tensor:
    """matmul with every check, staging copies where TMA needs them, and a _Plan for the call's geometry (none for
    debug and trace launches: matmul() sends those here with no key). `epilogue`: the sm_90a kernel's EPILOGUE
    function (kernels/epilogue_functions.py; api/linear.py passes its activations), None for matmul's; a gated one
    gives D half of B's columns (a new `out` only, K > 0)."""
    M, N, K, out_dtype, c, alpha, beta = check_matmul(a, b, out, out_dtype, c, alpha, beta, config)
    if out is None:
        out = torch.empty((M, N // columns_in(epilogue)), device=a.device, dtype=out_dtype)
    else:
        check_no_overlap(out, a, b, c)
    bias = None
    if c is not None and c is not out and is_column_bias(c):
        bias, c = c[0], None
    if M == 0 or N == 0:
        return out
    if K == 0:
        residual = c if c is not None else bias
        return out.copy_(residual * beta) if residual is not None else out.zero_()
    b_kmajor = b.stride(0) == 1 and b.stride(1) != 1
    target = out if tma_addressable(out) else aligned_empty(out.shape, out.dtype, out.device)
    source = None if c is None else (target if c is out else tma_ready(c))
    if source is target and target is not out:
        target.copy_(out)
    device = device_index(a)
    arch = device_target(device)
    own_source = source is not None and source.dtype != out_dtype
    check_schedule(scheduler, arch)
    if arch == "sm_100a" and epilogue is not None:
        raise ValueError("fused epilogues (activations, gated linears) are built for sm_90a (Hopper) only")
    if arch == "sm_100a":
        schedule = scheduler or "static"
        source_dtype = None if source is None else source.dtype
        cfg = config or sm100_config(M, N, a.dtype, out_dtype, sm_count(device), source_dtype, schedule)
    else:
        cfg = config or config_for(M, N, K, a.dtype, out_dtype, b_kmajor, device, own_source, scheduler,
                                   source is not None)
        schedule = scheduler or schedule_for(M, N, K, cfg, device_model(device))
    check_cluster(cfg, schedule, arch, source is not None)
    b_kmajor = b_kmajor or reads_b_kmajor(b, cfg)
    check_swap_ab(cfg, b_kmajor, arch)
    check_pieced(cfg, schedule, arch, own_source, out_dtype)
    check_subtiles(cfg, arch)
    check_pingpong(cfg, schedule, arch, source is not None)
    a_view, b_view = sector_aligned(tma_ready(a), tma_ready(b.t() if b_kmajor else b), M, N, K, cfg, device)
    launcher, grid, args = _launch(a_view, b_view, target, source, bias, alpha, beta, b_kmajor, device, cfg, schedule,
                                   probe, arch, epilogue)
    if target is not out:
        out.copy_(target)
    elif launcher is not None and key is not None and a_view is a and (
            b_view.data_ptr() == b.data_ptr() and (source is None or source is c)):
        stream = None if schedule == "static" else torch._C._cuda_getCurrentRawStream(device)
        # the A, B, D and C descriptors (the first two swapped under swap-AB)[, the bias pointer]
        slots = (1, 0, 2, 3, 4) if cfg.swap_ab else (0, 1, 2, 3, 4)
        slots = slots if bias is not None else slots[:4]
        _PLANS.remember(key, _Plan(LaunchPlan(launcher, grid, device, args, slots, stream), out,
                                   c is not None and c is not out, bias is not None))
    return out


def check_matmul(a: torch.Tensor, b: torch.Tensor, out: torch.Tensor | None, out_dtype: torch.dtype | None,
                 c: torch.Tensor | None, alpha: float, beta: float, config: MatmulConfig | None = None
                 ) -> tuple[int, int, int, torch.dtype, torch.Tensor | None, float, float]:
    """Every check of matmul's arguments that needs no memory address (so fake tensors pass through it too):
    (M, N, K, out dtype, c or None when beta is 0, alpha, beta)."""
    check_operands(a, b)
    out_dtype = check_out_dtype(out_dtype, out, a.dtype)
    M, K = a.shape
    N = b.shape[1]
    alpha, beta = check_scalar(alpha, "alpha"), check_scalar(beta, "beta")
    if beta != 0.0 and c is None:
        raise ValueError("beta is nonzero but c is None: pass c, or leave beta at 0")
    c = c if beta != 0.0 else None
    if c is not None:
        check_residual(c, (M, N), out_dtype, a.device)
    if out is not None:
        check_out(out, (M, N), a.device)
    if config is not None and not isinstance(config, MatmulConfig):
        raise TypeError(f"config must be a MatmulConfig, got {type(config).__name__}")
    return M, N, K, out_dtype, c, alpha, beta


def check_cluster(cfg: MatmulConfig, schedule: str, arch: str, has_c: bool = False,
                  pair: bool = True) -> None:
    """Clusters on sm_90a: 2x1 and 1x2 (the shared operand multicast) under the static, dynamic, stream-K and split-K
    schedules (a stream-K unit is a k-range of a cluster tile; a dynamic tile id reaches both CTAs by multicast); on
    sm_100a the 2x1 pair of the two-CTA GEMM (`pair`: the calling GEMM has that form; without C, `has_c`, which is
    not model-checked with a pair), static only. Anything else raises ValueError."""
    if cfg.cluster.num_ctas == 1:
        return
    if arch == "sm_100a" and not pair:
        raise ValueError(f"a {cfg.cluster_m}x{cfg.cluster_n} cluster is built for this GEMM on sm_90a (Hopper) only; "
                         "on sm_100a it takes configs with cluster_m = cluster_n = 1")
    if arch == "sm_100a" and cfg.cluster_n != 1:
        raise ValueError(f"cluster_n = {cfg.cluster_n}: sm_100a's clustered GEMM is the 2x1 pair of its two-CTA MMA "
                         "(cluster_m = 2, cluster_n = 1); a 1x2 cluster is built for sm_90a (Hopper) only")
    if arch == "sm_100a" and has_c:
        raise ValueError("c: the two-CTA sm_100a GEMM (cluster_m = 2) is built without a C epilogue; pass a config "
                         "with cluster_m = 1, or no c")
    built = CLUSTER_SCHEDULES if arch == "sm_90a" else ("static", )
    if schedule not in built:
        raise ValueError(f"scheduler {schedule!r} does not hand out cluster tiles yet; on {arch} a config with a "
                         f"{cfg.cluster_m}x{cfg.cluster_n} cluster runs under scheduler in {built}")


def reads_b_kmajor(b: torch.Tensor, cfg: MatmulConfig) -> bool:
    """Whether a B that reads as K-major and row-major at once (both strides 1: a (K, 1) or (1, N) one, which the
    stride test calls row-major) is read K-major: where `cfg` needs B K-major (swap-AB, split multicast in 2x1)."""
    return b.stride(0) == 1 and (cfg.swap_ab or cfg.split_multicast and cfg.cluster.m > 1)


def check_swap_ab(cfg: MatmulConfig, b_kmajor: bool, arch: str) -> None:
    """Swap-AB is built for the sm_90a GEMM, without clusters, with B K-major (the problem's B^T, an (N, K) tensor
    with unit inner stride, is the kernel's A operand): anything else raises ValueError."""
    if not cfg.swap_ab:
        return
    if arch != "sm_90a":
        raise ValueError(f"swap-AB is built for sm_90a (Hopper) only; {arch}'s GEMM takes configs with swap_ab=False")
    if cfg.cluster.num_ctas > 1:
        raise ValueError("a config cannot have both swap_ab=True and a cluster")
    if not b_kmajor:
        raise ValueError("a config with swap_ab=True needs b K-major (a transposed (N, K) tensor such as w.t()); "
                         "this b is row-major (K, N)")


def check_pieced(cfg: MatmulConfig, schedule: str, arch: str, own_source: bool, out_dtype: torch.dtype) -> None:
    """A tile with a side held as power-of-two pieces (pipeline/pieces.py: 192 rows or columns, 96 or 160 columns of
    128 rows, and 96 columns of 64 rows on 4 MMA warps) is built for the sm_90a GEMM's 8 MMA warps (4 for the 64-row
    one) with a 16-bit D (and C, if any, of D's dtype: `own_source` is an fp32 C), under the static or dynamic
    schedule, without a cluster or swap-AB; any other side that is not a power of two, or any other use, raises
    ValueError."""
    if not row_side_ok(cfg.block_m):
        raise ValueError(f"config.block_m must be a power of two or one of "
                         f"{[side for side in sorted(PIECES) if row_side_ok(side)]}, got {cfg.block_m}")
    if not (is_power_of_two(cfg.block_n) or cfg.block_n in PIECES):
        raise ValueError(f"config.block_n must be a power of two or one of {sorted(PIECES)}, got {cfg.block_n}")
    narrow = NARROW_PIECED_16BIT  # the one pieced form on one warpgroup
    rows_built = (narrow.block_m, 128) if cfg.block_n == narrow.block_n else (128, )
    if cfg.block_n in PIECES and not row_side_ok(cfg.block_n) and cfg.block_m not in rows_built:
        raise ValueError(f"config.block_m must be {' or '.join(map(str, rows_built))} with block_n = {cfg.block_n} "
                         f"(the forms built and tested), got {cfg.block_m}")
    if not cfg.pieced:
        return
    tile = f"a {cfg.block_m}x{cfg.block_n} tile"
    if arch != "sm_90a":
        raise ValueError(f"{tile} (held as power-of-two pieces) is built for sm_90a (Hopper) only")
    warps = narrow.num_warps if cfg.block_m == narrow.block_m else 8
    if cfg.swap_ab or cfg.cluster.num_ctas > 1 or cfg.num_warps != warps:
        raise ValueError(f"{tile} is built with num_warps={warps}, without swap-AB or a cluster")
    if schedule not in ("static", "dynamic"):
        raise ValueError(f"scheduler {schedule!r}: {tile} runs under the static or dynamic scheduler")
    if out_dtype == torch.float32:
        raise ValueError(f"out_dtype: {tile} is built for a 16-bit D")
    if own_source:
        raise ValueError(f"c: {tile} takes a C of D's dtype only (an fp32 C needs stages of its own); pass a "
                         "power-of-two config")


def check_subtiles(cfg: MatmulConfig, arch: str) -> None:
    """D in sub-tiles (`epilogue_n`) is built for the sm_90a GEMM's tiles of power-of-two rows (columns in pieces
    too: each piece a whole number of sub-tiles) without a cluster or swap-AB, in a power-of-two width of at least 16
    columns that divides every column piece; anything else raises ValueError."""
    if cfg.epilogue_n is None:
        return
    width, piece = cfg.epilogue_n, min(side_pieces(cfg.block_n))  # block_n checked by check_pieced
    if not isinstance(width, int) or width < 16 or not is_power_of_two(width) or piece % width:
        raise ValueError(f"config.epilogue_n must be a power of two of at least 16 that divides block_n = "
                         f"{cfg.block_n}" + (f" and its {piece}-column piece" if piece != cfg.block_n else "") +
                         f", got {width!r}")
    if arch != "sm_90a":
        raise ValueError(f"config.epilogue_n: D in sub-tiles is built for sm_90a (Hopper) only; {arch}'s GEMM "
                         "takes configs with epilogue_n=None (its epilogue sub-tiles are its own)")
    if cfg.block_m in PIECES or cfg.swap_ab or cfg.cluster.num_ctas > 1:
        raise ValueError("config.epilogue_n: D in sub-tiles is built without rows in pieces, swap-AB or a cluster")


def check_pingpong(cfg: MatmulConfig, schedule: str, arch: str, has_c: bool) -> None:
    """Two MMA warpgroups taking turns (`pingpong`, kernels/matmul_pingpong.py) are built for the sm_90a GEMM's
    power-of-two tiles, one warpgroup each (num_warps=4), under the static schedule, without C (a bias row is
    fine), a cluster or swap-AB; anything else raises ValueError."""
    if not cfg.pingpong:
        return
    if arch != "sm_90a":
        raise ValueError(f"config.pingpong: two MMA warpgroups taking turns are built for sm_90a (Hopper) only, not "
                         f"{arch}")
    if cfg.num_warps != 4 or cfg.pieced or cfg.swap_ab or cfg.cluster.num_ctas > 1:
        raise ValueError("config.pingpong is built with num_warps=4 (a warpgroup a turn), power-of-two sides, without "
                         "swap-AB or a cluster")
    if schedule != "static":
        raise ValueError(f"scheduler {schedule!r}: config.pingpong runs under the static scheduler")
    if has_c:
        raise ValueError("c: config.pingpong takes no C tile (a bias row, c=bias.expand(M, N), is fine); pass a "
                         "config without pingpong")


def check_schedule(scheduler: str | None, arch: str) -> None:
    """The schedulers each GEMM has: sm_90a the SCHEDULES (split-K included), sm_100a the SM100_SCHEDULERS (cluster
    launch control exists on sm_100 only; dynamic, stream-K and split-K are not built for it yet)."""
    offered = SM100_SCHEDULERS if arch == "sm_100a" else SCHEDULES
    if scheduler is not None and scheduler not in offered:
        raise ValueError(f"scheduler {scheduler!r} is not built for {arch}; this GPU's GEMM takes one of {offered}")


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


def _launch(a: torch.Tensor, b: torch.Tensor, out: torch.Tensor, c: torch.Tensor | None, bias: torch.Tensor | None,
            alpha: float, beta: float, b_kmajor: bool, device: int, cfg: MatmulConfig, schedule: str = "static",
            probe: str | os.PathLike | bool | None = None, arch: str = "sm_90a", epilogue: object = None
            ) -> tuple[FastLauncher | None, tuple[int, int, int], tuple]:
    """Launch the GEMM of `arch` (matmul_kernel, or sm100_matmul_kernel, which takes the same arguments with D in
    sub-tile boxes): the first call per configuration through Triton's JIT, later ones through FastLauncher.
    Returns the fast launcher (None if there is none yet), the grid and the kernel's arguments. Debug and trace
    launches (`probe`, from probe_request) always go through the JIT, to their own binaries. `epilogue`: EPILOGUE
    (sm_90a), the function itself, so Triton keys the binary on its source."""
    M, K = a.shape
    N = b.shape[0] if b_kmajor else b.shape[1]  # the GEMM's columns (D's; a gated epilogue's: twice D's); `b` is
    # the kernel's view of B: N x K when K-major
    has_c, has_bias = c is not None, bias is not None
    source = c if has_c else out  # without C the kernel never reads its descriptor
    first, second, rows, cols = (b, a, N, M) if cfg.swap_ab else (a, b, M, N)  # the kernel's operands, D^T's shape
    scalars = (rows, cols, K, alpha, beta, cfg.stages, cfg.c_stages, cfg.group_m, b_kmajor, has_c, has_bias,
               KERNEL_SCHEDULE.get(schedule, schedule))
    cluster = (cfg.cluster_m, cfg.cluster_n)
    grid = persistent_grid(M, N, K, cfg, device, schedule)
    stream = torch._C._cuda_getCurrentRawStream(device)
    workspace = scheduler_workspace(device, stream, cfg) if schedule != "static" else None
    partials, area = partial_tiles(workspace if scalars[-1] == "streamk" else None, cfg)
    tickets, rows = ticket_slots(workspace, cfg, scalars[-1], sm_count(device))
    # the bias pointer and the workspace are never read without a bias or by the static scheduler: null ones keep
    # cached plans free of stale tensors
    tiling = {**cfg.tiling(), "EPILOGUE": epilogue} if arch == "sm_90a" else {}  # matmul_kernel's TILE, EPILOGUE_N
    args = (TmaOperand.of(first), TmaOperand.of(second), TmaOperand.of(out), TmaOperand.of(source),
            bias.data_ptr() if has_bias else 0, workspace.data_ptr() if workspace is not None else 0, *scalars,
            *cluster, cfg.swap_ab, None, 0, partials, tickets, *tiling.values())
    key = (cfg, a.dtype, out.dtype, source.dtype, bias.dtype if has_bias else None, b_kmajor, has_c, scalars[-1],
           device, arch, epilogue)
    launcher = _LAUNCHERS.launch(key, grid, stream, args) if probe is None else None
    if launcher is not None:
        return launcher, grid, args
    from tilepipe.kernels.matmul import matmul_kernel, operand_blocks
    from tilepipe.kernels.matmul_pingpong import matmul_pingpong_kernel
    from tilepipe.kernels.sm100_matmul import sm100_matmul_kernel, sm100_operand_blocks

    kernel, blocks = ((sm100_matmul_kernel, sm100_operand_blocks(cfg, b_kmajor)) if arch == "sm_100a"
                      else (matmul_pingpong_kernel if cfg.pingpong else matmul_kernel, operand_blocks(cfg, b_kmajor)))
    jit_args = (tensor_descriptor(first, *blocks["a"]), tensor_descriptor(second, *blocks["b"]),
                tensor_descriptor(out, *blocks["c"]), tensor_descriptor(source, *blocks["c"]),
                bias if has_bias else out, workspace if workspace is not None else out, *scalars,
                *cluster, cfg.swap_ab)  # unused pointers: any tensor types them
    options = dict(num_warps=cfg.num_warps, num_ctas=cfg.cluster.num_ctas, **BUILD_OPTIONS)
    descs = dict(partial_desc=partial_descriptor(area, cfg, out.dtype), ticket_desc=ticket_descriptor(rows),
                 **tiling)
    if probe is not None:
        launch_probed(lambda buf, mode: kernel[grid](*jit_args, buf, mode, **descs, **options),
                      grid[0], probe, a.device, cfg.cluster.num_ctas)
        return None, grid, args
    _LAUNCHERS.remember(key, kernel[grid](*jit_args, **descs, **options))
    return None, grid, args


_LAUNCHERS = LauncherCache()
"""GEMM launchers by (config, dtypes, B layout, epilogue, kernel scheduler, device, target): everything the binary is
specialized on, since the GEMMs do not specialize on M, N and K and the descriptors' types follow from the config and
dtypes.
Without one (Triton internals not as expected) every call goes through the JIT."""


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


_PLANS = PlanCache()


def forget_plans() -> None:
    """Drop every cached call plan, so the next calls choose their configuration again (after autotuning)."""
    _PLANS.clear()
