"""tilepipe.distributed.all_gather_matmul: a column-parallel GEMM's all-gather of A overlapped with the GEMM. The copy
engine brings the peers' shards of A into this rank's symmetric slots (workspace.py) while one persistent kernel
(kernels/ag_matmul.py) computes, its load role waiting on each chunk's epoch flag; its tiles start on the rank's own
chunk. Where overlap cannot pay (plan.py), NCCL's all_gather_into_tensor then tilepipe.matmul (matmul_fp8)."""

import torch
import torch.distributed as dist

from tilepipe.distributed.checks import check_agreement, check_aligned, check_call, check_switches, resolve_group
from tilepipe.distributed.launch import launch_gemm, local_matmul, scales
from tilepipe.distributed.library import traced
from tilepipe.distributed.plan import CHUNK_MIN_ROWS, chunks_fit, for_operands, gather_config, gather_overlaps
from tilepipe.distributed.workspace import Workspace, check_report, workspace
from tilepipe.host.configs import MatmulConfig
from tilepipe.host.device import device_index, device_target
from tilepipe.host.gpus import device_model
from tilepipe.host.launch import LauncherCache
from tilepipe.probes.debug import stall_seconds


def all_gather_matmul(a_shard: torch.Tensor, b: torch.Tensor, group: dist.ProcessGroup | str | None = None, *,
                      scale_a: torch.Tensor | None = None, scale_b: torch.Tensor | None = None,
                      out_dtype: torch.dtype | None = None, out: torch.Tensor | None = None,
                      overlap: bool | None = None, debug: bool | None = None) -> torch.Tensor:
    """all_gather(a_shard) @ b: every rank of `group` holds a [M/W, K] shard of A (rank r's are rows r*M/W of A) and
    its own b [K, N] (row-major or a transposed [N, K] tensor), fp16 or bf16; returns this rank's [M, N] of D,
    written into `out` when given. Every rank must call it with the same shapes (checked once per geometry).
    FP8 per-tensor form (`scale_a`, `scale_b` given): float8 shards and b (K-major: a transposed [N, K] tensor),
    D = (A @ b) * scale_a * scale_b in `out_dtype` (bf16 default, or fp16); scale_a is A's one scale, the same on
    every rank (e.g. from an amax all-reduced over the group), scale_b this rank's b's.

    Overlapped on Hopper where the cost model says it pays (plan.py), or as `overlap` says (True: overlapped, which
    needs shards of at least 128 rows; False: NCCL's all-gather then tilepipe's GEMM). The first overlapped call per
    geometry sets up symmetric memory (a collective) and must not be captured into a CUDA graph; later calls capture
    and replay. `debug` (or TILEPIPE_DEBUG=1; not while capturing): a chunk that never arrives raises TimeoutError
    after TILEPIPE_DEBUG_STALL_S seconds, naming the role, chunk and peer. Bad input raises TypeError / ValueError
    naming the argument."""
    group = resolve_group(group)
    call = check_call("all_gather_matmul", "a_shard", a_shard, b, group, scale_a, scale_b, out, out_dtype)
    if torch.compiler.is_compiling():
        return traced("all_gather_matmul", out, a_shard, b, scale_a, scale_b, group.group_name, out_dtype, overlap)
    rows, K, N, world = call.rows, call.K, call.N, group.size()
    check_agreement(group, "all_gather_matmul", "a_shard", a_shard, b, call.b_kmajor)
    debug = check_switches(overlap, debug)
    check_aligned(out)
    check_aligned(a_shard, "a_shard")
    device = device_index(a_shard)
    if overlap and not chunks_fit(rows, device):
        raise ValueError(f"overlap: the overlapped form needs a Hopper GPU and shards of at least {CHUNK_MIN_ROWS} "
                         f"rows, got {rows} rows on {device_target(device)}")
    if overlap is None:
        overlap = gather_overlaps(rows, N, K, world, device, call.fp8)
    if not overlap:
        full = a_shard.new_empty((rows * world, K))
        dist.all_gather_into_tensor(full.view(torch.uint8), a_shard.view(torch.uint8), group=group)  # bytes
        return local_matmul(full, b, scale_a, scale_b, call.out_dtype, out)
    out = out if out is not None else a_shard.new_empty(call.out_shape, dtype=call.out_dtype)
    ws = workspace(group, (rows, K), a_shard.dtype, a_shard.device, "all_gather")
    main = torch.cuda.current_stream()
    ws.epoch.add_(1)
    ws.stream.wait_stream(main)
    with torch.cuda.stream(ws.stream):
        for peer in ws.push_order():
            ws.send(a_shard, peer)
    timeout_s = stall_seconds()
    cfg = for_operands(gather_config(rows, N, world, device_model(device)), call.fp8)
    _launch(ws, a_shard, b.t() if call.b_kmajor else b, out, scales(ws, scale_a, scale_b), cfg, call.b_kmajor, debug,
            int(timeout_s * 1e3), device)
    if debug:
        check_report(ws, "all_gather_matmul", "load", timeout_s)
    ws.finish()
    return out


def _launch(ws: Workspace, a_shard: torch.Tensor, b_view: torch.Tensor, out: torch.Tensor,
            scale_pair: tuple[torch.Tensor, torch.Tensor], cfg: MatmulConfig, b_kmajor: bool, debug: bool,
            timeout_ms: int, device: int) -> None:
    """ag_matmul_kernel over the slots (W chunks of A; this rank's from a_shard itself) on a persistent grid."""
    world, rows, K = ws.slots.shape
    N = out.shape[1]
    operands = ((ws.slots.view(world * rows, K), "a"), (a_shard, "a"), (b_view, "b"), (out, "c"))
    scalars = (rows, ws.rank, timeout_ms, N, K, world, cfg.stages, cfg.c_stages, cfg.group_m, b_kmajor,
               (cfg.block_m, cfg.block_n), cfg.epilogue_n, debug, a_shard.element_size() == 1)
    tiles = world * -(-rows // cfg.block_m) * -(-N // cfg.block_n)
    key = (cfg, a_shard.dtype, out.dtype, b_kmajor, world, debug, device)
    launch_gemm(_LAUNCHERS, key, "tilepipe.kernels.ag_matmul:ag_matmul_kernel", operands,
                (ws.flags, ws.epoch, ws.report, *scale_pair), scalars, cfg, b_kmajor, tiles, device)


_LAUNCHERS = LauncherCache()
"""all_gather_matmul's launchers by (config, dtypes, B layout, world, debug, device)."""
