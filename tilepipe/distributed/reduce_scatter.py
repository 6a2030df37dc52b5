"""tilepipe.distributed.matmul_reduce_scatter: a row-parallel GEMM's reduce-scatter overlapped with the GEMM, the
delivery fused into the GEMM's epilogue. The partial sums of a chunk of rows (chunk c: rank c's rows) travel a ring,
rank r + 1 to rank r: rank r computes every chunk, from chunk r + 1 to its own, each plus what rank r + 1 sent of it
(nothing for chunk r + 1), in one persistent kernel (kernels/rs_matmul.py). Its store role writes each tile straight
into rank r - 1's symmetric slot over NVLink (TMA stores to the peer's memory) and then sets that rank's flag of the
tile to the call's epoch; the own chunk's tiles go into `out`. A tile's C waits on its flag at the tile's epilogue,
and the chunks' tiles are staggered by a wave, so the sends spread over the kernel and a tile's C has landed a wave
before it is needed. The sums are in fp32 in each tile's epilogue, in ring order (the same bits on every call). No
reduction kernel or barrier follows the GEMM (two sets of slots and flags take turns: workspace.py). Where overlap
cannot pay (plan.py), or the chunks are under a tile's rows, tilepipe.matmul (matmul_fp8) then NCCL's
reduce_scatter_tensor."""

import torch
import torch.distributed as dist

from tilepipe.distributed.checks import check_agreement, check_aligned, check_call, check_switches, resolve_group
from tilepipe.distributed.launch import launch_gemm, local_matmul, scales
from tilepipe.distributed.library import traced
from tilepipe.distributed.plan import CHUNK_MIN_ROWS, chunks_fit, for_operands, overlap_pays, ring_config
from tilepipe.distributed.workspace import Workspace, check_report, workspace
from tilepipe.host.configs import MatmulConfig
from tilepipe.host.device import device_index, device_target
from tilepipe.host.gpus import device_model
from tilepipe.host.launch import LauncherCache
from tilepipe.probes.debug import stall_seconds


def matmul_reduce_scatter(a: torch.Tensor, b: torch.Tensor, group: dist.ProcessGroup | str | None = None, *,
                          scale_a: torch.Tensor | None = None, scale_b: torch.Tensor | None = None,
                          out_dtype: torch.dtype | None = None, out: torch.Tensor | None = None,
                          overlap: bool | None = None, debug: bool | None = None) -> torch.Tensor:
    """reduce_scatter(a @ b): every rank of `group` holds a [M, K/W] (its columns of A) and b [K/W, N] (its rows of B;
    row-major or a transposed [N, K/W] tensor), fp16 or bf16; returns this rank's [M/W, N] rows of the sum over the
    ranks (rank r's are rows r*M/W), written into `out` when given. M must be a multiple of W. Overlapped, each rank
    adds its fp32 accumulator to the partial sum it receives (of D's dtype), in ring order (rank r + 1's first).
    FP8 per-tensor form (`scale_a`, `scale_b` given, this rank's a's and b's): float8 a and b (K-major), each rank's
    (a @ b) * scale_a * scale_b summed, D in `out_dtype` (bf16 default, or fp16). `overlap` (None: the cost model's
    choice; True: overlapped, which needs M/W of at least 128 rows; False: tilepipe's GEMM then NCCL's
    reduce_scatter_tensor), CUDA graphs, `debug` and errors as all_gather_matmul."""
    group = resolve_group(group)
    call = check_call("matmul_reduce_scatter", "a", a, b, group, scale_a, scale_b, out, out_dtype)
    if torch.compiler.is_compiling():
        return traced("matmul_reduce_scatter", out, a, b, scale_a, scale_b, group.group_name, out_dtype, overlap)
    M, K, N, world = call.rows, call.K, call.N, group.size()
    rows = M // world
    check_agreement(group, "matmul_reduce_scatter", "a", a, b, call.b_kmajor)
    debug = check_switches(overlap, debug)
    check_aligned(out)
    device = device_index(a)
    out = out if out is not None else a.new_empty(call.out_shape, dtype=call.out_dtype)
    fits = chunks_fit(rows, device)
    if overlap and not fits:
        raise ValueError(f"overlap: the overlapped form needs a Hopper GPU and at least {CHUNK_MIN_ROWS} rows a rank, "
                         f"got {rows} rows on {device_target(device)}")
    if overlap is None:
        overlap = fits and overlap_pays(M, N, K, rows, N, world, device_model(device), out.element_size())
    if not overlap:
        dist.reduce_scatter_tensor(out, local_matmul(a, b, scale_a, scale_b, call.out_dtype, None), group=group)
        return out
    cfg = for_operands(ring_config(N), call.fp8)
    tiles = world * -(-rows // cfg.block_m) * -(-N // cfg.block_n)  # the chunks' tiles, each with its flag
    ws = workspace(group, (rows, N), out.dtype, a.device, "reduce_scatter", tiles, sets=2)
    ws.epoch.add_(1)
    timeout_s = stall_seconds()
    _launch(ws, a, b.t() if call.b_kmajor else b, out, scales(ws, scale_a, scale_b), cfg, tiles, call.b_kmajor, debug,
            int(timeout_s * 1e3), device)
    if debug:
        check_report(ws, "matmul_reduce_scatter", "epilogue_load", timeout_s, sender=(ws.rank + 1) % world)
    return out  # no barrier: the call's set of slots and flags is not the next call's (workspace.py)


def _launch(ws: Workspace, a: torch.Tensor, b_view: torch.Tensor, out: torch.Tensor,
            scale_pair: tuple[torch.Tensor, torch.Tensor], cfg: MatmulConfig, tiles: int, b_kmajor: bool, debug: bool,
            timeout_ms: int, device: int) -> None:
    """rs_matmul_kernel: the ring's every chunk of a @ b (`tiles` tiles) on a persistent grid, C from this rank's
    slots, the tiles into rank - 1's slots and `out`."""
    slots, rows, N = ws.slots.shape  # both sets' W slots
    world = ws.world
    to = (ws.rank - 1) % world  # the ring: partial sums go to rank - 1 and come from rank + 1
    operands = ((a, "a"), (b_view, "b"), (ws.slots.view(slots * rows, N), "c"),
                (ws.peer_slots[to].view(slots * rows, N), "c"), (out, "c"))
    scalars = (rows, ws.rank, timeout_ms, N, a.shape[1], world, cfg.stages, cfg.c_stages, cfg.group_m, b_kmajor,
               (cfg.block_m, cfg.block_n), cfg.epilogue_n, debug, a.element_size() == 1)
    launch_gemm(_LAUNCHERS, (cfg, a.dtype, out.dtype, b_kmajor, world, debug, device),
                "tilepipe.kernels.rs_matmul:rs_matmul_kernel", operands,
                (ws.flags, ws.peer_flags[to], ws.epoch, ws.report, *scale_pair), scalars, cfg, b_kmajor, tiles, device)


_LAUNCHERS = LauncherCache()
"""matmul_reduce_scatter's launchers by (config, dtypes, B layout, world, debug, device)."""
