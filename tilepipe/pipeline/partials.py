"""Partial tiles between programs: the cross-CTA pipeline of stream-K (tilepipe/schedulers/).

When the stream-K scheduler splits a tile's K loop over several programs, every program but the one that holds
the tile's last k-step (the *finisher*) is a *contributor*: it publishes its fp32 partial sum into its own slot
of a global workspace and signals the slot's flag; the finisher adds each contributor's slot to its accumulator
and then runs the tile's epilogue alone. A program is a contributor at most once (only the last part of its range
can end inside a tile, and it walks its range backwards, so that part is its first unit), so slot = program id.

The sums travel by TMA through the output stages, in sub-tiles of a stage's bytes (`partial_box`), so the MMA
warpgroups only write or read shared memory and go on:
  contributor  mma: each sub-tile into an output stage; store: TMA-stores it into the slot, then (all of them
               written, `store_wait` with writes) `fence.proxy.async.global` and a `red.release` add  -> flag 1
  finisher     epilogue_load: spins (`ld.acquire`) until the flag is set and stores 0 (the slot's only reader),
               `fence.proxy.async.global`, TMA-loads each sub-tile into a stage (the epi_load ring, like C);
               mma adds it from shared memory
Every use of an output stage passes epilogue_load (a fill or an empty arrival), mma and store in that order, so
the epi_load ring runs in lockstep with the output ring and a fill never lands in a stage a store still reads.
The proxy fences: TMA is the async proxy and the flag's release and acquire the generic one, and PTX orders two
proxies' accesses only across a `fence.proxy.async` (the bulk group's completion, waited for with its writes, makes
them performed; the fence then orders them before the release; the acquire is likewise fenced before the TMA
reads). The flags rest at 0 between launches (or CUDA-graph replays): no host reset; the next launch rewrites a slot
only after this one ended. Contributors never wait, and a finisher waits only for other programs' first units, so
no wait depends on a waiting program.
"""

from triton.experimental import gluon
from triton.experimental.gluon import aggregate
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import tma

from tilepipe.pipeline.output import column_join, column_parts

FLAG_WORDS = gl.constexpr(1024)
"""int32 flags ahead of the partial tiles in the workspace (one per CTA: at most this many CTAs)."""


def partial_box(rows: int, cols: int, out_bits: int) -> tuple[int, int]:
    """The TMA box of a partial sub-tile of a rows x cols fp32 accumulator: the bytes of one output stage of
    `out_bits`-bit D (half the columns for a 16-bit D: the even or the odd ones), so a sub-tile fills one stage."""
    return rows, cols * out_bits // 32


# Each asm runs in every thread of a one-warp role (the store and epilogue-load roles); lane 0 acts for the role, and
# `bar.warp.sync` orders the other lanes' operations with lane 0's.


def lane_0_asm(registers: str, body: str) -> gl.constexpr:
    """An asm block that sets predicate `first` on lane 0, declares `registers`, then runs `body`; its result ($0)
    is always 0."""
    return gl.constexpr(f"""{{
 .reg .u32 lane;
 .reg .pred first;
 {registers}
 mov.u32 lane, %laneid;
 setp.eq.u32 first, lane, 0;
{body}
 mov.u32 $0, 0;
}}""")


# store role, after its bulk stores completed: every lane orders the async proxy's writes before the generic proxy
# (the lane that issued them among them), then lane 0 releases the flag
_SIGNAL = lane_0_asm("", """ fence.proxy.async.global;
 bar.warp.sync -1;
 @first red.release.gpu.global.add.s32 [$1], 1;""")
# epilogue-load role: lane 0 acquires the flag and retires it (the slot's only reader), then every lane orders the
# acquire before the TMA reads that follow (whichever lane issues them)
_TAKE = lane_0_asm(".reg .s32 seen;\n .reg .pred early;", """ @!first bra taken;
 wait_flag:
 ld.acquire.gpu.global.s32 seen, [$1];
 setp.eq.s32 early, seen, 0;
 @early bra wait_flag;
 st.relaxed.gpu.global.s32 [$1], 0;
 taken:
 bar.warp.sync -1;
 fence.proxy.async.global;""")


@gluon.constexpr_function
def one_per_lane(num_ctas):
    """One value per lane of a one-warp role, each CTA of a cluster with its own copy (replicated over the CTAs)."""
    return gl.BlockedLayout([1], [32], [1], [0], cga_layout=[[0]] * (num_ctas.bit_length() - 1))


@gluon.jit
def _on_flag(asm: gl.constexpr, flag):
    """`asm` run exactly once by every thread of the calling one-warp role, on `flag`."""
    gl.static_assert(gl.num_warps() == 1, "lane 0 of a one-warp role signals and takes a flag")
    one: gl.constexpr = one_per_lane(gl.num_ctas())
    return gl.inline_asm_elementwise(asm, "=r,l", [flag + gl.zeros([32], gl.int32, one)], dtype=gl.int32,
                                     is_pure=False, pack=1)


@gluon.jit
def _cta_rank():
    """This CTA's rank in its cluster (%cluster_ctarank); 0 without a cluster, read only in one."""
    if gl.num_ctas() == 1:
        rank = 0
    else:
        rank = gl.inline_asm_elementwise("mov.u32 $0, %cluster_ctarank;", "=r", [], dtype=gl.int32, is_pure=True,
                                         pack=1)
    return rank


@gluon.jit
def _split(acc, COUNT: gl.constexpr):
    """A register tile as COUNT sub-tiles without moving data: its even and its odd columns where COUNT is 2, since
    column bit 0 of the wgmma layout is a register bit at every tile width (even at 8 columns); COUNT contiguous
    column parts where it is more (D in sub-tiles: parts of 32 columns of a 256-wide tile, whose column bits from 3
    up are register bits too). The slot keeps them as COUNT planes; only the finisher reads it, through the same
    split."""
    BM: gl.constexpr = acc.shape[0]
    BN: gl.constexpr = acc.shape[1]
    if COUNT == 2:
        parts = gl.split(acc.reshape([BM, BN // 2, 2]))
    else:
        parts = column_parts(acc, COUNT)
    return parts


@gluon.jit
def _join(parts, layout: gl.constexpr):
    """The register tile (in `layout`) whose sub-tiles _split gave."""
    if len(parts) == 2:
        joined = gl.join(parts[0], parts[1])
        acc = joined.reshape([joined.shape[0], joined.shape[1] * 2])
    else:
        acc = column_join(parts)
    return gl.convert_layout(acc, layout)  # the same layout: no data moves


@gluon.jit
def _settled(x):
    """x, computed where it stands: an opaque (side-effecting) copy keeps LLVM from sinking a sub-tile's adds to the
    end of the finisher's loop, where every sub-tile's loaded values would be live at once (and spill)."""
    return gl.inline_asm_elementwise("mov.b32 $0, $1;", "=r,r", [x], dtype=gl.float32, is_pure=False, pack=1)


@aggregate
class PartialTiles:
    """The workspace's FLAG_WORDS int32 flags; `desc`, a TMA descriptor over its fp32 partial tiles (slot p's
    tile at rows p * BM, in partial_box boxes); `stages`, the output stages seen as such boxes (same bytes)."""
    flags: gl.tensor
    desc: tma.tensor_descriptor
    stages: gl.shared_memory_descriptor
    COUNT: gl.constexpr

    @gluon.jit
    def create(workspace, desc, out_tiles, BN: gl.constexpr):
        """From the int32 workspace pointer (host/launch.py: scheduler_workspace), the partials' descriptor, the
        output stages (`OutputTileStorage` tiles) and the accumulator's columns BN."""
        stages = out_tiles.reinterpret(gl.float32, [out_tiles.shape[0]] + desc.block_type.shape, desc.layout)
        return PartialTiles(workspace, desc, stages, BN // desc.block_type.shape[1])

    @gluon.jit
    def flag(self, slot):
        """This CTA's flag of `slot`: a cluster's CTAs each store and signal their own part of the slot's tile."""
        return self.flags + slot * gl.num_ctas() + _cta_rank()

    @gluon.jit
    def send(self, acc, outputs, sources):
        """Contributor's mma role: each sub-tile of `acc` into an output stage for the store role; returns
        (outputs, sources), advanced."""
        parts = _split(acc, self.COUNT)
        for j in gl.static_range(self.COUNT):
            with outputs.produce() as out:
                _, sources = sources.wait()  # the empty fill of this use (epi_load in lockstep)
                self.stages.index(out.index()).store(parts[j])
                out.arrive()
        return outputs, sources

    @gluon.jit
    def split(self, acc):
        """The finisher's accumulator as the column sub-tiles `receive` adds to (join() puts it back)."""
        return _split(acc, self.COUNT)

    @gluon.jit
    def join(self, parts, layout: gl.constexpr):
        return _join(parts, layout)

    @gluon.jit
    def receive(self, parts, outputs, sources):
        """Finisher's mma role: the column sub-tiles `parts` (split()) plus a contributor's, one stage each as
        the epilogue-load role brings them; returns (parts, outputs, sources), advanced."""
        summed = ()
        for j in gl.static_range(self.COUNT):
            with outputs.produce() as out:
                _, sources = sources.wait()
                summed = summed + (_settled(parts[j] + self.stages.index(out.index()).load(parts[j].type.layout)), )
                out.arrive()  # nothing to store: the store role passes the stage on
        return summed, outputs, sources

    @gluon.jit
    def store(self, slot, outputs, sources):
        """Contributor's store role: TMA-store the COUNT sub-tiles into `slot`, then signal it once they are
        written; returns (outputs, sources), advanced."""
        BM: gl.constexpr = self.desc.block_type.shape[0]
        SUB: gl.constexpr = self.desc.block_type.shape[1]
        for j in gl.static_range(self.COUNT):
            with outputs.consume() as out:
                tma.async_store(self.desc, [slot * BM, j * SUB], self.stages.index(out.index()))
                tma.store_wait(0)  # read: the stage may be refilled
                sources = sources.release()
        tma.store_wait(0, read_only=False)  # written (performed), before the proxy fence and the release
        _on_flag(_SIGNAL, self.flag(slot))
        return outputs, sources

    @gluon.jit
    def pass_on(self, outputs, sources):
        """Finisher's store role: free the COUNT stages one received partial used; returns (outputs, sources)."""
        for j in gl.static_range(self.COUNT):
            with outputs.consume() as out:
                sources = sources.release()
        return outputs, sources

    @gluon.jit
    def fetch(self, slot, sources):
        """Finisher's epilogue-load role: wait for `slot`'s signal, retire it, TMA-load its COUNT sub-tiles into
        the stages in turn; returns `sources`, advanced."""
        BM: gl.constexpr = self.desc.block_type.shape[0]
        SUB: gl.constexpr = self.desc.block_type.shape[1]
        _on_flag(_TAKE, self.flag(slot))
        for j in gl.static_range(self.COUNT):
            sources = sources.load(self.desc, [slot * BM, j * SUB], self.stages)
        return sources

    @gluon.jit
    def skip(self, sources):
        """Contributor's epilogue-load role: the empty fills of the COUNT stages its partial sum passes through."""
        for j in gl.static_range(self.COUNT):
            sources = sources.skip()
        return sources
