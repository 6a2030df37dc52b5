"""tilepipe.distributed.matmul_reduce_scatter: a row-parallel GEMM's reduce-scatter overlapped with the GEMM, in its
simplest fast form. Each rank computes its partial sum of every rank's rows, a row block at a time with
tilepipe.matmul, the peers' blocks first: as each block is done the copy engine copies it into its owner's slot and
sets its flag (workspace.py), while the next block computes. The rank's own block goes straight into its own slot;
then one kernel (kernels/reduce_slots.py) waits for the peers' flags and sums the slots in fp32. Where overlap cannot
pay (plan.py), tilepipe.matmul then NCCL's reduce_scatter_tensor."""

import torch
import torch.distributed as dist

from tilepipe.api.matmul import matmul
from tilepipe.distributed.checks import (check_agreement, check_aligned, check_operands, check_out, check_switches,
                                         resolve_group)
from tilepipe.distributed.plan import overlap_pays
from tilepipe.distributed.workspace import Workspace, check_report, workspace
from tilepipe.host.device import device_index, device_target
from tilepipe.host.gpus import device_model
from tilepipe.host.launch import LauncherCache
from tilepipe.probes.debug import stall_seconds


def matmul_reduce_scatter(a: torch.Tensor, b: torch.Tensor, group: dist.ProcessGroup | str | None = None, *,
                          out: torch.Tensor | None = None, overlap: bool | None = None,
                          debug: bool | None = None) -> torch.Tensor:
    """reduce_scatter(a @ b): every rank of `group` holds a [M, K/W] (its columns of A) and b [K/W, N] (its rows of B;
    row-major or a transposed [N, K/W] tensor), fp16 or bf16; returns this rank's [M/W, N] rows of the sum over the
    ranks (rank r's are rows r*M/W), written into `out` when given. M must be a multiple of W. The sum is in fp32 over
    the ranks' a-dtype partial sums, in rank order. `overlap` (None: the cost model's choice; False: tilepipe.matmul
then NCCL's reduce_scatter_tensor), CUDA graphs, `debug` and errors as all_gather_matmul."""
    group = resolve_group(group)
    M, K, N, b_kmajor = check_operands("a", a, b, out, group)
    world = group.size()
    if M % world:
        raise ValueError(f"a: its {M} rows must split evenly over the group's {world} ranks")
    rows = M // world
    check_out(out, (rows, N))
    if torch.compiler.is_compiling():
        if out is None:
            return torch.ops.tilepipe.matmul_reduce_scatter(a, b, group_name=group.group_name)
        torch.ops.tilepipe.matmul_reduce_scatter_out(out, a, b, group_name=group.group_name)
        return out
    check_agreement(group, "matmul_reduce_scatter", "a", a, b, b_kmajor)
    debug = check_switches(overlap, debug)
    check_aligned(out)
    device = device_index(a)
    out = out if out is not None else a.new_empty((rows, N))
    fits = device_target(device) == "sm_90a" and rows * N < 2**31  # the reduction counts elements in int32
    if overlap and not fits:
        raise ValueError(f"overlap: the overlapped form needs a Hopper GPU and fewer than 2**31 elements of out, got "
                         f"{rows * N} on {device_target(device)}")
    if overlap is None:
        overlap = fits and overlap_pays(M, N, K, rows, N, world, device_model(device))
    if not overlap:
        dist.reduce_scatter_tensor(out, matmul(a, b), group=group)
        return out
    ws = workspace(group, (rows, N), a.dtype, a.device, "reduce_scatter")
    if ws.scratch is None:
        ws.scratch = a.new_empty((world - 1, rows, N))
    main = torch.cuda.current_stream()
    ws.epoch.add_(1)
    for step, peer in enumerate(ws.push_order()):
        matmul(a[peer * rows:(peer + 1) * rows], b, out=ws.scratch[step])
        ws.stream.wait_stream(main)
        with torch.cuda.stream(ws.stream):
            ws.send(ws.scratch[step], peer)
    matmul(a[ws.rank * rows:(ws.rank + 1) * rows], b, out=ws.slots[ws.rank])
    timeout_s = stall_seconds()
    _reduce(ws, out, debug, int(timeout_s * 1e3), device)
    if debug:
        check_report(ws, "matmul_reduce_scatter", "reduce", timeout_s)
    ws.finish()
    return out


def _reduce(ws: Workspace, out: torch.Tensor, debug: bool, timeout_ms: int, device: int) -> None:
    """reduce_slots_kernel: out = the sum of the slots, once the peers' flags hold the epoch."""
    from tilepipe.kernels.reduce_slots import BLOCK, WARPS

    numel = out.numel()
    grid = (-(-numel // BLOCK), 1, 1)
    stream = torch._C._cuda_getCurrentRawStream(device)
    tensors = (ws.slots, out, ws.flags, ws.epoch, ws.report)
    scalars = (ws.rank, timeout_ms, numel, ws.world, BLOCK, debug)
    key = (out.dtype, ws.world, debug, device)
    if _LAUNCHERS.launch(key, grid, stream, (*(t.data_ptr() for t in tensors), *scalars)) is not None:
        return
    from tilepipe.kernels.reduce_slots import reduce_slots_kernel

    kernel = reduce_slots_kernel[grid](*tensors, *scalars, num_warps=WARPS)
    _LAUNCHERS.remember(key, kernel)


_LAUNCHERS = LauncherCache()
"""matmul_reduce_scatter's reduction launchers by (dtype, world, debug, device)."""
