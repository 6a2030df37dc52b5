"""The pipeline's non-blocking tries see both answers: on a one-stage ring, driven by one role in a fixed order,
try_wait_producer says "not filled" before the fill and "filled" after it, and try_wait_consumer says "free" on a
fresh ring and "not free" while the slot is full, with and without the suspend hint. A stub that always answered one
way fails here."""

from triton.experimental import gluon
from triton.experimental.gluon import language as gl

from tilepipe.pipeline import ProducerConsumerPipeline

ANSWERS = ("filled before the fill", "free on a fresh ring", "filled after the fill", "free while full",
           "filled before the fill, 2 us suspend hint", "filled after the fill, 2 us suspend hint")
EXPECTED = (0, 1, 1, 0, 0, 1)


@gluon.jit
def try_wait_outcomes(out_ptr):
    """out[i] = the i-th try's answer (ANSWERS), from every thread; each try is one thread's own test."""
    producer = ProducerConsumerPipeline.create(1, name="try", producer_proxy="generic", consumer_proxy="generic")
    consumer = producer  # each side keeps its own place in the ring
    filled_before = consumer.try_wait_producer()
    filled_before_hinted = consumer.try_wait_producer(suspend_ns=2000)
    free_fresh = producer.try_wait_consumer()
    stage = producer.acquire_producer(free_fresh)
    stage.arrive()
    producer = stage.release()
    filled_after = consumer.try_wait_producer()
    free_while_full = producer.try_wait_consumer()  # the producer's next lap needs the slot the consumer holds
    filled_after_hinted = consumer.try_wait_producer(suspend_ns=2000)
    layout: gl.constexpr = gl.BlockedLayout([1], [32], [gl.num_warps()], [0])
    lanes = gl.arange(0, 32 * gl.num_warps(), layout)
    zero = gl.full([32 * gl.num_warps()], 0, gl.int32, layout)
    gl.store(out_ptr + 0 * 128 + lanes, zero + filled_before.to(gl.int32))
    gl.store(out_ptr + 1 * 128 + lanes, zero + free_fresh.to(gl.int32))
    gl.store(out_ptr + 2 * 128 + lanes, zero + filled_after.to(gl.int32))
    gl.store(out_ptr + 3 * 128 + lanes, zero + free_while_full.to(gl.int32))
    gl.store(out_ptr + 4 * 128 + lanes, zero + filled_before_hinted.to(gl.int32))
    gl.store(out_ptr + 5 * 128 + lanes, zero + filled_after_hinted.to(gl.int32))


def run() -> dict:
    """On a GPU: every thread's answer to each try, against EXPECTED (a try that answers 'not ready' for a completed
    phase, or 'ready' for one that is not, fails)."""
    import torch

    out = torch.full((len(ANSWERS), 128), -1, dtype=torch.int32, device="cuda")
    try_wait_outcomes[(1, )](out, num_warps=4)
    got = out.cpu()
    answers = {name: sorted(set(got[i].tolist())) for i, name in enumerate(ANSWERS)}
    ok = all(answers[name] == [want] for name, want in zip(ANSWERS, EXPECTED))
    return {"case": "try_wait answers both ways", "ok": ok, **answers}


if __name__ == "__main__":
    import json

    result = run()
    print(json.dumps(result))
    raise SystemExit(0 if result["ok"] else 1)
