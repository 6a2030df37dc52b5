"""GEMM + reduce-scatter's accumulating step for sm_90a (tilepipe/distributed/reduce_scatter.py): D = A @ B + C where
C is the partial sums another rank's GEMM stored into this rank's symmetric slot (chunk CHUNK of the call).

matmul_kernel's roles and pipelines (kernels/matmul.py) with C, under the static schedule:
  load           (1 warp)   TMA A and B tiles, as matmul's
  mma            (8 warps)  two wgmma warpgroups; the epilogue adds C (alpha = beta = 1) in fp32
  store          (1 warp)   TMA-stores D (a peer's slot over NVLink, or this rank's out) in EPILOGUE_N sub-tiles
  epilogue_load  (1 warp)   before a tile's first C load, waits until C's chunk arrived (pipeline/flags.py: an acquire
                            of the chunk's epoch flag and the proxy fence TMA needs), then TMA-loads C
The wait is at the tile's epilogue, not its start: the main loop runs while the peer's partial sums still land.
"""

from triton.experimental import gluon
from triton.experimental.gluon import language as gl

from tilepipe.kernels.gemm_roles import (WORKER_REGS, WORKER_WARPS, c_pipelines, epilogue_load_role, load_role,
                                        store_role)
from tilepipe.kernels.matmul import matmul_plan, mma_role, operand_blocks
from tilepipe.kernels.spec import KernelSpec, tile_desc
from tilepipe.kernels.tp_spec import tp_constexprs, tp_pointers
from tilepipe.pipeline.flags import ChunkFlags
from tilepipe.pipeline.output import OutputTilePipeline
from tilepipe.pipeline.probe import Probe
from tilepipe.pipeline.roles import warp_specialize
from tilepipe.pipeline.tiles import InputTilePipeline
from tilepipe.schedulers.static import StaticTileScheduler


@gluon.jit(do_not_specialize=["scale_a", "scale_b", "chunk", "timeout_ms", "M", "N", "K"])  # one per configuration
def rs_matmul_kernel(a_desc, b_desc, c_desc, d_desc, flags, epoch_ptr, report, scale_a, scale_b, chunk, timeout_ms,
                     M, N, K, STAGES: gl.constexpr, C_STAGES: gl.constexpr, GROUP_M: gl.constexpr,
                     B_KMAJOR: gl.constexpr, TILE: gl.constexpr, EPILOGUE_N: gl.constexpr, DEBUG: gl.constexpr,
                     SCALED: gl.constexpr):
    """D (M x N) = A (M x K) @ B + C (M x N, of D's dtype), C's tiles loaded once `flags[chunk]` holds the call's epoch
    (at `epoch_ptr`). DEBUG: the wait gives up after `timeout_ms` and writes `report` (pipeline/flags.py). TILE and
    EPILOGUE_N as matmul_kernel's. SCALED (FP8 A and B, K-major B): D = (A @ B) * scale_a[0] * scale_b[0] + C, the
    per-tensor scales read on the device (else unread)."""
    BM: gl.constexpr = TILE[0]
    BN: gl.constexpr = TILE[1]
    BK: gl.constexpr = a_desc.block_type.shape[1]
    PLAN: gl.constexpr = matmul_plan(BM, BN, BK, STAGES, C_STAGES, a_desc.dtype, d_desc.dtype, B_KMAJOR, True,
                                     c_desc.dtype, epilogue_n=EPILOGUE_N)
    k_tiles = gl.cdiv(K, BK)
    smem = PLAN.allocate(Probe.create(None, 0))
    sched = StaticTileScheduler.create(M, N, BM, BN, GROUP_M)  # edge tiles stay put: C is read at D's tiles
    arrivals = ChunkFlags.create(flags, epoch_ptr, M, gl.to_tensor(0), None, report if DEBUG else None,
                                 timeout_ms if DEBUG else 0, chunk)  # C is chunk `chunk` of the call
    inputs = InputTilePipeline(smem.pipelines.input, smem.operands, 1)
    outputs = OutputTilePipeline(smem.pipelines.output, smem.c_tiles)
    sources, load_order = c_pipelines(smem, smem.c_tiles, True)
    alpha = gl.load(scale_a) * gl.load(scale_b) if SCALED else gl.to_tensor(1.0)
    beta = gl.to_tensor(1.0)  # D = alpha * A @ B + C (matmul's epilogue)
    warp_specialize([(mma_role, (inputs, outputs, sources, sched, k_tiles, alpha, beta, flags, N, BN, B_KMAJOR, True,
                                 False, False, False, None)),
                     (load_role, (inputs, load_order, a_desc, b_desc, sched, k_tiles, B_KMAJOR, True), WORKER_WARPS,
                      WORKER_REGS),
                     (store_role, (outputs, sources, d_desc, sched, True, False, BN), WORKER_WARPS, WORKER_REGS),
                     (epilogue_load_role, (sources, load_order, c_desc, sched, BN, False, True, arrivals),
                      WORKER_WARPS, WORKER_REGS)])


def rs_matmul_spec(cfg, dtype: str, b_kmajor: bool, debug: bool = False, out_dtype: str | None = None) -> KernelSpec:
    """rs_matmul_kernel for configuration `cfg` (a single-CTA MatmulConfig, static) as a KernelSpec (sm_90a): A and B
    of `dtype` (an fp8 one: SCALED, B K-major, cfg's block_k 128), C and D of `out_dtype` (default `dtype`), DEBUG as
    `debug`."""
    blocks = operand_blocks(cfg, b_kmajor)
    signature = {"a_desc": tile_desc(dtype, *blocks["a"]), "b_desc": tile_desc(dtype, *blocks["b"]),
                 "c_desc": tile_desc(out_dtype or dtype, *blocks["c"]),
                 "d_desc": tile_desc(out_dtype or dtype, *blocks["c"]), **tp_pointers(), "chunk": "i32",
                 "timeout_ms": "i32", "M": "i32", "N": "i32", "K": "i32"}
    constexprs = tp_constexprs(cfg, b_kmajor, debug, dtype)
    return KernelSpec(f"{__name__}:rs_matmul_kernel", {**signature, **dict.fromkeys(constexprs, "constexpr")},
                      constexprs, "sm_90a", cfg.num_warps)
