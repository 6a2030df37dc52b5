"""Chunk flags: a kernel waits until a chunk of its operand, written by another GPU or by the copy engine, has landed.

Tensor-parallel GEMMs (tilepipe/distributed/) receive A (or partial sums, C) in chunks, one per rank. After a chunk's
copy (or the kernel that stored it there) the copy engine writes the call's epoch into that chunk's int32 flag; the
waiting role spins on the flag with `ld.acquire.sys` until it holds the epoch, then `fence.proxy.async.global`, so the
TMA loads (the async proxy) that follow read what the acquire made visible (the generic proxy). The epoch is a
counter that every rank advances once a call on its own stream (`epoch_ptr`, read on the device): a flag from an
earlier call never matches, so repeated calls and CUDA-graph replays need no reset.

A spinning persistent kernel holds its SMs: whatever feeds a flag must need no SM of the waiting GPU (copy-engine
copies, stream memory operations, or another GPU's kernels), or it waits behind the kernel that waits for it.

The reduce-scatter's ring (`TileFlags`) flags each tile instead: the store role that TMA-stored a tile into the next
rank's memory waits until the stores are written (performed), orders them before the generic proxy
(`fence.proxy.async.global`) and stores the epoch into that rank's flag of the tile with `st.release.sys`; the
receiving epilogue-load role waits on that one flag before its C loads, as above. No copy engine, no kernel boundary:
a tile's partial sums are on their way while the kernel computes the next. Its slots and flags come in two sets, call
n using set n mod 2 (the epoch's parity, read on the device), so no barrier ends a call: rank r + 1 writes call
n + 1's tiles into set (n + 1) mod 2 only after its call n ended, which waited (through the ring) on rank r's call n,
which started after rank r's call n - 1, the set's last reader, ended (docs/tp.md).

Debug mode (a `report` and `timeout_ms`): a wait gives up after that long, stores (1, chunk, epoch, the flag's value,
program) in the REPORT_WORDS int32 words at `report` and goes on, so the kernel ends and the host names the chunk that
never came (tilepipe/distributed/).
"""

from triton.experimental import gluon
from triton.experimental.gluon import aggregate
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import tma

from tilepipe.pipeline.partials import lane_0_asm, one_per_lane

REPORT_WORDS = 8
"""int32 words of a debug report: timed out (1), chunk, epoch, the flag's value, program id, 3 spare."""
MAX_CHUNKS = 32
"""Chunks a waiting role tracks in its one-word mask of chunks seen arrived."""


def _spin(timed: bool) -> gl.constexpr:
    """The wait, run by each thread on its own: $1 the flag's address, $2 the epoch, with `timed` $3 the timeout in ms.
    Its lanes may leave the loop apart; `bar.warp.sync` joins them before the fence and whatever the warp does next.
    Its result ($0) is the flag's last value (the epoch unless timed out)."""
    timer = """ .reg .u64 start, now, limit;
 .reg .pred late;
 mul.wide.u32 limit, $3, 1000000;
 mov.u64 start, %globaltimer;""" if timed else ""
    check = """ mov.u64 now, %globaltimer;
 sub.u64 now, now, start;
 setp.lt.u64 late, now, limit;
 @late bra wait_chunk;""" if timed else " bra wait_chunk;"
    return gl.constexpr(f"""{{
 .reg .u32 seen;
 .reg .pred arrived;
{timer}
 wait_chunk:
 ld.acquire.sys.global.u32 seen, [$1];
 setp.eq.u32 arrived, seen, $2;
 @arrived bra chunk_landed;
{check}
 chunk_landed:
 bar.warp.sync -1;
 fence.proxy.async.global;
 mov.u32 $0, seen;
}}""")


_SPIN = _spin(False)
_TIMED_SPIN = _spin(True)
# a one-warp store role, its bulk stores written: every lane orders the async proxy's writes before the generic proxy
# (the lane that issued them among them), then lane 0 releases the epoch ($2) into the flag ($1) at system scope
_PUBLISH = lane_0_asm("", """ fence.proxy.async.global;
 bar.warp.sync -1;
 @first st.release.sys.global.u32 [$1], $2;""")


@gluon.jit
def _wait(flag, epoch, timeout_ms, report, chunk, layout: gl.constexpr, COUNT: gl.constexpr):
    """Every one of COUNT threads (one value each in `layout`) waits for `flag` to hold `epoch`; in debug mode
    (`report` given) for at most `timeout_ms`, writing the report where it timed out."""
    zeros = gl.zeros([COUNT], gl.int32, layout)
    if report is None:
        gl.inline_asm_elementwise(_SPIN, "=r,l,r", [flag + zeros, epoch + zeros], dtype=gl.int32, is_pure=False,
                                  pack=1)
    else:
        seen = gl.inline_asm_elementwise(_TIMED_SPIN, "=r,l,r,r", [flag + zeros, epoch + zeros, timeout_ms + zeros],
                                         dtype=gl.int32, is_pure=False, pack=1)
        word = gl.arange(0, COUNT, layout)
        value = gl.where(word == 0, 1, gl.where(word == 1, chunk, gl.where(word == 2, epoch, gl.where(
            word == 3, seen, gl.program_id(0)))))
        gl.store(report + word, value, mask=(word < 5) & (seen != epoch))


@aggregate
class ChunkFlags:
    """A role's view of the chunk flags: `flags` (an int32 per chunk), the call's `epoch`, `chunk_rows` rows of A a
    chunk, and `ready`, a mask of the chunks this role saw arrive (it waits on each chunk once). With `own` (a TMA
    descriptor over this rank's shard, chunk `rank`) that chunk is read where it lies: no copy, no flag to wait on.
    `report` and `timeout_ms`: debug mode (module docstring), else None and 0."""
    flags: gl.tensor
    epoch: gl.tensor
    chunk_rows: gl.tensor
    rank: gl.tensor
    ready: gl.tensor
    own: tma.tensor_descriptor | gl.constexpr
    report: gl.tensor | gl.constexpr
    timeout_ms: gl.tensor | gl.constexpr

    @gluon.constexpr_function
    def __init__(self, flags, epoch, chunk_rows, rank, ready, own, report, timeout_ms):
        self.flags = flags
        self.epoch = epoch
        self.chunk_rows = chunk_rows
        self.rank = rank
        self.ready = ready
        self.own = own if isinstance(own, tma.tensor_descriptor) else gl.constexpr(own)
        self.report = report if isinstance(report, gl.tensor) else gl.constexpr(report)
        self.timeout_ms = timeout_ms if isinstance(timeout_ms, gl.tensor) else gl.constexpr(timeout_ms)

    @gluon.jit
    def create(flags, epoch_ptr, chunk_rows, rank, own=None, report=None, timeout_ms=0):
        """The flags of a call whose epoch is at `epoch_ptr`, no chunk seen yet but the own one where `own` reads it."""
        ready = gl.to_tensor(0) if own is None else gl.to_tensor(1) << rank
        return ChunkFlags(flags, gl.load(epoch_ptr), chunk_rows, rank, ready, own, report, timeout_ms)

    @gluon.must_use_result("Rebind it: `arrivals = arrivals.wait_rows(row)`.")
    @gluon.jit
    def wait_rows(self, row):
        """Wait (a one-warp role) until the chunk holding A's row `row` arrived, unless this role saw it already. A
        tile's rows lie in one chunk (schedulers/chunked.py)."""
        chunk = row // self.chunk_rows
        ready = self.ready
        if (ready >> chunk) & 1 == 0:
            gl.static_assert(gl.num_warps() == 1, "a one-warp role waits on a chunk flag")
            _wait(self.flags + chunk, self.epoch, self.timeout_ms, self.report, chunk, one_per_lane(gl.num_ctas()),
                  32)
            ready = ready | (1 << chunk)
        return gl.aggregate_replace(self, ready=ready)

    @gluon.jit
    def load_a(self, tiles, a_desc, row, col):
        """TMA-load A's tile at (row, col) of the gathered A into the stage `tiles`: from `own` where the row is in
        this rank's chunk, else from `a_desc` (the chunks that arrived)."""
        if self.own is None:
            tiles.load_a(a_desc, [row, col])
        else:
            own_row = row - self.rank * self.chunk_rows
            if (own_row >= 0) & (own_row < self.chunk_rows):
                tiles.load_a(self.own, [own_row, col])
            else:
                tiles.load_a(a_desc, [row, col])


@aggregate
class TileFlags:
    """The ring's flags (module docstring), an int32 per tile of each chunk (schedulers/chunked.py ChunkedGrid) in each
    of two sets: this rank's `flags`, which the next rank sets, and `peer_flags`, the previous rank's, which this rank
    sets, with the call's `epoch`; `set_rows` and `set_flags`: where this call's set of the slots' rows and of the
    flags starts. The ring's first chunk (`first`) adds nothing received and its last, this rank's own (`rank`), goes
    nowhere. `report` and `timeout_ms`: debug mode (module docstring), else None and 0."""
    flags: gl.tensor
    peer_flags: gl.tensor
    epoch: gl.tensor
    first: gl.tensor
    rank: gl.tensor
    set_rows: gl.tensor
    set_flags: gl.tensor
    report: gl.tensor | gl.constexpr
    timeout_ms: gl.tensor | gl.constexpr

    @gluon.constexpr_function
    def __init__(self, flags, peer_flags, epoch, first, rank, set_rows, set_flags, report, timeout_ms):
        self.flags = flags
        self.peer_flags = peer_flags
        self.epoch = epoch
        self.first = first
        self.rank = rank
        self.set_rows = set_rows
        self.set_flags = set_flags
        self.report = report if isinstance(report, gl.tensor) else gl.constexpr(report)
        self.timeout_ms = timeout_ms if isinstance(timeout_ms, gl.tensor) else gl.constexpr(timeout_ms)

    @gluon.jit
    def create(flags, peer_flags, epoch_ptr, rank, world, chunk_rows, chunk_tiles, report=None, timeout_ms=0):
        """The flags of rank `rank` of `world` in a call whose epoch is at `epoch_ptr`, over chunks of `chunk_rows`
        rows and `chunk_tiles` tiles."""
        epoch = gl.load(epoch_ptr)
        parity = epoch & 1
        return TileFlags(flags, peer_flags, epoch, (rank + 1) % world, gl.to_tensor(rank), parity * world * chunk_rows,
                         parity * world * chunk_tiles, report, timeout_ms)

    @gluon.jit
    def index(self, work):
        """(the chunk of the scheduler's current tile, its flag's index in this call's set)."""
        return work.chunk, self.set_flags + work.chunk * work.grid.chunk.num_tiles + work.inner

    @gluon.jit
    def slot_row(self, row):
        """Where row `row` of the chunks lies in this call's set of the slots."""
        return self.set_rows + row

    @gluon.must_use_result("Rebind it: `arrivals, row = arrivals.wait_for(work, row)`.")
    @gluon.jit
    def wait_for(self, work, row):
        """Epilogue-load role (one warp): wait until the next rank's partial sums of the current tile arrived (none
        for the ring's first chunk); returns (self, where its C row `row` lies: slot_row)."""
        chunk, index = self.index(work)
        if chunk != self.first:
            _wait(self.flags + index, self.epoch, self.timeout_ms, self.report, chunk, one_per_lane(gl.num_ctas()),
                  32)
        return self, self.slot_row(row)

    @gluon.jit
    def publish(self, work):
        """Store role (one warp), after the current tile's stores: unless the tile is of this rank's own chunk (which
        stays here), wait until they are written, then set the previous rank's flag of the tile."""
        chunk, index = self.index(work)
        if chunk != self.rank:
            tma.store_wait(0, read_only=False)
            one: gl.constexpr = one_per_lane(gl.num_ctas())
            gl.inline_asm_elementwise(_PUBLISH, "=r,l,r", [self.peer_flags + index + gl.zeros([32], gl.int32, one),
                                                           self.epoch + gl.zeros([32], gl.int32, one)],
                                      dtype=gl.int32, is_pure=False, pack=1)


@aggregate
class RingDelivery:
    """Where the ring's store role writes a tile: the previous rank's slots (`peer_desc`, over both sets of its W
    chunks' rows, whose tile flags `flags` publishes), or, for this rank's own chunk, `out_desc` (its rows of the
    result)."""
    peer_desc: tma.tensor_descriptor
    out_desc: tma.tensor_descriptor
    flags: TileFlags

    @gluon.constexpr_function
    def __init__(self, peer_desc, out_desc, flags):
        self.peer_desc = peer_desc
        self.out_desc = out_desc
        self.flags = flags

    @gluon.jit
    def store(self, out, work, row, col):
        """TMA-store output stage `out` at (row, col) of the chunks' rows (OutputStage.store)."""
        chunk = work.chunk
        if chunk == self.flags.rank:
            out.store(self.out_desc, [row - chunk * work.grid.chunk.M, col])
        else:
            out.store(self.peer_desc, [self.flags.slot_row(row), col])

    @gluon.jit
    def sent(self, work):
        """After the current tile's stores: its flag (TileFlags.publish)."""
        self.flags.publish(work)
