"""`KGroupedTileScheduler`: the tiles of a k-grouped GEMM (MoE weight gradient, torch._grouped_mm's 2D x 2D form),
D[g] = A[:, k_{g-1}:k_g] @ B[k_{g-1}:k_g, :], the groups' K ends read on the GPU.

Every group has the same M x N tiles (a TileGrid, GROUP_M raster, edge tiles moved inside: INWARD), numbered group
after group; program p takes tiles p, p + P, ... (persistent, static), so each program's tiles spread over the
groups and a skewed K splits evenly. A tile's group comes from its id (no walk), its K range [start, end) from two
loads of offs: ends clamped to [0, K], a group ending before it starts is empty (its D[g] is zeros), so decreasing
or too large offs never read outside A and B. Its k-steps start at `start` (rounded down to K_ALIGN elements, where an
operand is K-major and TMA's inner coordinate must sit on 16 bytes) and the last one reaches past `end`: the loads go
through descriptors re-cut at `end` on the device (`operands`: TMA reads zeros from there), and `mask_k` zeroes the
previous group's columns a first step rounded down holds (pipeline/masking.py). D is the G groups stacked, [G * M, N]:
a tile's origin is its group's rows; a group of fewer than BM rows spills into the next one's, and `spills` says so.

Re-cut descriptors against zeroing the last step in shared memory (the way before), on an H200 under Nsight Compute
(bench/results/archive/grouped-wgrad-bounds-h200.json): equal cycles on Mixtral's uniform groups (no masked steps),
1.7-2.6% fewer on Zipf and quarter-empty sizes, where every group's last step was masked.
"""

from triton.experimental import gluon
from triton.experimental.gluon import aggregate
from triton.experimental.gluon import language as gl

from tilepipe.pipeline.descriptors import bounded_like
from tilepipe.pipeline.masking import zero_outside_k
from tilepipe.schedulers.grid import TileGrid, TileWork


@aggregate
class KOperands:
    """A's and B's addresses and row strides (elements), as the kernel's descriptors cover them: A (M, K) or its
    transpose (K, M), B's transpose (N, K) or B (K, N); for descriptors re-cut at a group's K end."""
    a_ptr: gl.tensor
    lda: gl.tensor
    b_ptr: gl.tensor
    ldb: gl.tensor

    @gluon.constexpr_function
    def __init__(self, a_ptr, lda, b_ptr, ldb):
        self.a_ptr = a_ptr
        self.lda = lda
        self.b_ptr = b_ptr
        self.ldb = ldb


@aggregate
class KGroupedTileScheduler:
    """Persistent static schedule over G groups of M x N tiles (BM x BN, GROUP_M raster): `offs` (int32, G K ends on
    the GPU) over K rows of A's columns and B's rows (`ops`: where they lie), in k-steps of BK starting on K_ALIGN
    elements."""
    offs: gl.tensor
    G: gl.tensor
    M: gl.tensor
    N: gl.tensor
    K: gl.tensor
    grid: TileGrid
    ops: KOperands
    BM: gl.constexpr
    BN: gl.constexpr
    BK: gl.constexpr
    K_ALIGN: gl.constexpr

    @gluon.constexpr_function
    def __init__(self, offs, G, M, N, K, grid, ops, BM, BN, BK, K_ALIGN):
        self.offs = offs
        self.G = G
        self.M = M
        self.N = N
        self.K = K
        self.grid = grid
        self.ops = ops
        self.BM = gl.constexpr(BM)
        self.BN = gl.constexpr(BN)
        self.BK = gl.constexpr(BK)
        self.K_ALIGN = gl.constexpr(K_ALIGN)

    @gluon.jit
    def create(offs, G, M, N, K, BM: gl.constexpr, BN: gl.constexpr, BK: gl.constexpr, GROUP_M: gl.constexpr,
               K_ALIGN: gl.constexpr, ops: KOperands):
        grid = TileGrid.create(M, N, BM, BN, GROUP_M, True)
        return KGroupedTileScheduler(offs, G, M, N, K, grid, ops, BM, BN, BK, K_ALIGN)

    @gluon.jit
    def work(self, paces: gl.constexpr = False):
        """This program's first tile (`paces`: the GEMM roles' signature; a static schedule paces nothing)."""
        return KGroupedWork.at(gl.program_id(0), self)


@aggregate
class KGroupedWork(TileWork):
    """One role's current tile: its id over all groups (`tile_id`), its group and the group's K range [start, end),
    whose k-steps start at `first` (start rounded down to K_ALIGN)."""
    tile_id: gl.tensor
    valid: gl.tensor
    group: gl.tensor
    first: gl.tensor
    start: gl.tensor
    end: gl.tensor
    grid: TileGrid
    sched: KGroupedTileScheduler
    finishes: gl.constexpr

    @gluon.constexpr_function
    def __init__(self, tile_id, valid, group, first, start, end, grid, sched):
        self.tile_id = tile_id
        self.valid = valid
        self.group = group
        self.first = first
        self.start = start
        self.end = end
        self.grid = grid
        self.sched = sched
        self.finishes = gl.constexpr(True)

    @gluon.jit
    def at(tile_id, sched: KGroupedTileScheduler):
        group = tile_id // sched.grid.num_tiles
        valid = group < sched.G
        g = gl.minimum(group, sched.G - 1)  # a past-the-end id reads the last group's ends, never past offs
        start = gl.load(sched.offs + gl.maximum(g - 1, 0))
        start = gl.where(g > 0, gl.minimum(gl.maximum(start, 0), sched.K), 0)
        end = gl.maximum(gl.minimum(gl.load(sched.offs + g), sched.K), start)
        first = start // sched.K_ALIGN * sched.K_ALIGN
        return KGroupedWork(tile_id, valid, group, first, start, end, sched.grid, sched)

    @gluon.must_use_result("Rebind it: `work = work.next()`.")
    @gluon.jit
    def next(self):
        return KGroupedWork.at(self.tile_id + gl.num_programs(0), self.sched)

    @gluon.jit
    def local(self):
        """The tile's id within its group."""
        return self.tile_id - self.group * self.grid.num_tiles

    @gluon.jit
    def coords(self):
        """(pid_m, pid_n) of the current tile within its group."""
        return self.grid.coords(self.local())

    @gluon.jit
    def origin(self, BM: gl.constexpr, BN: gl.constexpr):
        """(row, col) of D, the groups stacked [G * M, N], where the current BM x BN tile starts."""
        row, col = self.grid.origin(self.local(), BM, BN)
        return self.group * self.sched.M + row, col

    @gluon.jit
    def a_coords(self, row, k, A_KMAJOR: gl.constexpr = True):
        """A's tile at D's row `row` (A's rows are the group's: less the groups before) and K from the group's first
        k-step: [row, k] in A (M, K) K-major, else [k, row] in its transpose."""
        m = row - self.group * self.sched.M
        if A_KMAJOR:
            return m, self.first + k
        return self.first + k, m

    @gluon.jit
    def b_coords(self, col, k, B_KMAJOR: gl.constexpr):
        """B's tile at D's column `col` and K from the group's first k-step: [col, k] in B's transpose (N, K) K-major,
        else [k, col] in B (K, N)."""
        if B_KMAJOR:
            return col, self.first + k
        return self.first + k, col

    @gluon.jit
    def k_steps(self, k_tiles):
        """The group's k-steps: from `first` over its K, none where it is empty (`k_tiles`, the whole K's, is not this
        unit's)."""
        return 0, gl.where(self.end > self.start, gl.cdiv(self.end - self.first, self.sched.BK), 0)

    @gluon.jit
    def operands(self, a_from, b_from, a_desc, b_desc, A_KMAJOR: gl.constexpr, B_KMAJOR: gl.constexpr):
        """The kernel's descriptors re-cut at the group's K end, built on the device where the program's previous tile
        (its tile id less the grid's programs) lay in another group (the first: none), else (a_from, b_from)."""
        before = self.tile_id - gl.num_programs(0)
        if (before < 0) | (before // self.grid.num_tiles != self.group):
            ops = self.sched.ops
            if A_KMAJOR:
                a_from = bounded_like(a_desc, ops.a_ptr, self.sched.M, self.end, ops.lda)
            else:
                a_from = bounded_like(a_desc, ops.a_ptr, self.end, self.sched.M, ops.lda)
            if B_KMAJOR:
                b_from = bounded_like(b_desc, ops.b_ptr, self.sched.N, self.end, ops.ldb)
            else:
                b_from = bounded_like(b_desc, ops.b_ptr, self.end, self.sched.N, ops.ldb)
        return a_from, b_from

    @gluon.jit
    def mask_k(self, tiles, k, A_KMAJOR: gl.constexpr, B_KMAJOR: gl.constexpr):
        """Zero the previous group's columns before `start` that k-step k's stage holds (the first step, where `first`
        < `start`: never with K_ALIGN 1); the next group's, from `end`, came in as zeros (`operands`)."""
        if self.sched.K_ALIGN > 1:
            lo = self.start - self.first - k * self.sched.BK
            if lo > 0:
                zero_outside_k(tiles, lo, self.sched.BK, A_KMAJOR, B_KMAJOR)

    @gluon.jit
    def spills(self):
        """Whether the tile's rows reach past its group's M rows of D (M < BM): its store is masked."""
        return self.sched.M < self.sched.BM

    @gluon.jit
    def rows_end(self):
        """The end of the tile's group's rows in D (the groups stacked)."""
        return (self.group + 1) * self.sched.M
