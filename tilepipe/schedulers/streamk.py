"""`StreamKTileScheduler`: data-parallel waves, then the partial last wave's k-steps (with the last full wave's where
the partial wave is under half the programs) split evenly over the programs; partial tiles meet through a global
workspace (tilepipe/pipeline/partials.py)."""

from triton.experimental import gluon
from triton.experimental.gluon import aggregate
from triton.experimental.gluon import language as gl

from tilepipe.pipeline.partials import PartialTiles
from tilepipe.schedulers.grid import TileGrid, TileWork


@aggregate
class StreamKTileScheduler:
    """Data-parallel waves, then stream-K: the full waves' tiles go whole to programs in the static order, and the
    partial last wave's k-steps are split evenly over the programs, so it costs its share of the work and not a
    whole tile time. A partial wave under half the programs takes the last full wave with it (between one and 1.5
    waves' worth split), so no tile is split over more than three programs (each partial sum is one more trip
    through memory); from half a wave on it is split alone, and every program keeps one whole tile a wave (at
    2560^3 in 128x256 tiles: 132 whole and 68 split, not 200 split). A program's range may start or end inside a
    tile; the program holding a tile's last k-step finishes it with the others' partial sums
    (tilepipe/pipeline/partials.py)."""
    grid: TileGrid
    k_tiles: gl.tensor
    dp_tiles: gl.tensor
    sk_steps: gl.tensor
    partials: PartialTiles

    @gluon.jit
    def from_kernel(M, N, k_tiles, BM: gl.constexpr, BN: gl.constexpr, GROUP_M: gl.constexpr, pipelines, workspace,
                    partials=None, INWARD: gl.constexpr = False):
        """The scheduler a GEMM kernel builds from its problem and its partial tiles (no pipelines of its own)."""
        return StreamKTileScheduler.create(M, N, k_tiles, BM, BN, GROUP_M, partials, INWARD)

    @gluon.jit
    def create(M, N, k_tiles, BM: gl.constexpr, BN: gl.constexpr, GROUP_M: gl.constexpr, partials: PartialTiles,
               INWARD: gl.constexpr = False):
        """`k_tiles`: the kernel's k-steps a tile; `partials`: the workspace's flags and partial tiles and the
        stages they travel through (pipeline/partials.py), found by tile id; INWARD: edge tiles moved inside the
        problem (TileGrid)."""
        grid = TileGrid.create(M, N, BM, BN, GROUP_M, INWARD)
        programs = gl.num_programs(0)
        waves = grid.num_tiles // programs
        rest = grid.num_tiles % programs
        # a partial wave of at least half the programs is split alone (its tiles over two or three programs each)
        dp_waves = gl.where(2 * rest >= programs, waves, gl.maximum(waves - 1, 0))
        dp_tiles = gl.where(rest != 0, dp_waves * programs, grid.num_tiles)
        return StreamKTileScheduler(grid, k_tiles, dp_tiles, (grid.num_tiles - dp_tiles) * k_tiles, partials)

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
    def origin(self, BM: gl.constexpr, BN: gl.constexpr):
        return self.sched.grid.origin(self.tile_id, BM, BN)

    @gluon.jit
    def k_steps(self, k_tiles):
        return self.k_begin, self.k_end

    @gluon.jit
    def next_partial(self, program, stop):
        """The contributor below `program` whose stream-K range ends at `stop` inside this tile, skipping empty
        ranges (which publish nothing): (its slot, its range's start), or slot -1 when there is none. Each is that
        program's first stream-K unit, after only whole tiles, so it never waits itself. A whole tile has none."""
        tile_first = (self.tile_id - self.sched.dp_tiles) * self.sched.k_tiles
        program = gl.where(self.tile_id < self.sched.dp_tiles, -1, program - 1)
        start = self.sched.first_step(gl.maximum(program, 0))
        while (program >= 0) & (stop > tile_first) & (start == stop):
            program -= 1
            start = self.sched.first_step(gl.maximum(program, 0))
        return gl.where((program >= 0) & (stop > tile_first), program, -1), start

    @gluon.jit
    def add_partials(self, acc, outputs, sources):
        """Finisher's mma role: acc plus the partial sums of the earlier programs whose stream-K ranges end inside
        this tile, from the stages the epilogue-load role fills (fetch_partials); returns (acc, outputs, sources)."""
        parts = self.sched.partials.split(acc)  # carried split through the loop: a join per add spills
        slot, stop = self.next_partial(gl.program_id(0), self.start)
        while slot >= 0:
            parts, outputs, sources = self.sched.partials.receive(parts, outputs, sources)
            slot, stop = self.next_partial(slot, stop)
        return self.sched.partials.join(parts, acc.type.layout), outputs, sources

    @gluon.jit
    def pass_partials(self, outputs, sources):
        """Finisher's store role: the stages each partial sum used go back to the ring unstored."""
        slot, stop = self.next_partial(gl.program_id(0), self.start)
        while slot >= 0:
            outputs, sources = self.sched.partials.pass_on(outputs, sources)
            slot, stop = self.next_partial(slot, stop)
        return outputs, sources

    @gluon.jit
    def fetch_partials(self, sources):
        """Finisher's epilogue-load role: wait for each contributor's signal and TMA-load its partial sum."""
        slot, stop = self.next_partial(gl.program_id(0), self.start)
        while slot >= 0:
            sources = self.sched.partials.fetch(slot, sources)
            slot, stop = self.next_partial(slot, stop)
        return sources

    @gluon.jit
    def publish_partial(self, acc, outputs, sources):
        """Contributor's mma role: hand this unit's partial sum to the store role through the output stages."""
        return self.sched.partials.send(acc, outputs, sources)

    @gluon.jit
    def store_partial(self, outputs, sources):
        """Contributor's store role: TMA-store the partial sum into this program's slot and signal the finisher."""
        return self.sched.partials.store(gl.program_id(0), outputs, sources)

    @gluon.jit
    def skip_partial(self, sources):
        """Contributor's epilogue-load role: the empty fills of the stages the partial sum passes through."""
        return self.sched.partials.skip(sources)
