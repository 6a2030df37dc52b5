"""SMs held by another kernel while a GEMM runs, as a MoE layer's all-to-all holds some (DeepEP's kernels take 20-24
SMs beside the expert GEMMs): `timed_beside_holders(call, sms, hold_us)` launches `sms` CTAs on a side stream that
each fill an SM's shared memory (no GEMM CTA fits beside one) and spin for `hold_us`, waits on the GEMM's stream
until every holder runs, and times `call` from then to its end with CUDA events. A persistent GEMM's programs on
the held SMs start `hold_us` late: a static schedule's tiles wait for them, a dynamic one's go to the other SMs."""

from functools import cache
from typing import Callable

import torch
from triton.experimental import gluon
from triton.experimental.gluon import language as gl

HOLD_BYTES = 128 * 1024
"""Shared memory a holder takes: more than half of an H100's or H200's 228 KB (a power of two, as a Gluon buffer's
shape must be), so no GEMM CTA, nor another holder, shares its SM."""


@gluon.jit
def _now():
    """%globaltimer (ns)."""
    return gl.inline_asm_elementwise("mov.u64 $0, %globaltimer;", "=l", [], dtype=gl.int64, is_pure=False, pack=1)


@gluon.jit
def hold_kernel(started, hold_ns, BYTES: gl.constexpr):
    """One CTA: BYTES of shared memory, counted into `started` once it runs, then a spin for hold_ns."""
    layout: gl.constexpr = gl.BlockedLayout([1], [32], [1], [0])
    smem = gl.allocate_shared_memory(gl.int32, [BYTES // 4], gl.SwizzledSharedLayout(1, 1, 1, [0]))
    smem.slice(0, 32).store(gl.zeros([32], gl.int32, layout))
    gl.atomic_add(started, 1)
    begin = _now()
    while _now() - begin < hold_ns:
        pass
    gl.store(started + 1 + gl.arange(0, 32, layout), smem.slice(0, 32).load(layout))  # keeps the allocation


@gluon.jit
def gate_kernel(started, count):
    """Spins until `count` holders counted themselves into `started`."""
    while gl.atomic_add(started, 0) < count:
        pass


def timed_beside_holders(call: Callable[[], object], sms: int, hold_us: float) -> float:
    """Milliseconds from the moment `sms` holder CTAs (hold_us each) all run until `call`, enqueued on the current
    stream right after, ends (`sms` 0: `call` alone, timed the same way). `sms` must leave an SM free (the gate kernel
    waits on one for the holders)."""
    if not 0 <= sms < torch.cuda.get_device_properties(torch.cuda.current_device()).multi_processor_count:
        raise ValueError(f"sms must leave the gate kernel an SM, got {sms}")
    stream, side, started = torch.cuda.current_stream(), _side_stream(), _counter()
    if sms:
        started.zero_()
        side.wait_stream(stream)
        with torch.cuda.stream(side):
            hold_kernel[(sms, )](started, int(hold_us * 1000), HOLD_BYTES, num_warps=1)
        gate_kernel[(1, )](started, sms, num_warps=1)
    begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    begin.record()
    call()
    end.record()
    stream.wait_stream(side)
    end.synchronize()
    return begin.elapsed_time(end)


@cache
def _side_stream() -> torch.cuda.Stream:
    return torch.cuda.Stream()


@cache
def _counter() -> torch.Tensor:
    """The holders' start count (word 0) and the words their stores keep their shared memory with."""
    return torch.zeros(33, dtype=torch.int32, device="cuda")


def holder_specs() -> list:
    """hold_kernel and gate_kernel as KernelSpecs (sm_90a), for the CPU test that compiles them."""
    from tilepipe.kernels.spec import KernelSpec

    return [KernelSpec(f"{__name__}:hold_kernel", {"started": "*i32", "hold_ns": "i64", "BYTES": "constexpr"},
                       {"BYTES": HOLD_BYTES}, num_warps=1),
            KernelSpec(f"{__name__}:gate_kernel", {"started": "*i32", "count": "i32"}, {}, num_warps=1)]
