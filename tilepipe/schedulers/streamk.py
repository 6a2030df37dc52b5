"""`StreamKTileScheduler`: data-parallel waves, then the last waves' k-steps split evenly over the programs; partial
tiles meet through a global workspace (tilepipe/pipeline/partials.py)."""

from triton.experimental import gluon
from triton.experimental.gluon import aggregate
from triton.experimental.gluon import language as gl

from tilepipe.pipeline.partials import PartialTiles
from tilepipe.schedulers.grid import TileGrid, TileWork


@aggregate
class StreamKTileScheduler:
    """Data-parallel waves, then stream-K: all but the last full wave's tiles go whole to programs in the static
    order; the remaining tiles' k-steps (between one and two waves' worth) are split evenly over the programs, so
    a partial last wave costs its share of the work and not a whole tile time. A program's range may start or end
    inside a tile; the program holding a tile's last k-step finishes it with the others' partial sums
    (tilepipe/pipeline/partials.py)."""
    grid: TileGrid
    k_tiles: gl.tensor
    dp_tiles: gl.tensor
    sk_steps: gl.tensor
    partials: PartialTiles

    @gluon.jit
    def from_kernel(M, N, k_tiles, BM: gl.constexpr, BN: gl.constexpr, GROUP_M: gl.constexpr, pipelines, workspace):
        """The scheduler a GEMM kernel builds from its problem and its workspace (no pipelines of its own)."""
        return StreamKTileScheduler.create(M, N, k_tiles, BM, BN, GROUP_M, workspace)

    @gluon.jit
    def create(M, N, k_tiles, BM: gl.constexpr, BN: gl.constexpr, GROUP_M: gl.constexpr, workspace):
        """`k_tiles`: the kernel's k-steps a tile; `workspace`: the flags and partial tiles (host/launch.py: scheduler_workspace)."""
        grid = TileGrid.create(M, N, BM, BN, GROUP_M)
        programs = gl.num_programs(0)
        waves = grid.num_tiles // programs
        ragged = grid.num_tiles % programs != 0
        dp_tiles = gl.where(ragged, gl.maximum(waves - 1, 0) * programs, grid.num_tiles)
        return StreamKTileScheduler(grid, k_tiles, dp_tiles, (grid.num_tiles - dp_tiles) * k_tiles,
                                    PartialTiles.create(workspace))

    @gluon.jit
    def first_step(self, program):
        """Where `program`'s stream-K range starts (ranges split sk_steps as evenly as integers allow)."""
        return (program.to(gl.int64) * self.sk_steps // gl.num_programs(0)).to(gl.int32)

    @gluon.jit
    def work(self, paces: gl.constexpr = False):
        """This program's first unit (`paces` matters only to the dynamic scheduler)."""
        program = gl.program_id(0)
        return StreamKWork.at(program, self.first_step(program), self.first_step(program + 1), self)


@aggregate
class StreamKWork(TileWork):
    """One role's current unit under the stream-K schedule: k-steps [k_begin, k_end) of tile `tile_id`. A program
    walks its stream-K range [start, stop) backwards, one tile's part at a time (`cursor`: where the part not yet
    done ends), and each part forwards in k. Walking back keeps every program at nearly the same k offset at the
    same time (program p does the head of tile p + 1, then the tail of tile p), so concurrent programs share their
    A and B panels through L2 as whole tiles do; walking forward staggered them and measured 2.8x slower a k-step."""
    tile_id: gl.tensor
    k_begin: gl.tensor
    k_end: gl.tensor
    valid: gl.tensor
    finishes: gl.tensor
    start: gl.tensor
    cursor: gl.tensor
    sched: StreamKTileScheduler

    @gluon.jit
    def at(whole_tile, start, cursor, sched: StreamKTileScheduler):
        """Tile `whole_tile` whole while it is one of the data-parallel tiles, else the stream-K unit that ends at
        `cursor` (the last part of [start, cursor) that lies in one tile)."""
        k_tiles = sched.k_tiles
        whole = whole_tile < sched.dp_tiles
        tile_first = (cursor - 1) // k_tiles * k_tiles
        tile_id = gl.where(whole, whole_tile, sched.dp_tiles + tile_first // k_tiles)
        k_begin = gl.where(whole, 0, gl.maximum(start, tile_first) - tile_first)
        k_end = gl.where(whole, k_tiles, cursor - tile_first)
        valid = whole | (start < cursor)
        return StreamKWork(tile_id, k_begin, k_end, valid, k_end == k_tiles, start, cursor, sched)

    @gluon.must_use_result("Rebind it: `work = work.next()`.")
    @gluon.jit
    def next(self):
        whole = self.tile_id < self.sched.dp_tiles
        return StreamKWork.at(gl.where(whole, self.tile_id + gl.num_programs(0), self.sched.dp_tiles), self.start,
                              gl.where(whole, self.cursor, self.cursor - self.k_end + self.k_begin), self.sched)

    @gluon.jit
    def coords(self):
        return self.sched.grid.coords(self.tile_id)

    @gluon.jit
    def k_steps(self, k_tiles):
        return self.k_begin, self.k_end

    @gluon.jit
    def add_partials(self, acc):
        """Finisher: add the partial sums of the earlier programs whose stream-K ranges end inside this tile. Each
        is that program's first stream-K unit, after only whole tiles, so it never waits itself; empty ranges
        publish nothing. A whole tile has none."""
        tile_first = (self.tile_id - self.sched.dp_tiles) * self.sched.k_tiles
        program = gl.where(self.tile_id < self.sched.dp_tiles, -1, gl.program_id(0) - 1)
        stop = self.start
        while (program >= 0) & (stop > tile_first):
            start = self.sched.first_step(program)
            if start < stop:
                acc = self.sched.partials.add(acc, program)
            program -= 1
            stop = start
        return acc

    @gluon.jit
    def publish_partial(self, acc):
        """Contributor: hand this unit's partial sum to the tile's finisher."""
        self.sched.partials.publish(acc, gl.program_id(0))
