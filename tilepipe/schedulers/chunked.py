"""`ChunkedTileScheduler`: the static persistent schedule over a GEMM whose A arrives in chunks, one per rank of a
tensor-parallel group (tilepipe/distributed/). D's rows are `world` chunks of `chunk_rows`; every tile lies inside
one chunk (a chunk's last row of tiles starts early, overlapping the one before, as TileGrid's INWARD does at D's
edge), so a tile waits for one chunk. The chunks are taken in turn from chunk `first`: first + 1, first + 2, ...
(mod world). All-gather then GEMM walks them one after the other, from its own chunk in the order the peers' arrive.
The reduce-scatter's ring staggers them (`lag`): tile k of the s-th chunk goes in slot k + s * lag, slot by slot, so
a chunk's tile comes `lag` slots after the same tile of the chunk before, and the ring's stores to the next rank
spread over the whole kernel instead of filling its first half."""

from triton.experimental import gluon
from triton.experimental.gluon import aggregate
from triton.experimental.gluon import language as gl

from tilepipe.schedulers.grid import TileGrid, TileWork


@aggregate
class ChunkedGrid:
    """`world` copies of one chunk's tile grid (`chunk`: grouped order, edge tiles inward), walked from chunk
    `first`: chunk by chunk, or staggered by `lag` slots (module docstring)."""
    chunk: TileGrid
    first: gl.tensor
    world: gl.tensor | gl.constexpr  # a constexpr where the kernel specializes it
    num_tiles: gl.tensor
    lag: gl.tensor | gl.constexpr
    INWARD: gl.constexpr

    @gluon.constexpr_function
    def __init__(self, chunk, first, world, num_tiles, lag):
        self.chunk = chunk
        self.first = first
        self.world = world if isinstance(world, gl.tensor) else gl.constexpr(world)
        self.num_tiles = num_tiles
        self.lag = lag if isinstance(lag, gl.tensor) else gl.constexpr(lag)
        self.INWARD = gl.constexpr(True)

    @gluon.jit
    def create(chunk_rows, N, world, first, BM: gl.constexpr, BN: gl.constexpr, GROUP_M: gl.constexpr, lag=None):
        chunk = TileGrid.create(chunk_rows, N, BM, BN, GROUP_M, True)
        return ChunkedGrid(chunk, first, world, chunk.num_tiles * world, lag)

    @gluon.jit
    def chunk_of(self, tile_id):
        """(the chunk of a tile id, its tile id inside the chunk's grid)."""
        if self.lag is None:
            per_chunk = self.chunk.num_tiles
            chunk = (self.first + tile_id // per_chunk) % self.world
            inner = tile_id % per_chunk
        else:
            turn, inner = self.staggered(tile_id)
            chunk = (self.first + turn) % self.world
        return chunk, inner

    @gluon.jit
    def staggered(self, tile_id):
        """(s, k): tile k of the s-th chunk at position `tile_id` of the staggered order. Its slot is the last one
        that starts at or before the position (a binary search over before()), the chunks of a slot in turn."""
        low = tile_id * 0
        high = self.chunk.num_tiles + (self.world - 1) * self.lag  # before(low) <= tile_id < before(high)
        while high - low > 1:
            middle = (low + high) // 2
            if self.before(middle) <= tile_id:
                low = middle
            else:
                high = middle
        first_turn = gl.maximum(gl.cdiv(low - self.chunk.num_tiles + 1, self.lag), 0)  # the slot's earliest chunk
        turn = first_turn + tile_id - self.before(low)
        return turn, low - turn * self.lag

    @gluon.jit
    def before(self, slot):
        """How many tiles the staggered order puts in the slots before `slot`."""
        count = slot * 0
        for turn in range(self.world):
            count += gl.minimum(gl.maximum(slot - turn * self.lag, 0), self.chunk.num_tiles)
        return count

    @gluon.jit
    def coords(self, chunk, inner):
        """(pid_m, pid_n) of tile `inner` of chunk `chunk`: pid_m counts the rows of tiles of the chunks before it."""
        pid_m, pid_n = self.chunk.coords(inner)
        return chunk * self.chunk.num_pid_m + pid_m, pid_n

    @gluon.jit
    def origin(self, chunk, inner, BM: gl.constexpr, BN: gl.constexpr):
        """(row, col) where the BM x BN tile `inner` of chunk `chunk` starts, inside the chunks' rows and D's
        columns."""
        row, col = self.chunk.origin(inner, BM, BN)
        return chunk * self.chunk.M + row, col


@aggregate
class ChunkedWork(TileWork):
    """One role's current tile: program p takes tiles p, p + P, p + 2P, ... of the ChunkedGrid, each whole; its
    `chunk` and its tile id `inner` in the chunk's grid are found once a tile (the staggered order's search)."""
    tile_id: gl.tensor
    valid: gl.tensor
    grid: ChunkedGrid
    chunk: gl.tensor
    inner: gl.tensor
    finishes: gl.constexpr

    @gluon.constexpr_function
    def __init__(self, tile_id, valid, grid, chunk, inner):
        self.tile_id = tile_id
        self.valid = valid
        self.grid = grid
        self.chunk = chunk
        self.inner = inner
        self.finishes = gl.constexpr(True)

    @gluon.jit
    def at(tile_id, grid: ChunkedGrid):
        chunk, inner = grid.chunk_of(tile_id)
        return ChunkedWork(tile_id, tile_id < grid.num_tiles, grid, chunk, inner)

    @gluon.jit
    def coords(self):
        """(pid_m, pid_n) of the current tile."""
        return self.grid.coords(self.chunk, self.inner)

    @gluon.jit
    def origin(self, BM: gl.constexpr, BN: gl.constexpr):
        """(row, col) where the current BM x BN tile starts."""
        return self.grid.origin(self.chunk, self.inner, BM, BN)

    @gluon.jit
    def adds_c(self):
        """Every chunk's tiles but the first chunk's: the reduce-scatter ring's first chunk receives no partial sums,
        so its epilogue adds no C (kernels/rs_matmul.py)."""
        return self.chunk != self.grid.first

    @gluon.must_use_result("Rebind it: `work = work.next()`.")
    @gluon.jit
    def next(self):
        return ChunkedWork.at(self.tile_id + gl.num_programs(0), self.grid)


@aggregate
class ChunkedTileScheduler:
    """Persistent grid over a ChunkedGrid (ChunkedWork)."""
    grid: ChunkedGrid

    @gluon.constexpr_function
    def __init__(self, grid):
        self.grid = grid

    @gluon.jit
    def create(chunk_rows, N, world, first, BM: gl.constexpr, BN: gl.constexpr, GROUP_M: gl.constexpr, lag=None):
        """`world` chunks of `chunk_rows` rows of D (chunk_rows >= BM), N columns, starting at chunk `first`, one
        after the other or staggered by `lag` slots."""
        return ChunkedTileScheduler(ChunkedGrid.create(chunk_rows, N, world, first, BM, BN, GROUP_M, lag))

    @gluon.jit
    def work(self, paces: gl.constexpr = False):
        """This program's first tile."""
        return ChunkedWork.at(gl.program_id(0), self.grid)
