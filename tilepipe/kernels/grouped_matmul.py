"""Grouped GEMM for Mixture-of-Experts on sm_90a (torch._grouped_mm's 2D x 3D form): D[rows of group g] = A[rows of
group g] @ B[g], the groups' row ends read on the GPU (schedulers/grouped.py), written with the GEMM's roles and
pipelines,
through an epilogue function (kernels/epilogue_functions.py: a per-expert bias, an activation, or a gated one over
packed gate-up experts, which writes half the columns it reads).

Roles (one CTA per SM; each group's tiles in grouped order, the groups one after another):
  load   (1 warp)   the GEMM's load role (gemm_roles.py): A at the tile's rows, B from the stacked experts at the
                    group's offset (GroupedWork.b_coords)
  mma    (8 warps)  the GEMM's wgmma main loop; D's tile in BM x EPILOGUE_N sub-tiles through the EPILOGUE function
                    and the output stages
  store  (1 warp)   TMA-stores each sub-tile while the mma role runs the next tile's main loop
  scheduler (1 warp, SCHEDULE "dynamic")  draws tile ids from a global counter and hands them to the other roles

Group boundaries, on the device. A tile's rows start at its group's first row and a group's last row of tiles is
moved up inside the group (TileGrid INWARD), so a group of at least BM rows has every tile inside it and TMA stores
it whole; D's descriptor clips columns past N and rows past M. A tile's A rows past its group are loaded (the next
group's rows, or zeros past M) and only their D rows are wrong, so only groups of fewer than BM rows leave a tile
that spills past its end (`work.spills()`): its mma role stores those rows from registers with a row mask, and the
output stages pass through the pipeline unwritten (the store role skips them), which keeps one protocol for both
kinds of tile. D's descriptor re-cut at each group's end on the device (as the weight gradient's are at its K ends:
schedulers/kgrouped.py) would save nothing here: no tile pays anything unless its group is smaller than one tile,
and such a tile's masked store ran within 2% of a TMA store (docs/grouped.md).
"""

from triton.experimental import gluon
from triton.experimental.gluon import language as gl

from tilepipe.kernels.epilogue_functions import EpilogueArgs, columns_in, epilogue_function
from tilepipe.kernels.gemm_roles import WORKER_REGS, WORKER_WARPS, load_role, wgmma_unit
from tilepipe.kernels.matmul import matmul_plan
from tilepipe.kernels.read_ahead import bias_part, reads_bias, tile_bias
from tilepipe.kernels.spec import KernelSpec, tile_desc
from tilepipe.pipeline.cluster import wgmma_accumulator
from tilepipe.pipeline.epilogue import LoadOrderBarrier
from tilepipe.pipeline.output import OutputTilePipeline, column_part
from tilepipe.pipeline.roles import warp_specialize
from tilepipe.pipeline.tiles import InputTilePipeline
from tilepipe.schedulers.dynamic import scheduler_role
from tilepipe.schedulers.grouped import grouped_scheduler_class


@gluon.jit
def masked_store(d_ptr, ld_d, part, row, col, end, N):
    """Store `part` (a sub-tile in registers) at (row, col) of D (row stride ld_d), its rows from `end` and columns
    from N left untouched; N None: every column of `part` is inside D, so only rows are masked (a column mask costs
    the whole kernel: its per-element predicates make ptxas move the main loop's counter to uniform registers, 6
    more instructions per two K tiles and 2.5% of a blockwise GEMM's time, perf-log row 133)."""
    layout: gl.constexpr = part.type.layout
    rows = row + gl.arange(0, part.shape[0], gl.SliceLayout(1, layout))
    cols = col + gl.arange(0, part.shape[1], gl.SliceLayout(0, layout))
    offsets = rows.to(gl.int64)[:, None] * ld_d + cols[None, :]
    mask = (rows < end)[:, None]
    if N is not None:
        mask = mask & (cols < N)[None, :]
    gl.store(d_ptr + offsets, part, mask=mask)


@gluon.jit
def grouped_mma_role(inputs: InputTilePipeline, outputs: OutputTilePipeline, sched, k_tiles, d_ptr, ld_d, bias_ptr,
                     B_KMAJOR: gl.constexpr, HAS_BIAS: gl.constexpr, EPILOGUE: gl.constexpr,
                     MAIN_LOOP: gl.constexpr, row_scale, COLUMNS_INSIDE: gl.constexpr = False):
    """The MAIN_LOOP per tile (wgmma_unit, or blockwise_unit: FP8 blockwise scales), then D's tile a sub-tile (an
    output stage) at a time, each through the EPILOGUE function (COLUMNS_IN accumulator columns per column of D; its
    bias row the group's, bias_ptr + group * N, a tile's read before its main loop; `row_scale`: row_scaled's, else
    None) unless the kernel has none; a tile that spills past its group's rows is stored from registers under a row
    mask instead (and a column mask, unless COLUMNS_INSIDE: N a multiple of BN), its stages handed on unwritten, as
    is every tile of a swap-AB schedule (sched.SWAP: D^T's tile, stored transposed; no epilogue)."""
    BM: gl.constexpr = outputs.tiles.shape[1]
    SUB_N: gl.constexpr = outputs.tiles.shape[2]
    BN: gl.constexpr = sched.BN
    RATIO: gl.constexpr = columns_in(EPILOGUE)
    PARTS: gl.constexpr = BN // (SUB_N * RATIO)
    FUSED: gl.constexpr = HAS_BIAS or EPILOGUE is not None  # else D is the accumulator, rounded
    epilogue: gl.constexpr = epilogue_function(EPILOGUE)
    acc_layout: gl.constexpr = wgmma_accumulator(gl.num_warps(), BN, outputs.tiles.type.layout.cga_layout)
    BIAS: gl.constexpr = reads_bias(EPILOGUE, HAS_BIAS)  # a tile's at once (tile_bias)
    gl.static_assert(not (sched.SWAP and FUSED), "the swap-AB grouped tile takes no epilogue")
    consumer = inputs.consumer().with_release_lag(1)
    one = gl.to_tensor(1.0)
    work = sched.work()
    while work.valid:
        row, col = work.origin(BM, BN)
        group_bias = bias_ptr + work.group.to(gl.int64) * sched.N if HAS_BIAS else bias_ptr
        bias = tile_bias(group_bias, sched.N, col, BM, BN, SUB_N * RATIO, acc_layout) if BIAS else None  # read ahead
        acc, consumer = MAIN_LOOP(consumer, work, k_tiles, BM, BN, acc_layout, B_KMAJOR)
        spills = work.spills()
        for j in gl.static_range(PARTS):
            with outputs.produce() as out:
                part = column_part(acc, j, PARTS)
                if FUSED:
                    args = EpilogueArgs(one, one, group_bias, sched.N, HAS_BIAS, row_scale, sched.M, bias_part(bias, j))
                    part = epilogue(part, None, args, row, col + j * SUB_N * RATIO)
                part = part.to(outputs.tiles.dtype)
                if sched.SWAP:  # (row, col) is D^T's: a column of D, a row of the group's
                    masked_store(d_ptr, ld_d, gl.permute(part, (1, 0)), col + j * SUB_N, row, work.end, sched.N)
                elif spills:
                    masked_store(d_ptr, ld_d, part, row, col // RATIO + j * SUB_N, work.end,
                                 None if COLUMNS_INSIDE else sched.N // RATIO)
                else:
                    out.tile().store(part)
                out.arrive()
        work = work.next()
    outputs.drain()


@gluon.jit
def grouped_store_role(outputs: OutputTilePipeline, d_desc, sched, RATIO: gl.constexpr, SWAP_AB: gl.constexpr = False):
    """TMA-stores each output stage of a tile inside its group (RATIO accumulator columns per column of D); frees a
    spilling tile's stages unread (every tile's under SWAP_AB, stored by the MMA warps)."""
    BM: gl.constexpr = outputs.tiles.shape[1]
    SUB_N: gl.constexpr = outputs.tiles.shape[2]
    BN: gl.constexpr = sched.BN
    work = sched.work()
    while work.valid:
        row, col = work.origin(BM, BN)
        spills = work.spills()
        for j in gl.static_range(BN // (SUB_N * RATIO)):
            with outputs.consume() as out:
                if not SWAP_AB:
                    if not spills:
                        out.store(d_desc, [row, col // RATIO + j * SUB_N])
        work = work.next()


@gluon.jit(do_not_specialize=["offs", "workspace", "G", "M", "N", "K", "ld_d", "bias_ptr"])  # a binary a config
def grouped_matmul_kernel(a_desc, b_desc, d_desc, d_ptr, offs, workspace, G, M, N, K, ld_d, STAGES: gl.constexpr,
                          C_STAGES: gl.constexpr, GROUP_M: gl.constexpr, B_KMAJOR: gl.constexpr,
                          SCHEDULE: gl.constexpr, TILE: gl.constexpr, bias_ptr, HAS_BIAS: gl.constexpr,
                          EPILOGUE: gl.constexpr, SWAP_AB: gl.constexpr = False):
    """a_desc over A [M, K]; b_desc over the G experts stacked, [G * N, K] K-major or [G * K, N] row-major (SWAP_AB:
    the two exchanged, B K-major, TILE BM of N by BN rows, every tile stored from registers); d_desc
    over D [M, N / COLUMNS_IN] in BM x EPILOGUE_N blocks, d_ptr its address (row stride ld_d) for masked stores;
    offs: G int32 row ends, or counts (SCHEDULE "masked"), or None ("batched": every row). TILE: (BM, BN).
    SCHEDULE: a grouped scheduler's name (schedulers/grouped.py; "dynamic": its tile counter is `workspace`'s word 0,
    else `workspace` is unread). bias_ptr: the experts' biases [G, N] (read only where HAS_BIAS); EPILOGUE: an
    epilogue function or its "module:name" (kernels/epilogue_functions.py; a gated one takes B's experts packed by
    pack_gate_up), None: D = A @ B (+ bias)."""
    BM: gl.constexpr = TILE[0]
    BN: gl.constexpr = TILE[1]
    BK: gl.constexpr = a_desc.block_type.shape[1]
    DYNAMIC: gl.constexpr = SCHEDULE == "dynamic"
    PLAN: gl.constexpr = matmul_plan(BM, BN, BK, STAGES, C_STAGES, a_desc.dtype, d_desc.dtype, B_KMAJOR,
                                     dynamic=DYNAMIC, epilogue_n=BN if SWAP_AB else d_desc.block_type.shape[1])
    k_tiles = gl.cdiv(K, BK)
    smem = PLAN.allocate()
    sched = grouped_scheduler_class(SCHEDULE).create(offs, G, M, N, K, BM, BN, GROUP_M, smem.pipelines, workspace,
                                                     SWAP_AB)
    inputs = InputTilePipeline(smem.pipelines.input, smem.operands, 1)
    outputs = OutputTilePipeline(smem.pipelines.output, smem.c_tiles)
    no_c = LoadOrderBarrier(smem.pipelines.output)  # the load role's load order, never signalled without C
    warp_specialize([(grouped_mma_role, (inputs, outputs, sched, k_tiles, d_ptr, ld_d, bias_ptr, B_KMAJOR, HAS_BIAS,
                                         EPILOGUE, wgmma_unit, None)),
                     (load_role, (inputs, no_c, a_desc, b_desc, sched, k_tiles, B_KMAJOR, False), WORKER_WARPS,
                      WORKER_REGS),
                     (grouped_store_role, (outputs, d_desc, sched, columns_in(EPILOGUE), SWAP_AB), WORKER_WARPS,
                      WORKER_REGS),
                     (scheduler_role, (sched, ), WORKER_WARPS, WORKER_REGS) if DYNAMIC else None])


def grouped_blocks(cfg, b_kmajor: bool) -> dict[str, tuple[int, int]]:
    """The TMA blocks of the kernel's a_desc, b_desc and d_desc for configuration `cfg` (a MatmulConfig): A, the
    stacked B and D's sub-tiles; under swap-AB (B K-major) the stacked B, A and D's tile (unused: stores are masked)."""
    return {"a": (cfg.block_m, cfg.block_k),
            "b": (cfg.block_n, cfg.block_k) if b_kmajor else (cfg.block_k, cfg.block_n),
            "d": (cfg.block_n, cfg.block_m) if cfg.swap_ab else (cfg.block_m, cfg.epilogue_cols)}


def grouped_spec(cfg, dtype: str, c_dtype: str, b_kmajor: bool, schedule: str = "static", bias: bool = False,
                 epilogue: str | None = None) -> KernelSpec:
    """grouped_matmul_kernel for one configuration (no cluster or pieces; swap-AB where `cfg` has it) as a KernelSpec
    (sm_90a): inputs of `dtype`, D of `c_dtype`, with the experts' biases (of `dtype`) where `bias`, through
    `epilogue` ("module:name": kernels/epilogue_functions.py)."""
    blocks = grouped_blocks(cfg, b_kmajor)
    signature = {"a_desc": tile_desc(dtype, blocks["a"]), "b_desc": tile_desc(dtype, blocks["b"]),
                 "d_desc": tile_desc(c_dtype, blocks["d"]), "d_ptr": f"*{c_dtype}",
                 "offs": "constexpr" if schedule == "batched" else "*i32", "workspace": "*i32", "G": "i32",
                 "M": "i32", "N": "i32", "K": "i32", "ld_d": "i32", "STAGES": "constexpr", "C_STAGES": "constexpr",
                 "GROUP_M": "constexpr", "B_KMAJOR": "constexpr", "SCHEDULE": "constexpr", "TILE": "constexpr",
                 "bias_ptr": f"*{dtype}", "HAS_BIAS": "constexpr", "EPILOGUE": "constexpr", "SWAP_AB": "constexpr"}
    constexprs = {"STAGES": cfg.stages, "C_STAGES": cfg.c_stages, "GROUP_M": cfg.group_m, "B_KMAJOR": b_kmajor,
                  "SCHEDULE": schedule, "TILE": [cfg.block_m, cfg.block_n], "HAS_BIAS": bias, "EPILOGUE": epilogue,
                  "SWAP_AB": cfg.swap_ab, **({"offs": None} if schedule == "batched" else {})}  # batched: no counts
    return KernelSpec(f"{__name__}:grouped_matmul_kernel", signature, constexprs, num_warps=cfg.num_warps,
                      divisible_by_16=("d_ptr", ))
