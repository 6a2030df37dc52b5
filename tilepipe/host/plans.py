"""Launch plans: a staged GEMM's grid, scheduler workspace and kernel arguments (`plan_gemm`), and call plans: a call
geometry that passed every check keeps its launch, so a repeated call reads only its tensors' addresses (the ops'
fast path)."""

import torch

from tilepipe.host.checks import check_no_overlap
from tilepipe.host.configs import MatmulConfig
from tilepipe.host.device import sm_count
from tilepipe.host.launch import (FastLauncher, GemmLaunch, LaunchPlan, TmaOperand, launch_hooks_active,
                                  partial_tiles, persistent_grid, scheduler_workspace, ticket_slots)
from tilepipe.host.staging import StagedGemm
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
    """The 16-bit GEMM's plan: inputs (a, b, c). The C descriptor reads `out` when there is no separate C; with a bias
    row (`bias`) the call's `c` is that row broadcast, and its address is the bias pointer argument."""

    __slots__ = ("separate_c", "bias")

    def __init__(self, plan: GemmLaunch, launcher: FastLauncher, out: torch.Tensor, separate_c: bool) -> None:
        bias = plan.bias is not None
        # the A, B, D and C descriptors (the first two swapped under swap-AB)[, the bias pointer]; a workspace is the
        # plan's stream's
        slots = (1, 0, 2, 3, 4) if plan.cfg.swap_ab else (0, 1, 2, 3, 4)
        launch = LaunchPlan(launcher, plan.grid, plan.device, plan.args, slots if bias else slots[:4],
                            None if plan.workspace is None else plan.stream)
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
