"""`StaticTileScheduler`: program p takes tiles p, p + P, p + 2P, ... (P = grid size). No shared state."""

from triton.experimental import gluon
from triton.experimental.gluon import aggregate
from triton.experimental.gluon import language as gl

from tilepipe.schedulers.grid import TileGrid, TileWork


@aggregate
class StaticWork(TileWork):
    """One role's current tile under the static schedule."""
    tile_id: gl.tensor
    valid: gl.tensor
    grid: TileGrid
    finishes: gl.constexpr

    @gluon.constexpr_function
    def __init__(self, tile_id, valid, grid):
        self.tile_id = tile_id
        self.valid = valid
        self.grid = grid
        self.finishes = gl.constexpr(True)

    @gluon.jit
    def at(tile_id, grid: TileGrid):
        return StaticWork(tile_id, tile_id < grid.num_tiles, grid)

    @gluon.must_use_result("Rebind it: `work = work.next()`.")
    @gluon.jit
    def next(self):
        return StaticWork.at(self.tile_id + gl.num_programs(0), self.grid)


@aggregate
class StaticTileScheduler:
    """Persistent grid over the output tiles: program p takes tiles p, p + P, p + 2P, ... in grouped order."""
    grid: TileGrid

    @gluon.jit
    def create(M, N, BM: gl.constexpr, BN: gl.constexpr, GROUP_M: gl.constexpr):
        return StaticTileScheduler(TileGrid.create(M, N, BM, BN, GROUP_M))

    @gluon.jit
    def from_kernel(M, N, k_tiles, BM: gl.constexpr, BN: gl.constexpr, GROUP_M: gl.constexpr, pipelines, workspace,
                    partials=None):
        """The scheduler a GEMM kernel builds from its problem, its allocated pipelines and its workspace (this
        one needs neither)."""
        return StaticTileScheduler.create(M, N, BM, BN, GROUP_M)

    @gluon.jit
    def work(self, paces: gl.constexpr = False):
        """This program's first tile (`paces` matters only to the dynamic scheduler)."""
        return StaticWork.at(gl.program_id(0), self.grid)
