"""Partial tiles between programs: the cross-CTA pipeline of stream-K (tilepipe/schedulers/).

When the stream-K scheduler splits a tile's K loop over several programs, every program but the one that holds
the tile's last k-step (the *finisher*) is a *contributor*: it publishes its fp32 partial sum into its own slot
of a global workspace and signals the slot's flag; the finisher adds each contributor's slot to its accumulator
and then runs the tile's epilogue alone. A program is a contributor at most once (only the last part of its range
can end inside a tile, and it walks its range backwards, so that part is its first unit), so slot = program id.

The protocol, per slot, counted in warps of the role that runs it (T = its warps; lane 0 acts for its warp):
  contributor  stores its partial; each warp `red.release` adds 1                -> flag reaches T
  finisher     each warp spins (`ld.acquire`) until flag >= T, loads the slot;
               each warp adds 1; the warp that brings it to 2T stores 0         -> flag back at 0
so the workspace needs no host reset between launches (or CUDA-graph replays). Contributors never wait, and a
finisher waits only for other programs' first units, so no wait depends on a waiting program.
"""

from triton.experimental import gluon
from triton.experimental.gluon import aggregate
from triton.experimental.gluon import language as gl

FLAG_WORDS = gl.constexpr(1024)
"""int32 flags ahead of the partial tiles in the workspace (one per program: at most this many programs)."""

# Each asm runs in every thread of the role; lane 0 of each warp acts for its warp, after `bar.warp.sync`, which
# orders the other lanes' memory operations with lane 0's (so a warp's release covers its lanes' stores, and its
# lanes' loads follow its acquire). Per-warp instead of per-thread: 1/32 of the fences, spins and same-address atomics.


def _lane_0(registers: str, body: str) -> gl.constexpr:
    """An asm block that sets predicate `first` on lane 0 of each warp, declares `registers`, then runs `body`;
    its result ($0) is always 0."""
    return gl.constexpr(f"""{{
 .reg .u32 lane;
 .reg .pred first;
 {registers}
 mov.u32 lane, %laneid;
 setp.eq.u32 first, lane, 0;
{body}
 mov.u32 $0, 0;
}}""")


_SIGNAL = _lane_0("", """ bar.warp.sync -1;
 @first red.release.gpu.global.add.s32 [$1], 1;""")
_WAIT = _lane_0(".reg .s32 seen;\n .reg .pred early;", """ @!first bra waited;
 wait_flag:
 ld.acquire.gpu.global.s32 seen, [$1];
 setp.lt.s32 early, seen, $2;
 @early bra wait_flag;
 waited:
 bar.warp.sync -1;""")
_RETIRE = _lane_0(".reg .s32 before;\n .reg .pred last;", """ @first atom.relaxed.gpu.global.add.s32 before, [$1], 1;
 setp.eq.and.s32 last, before, $2, first;
 @last st.relaxed.gpu.global.s32 [$1], 0;""")


@gluon.jit
def _per_thread(asm: gl.constexpr, flag, operand):
    """`asm` run exactly once by every thread of the calling role (one element per thread)."""
    threads: gl.constexpr = 32 * gl.num_warps()
    one: gl.constexpr = gl.BlockedLayout([1], [32], [gl.num_warps()], [0])
    flags = flag + gl.zeros([threads], gl.int32, one)
    return gl.inline_asm_elementwise(asm, "=r,l,r", [flags, gl.full([threads], operand, gl.int32, one)],
                                     dtype=gl.int32, is_pure=False, pack=1)


@aggregate
class PartialTiles:
    """The workspace: FLAG_WORDS int32 flags, then one BM x BN fp32 partial tile per program."""
    flags: gl.tensor
    sums: gl.tensor

    @gluon.jit
    def create(workspace):
        """From the int32 workspace pointer (host/launch.py: scheduler_workspace)."""
        return PartialTiles(workspace, (workspace + FLAG_WORDS).to(gl.pointer_type(gl.float32), bitcast=True))

    @gluon.jit
    def _offsets(self, slot, acc):
        """Pointers to `slot`'s elements, and the row indices, in the accumulator's own layout. Any one-to-one map of
        the tile works (both sides use this one); this one gives each warp's 8-byte register pair 256 contiguous
        bytes under Hopper's wgmma layout (warp = row // 16, lane = 4 * (row % 8) + (col % 8) // 2, pair = 2 * (col
        // 8) + (row % 16) // 8), so stores and loads coalesce."""
        layout: gl.constexpr = acc.type.layout
        BM: gl.constexpr = acc.shape[0]
        BN: gl.constexpr = acc.shape[1]
        THREADS: gl.constexpr = BM // 16 * 32
        row_ids = gl.arange(0, BM, layout=gl.SliceLayout(1, layout))
        rows = row_ids[:, None]
        cols = gl.arange(0, BN, layout=gl.SliceLayout(0, layout))[None, :]
        thread = rows // 16 * 32 + rows % 8 * 4 + cols % 8 // 2
        pair = cols // 8 * 2 + rows % 16 // 8
        offsets = gl.max_contiguous(gl.multiple_of((pair * THREADS + thread) * 2 + cols % 2, [1, 2]), [1, 2])
        return self.sums + slot * (BM * BN) + offsets, row_ids

    @gluon.jit
    def publish(self, acc, slot):
        """Contributor: store `acc` into `slot`, then signal it (release: the stores are visible first)."""
        ptrs, _ = self._offsets(slot, acc)
        gl.store(ptrs, acc)
        _per_thread(_SIGNAL, self.flags + slot, 0)

    @gluon.jit
    def add(self, acc, slot):
        """Finisher: wait for `slot`'s signal, return acc + its partial, and retire the slot."""
        warps: gl.constexpr = gl.num_warps()
        ptrs, rows = self._offsets(slot, acc)
        # every lane runs the wait once per row it holds (all lanes hold equally many); the loads depend on its zero
        ready = gl.inline_asm_elementwise(_WAIT, "=r,l,r", [self.flags + slot + rows * 0, gl.full(rows.shape, warps,
                                          gl.int32, rows.type.layout)], dtype=gl.int32, is_pure=False, pack=1)
        acc = acc + gl.load(ptrs + gl.multiple_of(ready, 16)[:, None])  # (zero: keeps the loads vectorized)
        _per_thread(_RETIRE, self.flags + slot, 2 * warps - 1)
        return acc
