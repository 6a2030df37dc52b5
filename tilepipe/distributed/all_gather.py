"""tilepipe.distributed.all_gather_matmul: a column-parallel GEMM's all-gather of A overlapped with the GEMM. The copy
engine brings the peers' shards of A into this rank's symmetric slots (workspace.py) while one persistent kernel
(kernels/ag_matmul.py) computes, its load role waiting on each chunk's epoch flag; its tiles start on the rank's own
chunk. Where overlap cannot pay (plan.py), NCCL's all_gather_into_tensor then tilepipe.matmul."""

import torch
import torch.distributed as dist

from tilepipe.api.matmul import matmul
from tilepipe.distributed.checks import (check_agreement, check_aligned, check_operands, check_out, check_switches,
                                         resolve_group)
from tilepipe.distributed.plan import CHUNK_MIN_ROWS, overlap_pays
from tilepipe.distributed.workspace import Workspace, check_report, workspace
from tilepipe.host.configs import LARGE_SUBTILED_16BIT, MEDIUM, MatmulConfig
from tilepipe.host.device import device_index, device_target, sm_count
from tilepipe.host.gpus import device_model
from tilepipe.host.launch import LauncherCache, TmaOperand, tensor_descriptor
from tilepipe.kernels.spec import BUILD_OPTIONS
from tilepipe.probes.debug import stall_seconds


def all_gather_matmul(a_shard: torch.Tensor, b: torch.Tensor, group: dist.ProcessGroup | str | None = None, *,
                      out: torch.Tensor | None = None, overlap: bool | None = None,
                      debug: bool | None = None) -> torch.Tensor:
    """all_gather(a_shard) @ b: every rank of `group` holds a [M/W, K] shard of A (rank r's are rows r*M/W of A) and
    its own b [K, N] (row-major or a transposed [N, K] tensor), fp16 or bf16; returns this rank's [M, N] of D,
    written into `out` when given. Every rank must call it with the same shapes (checked once per geometry).

    Overlapped on Hopper where the cost model says it pays (plan.py), or as `overlap` says (True: overlapped, which
    needs shards of at least 128 rows; False: NCCL's all-gather then tilepipe.matmul). The first overlapped call per
    geometry sets up symmetric memory (a collective) and must not be captured into a CUDA graph; later calls capture
    and replay. `debug` (or TILEPIPE_DEBUG=1; not while capturing): a chunk that never arrives raises TimeoutError
    after TILEPIPE_DEBUG_STALL_S seconds, naming the role, chunk and peer. Bad input raises TypeError / ValueError
    naming the argument."""
    group = resolve_group(group)
    rows, K, N, b_kmajor = check_operands("a_shard", a_shard, b, out, group)
    world = group.size()
    check_out(out, (rows * world, N))
    if torch.compiler.is_compiling():
        if out is None:
            return torch.ops.tilepipe.all_gather_matmul(a_shard, b, group_name=group.group_name)
        torch.ops.tilepipe.all_gather_matmul_out(out, a_shard, b, group_name=group.group_name)
        return out
    check_agreement(group, "all_gather_matmul", "a_shard", a_shard, b, b_kmajor)
    debug = check_switches(overlap, debug)
    check_aligned(out)
    check_aligned(a_shard, "a_shard")
    device = device_index(a_shard)
    if overlap and (rows < CHUNK_MIN_ROWS or device_target(device) != "sm_90a"):
        raise ValueError(f"overlap: the overlapped form needs a Hopper GPU and shards of at least {CHUNK_MIN_ROWS} "
                         f"rows, got {rows} rows on {device_target(device)}")
    if overlap is None:
        overlap = rows >= CHUNK_MIN_ROWS and device_target(device) == "sm_90a" and overlap_pays(
            rows * world, N, K, rows, K, world, device_model(device))
    if not overlap:
        full = a_shard.new_empty((rows * world, K))
        dist.all_gather_into_tensor(full, a_shard, group=group)
        return matmul(full, b, out=out)
    out = out if out is not None else a_shard.new_empty((rows * world, N))
    ws = workspace(group, (rows, K), a_shard.dtype, a_shard.device, "all_gather")
    main = torch.cuda.current_stream()
    ws.epoch.add_(1)
    ws.stream.wait_stream(main)
    with torch.cuda.stream(ws.stream):
        for peer in ws.push_order():
            ws.send(a_shard, peer)
    timeout_s = stall_seconds()
    _launch(ws, a_shard, b.t() if b_kmajor else b, out, gather_config(N), b_kmajor, debug, int(timeout_s * 1e3),
            device)
    if debug:
        check_report(ws, "all_gather_matmul", "load", timeout_s)
    ws.finish()
    return out


def gather_config(N: int) -> MatmulConfig:
    """matmul's 128x256 tile (D in 64-column sub-tiles) where N fills it, else 128x128."""
    return LARGE_SUBTILED_16BIT if N >= LARGE_SUBTILED_16BIT.block_n else MEDIUM


def _launch(ws: Workspace, a_shard: torch.Tensor, b_view: torch.Tensor, out: torch.Tensor, cfg: MatmulConfig,
            b_kmajor: bool, debug: bool, timeout_ms: int, device: int) -> None:
    """ag_matmul_kernel over the slots (W chunks of A; this rank's from a_shard itself) on a persistent grid: the
    first launch per configuration through Triton's JIT, later ones FastLauncher."""
    from tilepipe.kernels.matmul import operand_blocks

    world, rows, K = ws.slots.shape
    a_rows = ws.slots.view(world * rows, K)
    N = out.shape[1]
    tiles = world * -(-rows // cfg.block_m) * -(-N // cfg.block_n)
    grid = (min(sm_count(device), tiles), 1, 1)
    stream = torch._C._cuda_getCurrentRawStream(device)
    pointers = (ws.flags, ws.epoch, ws.report)
    scalars = (rows, ws.rank, timeout_ms, N, K, world, cfg.stages, cfg.c_stages, cfg.group_m, b_kmajor,
               (cfg.block_m, cfg.block_n), cfg.epilogue_n, debug)
    key = (cfg, out.dtype, b_kmajor, world, debug, device)
    operands = (TmaOperand.of(a_rows), TmaOperand.of(a_shard), TmaOperand.of(b_view), TmaOperand.of(out))
    if _LAUNCHERS.launch(key, grid, stream, (*operands, *(t.data_ptr() for t in pointers), *scalars)) is not None:
        return
    from tilepipe.kernels.ag_matmul import ag_matmul_kernel

    blocks = operand_blocks(cfg, b_kmajor)
    kernel = ag_matmul_kernel[grid](tensor_descriptor(a_rows, *blocks["a"]), tensor_descriptor(a_shard, *blocks["a"]),
                                    tensor_descriptor(b_view, *blocks["b"]), tensor_descriptor(out, *blocks["c"]),
                                    *pointers, *scalars, num_warps=cfg.num_warps, **BUILD_OPTIONS)
    _LAUNCHERS.remember(key, kernel)


_LAUNCHERS = LauncherCache()
"""all_gather_matmul's launchers by (config, dtype, B layout, world, debug, device)."""
