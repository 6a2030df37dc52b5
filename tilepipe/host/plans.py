"""Launch plans: a staged GEMM's grid, scheduler workspace and kernel arguments (`plan_gemm`; the FP8 GEMMs':
`plan_matmul_fp8`), and call plans: a call geometry that passed every check keeps its launch, so a repeated call
reads only its tensors' addresses (the ops' fast path)."""


import torch

from tilepipe.host.checks import GroupedProblem, check_no_overlap
from tilepipe.host.configs import MatmulConfig
from tilepipe.host.device import sm_count
from tilepipe.host.launch import (FastLauncher, Fp8Launch, GemmLaunch, GroupedLaunch, LaunchPlan, TmaOperand,
                                  launch_hooks_active, partial_tiles, persistent_grid, scheduler_workspace,
                                  ticket_slots)
from tilepipe.host.staging import StagedFp8, StagedGemm
from tilepipe.schedulers import KERNEL_SCHEDULE


def plan_gemm(staged: StagedGemm, bias: torch.Tensor | None, alpha: float, beta: float, b_kmajor: bool, device: int,
              cfg: MatmulConfig, schedule: str = "static", arch: str = "sm_90a", epilogue: object = None
              ) -> GemmLaunch:
    """The launch of the 16-bit GEMM of `arch` over `staged` tensors (`staged.b` is N x K when `b_kmajor`): the
    persistent grid, the scheduler's workspace (per stream and tile size), the kernel's arguments and its binary's
    key. `epilogue`: the sm_90a kernel's EPILOGUE function (kernels/epilogue_functions.py), the function itself, so
    Triton keys the binary on its source; None for matmul's."""
    a, b, out, c = staged
    M, K = a.shape
    N = b.shape[0] if b_kmajor else b.shape[1]  # the GEMM's columns (D's; a gated epilogue's: twice D's)
    has_c, has_bias = c is not None, bias is not None
    source = c if has_c else out  # without C the kernel never reads its descriptor
    first, second, rows, cols = (b, a, N, M) if cfg.swap_ab else (a, b, M, N)  # the kernel's operands, D^T's shape
    kernel_schedule = KERNEL_SCHEDULE.get(schedule, schedule)
    scalars = (rows, cols, K, alpha, beta, cfg.stages, cfg.c_stages, cfg.group_m, b_kmajor, has_c, has_bias,
               kernel_schedule, cfg.cluster_m, cfg.cluster_n, cfg.swap_ab)
    grid = persistent_grid(M, N, K, cfg, device, schedule)
    stream = torch._C._cuda_getCurrentRawStream(device)
    workspace = scheduler_workspace(device, stream, cfg) if schedule != "static" else None
    partials, area = partial_tiles(workspace if kernel_schedule == "streamk" else None, cfg)
    tickets, ticket_rows = ticket_slots(workspace, cfg, kernel_schedule, sm_count(device))
    # the bias pointer and the workspace are never read without a bias or by the static scheduler: null ones keep
    # cached plans free of stale tensors
    tiling = {**cfg.tiling(), "EPILOGUE": epilogue} if arch == "sm_90a" else {}  # matmul_kernel's TILE, EPILOGUE_N
    args = (TmaOperand.of(first), TmaOperand.of(second), TmaOperand.of(out), TmaOperand.of(source),
            bias.data_ptr() if has_bias else 0, workspace.data_ptr() if workspace is not None else 0, *scalars,
            None, 0, partials, tickets, *tiling.values())
    key = (cfg, a.dtype, out.dtype, source.dtype, bias.dtype if has_bias else None, b_kmajor, has_c, kernel_schedule,
           device, arch, epilogue)
    return GemmLaunch(key, grid, device, stream, args, (first, second, out, source), bias, workspace, scalars, area,
                      ticket_rows, tiling, cfg, arch, b_kmajor)


def plan_matmul_fp8(staged: StagedFp8, mode: str, device: int, cfg: MatmulConfig, schedule: str, arch: str
                    ) -> Fp8Launch:
    """The launch of matmul_fp8's GEMM of `arch` over `staged` tensors. Per-tensor or per-row scales (`mode` "tensor",
    "row") are read by pointer (stride 0 or 1 along M and N); swap-AB passes B, A and their scales in that order (the
    plan's slots keep the call's a, b, D, scale_a, scale_b order). Blockwise scales are TMA operands, loaded with the
    tiles they scale, split or shared over a cluster as those are. On sm_100a the Blackwell kernels, which take the
    same arguments (the scaled one's D blocks are its epilogue's sub-tiles)."""
    a, b, scale_a, scale_b, out = staged
    if mode == "blockwise":
        from tilepipe.kernels.matmul_fp8_blockwise import blockwise_blocks

        blocks = blockwise_blocks(cfg)
        tma = tuple((t, *blocks[name]) for t, name in ((a, "a"), (b, "b"), (scale_a, "sa"), (scale_b, "sb"),
                                                       (out, "c")))
        kernel = "sm100_blockwise_matmul_kernel" if arch == "sm_100a" else "blockwise_matmul_kernel"
        return plan_fp8_kernel(kernel, tma, (), (), None, device, cfg, schedule)
    from tilepipe.kernels.matmul import operand_blocks
    from tilepipe.kernels.sm100_matmul import sm100_operand_blocks

    per_row = mode == "row"
    stride = 1 if per_row else 0
    blocks = (sm100_operand_blocks if arch == "sm_100a" else operand_blocks)(cfg, True)  # a cluster's tiles, split
    first, second, scales, slots = ((b, a, (scale_b, scale_a), (1, 0, 2, 4, 3)) if cfg.swap_ab else  # or shared
                                    (a, b, (scale_a, scale_b), None))                                # over its CTAs
    tma = ((first, *blocks["a"]), (second, *blocks["b"]), (out, *blocks["c"]))
    kernel = "sm100_scaled_matmul_kernel" if arch == "sm_100a" else "scaled_matmul_kernel"
    return plan_fp8_kernel(kernel, tma, scales, (stride, stride), per_row, device, cfg, schedule, slots)


def plan_fp8_kernel(kernel: str, tma: tuple[tuple, ...], pointers: tuple, extra: tuple, variant: object, device: int,
                    cfg: MatmulConfig, schedule: str, slots: tuple[int, ...] | None = None) -> Fp8Launch:
    """The launch of the FP8 kernel named `kernel` under `schedule` (static, stream-K or split-K: host/configs.py
    fp8_schedule_for) with its arguments in order: TMA operands (tensor, block, cga bases[, layout kind]), pointers,
    the scheduler's workspace, then M, N, K, the config's stage counts and GROUP_M, `extra` scalars, the kernel's
    schedule, (the sm_90a blockwise kernel) the cluster shape, (the scaled kernels) the cluster shape and swap-AB,
    and (the sm_90a kernels) stream-K's partial tiles. The binary's key: kernel, config, dtypes, `variant`,
    schedule, device. The plan's slots are the TMA operands and pointers, in order or as `slots` maps the call's
    addresses to them."""
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
    return Fp8Launch(kernel, key, grid, device, stream, args, slots or tuple(range(len(tma) + len(pointers))), tma,
                     pointers, workspace, scalars, area, cfg)


class CallPlan:
    """A call geometry that passed every check and needed no staging copy (the key in its op's plan table), with its
    launch (`LaunchPlan`): a repeated call reads only its tensors' addresses. Subclasses say which address fills each
    tensor slot of the kernel and which inputs the output must not overlap; that check runs once per new address
    tuple."""

    __slots__ = ("launch", "prototype")

    def __init__(self, launch: LaunchPlan, out: torch.Tensor) -> None:
        self.launch = launch
        # one element viewed as the output's shape: torch.empty_like of it allocates a contiguous output in about
        # half the host time of torch.empty(shape, dtype=, device=), which parses its arguments (1.7 vs 3.0 us, H100)
        self.prototype = torch.empty((1, ), dtype=out.dtype, device=out.device).expand(out.shape)

    def run(self, inputs: tuple, out: torch.Tensor | None) -> torch.Tensor | None:
        """Launch for these tensors and return the output (allocated when `out` is None), or None when the full path
        must run instead: an unaligned TMA address, another stream than the workspace's, or a Triton launch hook."""
        launch = self.launch
        stream = torch._C._cuda_getCurrentRawStream(launch.device)
        if launch_hooks_active() or launch.stream not in (None, stream):
            return None
        fresh = out is None
        if fresh:
            out = torch.empty_like(self.prototype)
        addresses = self.addresses(inputs, out)
        bound = launch.bound.get(addresses)
        if bound is None:
            if not fresh:
                check_no_overlap(out, *self.overlapping(inputs))
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


class MatmulPlan(CallPlan):
    """The 16-bit GEMM's plan: inputs (a, b, c). The C descriptor reads `out` when there is no separate C (none, or C
    is D in place); with a bias row (`bias`) the call's `c` is that row broadcast, and its address is the bias pointer
    argument. Both are read from the launch once and kept as fields: a property costs ~0.1 us a read on the fast
    path, and the launch's tensors are not kept."""

    __slots__ = ("separate_c", "bias")

    def __init__(self, plan: GemmLaunch, launcher: FastLauncher, out: torch.Tensor) -> None:
        bias = plan.bias is not None
        # the A, B, D and C descriptors (the first two swapped under swap-AB)[, the bias pointer]; a workspace is the
        # plan's stream's
        slots = (1, 0, 2, 3, 4) if plan.cfg.swap_ab else (0, 1, 2, 3, 4)
        launch = LaunchPlan(launcher, plan.grid, plan.device, plan.args, slots if bias else slots[:4],
                            None if plan.workspace is None else plan.stream)
        super().__init__(launch, out)
        source, d = plan.operands[3], plan.operands[2]  # what C's descriptor reads: C, or D
        self.separate_c, self.bias = source is not d, bias

    def addresses(self, inputs: tuple, out: torch.Tensor) -> tuple[int, ...]:
        a, b, c = inputs
        d = out.data_ptr()
        addresses = (a.data_ptr(), b.data_ptr(), d, c.data_ptr() if self.separate_c else d)
        return addresses + (c.data_ptr(), ) if self.bias else addresses

    def overlapping(self, inputs: tuple) -> tuple:
        a, b, c = inputs
        return a, b, c if self.separate_c or self.bias else None


class Fp8Plan(CallPlan):
    """matmul_fp8's plan: inputs (a, b, scale_a, scale_b). The scaled kernel takes D's descriptor before the scale
    pointers; the blockwise kernel (whose scales are TMA operands, no pointers) takes the scales' descriptors before
    D's. Which one is read from the launch once and kept as a field (a property costs ~0.1 us a read)."""

    __slots__ = ("blockwise", )

    def __init__(self, plan: Fp8Launch, launcher: FastLauncher, out: torch.Tensor) -> None:
        super().__init__(LaunchPlan(launcher, plan.grid, plan.device, plan.args, plan.slots,
                                    None if plan.workspace is None else plan.stream), out)
        self.blockwise = not plan.pointers

    def addresses(self, inputs: tuple, out: torch.Tensor) -> tuple[int, ...]:
        a, b, scale_a, scale_b = (t.data_ptr() for t in inputs)
        return (a, b, scale_a, scale_b, out.data_ptr()) if self.blockwise else (a, b, out.data_ptr(), scale_a, scale_b)

    def overlapping(self, inputs: tuple) -> tuple:
        return inputs[0], inputs[1], None


class PlanCache(dict):
    """CallPlans by call geometry; cleared when it reaches LIMIT entries (a program seldom has that many)."""

    LIMIT = 1024

    def remember(self, key: tuple, plan: CallPlan) -> None:
        if len(self) >= self.LIMIT:
            self.clear()
        self[key] = plan


def plan_grouped(problem: GroupedProblem, cfg: MatmulConfig, out: torch.Tensor, epilogue: object, schedule: str
                 ) -> GroupedLaunch:
    """The launch of grouped_matmul_kernel over `problem`'s rows, D's rows `out` (N: the GEMM's columns, D's times the
    epilogue's COLUMNS_IN; `schedule` its SCHEDULE: the layout's, offs its ends or counts, none batched, or "dynamic"
    with the stream's scheduler workspace) through `epilogue` (None: D = A @ B): B's experts stacked as one TMA
    operand (the kernel's first under swap-AB), the bias pointer D's where there is no bias (never read), D the
    workspace where none is read."""
    from tilepipe.kernels.grouped_matmul import grouped_blocks

    a, bias, G, M, N, b_kmajor, device = (problem.a, problem.bias, problem.G, problem.M, problem.N, problem.b_kmajor,
                                          problem.device)
    b_rows = stacked_experts(problem.b, b_kmajor)
    scalars = (G, M, N, problem.K, out.stride(0), cfg.stages, cfg.c_stages, cfg.group_m, b_kmajor, schedule,
               (cfg.block_m, cfg.block_n))
    fused = (bias is not None, epilogue)  # HAS_BIAS, EPILOGUE: after the bias pointer
    rest = (out, problem.offs, grouped_workspace(schedule, device, cfg, out), *scalars, out if bias is None else bias,
            *fused, cfg.swap_ab)
    blocks = grouped_blocks(cfg, b_kmajor)
    operands = (b_rows, a) if cfg.swap_ab else (a, b_rows)  # swap-AB: D^T = B^T A^T, the experts' rows first
    return _grouped_launch("tilepipe.kernels.grouped_matmul:grouped_matmul_kernel",
                           (cfg, a.dtype, out.dtype, b_kmajor, device, schedule, *fused),
                           grouped_grid(M, N, G, cfg, device), device,
                           ((operands[0], blocks["a"]), (operands[1], blocks["b"]), (out, blocks["d"])), rest,
                           cfg.num_warps)


def plan_grouped_fp8(a: torch.Tensor, b: torch.Tensor, scales: tuple[torch.Tensor, torch.Tensor], out: torch.Tensor,
                     offs: torch.Tensor, G: int, N: int, K: int, blockwise: bool, device: int, cfg: MatmulConfig,
                     schedule: str) -> GroupedLaunch:
    """The launch of grouped_blockwise_kernel (the scales as TMA operands, before D's) or grouped_scaled_kernel (by
    pointer, after the workspace) under the grouped scheduler `schedule` (the choice's: the rows' layout, or
    "dynamic" with the stream's scheduler workspace; D where none is read), b's (G, K, N) K-major experts stacked as
    one TMA operand."""
    from tilepipe.kernels.grouped_fp8 import grouped_fp8_blocks

    M = out.shape[0]
    b_rows = stacked_experts(b, True)
    blocks = grouped_fp8_blocks(cfg, blockwise)
    names = ("a", "b", "sa", "sb", "c") if blockwise else ("a", "b", "c")
    tma = (a, b_rows, *scales, out) if blockwise else (a, b_rows, out)
    workspace = grouped_workspace(schedule, device, cfg, out)
    pointers = (out, offs, workspace) if blockwise else (out, offs, workspace, *scales)
    scalars = (G, M, N, K, out.stride(0), cfg.stages, cfg.c_stages, cfg.group_m, schedule)
    kernel = "grouped_blockwise_kernel" if blockwise else "grouped_scaled_kernel"
    return _grouped_launch(f"tilepipe.kernels.grouped_fp8:{kernel}", (cfg, blockwise, out.dtype, device, schedule),
                           grouped_grid(M, N, G, cfg, device), device,
                           tuple((t, *blocks[name]) for t, name in zip(tma, names)), (*pointers, *scalars),
                           cfg.num_warps)


def plan_grouped_wgrad(a_rows: torch.Tensor, b_rows: torch.Tensor, d_rows: torch.Tensor, offs: torch.Tensor, G: int,
                       M: int, N: int, K: int, a_kmajor: bool, b_kmajor: bool, cfg: MatmulConfig, device: int
                       ) -> GroupedLaunch:
    """The launch of grouped_wgrad_kernel over A and B as their descriptors read them (a_rows (M, K) or (K, M), b_rows
    (N, K) or (K, N)) and D's groups stacked (G * M, N), one program per SM or per tile."""
    from tilepipe.kernels.grouped_wgrad import wgrad_blocks

    tiles = G * -(-M // cfg.block_m) * -(-N // cfg.block_n)
    scalars = (G, M, N, K, d_rows.stride(0), a_rows, a_rows.stride(0), b_rows, b_rows.stride(0), cfg.stages,
               cfg.c_stages, cfg.group_m, a_kmajor, b_kmajor, (cfg.block_m, cfg.block_n))
    blocks = wgrad_blocks(cfg, a_kmajor, b_kmajor)
    return _grouped_launch("tilepipe.kernels.grouped_wgrad:grouped_wgrad_kernel",
                           (cfg, a_rows.dtype, d_rows.dtype, a_kmajor, b_kmajor, device),
                           (min(sm_count(device), tiles), 1, 1), device,
                           ((a_rows, blocks["a"]), (b_rows, blocks["b"]), (d_rows, blocks["d"])),
                           (d_rows, offs, *scalars), cfg.num_warps)


def grouped_workspace(schedule: str, device: int, cfg: MatmulConfig, unread: torch.Tensor) -> torch.Tensor:
    """A grouped kernel's workspace argument: the current stream's scheduler workspace under the dynamic schedule
    (its tile counter), else `unread` (any tensor: the static schedules never read it; no stream lookup)."""
    if schedule != "dynamic":
        return unread
    return scheduler_workspace(device, torch._C._cuda_getCurrentRawStream(device), cfg)


def grouped_grid(M: int, N: int, G: int, cfg: MatmulConfig, device: int) -> tuple[int, int, int]:
    """A grouped GEMM's persistent grid over M rows in G groups: one program per SM, or per tile where the bound on the
    tile count (each group adds at most one row of tiles) is smaller."""
    rows, cols = (cfg.block_n, cfg.block_m) if cfg.swap_ab else (cfg.block_m, cfg.block_n)  # swap-AB: tiles of D^T
    most_tiles = (-(-M // rows) + G) * -(-N // cols)
    return min(sm_count(device), most_tiles), 1, 1


def stacked_experts(b: torch.Tensor, b_kmajor: bool) -> torch.Tensor:
    """b's G experts as one 2-D tensor the kernel's B descriptor covers: (G * N, K) K-major, else (G * K, N)."""
    G, K, N = b.shape
    if b_kmajor:
        return b.as_strided((G * N, K), (b.stride(2), 1))
    return b.as_strided((G * K, N), (b.stride(1), 1))


def _grouped_launch(kernel: str, key: tuple, grid: tuple[int, int, int], device: int, tma: tuple[tuple, ...],
                    rest: tuple, num_warps: int) -> GroupedLaunch:
    """A GroupedLaunch on the current stream; its fast launcher's arguments: the TMA operands, then `rest` with each
    tensor as its address (None, an unread pointer's constexpr, as itself)."""
    args = (*(TmaOperand.of(t) for t, *_ in tma),
            *(r.data_ptr() if isinstance(r, torch.Tensor) else r for r in rest))
    return GroupedLaunch(kernel, key, grid, torch._C._cuda_getCurrentRawStream(device), args, tma, rest, num_warps)
