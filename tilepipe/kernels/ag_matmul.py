"""All-gather + GEMM for sm_90a (tilepipe/distributed/): D = A @ B where A's rows arrive in chunks, one per rank (16-bit,
or FP8 with per-tensor scales).

matmul_kernel's roles and pipelines (kernels/matmul.py) under the chunked static schedule (schedulers/chunked.py):
  load   (1 warp)   before a tile's first TMA load of A, waits until the chunk holding its rows arrived
                    (pipeline/flags.py: an acquire of the chunk's epoch flag and the proxy fence TMA needs); the
                    rank's own chunk it reads from its shard, which needs no copy and no wait
  mma    (8 warps)  two wgmma warpgroups on a tile, D (times the scales) through the output stages (matmul's)
  store  (1 warp)   TMA-stores each output stage (D in sub-tiles where EPILOGUE_N is set)
Each rank starts on its own chunk and takes the peers' in the order they arrive. No C, bias, cluster or swap-AB.
"""

from triton.experimental import gluon
from triton.experimental.gluon import language as gl

from tilepipe.kernels.gemm_roles import WORKER_REGS, WORKER_WARPS, c_pipelines, load_role, store_role
from tilepipe.kernels.matmul import matmul_plan, mma_role, operand_blocks
from tilepipe.kernels.spec import KernelSpec, tile_desc
from tilepipe.kernels.tp_spec import tp_constexprs, tp_pointers
from tilepipe.pipeline.flags import ChunkFlags
from tilepipe.pipeline.output import OutputTilePipeline
from tilepipe.pipeline.probe import Probe
from tilepipe.pipeline.roles import warp_specialize
from tilepipe.pipeline.tiles import InputTilePipeline
from tilepipe.schedulers.chunked import ChunkedTileScheduler


@gluon.jit(do_not_specialize=["scale_a", "scale_b", "chunk_rows", "rank", "timeout_ms", "N", "K"])  # one per config
def ag_matmul_kernel(a_desc, own_desc, b_desc, d_desc, flags, epoch_ptr, report, scale_a, scale_b, chunk_rows, rank,
                     timeout_ms, N, K, WORLD: gl.constexpr, STAGES: gl.constexpr, C_STAGES: gl.constexpr,
                     GROUP_M: gl.constexpr, B_KMAJOR: gl.constexpr, TILE: gl.constexpr, EPILOGUE_N: gl.constexpr,
                     DEBUG: gl.constexpr, SCALED: gl.constexpr):
    """A (a_desc) is WORLD chunks of `chunk_rows` rows (>= the tile's), chunk r from rank r, but this rank's own
    chunk is read from its shard (own_desc); `flags` holds an int32 per chunk, which the copy engine sets to the
    call's epoch (at `epoch_ptr`) once the chunk landed. DEBUG: a wait gives up after `timeout_ms` and writes
    `report` (pipeline/flags.py). TILE and EPILOGUE_N as matmul_kernel's. SCALED (FP8 A and B, K-major B):
    D = (A @ B) * scale_a[0] * scale_b[0], the per-tensor scales read on the device (else unread)."""
    BM: gl.constexpr = TILE[0]
    BN: gl.constexpr = TILE[1]
    BK: gl.constexpr = a_desc.block_type.shape[1]
    PLAN: gl.constexpr = matmul_plan(BM, BN, BK, STAGES, C_STAGES, a_desc.dtype, d_desc.dtype, B_KMAJOR,
                                     epilogue_n=EPILOGUE_N)
    k_tiles = gl.cdiv(K, BK)
    smem = PLAN.allocate(Probe.create(None, 0))
    sched = ChunkedTileScheduler.create(chunk_rows, N, WORLD, rank, BM, BN, GROUP_M)
    arrivals = ChunkFlags.create(flags, epoch_ptr, chunk_rows, rank, own_desc, report if DEBUG else None,
                                 timeout_ms if DEBUG else 0)
    inputs = InputTilePipeline(smem.pipelines.input, smem.operands, 1)
    outputs = OutputTilePipeline(smem.pipelines.output, smem.c_tiles)
    sources, load_order = c_pipelines(smem, smem.c_tiles, False)
    alpha = gl.load(scale_a) * gl.load(scale_b) if SCALED else gl.to_tensor(1.0)
    beta = gl.to_tensor(0.0)  # D = alpha * A @ B (matmul's epilogue, no C or bias)
    warp_specialize([(mma_role, (inputs, outputs, sources, sched, k_tiles, alpha, beta, flags, N, BN, B_KMAJOR, False,
                                 False, False, False, None)),
                     (load_role, (inputs, load_order, a_desc, b_desc, sched, k_tiles, B_KMAJOR, False, None, None,
                                  arrivals), WORKER_WARPS, WORKER_REGS),
                     (store_role, (outputs, sources, d_desc, sched, False, False, BN), WORKER_WARPS, WORKER_REGS)])


def ag_matmul_spec(cfg, dtype: str, b_kmajor: bool, world: int, debug: bool = False, out_dtype: str | None = None
                   ) -> KernelSpec:
    """ag_matmul_kernel for configuration `cfg` (a single-CTA MatmulConfig, static) as a KernelSpec (sm_90a): A and B
    of `dtype` (an fp8 one: SCALED, B K-major, cfg's block_k 128), D of `out_dtype` (default `dtype`), `world`
    chunks, DEBUG as `debug`."""
    blocks = operand_blocks(cfg, b_kmajor)
    signature = {"a_desc": tile_desc(dtype, *blocks["a"]), "own_desc": tile_desc(dtype, *blocks["a"]),
                 "b_desc": tile_desc(dtype, *blocks["b"]), "d_desc": tile_desc(out_dtype or dtype, *blocks["c"]),
                 **tp_pointers(), "chunk_rows": "i32", "rank": "i32", "timeout_ms": "i32", "N": "i32", "K": "i32"}
    constexprs = {"WORLD": world, **tp_constexprs(cfg, b_kmajor, debug, dtype)}
    return KernelSpec(f"{__name__}:ag_matmul_kernel", {**signature, **dict.fromkeys(constexprs, "constexpr")},
                      constexprs, "sm_90a", cfg.num_warps)
