"""Deliberately broken pipelines for the debug-mode watchdog: each bug hangs the GPU unless the watchdog stops it.

    python -m tests.kernels.hang_kernels BUG [STAGES]

BUG is "none" (a healthy ring: prints {"ok": true}), "wrong_phase" (the producer steps its cursor once before
its loop, so it waits on the empty barrier with the wrong parity), "missing_arrive" (the consumer steps past
each slot through the direct API without arriving, so the producer never gets a slot back), or, in two-CTA
clusters over a multicast ring, "missing_peer_release" (each consumer frees its own CTA's slot but not the pair's,
so the pair's first CTA, which waits for both, never gets a slot back); over a split multicast ring (each empty
barrier counts both CTAs' consumers: pipeline/multicast.py), "split_none" (healthy: each CTA fills its own slots,
every release reaches both CTAs) and "split_skips_peer" (each consumer frees its own CTA's slot only, so neither
CTA's producer gets a slot back). A healthy multicast ring needs its fills to
reach both CTAs (TMA multicast: see ProducerConsumerPipeline), which this generic ring does not do, so the healthy
cluster case is the cluster GEMM in debug mode (tests/gpu/probe_cases.py). The kernel runs in
debug mode under `tilepipe.probes.debug.watch`; a hang ends the process with the watchdog's report and exit code.
The direct API has no trace-time checks, which is how these bugs get past the protocol checker.
"""

import json
import sys

from triton.experimental import gluon
from triton.experimental.gluon import language as gl

from triton.experimental.gluon.language.nvidia.hopper import mbarrier

from tilepipe.pipeline.probe import Probe
from tilepipe.pipeline.ring import ProducerConsumerPipeline
from tilepipe.pipeline.roles import warp_specialize

BUGS = {"none": 0, "wrong_phase": 1, "missing_arrive": 2, "missing_peer_release": 3, "split_none": 4,
        "split_skips_peer": 5}
CLUSTER_BUGS = ("missing_peer_release", "split_none", "split_skips_peer")
ITEMS = 4096


@gluon.jit
def producer_role(ring: ProducerConsumerPipeline, items, BUG: gl.constexpr):
    if BUG == 1:
        ring = ring.producer_step()  # the bug: the cursor is one stage ahead of the barriers
    for _ in range(items):
        stage = ring.acquire_producer()
        stage.arrive()
        ring = stage.release()
    ring.drain()


@gluon.jit
def consumer_role(ring: ProducerConsumerPipeline, items, out_ptr, BUG: gl.constexpr):
    for _ in range(items):
        if BUG == 2:
            ring.wait_producer()
            ring = ring.consumer_step()  # the bug: no arrive on the empty barrier
        elif BUG == 3 or BUG == 5:
            ring.wait_producer()
            mbarrier.arrive(ring.consumer_mbar(ring.index))  # the bug: this CTA's barrier only, not the pair's/peer's
            ring = ring.consumer_step()
        else:
            stage = ring.acquire_consumer()
            ring = stage.release()
    gl.store(out_ptr, items)


@gluon.jit
def ring_kernel(out_ptr, items, probe_buf, STAGES: gl.constexpr, BUG: gl.constexpr, PROBE: gl.constexpr):
    probe = Probe.create(probe_buf, PROBE)
    ring = ProducerConsumerPipeline.create(STAGES, name="ring", producer_proxy="generic", consumer_proxy="generic",
                                           probe=probe, multicast=gl.num_ctas() > 1 and BUG < 4, split=BUG >= 4)
    warp_specialize([(consumer_role, (ring, items, out_ptr + gl.program_id(0), BUG)),
                     (producer_role, (ring, items, BUG))], [1], [40])


def run(bug: str, stages: int, programs: int = 4) -> dict:
    import torch

    from tilepipe.pipeline.probe import DEBUG
    from tilepipe.probes import debug

    ctas = 2 if bug in CLUSTER_BUGS else 1
    out = torch.zeros(programs, dtype=torch.int32, device="cuda")
    records = debug.progress_buffer(programs * ctas)
    debug.watch("ring_kernel", records, lambda: ring_kernel[(programs, )](out, ITEMS, records, stages, BUGS[bug], DEBUG,
                                                                          num_warps=4, num_ctas=ctas), ctas=ctas)
    done = out.tolist()
    return {"bug": bug, "stages": stages, "ok": done == [ITEMS] * programs, "done": done}


if __name__ == "__main__":
    bug, *rest = sys.argv[1:]
    print(json.dumps(run(bug, int(rest[0]) if rest else 1)), flush=True)
