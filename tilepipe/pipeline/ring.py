"""Producer-consumer pipelines: N stages of full/empty mbarrier pairs, with a cursor per role.

The seed's `ProducerConsumerPipeline` (Mojo, SM100 structured kernels) in Gluon (triton 3.9).

**State advance.** A Gluon aggregate cannot be mutated, so a pipeline value carries its role's
cursor (stage index, phase bit) and every step returns a new value that the caller rebinds:

    stage = pipe.acquire_producer()          # waits until the consumers freed the slot
    ...                                      # fill slot stage.index(); signal with stage.expect_bytes(n)
    pipe = stage.release()                   # compile error if the result is dropped

The context forms rebind the variable themselves, so they read like the seed:

    with pipe.consume() as stage:            # waits for the producer
        x = bufs.index(stage.index()).load(layout)
    # here `pipe` has advanced: __exit__ rebinds it in the caller's scope

`with` in Gluon hands its context manager no code generator, so the context finds the
generator's `visit_With` frame and rebinds the name written before `.produce()`: a plain local
variable is required (checked). Rebinding is an ordinary assignment to the tracer, so it is
loop-carried and merged across `if` like `pipe = ...` (tests prove loops, branches, nesting).

Why not `prev = s` copies: Triton's frontend decides which names a loop carries by comparing each
name's IR values before and after a dry run of the body. After `prev = s` before the loop, the
body's `prev = s` yields exactly `prev`'s pre-loop values, so `prev` is not carried and keeps the
first slot forever (docs/hang-prev-copy.md). A wgmma consumer that must free a slot only after the
wgmma reading it retired declares `release_lag` instead: `release()` then arrives on the slot
`release_lag` acquisitions back, and `flush_releases()` frees the rest once the last wgmma retired.

**Arrivals.** An `mbarrier.arrive` in Gluon is one arrival per partition (one thread after a
partition-wide bar.sync); a TMA `expect` is one arrival. So `producer_arrivals` and
`consumer_arrivals` count roles, and `tilepipe.pipeline.roles.warp_specialize` checks them against the roles
that actually signal each barrier while tracing.

**Probes.** A pipeline carries a `tilepipe.pipeline.probe.Probe`: off by default (no code at all), it records every
wait in debug mode (progress records the hang watchdog reads) or trace mode (timestamps for a timeline).

**Try-acquire.** Gluon has no `mbarrier.try_wait` builtin; since 3.9 inline PTX takes a barrier as an
operand, so `try_wait_*` / `try_acquire_*` run a real `mbarrier.try_wait.parity` and return `ready` without
blocking past the hardware's short suspend. Each thread asks for itself, and a "not ready" may be spurious,
so `ready` only ever skips a wait: `wait_*_if_needed(ready)` / `acquire_*(ready)` are exact predicated waits.
"""

import hashlib
from pathlib import Path

from triton.experimental import gluon
from triton.experimental.gluon import aggregate
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language._core import builtin
from triton.experimental.gluon.language.nvidia.hopper import fence_async_shared, mbarrier
from triton.language.core import _unwrap_if_constexpr

from tilepipe.pipeline import _trace
from tilepipe.pipeline import probe as _probe
from tilepipe.pipeline.multicast import cluster_init_barrier, remote_arrive
from tilepipe.pipeline.probe import Probe

PROXIES = ("async", "generic")


@aggregate
class ProducerConsumerPipeline:
    """A ring of `num_stages` slots guarded by full/empty mbarriers, seen through one role's cursor.

    `full[i]` completes when the producer filled slot i; `empty[i]` when every consumer released it.
    `producer_proxy` / `consumer_proxy` say how each side touches the slot ("async": TMA, wgmma,
    tcgen05; "generic": ld/st.shared); the proxy fences the hand-offs need are derived from them.
    In a cluster kernel every CTA has its own barriers; a `multicast` ring (slots a TMA multicast fills in both CTAs
    of a pair) also has `pair[i]`, in the first CTA, which completes when the consumers of both CTAs released slot i:
    releases arrive on both, the producer waits on both (the pair wait runs in the first CTA, which multicasts).
    The second CTA's producer does not wait on the pair: what keeps it from running a lap ahead (and mixing two
    laps' releases in one pair phase) is that its fills complete only when the first CTA's multicast landed, so
    a multicast ring must be filled by TMA multicast (InputProducerStage.load of a tile the CTAs share).
    A `split` multicast ring (pipeline/multicast.py: each CTA issues its half of a shared tile to both) has no pair
    barrier: both CTAs' producers write both CTAs' slots, so every consumer's release arrives on its own CTA's empty
    barrier and on the peer's (a remote arrive), each empty barrier counts the consumers of both CTAs, and each
    producer waits on its own. A leader-issued multicast into such a ring is safe too (its issuer waited for both).
    A two-CTA MMA ring (`pair_side` "full" or "empty": storage.BarrierPair.pair_mma) keeps that side's barriers in
    `pair`, one per CTA pair in its lead CTA: both CTAs arrive there (an expect, a release), the compiler doubles the
    count and lets only the lead CTA wait; `barriers` holds the other side, one per CTA, signalled by the lead CTA's
    MMA commit on both CTAs.
    """
    barriers: gl.shared_memory_descriptor
    pair: gl.shared_memory_descriptor
    index: gl.tensor
    phase: gl.tensor
    pending: gl.tensor
    num_stages: gl.constexpr
    producer_arrivals: gl.constexpr
    consumer_arrivals: gl.constexpr
    release_lag: gl.constexpr
    fence_before_signal: gl.constexpr
    fence_before_release: gl.constexpr
    name: gl.constexpr
    multicast: gl.constexpr
    split: gl.constexpr
    pair_side: gl.constexpr
    turns: gl.constexpr
    probe: Probe

    # ---- declaration --------------------------------------------------------------------------

    @builtin
    def from_barriers(barriers, num_stages, producer_arrivals=1, consumer_arrivals=1, name="pipeline",
                      producer_proxy="async", consumer_proxy="async", probe=None, pair=None, pair_side="",
                      split=False, _semantic=None):
        """A pipeline over `barriers`, a [2 * num_stages, CTAs] int64 mbarrier array: full stages, then empty.

        `probe` (a `tilepipe.pipeline.probe.Probe`, default off) records this pipeline's waits in debug and trace modes.
        `pair` ([num_stages, 1], two-CTA barriers) makes it a multicast ring; with `pair_side` ("full" or "empty") a
        two-CTA MMA ring, whose `pair` is that side and `barriers` ([num_stages, CTAs]) the other. `split`: a split
        multicast ring of a two-CTA cluster (no pair barriers; releases count both CTAs' consumers).
        """
        num_stages, producer_arrivals, consumer_arrivals = map(_unwrap_if_constexpr, (num_stages, producer_arrivals,
                                                                     consumer_arrivals))
        name, producer_proxy, consumer_proxy = map(_unwrap_if_constexpr, (name, producer_proxy, consumer_proxy))
        if not (isinstance(num_stages, int) and num_stages >= 1):
            raise _trace.ProtocolError(f"pipeline '{name}': num_stages must be a positive int, got {num_stages!r}")
        for what, count in (("producer_arrivals", producer_arrivals), ("consumer_arrivals", consumer_arrivals)):
            if not (isinstance(count, int) and count >= 1):
                raise _trace.ProtocolError(f"pipeline '{name}': {what} must be a positive int, got {count!r}")
        for what, proxy in (("producer_proxy", producer_proxy), ("consumer_proxy", consumer_proxy)):
            if proxy not in PROXIES:
                raise _trace.ProtocolError(f"pipeline '{name}': {what} must be one of {PROXIES}, got {proxy!r}")
        ctas, pair_side = _unwrap_if_constexpr(gl.num_ctas(_semantic=_semantic)), _unwrap_if_constexpr(pair_side)
        if pair_side not in ("", "full", "empty") or pair_side and pair is None:
            raise _trace.ProtocolError(f"pipeline '{name}': pair_side must be '', 'full' or 'empty' with pair "
                                       f"barriers, got {pair_side!r}")
        sides = 1 if pair_side else 2
        if list(barriers.shape) != [sides * num_stages, ctas]:
            raise _trace.ProtocolError(f"pipeline '{name}' needs a [{sides * num_stages}, {ctas}] barrier array (one "
                                       f"per CTA), got {list(barriers.shape)}")
        if pair is not None and list(pair.shape) != [num_stages, 1]:
            raise _trace.ProtocolError(f"pipeline '{name}' needs [{num_stages}, 1] pair barriers (a two-CTA "
                                       f"cluster), got {list(pair.shape)}")
        split = _unwrap_if_constexpr(split)
        if split and (pair is not None or ctas != 2):
            raise _trace.ProtocolError(f"pipeline '{name}': a split multicast ring is a two-CTA cluster's, without "
                                       f"pair barriers (the kernel has {ctas} CTAs)")
        index, phase, pending = (_semantic.to_tensor(0) for _ in range(3))  # own values: see hang-prev-copy.md
        return ProducerConsumerPipeline(
            barriers, barriers if pair is None else pair, index, phase, pending, num_stages,
            producer_arrivals, consumer_arrivals, 0, producer_proxy == "generic" and consumer_proxy == "async",
            consumer_proxy == "generic" and producer_proxy == "async", name, pair is not None and not pair_side,
            bool(split), pair_side, 1, _probe.started(_probe.off() if probe is None else probe, _semantic))

    @builtin
    def create(num_stages, producer_arrivals=1, consumer_arrivals=1, name="pipeline", producer_proxy="async",
               consumer_proxy="async", probe=None, multicast=False, split=False, _semantic=None, _generator=None):
        """Allocate 2 x num_stages barriers per CTA (and, `multicast`, a pair barrier per stage in a two-CTA
        cluster; `split`: a split multicast ring's, no pair) from one declaration and initialise them."""
        stages = _unwrap_if_constexpr(num_stages)
        barriers = allocate_barriers(2 * stages, False, name, _semantic)
        pair = allocate_barriers(stages, True, name, _semantic) if _unwrap_if_constexpr(multicast) else None
        pipe = ProducerConsumerPipeline.from_barriers(barriers, num_stages, producer_arrivals, consumer_arrivals,
                                                      name, producer_proxy, consumer_proxy, probe, pair,
                                                      split=split, _semantic=_semantic)
        _generator.call_JitFunction(ProducerConsumerPipeline.init_barriers, [pipe], {})
        return pipe

    @gluon.jit
    def init_barriers(self):
        """full[i] expects `producer_arrivals` arrivals per phase, empty[i] `consumer_arrivals` (a pair barrier: from
        each CTA of the pair, the compiler doubles the count; a split ring's: from the consumers of both CTAs)."""
        gl.static_assert(_LIB_REV != "", "the library revision enters the cache key of every kernel")
        for i in gl.static_range(self.num_stages):
            mbarrier.init(self.producer_mbar(i), count=self.producer_arrivals)
            mbarrier.init(self.consumer_mbar(i), count=self.consumer_arrivals * (2 if self.split else 1))
            if self.multicast:  # counts each CTA's releases: the compiler doubles the count for the pair
                mbarrier.init(self.pair.index(i), count=self.consumer_arrivals)
        if self.split:  # the peer CTA signals these barriers: initialised in both CTAs before it may
            cluster_init_barrier()

    @builtin
    def with_release_lag(self, lag, _semantic=None):
        """This consumer keeps `lag` stages in use after acquiring the next (async wgmma in flight)."""
        lag = _unwrap_if_constexpr(lag)
        if not (isinstance(lag, int) and 0 <= lag < self.num_stages):
            raise _trace.ProtocolError(
                f"pipeline '{self.name.value}': a release lag of {lag} needs at least {lag + 1} stages (has "
                f"{self.num_stages.value}); the producer could never refill the slots the consumer holds")
        return gl.aggregate_replace(self, release_lag=lag)

    @builtin
    def taking_turns(self, turns, _semantic=None):
        """This role's side of the ring is shared by `turns` roles taking turns (each stage use is one role's, which
        signals it alone), so the side's one declared arrival is theirs together. A role skips the others' uses
        with pass_over(), once they acquired them (an ordering such as pipeline/turns.py keeps that true: a cursor
        that ran ahead of the ring's phases by two would pass a parity wait on an old phase)."""
        turns = _unwrap_if_constexpr(turns)
        if not (isinstance(turns, int) and turns >= 1):
            raise _trace.ProtocolError(f"pipeline '{self.name.value}': turns must be a positive int, got {turns!r}")
        return gl.aggregate_replace(self, turns=turns)

    @gluon.must_use_result("Rebind it: `pipe = pipe.pass_over(n)`.")
    @builtin
    def pass_over(self, count, _semantic=None):
        """The cursor `count` stages on without using them: the uses of the other roles taking turns (taking_turns).
        A lagged consumer passes over only with no release pending (after flush_releases)."""
        if _unwrap_if_constexpr(self.turns) == 1:
            raise _trace.ProtocolError(f"pipeline '{self.name.value}': pass_over() skips other roles' turns; declare "
                                       "them with taking_turns()")
        stages = _unwrap_if_constexpr(self.num_stages)
        ahead = self.index.__add__(count, _semantic=_semantic)
        laps = ahead.__floordiv__(stages, _semantic=_semantic)
        phase = self.phase.__xor__(laps.__and__(1, _semantic=_semantic), _semantic=_semantic)
        index = ahead.__mod__(stages, _semantic=_semantic)
        return gl.aggregate_replace(self, index=index, phase=phase)

    # ---- direct API (the seed's names; no trace-time checks) -----------------------------------

    @builtin
    def wait_consumer(self, _semantic=None):
        """Producer side: wait until the consumers released the current slot (passes on the first lap)."""
        self.wait_consumer_if_needed(None, _semantic=_semantic)

    @builtin
    def wait_producer(self, _semantic=None):
        """Consumer side: wait until the producer filled the current slot."""
        self.wait_producer_if_needed(None, _semantic=_semantic)

    @builtin
    def wait_consumer_if_needed(self, ready, _semantic=None):
        """wait_consumer(), skipped where `ready` (from try_wait_consumer) is set. A multicast ring also waits for
        the consumers of both CTAs (the pair barrier: in the CTA that multicasts; elsewhere the wait is a no-op)."""
        empty = _empty(self, self.index, _semantic)
        phase = self.phase.__xor__(1, _semantic=_semantic)
        _wait(self, _probe.PRODUCER, empty, phase, ready, _semantic)
        if self.multicast:
            _wait(self, _probe.PAIR, self.pair.index(self.index, _semantic=_semantic), phase, ready, _semantic)

    @builtin
    def wait_producer_if_needed(self, ready, _semantic=None):
        """wait_producer(), skipped where `ready` (from try_wait_producer) is set."""
        _wait(self, _probe.CONSUMER, _full(self, self.index, _semantic), self.phase, ready, _semantic)

    @gluon.jit
    def try_wait_consumer(self, suspend_ns: gl.constexpr = 0):
        """Producer side: whether the consumers already released the current slot, without waiting for it (longer
        than about `suspend_ns` nanoseconds, when given: the seed's suspend hint)."""
        gl.static_assert(not self.multicast and self.pair_side != "empty",
                         "try_wait_consumer: a multicast or two-CTA ring's pair barrier lives in another CTA")
        return _try_wait(self.consumer_mbar(self.index), self.phase ^ 1, suspend_ns)

    @gluon.jit
    def try_wait_producer(self, suspend_ns: gl.constexpr = 0):
        """Consumer side: whether the producer already filled the current slot, without waiting for it (longer than
        about `suspend_ns` nanoseconds, when given)."""
        gl.static_assert(self.pair_side != "full", "try_wait_producer: a two-CTA ring's pair barrier is the lead CTA's")
        return _try_wait(self.producer_mbar(self.index), self.phase, suspend_ns)

    @gluon.must_use_result("Rebind it: `pipe = pipe.producer_step()`.")
    @builtin
    def producer_step(self, _semantic=None):
        return _advanced(self, _semantic)

    @gluon.must_use_result("Rebind it: `pipe = pipe.consumer_step()`.")
    @builtin
    def consumer_step(self, _semantic=None):
        return _advanced(self, _semantic)

    @builtin
    def producer_mbar(self, index, _semantic=None):
        """The full barrier of slot `index`, which the producer's signal completes."""
        return _full(self, _semantic.to_tensor(index), _semantic)

    @builtin
    def consumer_mbar(self, index, _semantic=None):
        """The empty barrier of slot `index`, which the consumers' releases complete."""
        return _empty(self, _semantic.to_tensor(index), _semantic)

    @gluon.jit
    def producer_stage(self):
        return self.index

    @gluon.jit
    def consumer_stage(self):
        return self.index

    @gluon.jit
    def drain(self):
        """Producer tail: wait until the consumers released every slot, so no arrive targets an exited role."""
        pipe = self
        for _ in gl.static_range(self.num_stages):
            pipe.wait_consumer()
            pipe = pipe.producer_step()

    @gluon.must_use_result("Rebind it: `pipe = pipe.flush_releases()`.")
    @builtin
    def flush_releases(self, _semantic=None):
        """Lagged consumer tail: release the stages still held, once the wgmma reading them retired."""
        lag, stages = _unwrap_if_constexpr(self.release_lag), _unwrap_if_constexpr(self.num_stages)
        for j in range(lag):
            slot = self.index.__add__(stages + j, _semantic=_semantic).__sub__(self.pending, _semantic=_semantic)
            slot = slot.__mod__(stages, _semantic=_semantic)
            if self.fence_before_release:
                fence_async_shared(_semantic=_semantic)
            _arrive_empty(self, slot, self.pending.__gt__(j, _semantic=_semantic), _semantic)
        return gl.aggregate_replace(self, pending=_semantic.to_tensor(0))

    # ---- stage handles -----------------------------------------------------------------------

    @builtin
    def acquire_producer(self, ready=None, _semantic=None):
        """Wait for a free slot (skipped if `ready`, from try_wait_consumer) and return its handle."""
        self.wait_consumer_if_needed(ready, _semantic=_semantic)
        return ProducerStage(self, _trace.open_stage("producer", self.name, _semantic))

    @builtin
    def acquire_consumer(self, ready=None, _semantic=None):
        """Wait for a filled slot (skipped if `ready`, from try_wait_producer) and return its handle."""
        self.wait_producer_if_needed(ready, _semantic=_semantic)
        return ConsumerStage(self, _trace.open_stage("consumer", self.name, _semantic))

    @gluon.jit
    def try_acquire_producer(self, suspend_ns: gl.constexpr = 0):
        """The seed's non-blocking try: `ready`, to pass to acquire_producer(ready) after other work."""
        return self.try_wait_consumer(suspend_ns)

    @gluon.jit
    def try_acquire_consumer(self, suspend_ns: gl.constexpr = 0):
        """The seed's non-blocking try: `ready`, to pass to acquire_consumer(ready) after other work."""
        return self.try_wait_producer(suspend_ns)

    # ---- context managers ---------------------------------------------------------------------

    @builtin
    def produce(self, _semantic=None):
        """`with pipe.produce() as stage:` waits for a free slot; on exit `pipe` advances."""
        return _trace.StageContext("produce", lambda: self.acquire_producer(_semantic=_semantic),
                                   lambda stage: stage.release(_semantic=_semantic), _semantic)

    @builtin
    def consume(self, _semantic=None):
        """`with pipe.consume() as stage:` waits for a filled slot; on exit releases it and `pipe` advances."""
        return _trace.StageContext("consume", lambda: self.acquire_consumer(_semantic=_semantic),
                                   lambda stage: stage.release(_semantic=_semantic), _semantic)

    @builtin
    def consume_explicit(self, _semantic=None):
        """Like consume(), but the body signals with `stage.arrive()` (e.g. under a condition)."""
        return _trace.StageContext("consume_explicit", lambda: self.acquire_consumer(_semantic=_semantic),
                                   lambda stage: stage.release_without_signal(_semantic=_semantic), _semantic)


DEVICE_SIDE = ("pipeline", "schedulers", "kernels", "examples")
"""The package folders whose code a kernel is built from: only their sources enter a kernel's cache key."""


def device_sources() -> list[Path]:
    root = Path(__file__).resolve().parents[1]
    return sorted(path for folder in DEVICE_SIDE for path in (root / folder).rglob("*.py"))


def _library_revision() -> str:
    """Hash of the device-side sources: builtins are not hashed into Triton's cache key, this constexpr is (editing a
    benchmark or the host side recompiles nothing)."""
    digest = hashlib.sha256()
    for path in device_sources():
        digest.update(path.read_bytes())
    return digest.hexdigest()[:16]


_LIB_REV = gl.constexpr(_library_revision())


def allocate_barriers(count: int, pair: bool, name: str, semantic):
    """`count` mbarriers of every CTA of the launch ([count, CTAs]), or with `pair` one per two-CTA pair, in its first
    CTA ([count, 1]): the one allocation rule of pipelines and storage parts."""
    ctas = _unwrap_if_constexpr(gl.num_ctas(_semantic=semantic))
    if pair and ctas != 2:
        raise _trace.ProtocolError(f"{name}: pair barriers need a two-CTA cluster, the kernel has {ctas} CTAs")
    return gl.allocate_shared_memory(gl.int64, [count, ctas // 2 if pair else ctas],
                                     mbarrier.MBarrierLayout.multicta(ctas, pair), _semantic=semantic)


def _advanced(pipe, semantic):
    """The cursor one stage on: index wraps at num_stages and flips the phase (the probe counts the step)."""
    pipe = gl.aggregate_replace(pipe, probe=_probe.advanced(pipe, semantic))
    if _unwrap_if_constexpr(pipe.num_stages) == 1:
        return gl.aggregate_replace(pipe, phase=pipe.phase.__xor__(1, _semantic=semantic))
    nxt = pipe.index.__add__(1, _semantic=semantic)
    wrap = nxt.__eq__(pipe.num_stages, _semantic=semantic)
    index = gl.where(wrap, 0, nxt, _semantic=semantic)
    phase = gl.where(wrap, pipe.phase.__xor__(1, _semantic=semantic), pipe.phase, _semantic=semantic)
    return gl.aggregate_replace(pipe, index=index, phase=phase)


@gluon.jit
def _try_wait(barrier, parity, SUSPEND_NS: gl.constexpr = 0):
    """One thread's non-blocking test of `barrier` for the phase with parity `parity` (PTX try_wait, which may
    suspend the thread for a short time: hardware-chosen, or with SUSPEND_NS > 0 at most about that many nanoseconds,
    the seed's suspend hint). A "not ready" may be spurious; "ready" never is."""
    if SUSPEND_NS > 0:
        done = gl.inline_asm_elementwise(
            "{ .reg .pred p; mbarrier.try_wait.parity.shared::cta.b64 p, [$1], $2, $3; selp.u32 $0, 1, 0, p; }",
            "=r,r,r,r", [barrier, parity, gl.to_tensor(SUSPEND_NS)], dtype=gl.int32, is_pure=False, pack=1)
    else:
        done = gl.inline_asm_elementwise(
            "{ .reg .pred p; mbarrier.try_wait.parity.shared::cta.b64 p, [$1], $2; selp.u32 $0, 1, 0, p; }",
            "=r,r,r", [barrier, parity], dtype=gl.int32, is_pure=False, pack=1)
    return done != 0


def _release_slot(pipe, semantic):
    """Arrive on empty for the slot this consumer frees now; returns `pipe` with `pending` updated."""
    lag, stages = _unwrap_if_constexpr(pipe.release_lag), _unwrap_if_constexpr(pipe.num_stages)
    if _unwrap_if_constexpr(pipe.fence_before_release):
        fence_async_shared(_semantic=semantic)
    if lag == 0:
        _arrive_empty(pipe, pipe.index, True, semantic)
        return pipe
    slot = pipe.index.__add__(stages - lag, _semantic=semantic).__mod__(stages, _semantic=semantic)
    held = pipe.pending.__eq__(lag, _semantic=semantic)
    _arrive_empty(pipe, slot, held, semantic)
    pending = gl.minimum(pipe.pending.__add__(1, _semantic=semantic), lag, _semantic=semantic)
    return gl.aggregate_replace(pipe, pending=pending)


def _arrive_empty(pipe, slot, pred, semantic):
    """This consumer's release of `slot`: its CTA's empty barrier, and in a multicast ring the pair's too (in a
    split ring the peer CTA's empty barrier)."""
    mbarrier.arrive(_empty(pipe, slot, semantic), pred=pred, _semantic=semantic)
    if _unwrap_if_constexpr(pipe.split):
        remote_arrive(_empty(pipe, slot, semantic), pred, _semantic=semantic)
    if _unwrap_if_constexpr(pipe.multicast):
        mbarrier.arrive(pipe.pair.index(slot, _semantic=semantic), pred=pred, _semantic=semantic)


def _signal(stage, barrier, semantic):
    """Trace-time record that this role signals `barrier` ("full" or "empty") through `stage`."""
    _trace.mark_signalled(stage.token)
    pipe = stage.pipe
    _trace.record_signal(pipe.name, barrier, pipe.producer_arrivals, pipe.consumer_arrivals, semantic, pipe.turns)


def _check_unlagged(pipe, what):
    if pipe.release_lag:
        raise _trace.ProtocolError(f"pipeline '{pipe.name.value}': {what}() is not available with a release lag; "
                                   "release() picks the lagged slot")


def _full(pipe, index, semantic):
    """The full barrier of slot `index`: barriers[index] (a two-CTA ring's pair side: pair[index])."""
    side = _unwrap_if_constexpr(pipe.pair_side)
    return (pipe.pair if side == "full" else pipe.barriers).index(index, _semantic=semantic)


def _empty(pipe, index, semantic):
    """The empty barrier of slot `index`: barriers[num_stages + index] (the seed's layout; a two-CTA ring's:
    pair[index] on its pair side, else barriers[index])."""
    side = _unwrap_if_constexpr(pipe.pair_side)
    if side:
        return (pipe.pair if side == "empty" else pipe.barriers).index(index, _semantic=semantic)
    return pipe.barriers.index(index.__add__(pipe.num_stages, _semantic=semantic), _semantic=semantic)


def _wait(pipe, side, barrier, phase, ready, semantic):
    """Spin until `barrier`, the current slot's barrier of `side` (producer: empty, consumer: full), completes the
    phase with parity `phase`; skipped where `ready` is set. The probe sees the wait (nothing when it is off)."""
    pred = True if _unwrap_if_constexpr(ready) is None else ready.__eq__(0, _semantic=semantic)
    started_at = _probe.before_wait(pipe, side, phase, semantic)
    mbarrier.wait(barrier, phase, pred=pred, _semantic=semantic)
    _probe.after_wait(pipe, side, phase, started_at, semantic)


@aggregate
class _Stage:
    """What both stage handles hold: the pipeline (with the role's cursor) and the trace-time token."""

    @gluon.jit
    def index(self):
        return self.pipe.index


@aggregate
class ProducerStage(_Stage):
    """A slot the producer holds: fill it, signal it once, then `pipe = stage.release()`."""
    pipe: ProducerConsumerPipeline
    token: gl.constexpr

    @builtin
    def mbar(self, _semantic=None):
        """The full barrier, for an operation that completes it (e.g. tcgen05_commit); counts as the signal."""
        _signal(self, "full", _semantic)
        return _full(self.pipe, self.pipe.index, _semantic)

    @builtin
    def expect_bytes(self, nbytes, _semantic=None):
        """Arm the full barrier for `nbytes` of TMA traffic; this is the producer's one arrival."""
        _signal(self, "full", _semantic)
        mbarrier.expect(_full(self.pipe, self.pipe.index, _semantic), nbytes, _semantic=_semantic)

    @builtin
    def wait_filled(self, _semantic=None):
        """Wait until the asynchronous fill this producer started (signalled through expect_bytes) has landed, for a
        producer that reads it back itself: the scheduler reading its own CLC response."""
        _wait(self.pipe, _probe.PRODUCER, _full(self.pipe, self.pipe.index, _semantic), self.pipe.phase, None,
              _semantic)

    @builtin
    def read_back(self, _semantic=None):
        """After wait_filled, and once this producer read the slot: free it as one of the ring's consumers (the
        ring counts it among them). A multicast ring's other CTA fills this CTA's slot too, so a producer that
        reads its fill back must hold the slot against the next lap's multicast as the consumers do."""
        _check_unlagged(self.pipe, "read_back")
        _signal(self, "empty", _semantic)
        _release_slot(self.pipe, _semantic)

    @builtin
    def expect_loads(self, *descs, _semantic=None):
        """expect_bytes() for one TMA load from each descriptor: the bytes each lands in this CTA (a cluster tile's
        share: its part of a split tile, all of a shared one)."""
        self.expect_bytes(sum(_unwrap_if_constexpr(desc.nbytes_per_cta) for desc in descs), _semantic=_semantic)

    @builtin
    def arrive(self, _semantic=None):
        """Signal a slot filled with ordinary stores (fenced first when its consumer reads via the async proxy)."""
        _signal(self, "full", _semantic)
        if self.pipe.fence_before_signal:
            fence_async_shared(_semantic=_semantic)
        mbarrier.arrive(_full(self.pipe, self.pipe.index, _semantic), _semantic=_semantic)

    @gluon.must_use_result("Rebind the pipeline: `pipe = stage.release()`.")
    @builtin
    def release(self, _semantic=None):
        """Hand the slot to the consumers' side of the ring and return the advanced pipeline."""
        _trace.close_stage(self.token, _semantic, needs_signal=True)
        return _advanced(self.pipe, _semantic)


@aggregate
class ConsumerStage(_Stage):
    """A slot a consumer holds: read it, then `pipe = stage.release()` (arrive on empty and advance)."""
    pipe: ProducerConsumerPipeline
    token: gl.constexpr

    @builtin
    def mbar(self, _semantic=None):
        """The empty barrier, for a special signal (e.g. a commit); counts as this role's release signal."""
        _check_unlagged(self.pipe, "mbar")
        if self.pipe.multicast or self.pipe.split:
            raise _trace.ProtocolError(f"pipeline '{self.pipe.name.value}': a multicast ring's release arrives on two "
                                       "barriers, so one commit cannot signal it; use release()")
        _signal(self, "empty", _semantic)
        return _empty(self.pipe, self.pipe.index, _semantic)

    @builtin
    def arrive(self, _semantic=None):
        """Signal the release without advancing (may sit under a condition); then release_without_signal()."""
        _check_unlagged(self.pipe, "arrive")
        _signal(self, "empty", _semantic)
        _release_slot(self.pipe, _semantic)

    @gluon.must_use_result("Rebind the pipeline: `pipe = stage.release()`.")
    @builtin
    def release(self, _semantic=None):
        """Free the slot (with a release lag: the slot `release_lag` acquisitions back) and advance."""
        _signal(self, "empty", _semantic)
        _trace.close_stage(self.token, _semantic, needs_signal=True)
        return _advanced(_release_slot(self.pipe, _semantic), _semantic)

    @gluon.must_use_result("Rebind the pipeline: `pipe = stage.release_without_signal()`.")
    @builtin
    def release_without_signal(self, _semantic=None):
        """Advance after this stage was signalled by `arrive()` or through `mbar()`."""
        _trace.close_stage(self.token, _semantic, needs_signal=True)
        return _advanced(self.pipe, _semantic)


@aggregate
class GuardedTiles:
    """Base of aggregates that pair a pipeline with the shared-memory stage array it guards (fields `pipeline`,
    `tiles`): output stages, epilogue source stages."""
