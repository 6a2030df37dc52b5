"""GEMM + reduce-scatter for sm_90a (tilepipe/distributed/reduce_scatter.py): the whole ring in one persistent kernel.
Rank r computes every chunk c of D's rows (rank c's), from chunk r + 1 to its own, and adds what rank r + 1 computed
of it; each tile but the own chunk's goes to rank r - 1, the own chunk's into `out`.

matmul_kernel's roles and pipelines (kernels/matmul.py) with C, under the chunked schedule staggered by a wave
(schedulers/chunked.py), so a chunk's tile comes a wave of tiles after the same tile of the chunk before:
  load           (1 warp)   TMA A and B tiles, as matmul's (A's rows: the tile's chunk's)
  mma            (8 warps)  two wgmma warpgroups; the epilogue adds C (alpha = beta = 1) in fp32
  store          (1 warp)   TMA-stores D in EPILOGUE_N sub-tiles: into rank r - 1's slots over NVLink, then (its
                            stores written) sets that rank's flag of the tile to the call's epoch; the own chunk's into
                            `out` (pipeline/flags.py RingDelivery)
  epilogue_load  (1 warp)   before a tile's C loads, waits until rank r + 1's partial sums of the tile arrived
                            (TileFlags), then TMA-loads C from this rank's slots; the first chunk's tiles receive
                            nothing: their stages get an empty fill and the mma role adds no C (work.adds_c)
Slots and flags come in two sets, call n using set n mod 2, so no barrier ends a call (pipeline/flags.py).
The wait is at the tile's epilogue, not its start: the main loop runs while the peer's partial sums still land.
"""

from triton.experimental import gluon
from triton.experimental.gluon import language as gl

from tilepipe.kernels.gemm_roles import (WORKER_REGS, WORKER_WARPS, c_pipelines, epilogue_load_role, load_role,
                                        store_role)
from tilepipe.kernels.matmul import matmul_plan, mma_role, operand_blocks
from tilepipe.kernels.spec import KernelSpec, tile_desc
from tilepipe.kernels.tp_spec import tp_constexprs, tp_pointers
from tilepipe.pipeline.flags import RingDelivery, TileFlags
from tilepipe.pipeline.output import OutputTilePipeline
from tilepipe.pipeline.pieces import pieced
from tilepipe.pipeline.probe import Probe
from tilepipe.pipeline.roles import warp_specialize
from tilepipe.pipeline.tiles import InputTilePipeline
from tilepipe.schedulers.chunked import ChunkedTileScheduler


@gluon.jit(do_not_specialize=["scale_a", "scale_b", "chunk_rows", "rank", "timeout_ms", "N", "K"])  # one per config
def rs_matmul_kernel(a_desc, b_desc, c_desc, peer_desc, d_desc, flags, peer_flags, epoch_ptr, report, scale_a,
                     scale_b, chunk_rows, rank, timeout_ms, N, K, WORLD: gl.constexpr, STAGES: gl.constexpr,
                     C_STAGES: gl.constexpr, GROUP_M: gl.constexpr, B_KMAJOR: gl.constexpr, TILE: gl.constexpr,
                     EPILOGUE_N: gl.constexpr, DEBUG: gl.constexpr, SCALED: gl.constexpr):
    """A (a_desc, WORLD * chunk_rows rows of this rank's K) @ B, chunk by chunk of `chunk_rows` rows (>= the tile's),
    plus C (c_desc: this rank's slots, two sets of the chunks' rows). D: chunk `rank` into d_desc (chunk_rows rows),
    the others into peer_desc (rank - 1's slots), each tile flagged in `peer_flags` (two sets of an int32 per tile of
    each chunk) with the call's epoch (at `epoch_ptr`; its parity picks the set); C's tile waits on `flags`. DEBUG:
    a wait gives up after `timeout_ms` and writes `report` (pipeline/flags.py). TILE and EPILOGUE_N as matmul_kernel's.
    SCALED (FP8 A and B, K-major B): D = (A @ B) * scale_a[0] * scale_b[0] + C, the per-tensor scales read on the
    device (else unread)."""
    BM: gl.constexpr = TILE[0]
    BN: gl.constexpr = TILE[1]
    BK: gl.constexpr = a_desc.block_type.shape[1]
    gl.static_assert(not pieced(BM, BN), "the ring's tile is not pieced (store_pieced reads C on every tile)")
    PLAN: gl.constexpr = matmul_plan(BM, BN, BK, STAGES, C_STAGES, a_desc.dtype, d_desc.dtype, B_KMAJOR, True,
                                     c_desc.dtype, epilogue_n=EPILOGUE_N)
    k_tiles = gl.cdiv(K, BK)
    smem = PLAN.allocate(Probe.create(None, 0))
    sched = ChunkedTileScheduler.create(chunk_rows, N, WORLD, (rank + 1) % WORLD, BM, BN, GROUP_M,
                                        gl.num_programs(0))
    ring = TileFlags.create(flags, peer_flags, epoch_ptr, rank, WORLD, chunk_rows, sched.grid.chunk.num_tiles,
                            report if DEBUG else None, timeout_ms if DEBUG else 0)
    inputs = InputTilePipeline(smem.pipelines.input, smem.operands, 1)
    outputs = OutputTilePipeline(smem.pipelines.output, smem.c_tiles)
    sources, load_order = c_pipelines(smem, smem.c_tiles, True)
    alpha = gl.load(scale_a) * gl.load(scale_b) if SCALED else gl.to_tensor(1.0)
    beta = gl.to_tensor(1.0)  # D = alpha * A @ B + C (matmul's epilogue)
    warp_specialize([(mma_role, (inputs, outputs, sources, sched, k_tiles, alpha, beta, flags, N, BN, B_KMAJOR, True,
                                 False, False, False, None)),
                     (load_role, (inputs, load_order, a_desc, b_desc, sched, k_tiles, B_KMAJOR, True), WORKER_WARPS,
                      WORKER_REGS),
                     (store_role, (outputs, sources, None, sched, True, False, BN, RingDelivery(peer_desc, d_desc,
                                                                                                  ring)),
                      WORKER_WARPS, WORKER_REGS),
                     (epilogue_load_role, (sources, load_order, c_desc, sched, BN, False, True, ring),
                      WORKER_WARPS, WORKER_REGS)])


def rs_matmul_spec(cfg, dtype: str, b_kmajor: bool, world: int, debug: bool = False, out_dtype: str | None = None
                   ) -> KernelSpec:
    """rs_matmul_kernel for configuration `cfg` (a single-CTA MatmulConfig, static) as a KernelSpec (sm_90a): A and B
    of `dtype` (an fp8 one: SCALED, B K-major, cfg's block_k 128), C and D of `out_dtype` (default `dtype`), `world`
    ranks, DEBUG as `debug`."""
    blocks = operand_blocks(cfg, b_kmajor)
    out = tile_desc(out_dtype or dtype, *blocks["c"])
    signature = {"a_desc": tile_desc(dtype, *blocks["a"]), "b_desc": tile_desc(dtype, *blocks["b"]), "c_desc": out,
                 "peer_desc": out, "d_desc": out, **tp_pointers(True), "chunk_rows": "i32", "rank": "i32",
                 "timeout_ms": "i32", "N": "i32", "K": "i32"}
    constexprs = {"WORLD": world, **tp_constexprs(cfg, b_kmajor, debug, dtype)}
    return KernelSpec(f"{__name__}:rs_matmul_kernel", {**signature, **dict.fromkeys(constexprs, "constexpr")},
                      constexprs, "sm_90a", cfg.num_warps)
