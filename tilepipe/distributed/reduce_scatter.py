"""tilepipe.distributed.matmul_reduce_scatter: a row-parallel GEMM's reduce-scatter overlapped with the GEMM, the
delivery fused into the GEMM's epilogue. The partial sums of a chunk of rows (chunk c: rank c's rows) travel a ring,
rank r + 1 to rank r: in step s rank r computes chunk c = r + 1 + s (mod W) plus what rank r + 1 sent of it (none in
step 0), its store role writing the tiles straight into rank r - 1's symmetric slot c over NVLink (TMA stores to the
peer's memory); after the kernel the copy engine sets that rank's flag c to the call's epoch. The last step is the
rank's own chunk, into `out`. A step's kernel (kernels/rs_matmul.py) waits on the flag of the chunk it adds at each
tile's epilogue, not before its main loop; the sums are in fp32 in each tile's epilogue, in ring order (the same bits
on every call). No reduction kernel follows the GEMM. Where overlap cannot pay (plan.py), tilepipe.matmul
(matmul_fp8) then NCCL's reduce_scatter_tensor."""

import torch
import torch.distributed as dist

from tilepipe.distributed.checks import check_agreement, check_aligned, check_call, check_switches, resolve_group
from tilepipe.distributed.launch import launch_gemm, local_matmul, scales
from tilepipe.distributed.library import traced
from tilepipe.distributed.plan import for_operands, overlap_pays, tile_config
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
    choice; False: tilepipe's GEMM then NCCL's reduce_scatter_tensor), CUDA graphs, `debug` and errors as
    all_gather_matmul."""
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
    fits = device_target(device) == "sm_90a"
    if overlap and not fits:
        raise ValueError(f"overlap: the overlapped form needs a Hopper GPU, got {device_target(device)}")
    if overlap is None:
        overlap = fits and overlap_pays(M, N, K, rows, N, world, device_model(device), out.element_size())
    if not overlap:
        dist.reduce_scatter_tensor(out, local_matmul(a, b, scale_a, scale_b, call.out_dtype, None), group=group)
        return out
    ws = workspace(group, (rows, N), out.dtype, a.device, "reduce_scatter")
    ws.epoch.add_(1)
    to = (ws.rank - 1) % world  # the ring: partial sums go to rank - 1 and come from rank + 1
    timeout_s = stall_seconds()
    b_view = b.t() if call.b_kmajor else b
    cfg, scale_pair = for_operands(tile_config(N), call.fp8), scales(ws, scale_a, scale_b)
    for step in range(world):
        chunk = (ws.rank + 1 + step) % world
        rows_in = a[chunk * rows:(chunk + 1) * rows]
        dest = out if chunk == ws.rank else ws.peer_slots[to][chunk]
        if step == 0:
            local_matmul(rows_in, b, scale_a, scale_b, out.dtype, dest)
        else:
            _launch(ws, rows_in, b_view, chunk, dest, scale_pair, cfg, call.b_kmajor, debug, int(timeout_s * 1e3),
                    device)
        if chunk != ws.rank:  # the copy engine, after the kernel: rank - 1's flag of this chunk
            ws.peer_flags[to][chunk:chunk + 1].copy_(ws.epoch)
    if debug:
        check_report(ws, "matmul_reduce_scatter", "epilogue_load", timeout_s, sender=(ws.rank + 1) % world)
    ws.finish(pushed=False)  # the kernels stored the partial sums themselves
    return out


def _launch(ws: Workspace, a_rows: torch.Tensor, b_view: torch.Tensor, chunk: int, dest: torch.Tensor,
            scale_pair: tuple[torch.Tensor, torch.Tensor], cfg: MatmulConfig, b_kmajor: bool, debug: bool,
            timeout_ms: int, device: int) -> None:
    """rs_matmul_kernel: dest = a_rows @ b + this rank's slot `chunk`, once its flag holds the call's epoch."""
    rows, N = dest.shape
    K = a_rows.shape[1]
    fp8 = a_rows.element_size() == 1
    operands = ((a_rows, "a"), (b_view, "b"), (ws.slots[chunk], "c"), (dest, "c"))
    scalars = (chunk, timeout_ms, rows, N, K, cfg.stages, cfg.c_stages, cfg.group_m, b_kmajor,
               (cfg.block_m, cfg.block_n), cfg.epilogue_n, debug, fp8)
    tiles = -(-rows // cfg.block_m) * -(-N // cfg.block_n)
    launch_gemm(_LAUNCHERS, (cfg, a_rows.dtype, dest.dtype, b_kmajor, debug, device),
                "tilepipe.kernels.rs_matmul:rs_matmul_kernel", operands, (ws.flags, ws.epoch, ws.report, *scale_pair),
                scalars, cfg, b_kmajor, tiles, device)


_LAUNCHERS = LauncherCache()
"""matmul_reduce_scatter's accumulating-step launchers by (config, dtypes, B layout, debug, device)."""
