"""`StaticTileScheduler`: program p takes tiles p, p + P, p + 2P, ... (P = grid size). No shared state. Roles that
take turns (pipeline/turns.py) each walk every other one of the program's tiles."""

from triton.experimental import gluon
from triton.experimental.gluon import aggregate
from triton.experimental.gluon import language as gl

from tilepipe.schedulers.grid import TileGrid, TileWork


@aggregate
class StaticWork(TileWork):
    """One role's current tile under the static schedule (`turns` > 1: every turns-th of the program's tiles)."""
    tile_id: gl.tensor
    valid: gl.tensor
    grid: TileGrid
    turns: gl.constexpr
    finishes: gl.constexpr

    @gluon.constexpr_function
    def __init__(self, tile_id, valid, grid, turns=1):
        self.tile_id = tile_id
        self.valid = valid
        self.grid = grid
        self.turns = gl.constexpr(turns)
        self.finishes = gl.constexpr(True)

    @gluon.jit
    def at(tile_id, grid: TileGrid, turns: gl.constexpr = 1):
        return StaticWork(tile_id, tile_id < grid.num_tiles, grid, turns)

    @gluon.must_use_result("Rebind it: `work = work.next()`.")
    @gluon.jit
    def next(self):
        return self.moved(self.tile_id + self.turns * gl.num_programs(0))

    @gluon.jit
    def moved(self, tile_id):
        """The same walk at tile id `tile_id` (the dynamic scheduler role's cursor)."""
        return StaticWork.at(tile_id, self.grid, self.turns)

    @gluon.jit
    def counted(self):
        """The tiles a valid id lies below: all of them."""
        return self.grid.num_tiles

    @gluon.jit
    def followed(self):
        """Whether the program has a tile after this one (where roles take turns, the next role's)."""
        return self.tile_id + gl.num_programs(0) < self.grid.num_tiles


@aggregate
class StaticTileScheduler:
    """Persistent grid over the output tiles: program p takes tiles p, p + P, p + 2P, ... in grouped order. A view
    `taking_turns(turn, turns)` walks the tiles a role of `turns` taking turns gets: the turn-th, then every turns-th."""
    grid: TileGrid
    turn: gl.constexpr
    turns: gl.constexpr

    @gluon.constexpr_function
    def __init__(self, grid, turn=0, turns=1):
        self.grid = grid
        self.turn = gl.constexpr(turn)
        self.turns = gl.constexpr(turns)

    @gluon.jit
    def create(M, N, BM: gl.constexpr, BN: gl.constexpr, GROUP_M: gl.constexpr, INWARD: gl.constexpr = False):
        """INWARD: edge tiles moved inside the problem (TileGrid)."""
        return StaticTileScheduler(TileGrid.create(M, N, BM, BN, GROUP_M, INWARD))

    @gluon.jit
    def taking_turns(self, turn: gl.constexpr, turns: gl.constexpr):
        return StaticTileScheduler(self.grid, turn, turns)

    @gluon.jit
    def from_kernel(M, N, k_tiles, BM: gl.constexpr, BN: gl.constexpr, GROUP_M: gl.constexpr, pipelines, workspace,
                    partials=None, INWARD: gl.constexpr = False):
        """The scheduler a GEMM kernel builds from its problem, its allocated pipelines and its workspace (this
        one needs neither); INWARD: edge tiles moved inside the problem (TileGrid)."""
        return StaticTileScheduler.create(M, N, BM, BN, GROUP_M, INWARD)

    @gluon.jit
    def work(self, paces: gl.constexpr = False):
        """This program's first tile (`paces` matters only to the dynamic scheduler)."""
        return StaticWork.at(gl.program_id(0) + self.turn * gl.num_programs(0), self.grid, self.turns)
