"""Minimal warp-specialized Gluon kernels without tilepipe, for telling compute-sanitizer's limits from real races.

racecheck reports hazards in tilepipe's warp-specialized kernels at three hand-offs; each kernel here has one of
them and nothing else (only triton and torch are imported), and checks its own result:

- `capture`: warp_specialize's argument hand-off. The default warps write the captured arguments to shared memory
  at the warp_specialize call and the workers read them at their entry, ordered by the barrier Triton emits there.
- `tma_ring`: a 1-warp TMA loader and a 4-warp consumer over a 2-stage ring: full barriers completed by the TMA's
  transaction bytes, empty barriers the consumer arrives on after reading the tile with ordinary loads (as the
  blockwise FP8 kernel reads its scales). `tma_ring_fenced` adds a proxy fence (fence.proxy.async) between the
  consumer's loads and its arrival: a hazard that only the unfenced ring shows is about the generic-read /
  TMA-write proxy order, not the barrier hand-off.
- `smem_ring`: a 1-warp producer writing a 16-byte slot with ordinary stores (every lane the same words) and
  arriving on its full barrier, read by two consumer partitions that arrive on its empty barrier (the dynamic
  scheduler's tile-id ring).
- `oversized_smem`: no warp specialization, one 64 KB shared buffer. Loading a kernel that needs more than 48 KB of
  shared memory makes Triton's module loader try a function attribute first and fall back on its rejection, a
  CUDA API error memcheck reports for every such kernel.

A hazard racecheck reports here as it does in tilepipe is the tool not modelling that hand-off (every access is
ordered by an mbarrier arrive/wait pair or the warp_specialize barrier, and the results are exact). Run under the
sanitizer by `python -m tilepipe.verify.sanitize` (gpu_check.sh's sanitize part), or alone:
`compute-sanitizer --tool racecheck python scripts/sanitize_repro.py [capture|tma_ring|tma_ring_fenced|smem_ring|oversized_smem ...]`.
"""

import sys

from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import fence_async_shared, mbarrier, tma

DEFAULT_WARPS = 4
BM, BK = gl.constexpr(64), gl.constexpr(64)  # one TMA tile
STAGES = gl.constexpr(2)
MARK = "tilepipe-sanitize:"


@gluon.jit
def _capture_default(out_ptr, value):
    offs = gl.arange(0, 128, gl.BlockedLayout([1], [32], [4], [0]))
    gl.store(out_ptr + offs, value + offs)


@gluon.jit
def _capture_worker(out_ptr, value):
    offs = gl.arange(0, 32, gl.BlockedLayout([1], [32], [1], [0]))
    gl.store(out_ptr + 128 + offs, 2 * value + offs)


@gluon.jit
def capture_kernel(out_ptr, value):
    """out[0:128] = value + i (default warps), out[128:160] = 2 * value + i (a 1-warp worker)."""
    gl.warp_specialize([(_capture_default, (out_ptr, value)), (_capture_worker, (out_ptr, value))], [1], [24])


@gluon.jit
def _tma_loader(desc, bufs, full, empty, n_tiles):
    for i in range(n_tiles):
        s = i % STAGES
        mbarrier.wait(empty.index(s), (i // STAGES) & 1 ^ 1)  # a fresh barrier's odd phase counts as complete
        mbarrier.expect(full.index(s), desc.block_type.nbytes)  # the loader's one arrival, plus the bytes
        tma.async_load(desc, [i * BM, 0], full.index(s), bufs.index(s))


@gluon.jit
def _tma_consumer(bufs, full, empty, out_ptr, n_tiles, FENCE: gl.constexpr):
    layout: gl.constexpr = gl.BlockedLayout([1, 8], [4, 8], [4, 1], [1, 0])
    rows = gl.arange(0, BM, gl.SliceLayout(1, layout))
    cols = gl.arange(0, BK, gl.SliceLayout(0, layout))
    for i in range(n_tiles):
        s = i % STAGES
        mbarrier.wait(full.index(s), (i // STAGES) & 1)
        tile = bufs.index(s).load(layout)
        if FENCE:
            fence_async_shared()
        mbarrier.arrive(empty.index(s))
        gl.store(out_ptr + (i * BM + rows)[:, None] * BK + cols[None, :], tile)


@gluon.jit
def tma_ring_kernel(desc, out_ptr, n_tiles, FENCE: gl.constexpr):
    """out = the (n_tiles * BM, BK) input, tile by tile through TMA and a STAGES-deep ring (FENCE: a proxy fence
    before each release)."""
    bufs = gl.allocate_shared_memory(desc.dtype, [STAGES, BM, BK], desc.layout)
    full = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    empty = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    for s in gl.static_range(STAGES):
        mbarrier.init(full.index(s), count=1)
        mbarrier.init(empty.index(s), count=1)
    gl.warp_specialize([(_tma_consumer, (bufs, full, empty, out_ptr, n_tiles, FENCE)),
                        (_tma_loader, (desc, bufs, full, empty, n_tiles))], [1], [24])


@gluon.jit
def _slot_producer(slots, full, empty, n_items):
    words: gl.constexpr = gl.BlockedLayout([1, 4], [1, 32], [1, 1], [1, 0])  # every lane holds all 4 words
    for i in range(n_items):
        s = i % STAGES
        mbarrier.wait(empty.index(s), (i // STAGES) & 1 ^ 1)
        slots.index(s).store(gl.full([1, 4], i, gl.int32, words))
        mbarrier.arrive(full.index(s))


@gluon.jit
def _slot_consumer(slots, full, empty, out_ptr, n_items, WARPS: gl.constexpr, COLUMN: gl.constexpr):
    words: gl.constexpr = gl.BlockedLayout([1, 4], [1, 32], [1, WARPS], [1, 0])
    for i in range(n_items):
        s = i % STAGES
        mbarrier.wait(full.index(s), (i // STAGES) & 1)
        item = gl.max(gl.max(slots.index(s).load(words), axis=1), axis=0)
        mbarrier.arrive(empty.index(s))
        gl.store(out_ptr + 2 * i + COLUMN, item)


@gluon.jit
def smem_ring_kernel(out_ptr, n_items):
    """out[i, 0] (the 4-warp default partition) = out[i, 1] (a 1-warp worker) = i, through a 16-byte slot ring."""
    slots = gl.allocate_shared_memory(gl.int32, [STAGES, 1, 4], gl.SwizzledSharedLayout(1, 1, 1, [1, 0]))
    full = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    empty = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    for s in gl.static_range(STAGES):
        mbarrier.init(full.index(s), count=1)
        mbarrier.init(empty.index(s), count=2)  # both consumer partitions
    gl.warp_specialize([(_slot_consumer, (slots, full, empty, out_ptr, n_items, 4, 0)),
                        (_slot_producer, (slots, full, empty, n_items)),
                        (_slot_consumer, (slots, full, empty, out_ptr, n_items, 1, 1))], [1, 1], [24, 24])


@gluon.jit
def oversized_smem_kernel(x_ptr, out_ptr):
    """out = x (a 128 x 128 fp32 tile) through one 64 KB shared buffer."""
    layout: gl.constexpr = gl.BlockedLayout([1, 4], [1, 32], [gl.num_warps(), 1], [1, 0])
    offs = gl.arange(0, 128, gl.SliceLayout(1, layout))[:, None] * 128 + gl.arange(0, 128, gl.SliceLayout(0, layout))[None, :]
    buf = gl.allocate_shared_memory(gl.float32, [128, 128], gl.SwizzledSharedLayout(1, 1, 1, [1, 0]),
                                    gl.load(x_ptr + offs))
    gl.store(out_ptr + offs, buf.load(layout))


def run(name: str) -> bool:
    """Launch one repro kernel on the GPU; whether its result is exact."""
    import torch
    from triton.experimental.gluon.nvidia.hopper import TensorDescriptor

    if name == "capture":
        out = torch.full((160, ), -1, dtype=torch.int32, device="cuda")
        capture_kernel[(1, )](out, 7, num_warps=DEFAULT_WARPS)
        expected = torch.cat([7 + torch.arange(128), 14 + torch.arange(32)]).to(out)
    elif name.startswith("tma_ring"):
        n_tiles, block = 2 * STAGES.value + 1, [BM.value, BK.value]
        x = torch.randn(n_tiles * block[0], block[1], device="cuda", dtype=torch.float16)
        out = torch.full_like(x, float("nan"))
        desc = TensorDescriptor.from_tensor(x, block, gl.NVMMASharedLayout.get_default_for(block, gl.float16))
        tma_ring_kernel[(1, )](desc, out, n_tiles, name == "tma_ring_fenced", num_warps=DEFAULT_WARPS)
        expected = x
    elif name == "oversized_smem":
        x = torch.randn(128, 128, device="cuda")
        out = torch.full_like(x, float("nan"))
        oversized_smem_kernel[(1, )](x, out, num_warps=DEFAULT_WARPS)
        expected = x
    else:
        n_items = 32 * STAGES.value + 1  # many laps, so reads of one lap meet writes of the next
        out = torch.full((n_items, 2), -1, dtype=torch.int32, device="cuda")
        smem_ring_kernel[(1, )](out, n_items, num_warps=DEFAULT_WARPS)
        expected = torch.arange(n_items, device="cuda", dtype=torch.int32)[:, None].expand(n_items, 2)
    torch.cuda.synchronize()
    return bool(torch.equal(out, expected))


KERNELS = ("capture", "tma_ring", "tma_ring_fenced", "smem_ring", "oversized_smem")

if __name__ == "__main__":
    names = sys.argv[1:] or list(KERNELS)
    results = {}
    for name in names:
        print(f"{MARK} variant repro {name}", flush=True)
        results[name] = run(name)
        print(f"{MARK} done repro {name} ok={results[name]}", flush=True)
    sys.exit(0 if all(results.values()) else 1)
