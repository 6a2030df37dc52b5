"""`DynamicTileScheduler`: a scheduler role (one warp, `scheduler_role`) takes tile ids from a global
atomic counter and hands them to every other role through the ClcPipelineStorage ring: one slot per
tile id (16 bytes, the size of sm_100a's CLC response), full/empty barriers whose empty side counts
every consuming role. The load role paces the scheduler through the throttle pair: the scheduler
takes the next tile only once the load role started the previous one, so a CTA never reserves work
long before it can start it (reserving earlier measured slower, docs/scheduler.md). A tile id >= num_tiles is the
sentinel that ends every role's loop; the scheduler drains the ring before it exits.

The counter needs no reset from the host: program p's first tile is p, later ones are
`grid + atomic_add(counter, 1)`, and a scheduler whose first tile is valid draws tickets up to its first
one past the end. A launch therefore hands out exactly num_tiles tickets (num_tiles - grid that land,
one per program that misses), and the scheduler that draws ticket num_tiles - 1 sets the counter back to 0,
so the next launch (or CUDA-graph replay) on the stream starts from 0.
Two launches that share a counter must not run concurrently (host/launch.py keeps one workspace per stream).

In a two-CTA cluster a program is a cluster and its tiles are cluster tiles, so both CTAs must take the same ids.
Lane 0 of the first CTA's scheduler computes each id (the same tickets as above, per cluster), writes it into the
cluster's global row for the ring slot (`TICKET_BASE` on in the workspace, one row of TICKET_WORDS per cluster and
stage, rewritten only once both CTAs freed the slot) and fences it for the async proxy; each CTA's scheduler
expects the row's 16 bytes on its own full barrier and one TMA multicast lands it in both CTAs' slots (the ring is a
multicast ring: ClcPipelineStorage(multicast=True)). Each scheduler reads the id back to know when to stop and frees
the slot as one of its consumers. No cluster barrier is needed: a scalar atomic would synchronise the whole cluster
(docs/triton-notes.md), which the other roles never join.
"""

from triton.experimental import gluon
from triton.experimental.gluon import aggregate
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language._core import builtin
from triton.experimental.gluon.language.nvidia.hopper import tma
from triton.language.core import _unwrap_if_constexpr

from tilepipe.pipeline.partials import FLAG_WORDS, one_per_lane
from tilepipe.pipeline.ring import ProducerConsumerPipeline, _trace
from tilepipe.schedulers.grid import TileGrid
from tilepipe.schedulers.ringfed import RingWork, paced
from tilepipe.schedulers.static import StaticWork

TICKET_BASE = gl.constexpr(FLAG_WORDS.value)
"""The workspace's int32 word where the clusters' ticket rows start: past stream-K's flags, which must rest at 0
(the stream shares one workspace among the schedules), in the partial tiles' words, which hold nothing between
launches."""
TICKET_WORDS = gl.constexpr(4)
"""A ticket row: one 16-byte ring response (the tile id in every word)."""


def ticket_rows(programs: int, stages: int) -> int:
    """Ticket rows in the workspace for a launch of up to `programs` clusters with `stages` ring slots."""
    return programs * stages


@gluon.constexpr_function
def _response_layout(num_warps, num_ctas=1):
    """Every thread holds the whole 1 x 4-word response (each CTA its own copy): reading the tile id needs no
    shuffle and no other CTA."""
    return gl.BlockedLayout([1, 4], [1, 32], [1, num_warps], [1, 0], cga_layout=[[0, 0]] * (num_ctas.bit_length() - 1))


def _ticket_asm(draw: bool) -> gl.constexpr:
    """Lane 0 of the cluster's first CTA writes the tile id base ($4), plus (`draw`) a counter ticket, into all four
    words of the row at $2 (the ticket that is the last one, $3, sets the counter at $1 back to 0); then every lane
    orders the write before the async proxy (the multicast that reads the row, whichever lane issues it)."""
    drawn = """ @first atom.global.add.u32 t, [$1], 1;
 setp.eq.and.u32 last, t, $3, first;
 @last atom.global.exch.b32 lane, [$1], 0;
""" if draw else ""
    return gl.constexpr(f"""{{
 .reg .u32 lane, rank, t;
 .reg .pred first, last;
 mov.u32 lane, %laneid;
 mov.u32 rank, %cluster_ctarank;
 setp.eq.u32 first, lane, 0;
 setp.eq.and.u32 first, rank, 0, first;
 mov.u32 t, 0;
{drawn} add.u32 t, t, $4;
 @first st.global.v4.u32 [$2], {{t, t, t, t}};
 bar.warp.sync -1;
 fence.proxy.async.global;
 mov.u32 $0, 0;
}}""")


@gluon.jit
def _slot(response, index):
    """The 1 x 4 response words of ring slot `index` (the first row of its stage: storage.ClcPipelineStorage)."""
    return response.index(index).slice(0, 1)


@gluon.jit
def take_tile_id(ring: ProducerConsumerPipeline, response, ROLE: gl.constexpr):
    """The next tile id the scheduler role published (every role takes each one), its ring slot freed: (id, ring).
    ROLE: the calling role's name, so each role traces its own copy (_trace.current_role)."""
    with ring.consume() as slot:
        words = _slot(response, slot.index()).load(_response_layout(gl.num_warps(), gl.num_ctas()))
        tile_id = gl.max(gl.max(words, axis=1), axis=0)
    return tile_id, ring


_FIRST_TICKET = _ticket_asm(False)
_NEXT_TICKET = _ticket_asm(True)


@aggregate
class DynamicWork(RingWork):
    """One role's current tile under the dynamic schedule, and its cursor into the scheduler ring."""

    @gluon.jit
    def take(grid: TileGrid, ring: ProducerConsumerPipeline, throttle: ProducerConsumerPipeline, response,
             PACES: gl.constexpr, ROLE: gl.constexpr):
        """Wait for the next tile id in the ring, free its slot; a pacing role then lets the scheduler fetch on."""
        tile_id, ring = take_tile_id(ring, response, ROLE)
        valid = tile_id < grid.num_tiles
        return DynamicWork(tile_id, valid, grid, ring, paced(throttle, valid, PACES), response, PACES, ROLE)

    @gluon.must_use_result("Rebind it: `work = work.next()`.")
    @gluon.jit
    def next(self):
        return DynamicWork.take(self.grid, self.ring, self.throttle, self.response, self.PACES, self.ROLE)


@aggregate
class DynamicTileScheduler:
    """Tiles handed out at run time by `scheduler_role` from a global counter (int32, zero before the first
    launch, left at zero by every launch). `tickets`: in a two-CTA cluster, the TMA descriptor over the workspace's
    ticket rows ([rows, TICKET_WORDS] int32 from word TICKET_BASE, a row replicated in both CTAs); else None."""
    grid: TileGrid
    ring: ProducerConsumerPipeline
    throttle: ProducerConsumerPipeline
    response: gl.shared_memory_descriptor
    counter: gl.tensor
    tickets: tma.tensor_descriptor | gl.constexpr  # None (a constexpr) without a cluster

    @gluon.jit
    def from_kernel(M, N, k_tiles, BM: gl.constexpr, BN: gl.constexpr, GROUP_M: gl.constexpr, pipelines, workspace,
                    tickets=None, INWARD: gl.constexpr = False):
        """The scheduler a GEMM kernel builds from its problem, its allocated pipelines (the `clc` ring), its
        workspace (word 0 is the tile counter) and, in a cluster, the ticket rows' descriptor; INWARD: edge tiles
        moved inside the problem (TileGrid)."""
        return DynamicTileScheduler.create(M, N, BM, BN, GROUP_M, pipelines.clc, workspace, tickets, INWARD)

    @gluon.jit
    def create(M, N, BM: gl.constexpr, BN: gl.constexpr, GROUP_M: gl.constexpr, clc, counter, tickets=None,
               INWARD: gl.constexpr = False):
        """From the ClcPipelines that ClcPipelineStorage.allocate() gave."""
        gl.static_assert((gl.num_ctas() == 1) == (tickets is None),
                         "a two-CTA cluster shares its tile ids through the ticket rows' descriptor (and only it)")
        return DynamicTileScheduler(TileGrid.create(M, N, BM, BN, GROUP_M, INWARD), clc.pipeline, clc.throttle,
                                    clc.response, counter, tickets)

    @gluon.jit
    def cursor(self, tile_id):
        """Where tile id `tile_id` lies (the scheduler role's own view of the ids it publishes)."""
        return StaticWork.at(tile_id, self.grid)

    @builtin
    def work(self, paces=False, _semantic=None, _generator=None):
        """This role's first tile. The one role created with `paces=True` (the load role) paces the scheduler.

        The work carries the role's name as a constexpr, so each role traces its own copy of the ring handling
        and the protocol check sees every consuming role (_trace.current_role)."""
        args = [self.grid, self.ring, self.throttle, self.response, gl.constexpr(_unwrap_if_constexpr(paces)),
                gl.constexpr(_trace.current_role())]
        return _generator.call_JitFunction(DynamicWork.take, args, {})


@gluon.jit
def _publish(ring: ProducerConsumerPipeline, response, tile_id):
    """Write a tile id into the next free ring slot and signal it to every consuming role."""
    with ring.produce() as slot:
        _slot(response, slot.index()).store(gl.full([1, 4], tile_id, gl.int32, _response_layout(gl.num_warps())))
        slot.arrive()
    return ring


@gluon.jit
def _multicast(ring: ProducerConsumerPipeline, sched: DynamicTileScheduler, base, ASM: gl.constexpr):
    """Cluster form of _publish: the first CTA computes the tile id (ASM: base, or base plus a ticket) into the
    cluster's row for the next ring slot, one multicast lands it in both CTAs' slots; each CTA's scheduler reads it
    back and frees the slot as a consumer. Returns (ring, tile id)."""
    lanes: gl.constexpr = one_per_lane(gl.num_ctas())
    slot = ring.acquire_producer()  # in the first CTA: the consumers of both CTAs freed it (the row's last reader)
    row = gl.program_id(0) * ring.num_stages + slot.index()
    at = gl.zeros([32], gl.int32, lanes)
    gl.inline_asm_elementwise(ASM, "=r,l,l,r,r", [sched.counter + at, sched.counter + TICKET_BASE + row * TICKET_WORDS
                                                 + at, sched.grid.num_tiles - 1 + at, base + at],
                              dtype=gl.int32, is_pure=False, pack=1)
    slot.expect_loads(sched.tickets)
    response = _slot(sched.response, slot.index())
    tma.async_load(sched.tickets, [row, 0], slot.mbar(), response, multicast=True)
    slot.wait_filled()
    words = response.load(_response_layout(gl.num_warps(), gl.num_ctas()))
    tile_id = gl.max(gl.max(words, axis=1), axis=0)
    slot.read_back()
    return slot.release(), tile_id


@gluon.jit
def _cluster_scheduler_loop(sched: DynamicTileScheduler):
    """scheduler_role in a two-CTA cluster: the same tiles and tickets per cluster, shared through _multicast."""
    ring = sched.ring
    throttle = sched.throttle
    ring, tile_id = _multicast(ring, sched, gl.program_id(0), _FIRST_TICKET)
    while tile_id < sched.grid.num_tiles:
        with throttle.consume() as taken:  # the load role (of this CTA) started the tile published last
            pass
        ring, tile_id = _multicast(ring, sched, gl.num_programs(0), _NEXT_TICKET)
    ring.drain()


@gluon.jit
def scheduler_role(sched: DynamicTileScheduler):
    """The producer of the ring: this program's own tile first, then one counter ticket each time the load role
    took the previous tile, until a ticket past the end (published as the sentinel)."""
    if gl.num_ctas() > 1:
        _cluster_scheduler_loop(sched)
    else:
        _scheduler_loop(sched)


@gluon.jit
def _scheduler_loop(sched):
    """scheduler_role in a one-CTA program. `sched.cursor(tile_id)` follows the ids it publishes (their validity, and
    the tiles counted up to them: all of them once an id is past the end, which the last ticket's drawer sees)."""
    ring = sched.ring
    throttle = sched.throttle
    programs = gl.num_programs(0)
    tiles = sched.cursor(gl.program_id(0))
    ring = _publish(ring, sched.response, tiles.tile_id)
    while tiles.valid:
        with throttle.consume() as taken:  # the load role started the tile published last
            ticket = gl.atomic_add(sched.counter, 1)
        tiles = tiles.moved(ticket + programs)
        if ticket == tiles.counted() - 1:  # every other ticket of this launch was drawn: leave the counter at 0
            gl.atomic_xchg(sched.counter, 0)
        ring = _publish(ring, sched.response, tiles.tile_id)
    ring.drain()
