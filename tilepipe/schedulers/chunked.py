"""`ChunkedTileScheduler`: the static persistent schedule over a GEMM whose A arrives in chunks, one per rank of a
tensor-parallel group (tilepipe/distributed/: all-gather then GEMM). D's rows are `world` chunks of `chunk_rows`;
every tile lies inside one chunk (a chunk's last row of tiles starts early, overlapping the one before, as TileGrid's
INWARD does at D's edge), so a tile waits for one chunk. The tile order starts on this rank's own chunk, which is
there first, then takes the peers' chunks in the order they arrive: first + 1, first + 2, ... (mod world)."""

from triton.experimental import gluon
from triton.experimental.gluon import aggregate
from triton.experimental.gluon import language as gl

from tilepipe.schedulers.grid import TileGrid, TileWork


@aggregate
class ChunkedGrid:
    """`world` copies of one chunk's tile grid (`chunk`: grouped order, edge tiles inward), walked chunk by chunk
    from chunk `first`."""
    chunk: TileGrid
    first: gl.tensor
    world: gl.tensor | gl.constexpr  # a constexpr where the kernel specializes it
    num_tiles: gl.tensor
    INWARD: gl.constexpr

    @gluon.constexpr_function
    def __init__(self, chunk, first, world, num_tiles):
        self.chunk = chunk
        self.first = first
        self.world = world if isinstance(world, gl.tensor) else gl.constexpr(world)
        self.num_tiles = num_tiles
        self.INWARD = gl.constexpr(True)

    @gluon.jit
    def create(chunk_rows, N, world, first, BM: gl.constexpr, BN: gl.constexpr, GROUP_M: gl.constexpr):
        chunk = TileGrid.create(chunk_rows, N, BM, BN, GROUP_M, True)
        return ChunkedGrid(chunk, first, world, chunk.num_tiles * world)

    @gluon.jit
    def chunk_of(self, tile_id):
        """(the chunk of a tile id, its tile id inside the chunk's grid)."""
        per_chunk = self.chunk.num_tiles
        return (self.first + tile_id // per_chunk) % self.world, tile_id % per_chunk

    @gluon.jit
    def coords(self, tile_id):
        """(pid_m, pid_n) of a tile id: pid_m counts the rows of tiles of the chunks before it."""
        chunk, inner = self.chunk_of(tile_id)
        pid_m, pid_n = self.chunk.coords(inner)
        return chunk * self.chunk.num_pid_m + pid_m, pid_n

    @gluon.jit
    def origin(self, tile_id, BM: gl.constexpr, BN: gl.constexpr):
        """(row, col) where the BM x BN tile of a tile id starts, inside its chunk's rows and D's columns."""
        chunk, inner = self.chunk_of(tile_id)
        row, col = self.chunk.origin(inner, BM, BN)
        return chunk * self.chunk.M + row, col


@aggregate
class ChunkedWork(TileWork):
    """One role's current tile: program p takes tiles p, p + P, p + 2P, ... of the ChunkedGrid, each whole."""
    tile_id: gl.tensor
    valid: gl.tensor
    grid: ChunkedGrid
    finishes: gl.constexpr

    @gluon.constexpr_function
    def __init__(self, tile_id, valid, grid):
        self.tile_id = tile_id
        self.valid = valid
        self.grid = grid
        self.finishes = gl.constexpr(True)

    @gluon.jit
    def at(tile_id, grid: ChunkedGrid):
        return ChunkedWork(tile_id, tile_id < grid.num_tiles, grid)

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
    def create(chunk_rows, N, world, first, BM: gl.constexpr, BN: gl.constexpr, GROUP_M: gl.constexpr):
        """`world` chunks of `chunk_rows` rows of D (chunk_rows >= BM), N columns, starting at chunk `first`."""
        return ChunkedTileScheduler(ChunkedGrid.create(chunk_rows, N, world, first, BM, BN, GROUP_M))

    @gluon.jit
    def work(self, paces: gl.constexpr = False):
        """This program's first tile."""
        return ChunkedWork.at(gl.program_id(0), self.grid)
