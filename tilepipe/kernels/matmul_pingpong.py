"""Ping-pong GEMM for sm_90a: D = alpha * A @ B (+ beta * bias[col]), two MMA warpgroups taking turns at the tensor
core, each a whole tile, so one's epilogue runs while the other's main loop does (CUTLASS's ping-pong kernel; the
cooperative matmul_kernel's tensor core waits for each tile's epilogue).

Roles (one CTA per SM; static schedule, the program's tiles dealt alternately to the two turns):
  mma    (4 warps, turn 0 and turn 1)  a tile's wgmmas in its turn (`TurnOrder`), then, while the other turn's main
         loop runs, its epilogue into its own output stages; each passes over the other's stages of the shared input
         ring
  load   (1 warp)  TMA A and B tiles of every tile of the program, in order, into the one input ring
  store  (1 warp, turn 0 and turn 1)  TMA-stores its turn's output stages
A is M x K row-major; B is N x K (K-major, B_KMAJOR) or K x N (row-major). D is 16-bit; with EPILOGUE_N an output stage
holds a BM x EPILOGUE_N sub-tile of D. Takes matmul_kernel's arguments, its EPILOGUE function included (a gated one
writes BN / 2 of D's columns a tile); C, clusters, swap-AB, pieced tiles and the other schedules are matmul_kernel's.
"""

from triton.experimental import gluon
from triton.experimental.gluon import language as gl

from tilepipe.kernels.epilogues import columns_in, store_tile
from tilepipe.kernels.gemm_roles import WORKER_REGS, WORKER_WARPS, load_role, store_role, wgmma_steps
from tilepipe.kernels.read_ahead import reads_bias, tile_bias
from tilepipe.pipeline.cluster import wgmma_accumulator
from tilepipe.pipeline.epilogue import EpiLoadPipeline, LoadOrderBarrier
from tilepipe.pipeline.output import OutputTilePipeline
from tilepipe.pipeline.probe import Probe
from tilepipe.pipeline.roles import warp_specialize
from tilepipe.pipeline.storage import (InputPipelineStorage, OutputPipelineStorage, OutputTileStorage, SmemPlan,
                                       StandardTileStorage, TurnOrderStorage)
from tilepipe.pipeline.tiles import InputTilePipeline
from tilepipe.pipeline.turns import TURNS, TurnOrder
from tilepipe.schedulers.static import StaticTileScheduler

MMA_REGS = gl.constexpr(232)
"""Registers of the second MMA warpgroup (a worker partition): a 128x128 fp32 accumulator is 128 a thread."""


@gluon.constexpr_function
def pingpong_plan(block_m, block_n, block_k, stages, c_stages, dtype, c_dtype, b_kmajor, epilogue_n=None):
    """Shared memory: one ring of operand stages both turns read, and each turn's own output stages (a tile of D, or
    a block_m x epilogue_n sub-tile) with their pipelines to its store role; the turn order between the MMA roles."""
    b_tile = (block_n, block_k) if b_kmajor else (block_k, block_n)
    d_tile = (block_m, epilogue_n or block_n)
    turns = range(TURNS.value)
    tiles = {f"c_tiles{turn}": OutputTileStorage(c_dtype, d_tile, c_stages) for turn in turns}
    outputs = {f"output{turn}": OutputPipelineStorage(c_stages, name=f"output{turn}", producer=f"mma (turn {turn})",
                                                      consumer=f"store (turn {turn})", producer_proxy="generic",
                                                      consumer_proxy="async") for turn in turns}
    return SmemPlan("sm_90a", operands=StandardTileStorage(dtype, dtype, (block_m, block_k), b_tile, stages), **tiles,
                    input=InputPipelineStorage(stages, consumer="+".join(f"mma (turn {turn})" for turn in turns)),
                    **outputs, turns=TurnOrderStorage())


@gluon.jit
def mma_turn_role(inputs: InputTilePipeline, outputs: OutputTilePipeline, sources: EpiLoadPipeline, order: TurnOrder,
                  sched, k_tiles, alpha, beta, bias_ptr, N, D_BN: gl.constexpr, B_KMAJOR: gl.constexpr,
                  HAS_BIAS: gl.constexpr, EPILOGUE: gl.constexpr):
    """One turn's tiles: the main loop in its turn (the last wgmmas retired after the turn passed), then the EPILOGUE
    function into this turn's output stages while the other turn's main loop runs. Every stage of the other turn's
    tiles is passed over (all tiles have k_tiles). `sources`: the epilogue's C pipeline, a stand-in never used (no C).
    D_BN: the accumulator's columns. A tile's bias is read before it waits for its turn (tile_bias)."""
    BM: gl.constexpr = outputs.tiles.shape[1]
    acc_layout: gl.constexpr = wgmma_accumulator(gl.num_warps(), D_BN)
    BIAS: gl.constexpr = reads_bias(EPILOGUE, HAS_BIAS)
    consumer = inputs.consumer().with_release_lag(1).taking_turns(TURNS)
    if order.turn == 1:
        consumer = consumer.pass_over(k_tiles)  # the program's first tile is turn 0's
    work = sched.work()
    while work.valid:
        row, col = work.origin(BM, D_BN)
        bias = (tile_bias(bias_ptr, N, col, BM, D_BN, outputs.tiles.shape[2] * columns_in(EPILOGUE), acc_layout)
                if BIAS else None)  # its load hidden by the wait for the turn and the main loop
        with order.take(work.followed()):  # the turn passes where the other turn has a tile to come
            acc, consumer = wgmma_steps(consumer, work, k_tiles, BM, D_BN, acc_layout, B_KMAJOR)
        acc, consumer = consumer.retire(acc)
        consumer = consumer.pass_over(k_tiles)  # the other turn's next tile
        outputs, sources = store_tile(outputs, sources, acc, alpha, beta, bias_ptr, N, col, False, HAS_BIAS, False,
                                      EPILOGUE, row, bias)
        work = work.next()
    outputs.drain()


@gluon.jit(do_not_specialize=["M", "N", "K", "alpha", "beta", "bias_ptr"])  # one binary per configuration
def matmul_pingpong_kernel(a_desc, b_desc, d_desc, c_desc, bias_ptr, workspace, M, N, K, alpha, beta,
                           STAGES: gl.constexpr, C_STAGES: gl.constexpr, GROUP_M: gl.constexpr,
                           B_KMAJOR: gl.constexpr, HAS_C: gl.constexpr, HAS_BIAS: gl.constexpr,
                           SCHEDULE: gl.constexpr, CLUSTER_M: gl.constexpr = 1, CLUSTER_N: gl.constexpr = 1,
                           SWAP_AB: gl.constexpr = False, probe_buf=None, PROBE: gl.constexpr = 0, partial_desc=None,
                           ticket_desc=None, TILE: gl.constexpr = None, EPILOGUE_N: gl.constexpr = None,
                           EPILOGUE: gl.constexpr = None):
    """matmul_kernel's arguments; c_desc, workspace, partial_desc and ticket_desc are never read. Launched with
    num_warps=4 (the turn-0 MMA warpgroup)."""
    gl.static_assert(SCHEDULE == "static", "the ping-pong GEMM runs static")
    gl.static_assert(not HAS_C, "the ping-pong GEMM runs without C")
    gl.static_assert(not SWAP_AB, "the ping-pong GEMM runs without swap-AB")
    gl.static_assert(CLUSTER_M * CLUSTER_N == 1, "the ping-pong GEMM runs without a cluster")
    BM: gl.constexpr = a_desc.block_type.shape[0]
    BK: gl.constexpr = a_desc.block_type.shape[1]
    BN: gl.constexpr = d_desc.block_type.shape[1] if TILE is None else TILE[1]
    gl.static_assert(columns_in(EPILOGUE) == 1 or EPILOGUE_N is not None, "a gated epilogue writes D in sub-tiles")
    D_BN: gl.constexpr = BN // columns_in(EPILOGUE)  # the columns of D's tile
    PLAN: gl.constexpr = pingpong_plan(BM, BN, BK, STAGES, C_STAGES, a_desc.dtype, d_desc.dtype, B_KMAJOR, EPILOGUE_N)
    k_tiles = gl.cdiv(K, BK)
    probe = Probe.create(probe_buf, PROBE)
    smem = PLAN.allocate(probe)
    # edge tiles inside the problem, but for a gated epilogue (D's tiles start at half the accumulator's columns)
    sched = StaticTileScheduler.create(M, N, BM, BN, GROUP_M, INWARD=columns_in(EPILOGUE) == 1)
    inputs = InputTilePipeline(smem.input, smem.operands, 1)
    out0 = OutputTilePipeline(smem.output0, smem.c_tiles0)
    out1 = OutputTilePipeline(smem.output1, smem.c_tiles1)
    no_c = EpiLoadPipeline(smem.output0, smem.c_tiles0)  # the roles' C arguments, never used
    no_order = LoadOrderBarrier(smem.output0)
    warp_specialize([(mma_turn_role, (inputs, out0, no_c, TurnOrder(smem.turns, 0), sched.taking_turns(0, TURNS),
                                      k_tiles, alpha, beta, bias_ptr, N, BN, B_KMAJOR, HAS_BIAS, EPILOGUE)),
                     (mma_turn_role, (inputs, out1, no_c, TurnOrder(smem.turns, 1), sched.taking_turns(1, TURNS),
                                      k_tiles, alpha, beta, bias_ptr, N, BN, B_KMAJOR, HAS_BIAS, EPILOGUE), 4,
                      MMA_REGS),
                     (load_role, (inputs, no_order, a_desc, b_desc, sched, k_tiles, B_KMAJOR, False), WORKER_WARPS,
                      WORKER_REGS),
                     (store_role, (out0, no_c, d_desc, sched.taking_turns(0, TURNS), False, False, D_BN), WORKER_WARPS,
                      WORKER_REGS),
                     (store_role, (out1, no_c, d_desc, sched.taking_turns(1, TURNS), False, False, D_BN), WORKER_WARPS,
                      WORKER_REGS)])
