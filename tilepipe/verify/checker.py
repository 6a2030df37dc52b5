"""CPU protocol checker: every interleaving of a kernel's roles over a model of its mbarriers, before any launch.

A kernel's protocol is declared as role programs (`Role`: loops with trip counts over acquire / signal / step,
flush and drain; see tilepipe/verify/protocols.py) over the pipelines its shared-memory storage declares
(stages, arrival counts, producer and consumer role names). The checker

* models each mbarrier as the hardware does: an expected arrival count, the arrivals of the current phase, and the
  number of completed phases; `mbarrier.wait(bar, parity)` passes while the completed count's parity differs from
  `parity` (the phase of that parity completed); a TMA `expect` plus its bytes counts as one producer arrival;
* replays each role's cursor exactly as tilepipe/pipeline/ring.py computes it (stage index, phase bit, release lag);
* explores every interleaving breadth-first with a visited set and reports, with a shortest trace:
  - deadlock: roles not finished and none can move (a drain that never completes included);
  - over-arrival: an arrival that lands in another phase than the one its role means (more arrivals than
    declared, or an arrival for a stage the role does not hold);
  - phase aliasing: a parity wait that passes although the completed phase is not the one the role means
    (a producer lapping its consumer, a wait on the wrong parity);
  - leftover: at the end, a phase left part-arrived, or a filled stage some consuming role never saw;
  - declaration: a role signals a pipeline its storage does not name it for, or an unknown pipeline;
  - drift: the declaration disagrees with what tracing the kernel records (tilepipe/pipeline/_trace.py).

A cluster kernel (`Protocol.ctas` = 2) runs every role once per CTA, each CTA over its own barriers. A multicast
ring (its storage declares an `empty_pair` barrier) couples them as the hardware does: the first CTA's fill also
lands in the second CTA (one more arrival on that CTA's full barrier, for the same phase), every consumer's release
also arrives on the pair barrier (in the first CTA, counting both CTAs), and only the first CTA's producer waits on
it (Gluon predicates the pair wait to the first CTA). A split multicast ring (its storage declares "split_barrier"s)
couples them both ways: each CTA's fill lands in every CTA (one more arrival on each peer's full barrier), every
consumer's release arrives on the empty barrier of every CTA, and each producer waits on its own CTA's.

A two-CTA MMA ring (sm_100a cta_group::2: its storage declares one side a "pair_barrier") couples them as the
compiled kernel does: its MMA side (the consumer of a ring whose full barrier is the pair's, the producer of one whose
empty barrier is) runs in the lead CTA only (Gluon predicates the other CTA's waits, MMAs and commits away), the
other side's roles of both CTAs arrive on the lead CTA's pair barrier (counting both), and each lead-CTA commit
lands on that side's barrier in every CTA. The CTAs run independently otherwise, so either may be the slower one.
"""

import hashlib
import json
import multiprocessing
import os
import pickle
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import asdict, dataclass, field
from functools import cache, cached_property
from itertools import product, repeat
from pathlib import Path
from typing import Any, TypeVar

from tilepipe._text import format_table
from tilepipe.pipeline import _trace
from tilepipe.pipeline.storage import Storage
from tilepipe.verify import claims

KINDS = ("deadlock", "over-arrival", "phase-aliasing", "leftover", "declaration", "drift")
MAX_STATES = 2_000_000
T = TypeVar("T")
_TRACE_STEPS = 12  # steps of a finding's interleaving kept in its report


# ---- declarations ------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class PipelineModel:
    """A pipeline as its storage declares it: `stages` full/empty pairs and the roles that arrive on each side."""
    name: str
    stages: int
    producer_arrivals: int
    consumer_arrivals: int
    producers: tuple[str, ...]
    consumers: tuple[str, ...]
    pair_arrivals: int = 0  # a multicast ring's pair barrier count (both CTAs' releases); 0: not multicast
    pair_side: str = ""  # a two-CTA MMA ring's barrier kept per CTA pair ("full" or "empty", counting both CTAs)
    split: bool = False  # a split multicast ring: every CTA's producer fills, and consumer releases, every CTA's slot

    @property
    def lead_roles(self) -> tuple[str, ...]:
        """The roles of a two-CTA MMA ring's MMA side, which run in the lead CTA only (none for other rings)."""
        return {"full": self.consumers, "empty": self.producers}.get(self.pair_side, ())

    def per_cta_arrivals(self) -> tuple[int, int]:
        """(producer, consumer) arrivals as each CTA declares them: a pair barrier's count is both CTAs'."""
        return (self.producer_arrivals // (2 if self.pair_side == "full" else 1),
                self.consumer_arrivals // (2 if self.pair_side == "empty" or self.split else 1))


def pipelines_of(storages: Iterable[Storage]) -> dict[str, PipelineModel]:
    """The full/empty barrier pairs that `storages` declare (an SmemPlan's storages, or storages on their own), with
    the pair barriers of multicast rings."""
    models = {}
    for storage in storages:
        uses = {use.name: use for use in storage.barriers()}
        for name, full in uses.items():
            pipe, _, barrier = name.rpartition(".")
            empty, pair = uses.get(f"{pipe}.empty"), uses.get(f"{pipe}.empty_pair")
            if barrier != "full" or empty is None:
                continue  # single barriers (TMEM dealloc) and raw barriers are not pipelines
            side = "full" if full.kind == "pair_barrier" else "empty" if empty.kind == "pair_barrier" else ""
            models[pipe] = PipelineModel(pipe, full.count, full.arrivals, empty.arrivals,
                                         tuple(full.producer.split("+")), tuple(full.consumer.split("+")),
                                         pair.arrivals if pair is not None else 0, side,
                                         empty.kind == "split_barrier")
    return models


@dataclass(frozen=True)
class Wait:
    """Wait on the role's current stage: a producer for `empty` (parity phase ^ 1), a consumer for `full` (phase).

    `hold`: a consumer keeps the stage until a Signal frees it (False: it only looks, like EpiLoadPipeline.wait).
    `traced`: the kernel acquires through a stage handle, which tracing records (False: the direct API).
    `flip`: wait on the other parity (a seeded bug).
    """
    pipeline: str
    side: str
    hold: bool = True
    traced: bool = True
    flip: bool = False


@dataclass(frozen=True)
class Signal:
    """Arrive for the current stage: a producer on `full`; a consumer on `empty` (with its release lag; on a
    multicast ring also on the pair barrier, on a split ring on every CTA's empty barrier, unless `own_cta_only`, a
    seeded bug)."""
    pipeline: str
    side: str
    own_cta_only: bool = False


@dataclass(frozen=True)
class Commit(Signal):
    """A signal the hardware makes once the work the role issued before it completed (a tcgen05 commit: an MMA's
    `mbarriers=` release of its input stage, a tile's accumulator hand-off). The role goes on at once; its commits
    land later, in the order it issued them (_AsyncExplorer)."""


@dataclass(frozen=True)
class Step:
    """Advance the role's cursor: the stage index wraps at `stages` and flips the phase bit."""
    pipeline: str


@dataclass(frozen=True)
class PassOver:
    """A consumer taking turns steps past a stage another role uses in its turn (ring.py `pass_over`): it means that
    stage's next fill as seen, so its own next wait there means the one after."""
    pipeline: str


@dataclass(frozen=True)
class Flush:
    """A lagged consumer's tail: release the stages it still holds."""
    pipeline: str


@dataclass(frozen=True)
class Drain:
    """A producer's tail: wait until the consumers released every stage (one wait and step per stage)."""
    pipeline: str


@dataclass(frozen=True)
class Loop:
    """Run `body` `count` times; `count` is an int or the name of a trip-count parameter."""
    var: str
    count: int | str
    body: tuple


Op = Wait | Signal | Step | PassOver | Flush | Drain | Loop


def produce(pipeline: str, *body: Op) -> tuple[Op, ...]:
    """`with pipe.produce() as stage:` wait for a free stage, run `body`, signal it filled, advance."""
    return (Wait(pipeline, "producer"), *body, Signal(pipeline, "producer"), Step(pipeline))


def consume(pipeline: str, *body: Op) -> tuple[Op, ...]:
    """`with pipe.consume() as stage:` wait for a filled stage, run `body`, release it, advance."""
    return (Wait(pipeline, "consumer"), *body, Signal(pipeline, "consumer"), Step(pipeline))


def wait_filled(pipeline: str) -> tuple[Op, ...]:
    """Direct API `wait_producer(); consumer_step()`: see a filled stage without freeing it."""
    return (Wait(pipeline, "consumer", hold=False, traced=False), Step(pipeline))


def loop(var: str, count: int | str, *body: Op) -> Loop:
    return Loop(var, count, tuple(body))


@dataclass(frozen=True)
class Role:
    """One partition: its name in the storages, its kernel function (for tracing), its program, its release lags."""
    name: str
    function: str
    program: tuple[Op, ...]
    release_lag: tuple[tuple[str, int], ...] = ()


@dataclass(frozen=True)
class Protocol:
    """A kernel configuration's roles (in warp_specialize partition order) over its storages' pipelines.

    `cases` lists the trip counts to explore; `trace` builds the KernelSpec whose tracing the declaration is
    compared with (None: not cross-checked); `ctas`: CTAs per cluster, each running every role. `scope`: a protocol
    of some of the kernel's pipelines only (the roles' programs over those, the others checked by another protocol),
    where exploring all of them at once would pass the state budget.
    """
    kernel: str
    config: str
    storages: tuple[Storage, ...]
    roles: tuple[Role, ...]
    cases: tuple[tuple[tuple[str, int], ...], ...]
    trace: Callable[[], object] | None = None
    ctas: int = 1
    scope: tuple[str, ...] = ()  # the pipelines modelled (empty: all); tracing is compared over these only

    @property
    def pipelines(self) -> dict[str, PipelineModel]:
        return pipelines_of(self.storages)


# ---- results -----------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Finding:
    """One problem: its kind (KINDS), the role and pipeline it names, the stage and the barrier phase the role means
    (-1: the fresh barrier a first-lap producer waits on), the loop iteration, the trip counts, the interleaving."""
    kind: str
    role: str
    pipeline: str
    message: str
    stage: int | None = None
    phase: int | None = None
    iteration: str = ""
    case: str = ""
    trace: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"unknown finding kind {self.kind!r}; expected one of {KINDS}")

    def __str__(self) -> str:
        where = f"stage {self.stage} phase {self.phase}" if self.stage is not None else ""
        head = f"{self.kind}: role '{self.role}', pipeline '{self.pipeline}' {where} {self.iteration}".rstrip()
        lines = [head + (f" [{self.case}]" if self.case else ""), f"  {self.message}"]
        if self.trace:
            lines += ["  interleaving (last steps):", *(f"    {step}" for step in self.trace)]
        return "\n".join(lines)


@dataclass
class CheckResult:
    """One kernel configuration checked: how many trip-count cases and states were explored, and what was found."""
    kernel: str
    config: str
    cases: int = 0
    states: int = 0
    traced: bool = False
    findings: list[Finding] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.findings


# ---- role programs to concrete steps -----------------------------------------------------------------------------


@dataclass(frozen=True)
class _Barriers:
    """Global numbering of every pipeline's barriers: per CTA, full[s] then empty[s], pipeline after pipeline; then
    the pair barriers of the multicast rings. A two-CTA MMA ring's pair side is the lead CTA's barrier in every CTA."""
    pipelines: dict[str, PipelineModel]
    ctas: int = 1

    @cached_property
    def per_cta(self) -> int:
        return sum(2 * model.stages for model in self.pipelines.values())

    def base(self, pipeline: str, cta: int = 0) -> int:
        base = cta * self.per_cta
        for name, model in self.pipelines.items():
            if name == pipeline:
                return base
            base += 2 * model.stages
        raise KeyError(pipeline)

    def full(self, pipeline: str, stage: int, cta: int = 0) -> int:
        return self.base(pipeline, 0 if self.pipelines[pipeline].pair_side == "full" else cta) + stage

    def empty(self, pipeline: str, stage: int, cta: int = 0) -> int:
        model = self.pipelines[pipeline]
        return self.base(pipeline, 0 if model.pair_side == "empty" else cta) + model.stages + stage

    def pair(self, pipeline: str, stage: int) -> int:
        base = self.ctas * self.per_cta
        for name, model in self.pipelines.items():
            if name == pipeline:
                return base + stage
            base += model.stages if model.pair_arrivals else 0
        raise KeyError(pipeline)

    def multicast(self, pipeline: str) -> bool:
        """Whether `pipeline` is a multicast ring in a cluster of more than one CTA."""
        return self.ctas > 1 and self.pipelines[pipeline].pair_arrivals > 0

    def split(self, pipeline: str) -> bool:
        """Whether `pipeline` is a split multicast ring in a cluster of more than one CTA."""
        return self.ctas > 1 and self.pipelines[pipeline].split

    def counts(self) -> tuple[int, ...]:
        """Arrivals per phase: a multicast ring's full barrier outside the first CTA also counts the multicast, a
        split ring's in every CTA the peer's half."""
        per_cta = [tuple(count for m in self.pipelines.values()
                         for count in (m.producer_arrivals + int(cta > 0 and self.multicast(m.name))
                                       + int(self.split(m.name)), ) * m.stages
                         + (m.consumer_arrivals, ) * m.stages) for cta in range(self.ctas)]
        pairs = tuple(m.pair_arrivals for m in self.pipelines.values() if self.multicast(m.name)
                      for _ in range(m.stages))
        return sum(per_cta, ()) + pairs

    def describe(self, barrier: int) -> tuple[str, str, int]:
        """(pipeline, "full" | "empty" | "pair", stage) of a barrier number."""
        if barrier >= self.ctas * self.per_cta:
            barrier -= self.ctas * self.per_cta
            for name, model in self.pipelines.items():
                if self.multicast(name):
                    if barrier < model.stages:
                        return name, "pair", barrier
                    barrier -= model.stages
            raise IndexError(barrier)
        barrier %= self.per_cta
        for name, model in self.pipelines.items():
            if barrier < 2 * model.stages:
                return name, ("full" if barrier < model.stages else "empty"), barrier % model.stages
            barrier -= 2 * model.stages
        raise IndexError(barrier)

    def name(self, barrier: int) -> str:
        """`pipeline.kind[stage]`, with the CTA in a cluster (`@cta1`; a pair barrier is the pair's)."""
        pipe, kind, stage = self.describe(barrier)
        cta = barrier // self.per_cta if kind != "pair" else None
        return f"{pipe}.{kind}[{stage}]" + (f"@cta{cta}" if self.ctas > 1 and cta is not None else "")


@dataclass(frozen=True)
class _WaitStep:
    barrier: int
    parity: int
    target: int  # completed phases the role means to see: the wait passes as intended only at exactly this count
    where: str
    drain: bool


@dataclass(frozen=True)
class _ArriveStep:
    arrivals: tuple[tuple[int, int | None], ...]  # (barrier, phase the role means to complete; None: holds none)
    where: str


class _Cursor:
    """One role's view of one pipeline, computed as tilepipe/pipeline/ring.py does, plus what the role means by it."""

    def __init__(self, model: PipelineModel, lag: int) -> None:
        self.model, self.lag = model, lag
        self.index = self.phase = self.pending = 0
        self.fills = [0] * model.stages  # producer: times this role filled each stage
        self.seen = [0] * model.stages  # consumer: times this role acquired each stage
        self.held: list[tuple[int, int]] = []  # consumer: (stage, lap) acquired and not released yet
        self.filling: list[int] = []  # producer: stages acquired and not signalled yet

    def step(self) -> None:
        self.index += 1
        if self.index == self.model.stages:
            self.index, self.phase = 0, self.phase ^ 1

    def release_slots(self) -> list[int]:
        """Stages a consumer's release arrives on (pipeline.py `_release_slot`), updating `pending`."""
        if self.lag == 0:
            return [self.index]
        slots = [(self.index + self.model.stages - self.lag) % self.model.stages] if self.pending == self.lag else []
        self.pending = min(self.pending + 1, self.lag)
        return slots

    def flush_slots(self) -> list[int]:
        """Stages `flush_releases()` arrives on."""
        slots = [(self.index + self.model.stages + j - self.pending) % self.model.stages for j in range(self.lag)
                 if self.pending > j]
        self.pending = 0
        return slots

    def release_intent(self, stage: int) -> int | None:
        """The lap of the oldest held acquisition of `stage`, which this release means to free."""
        for i, (held_stage, lap) in enumerate(self.held):
            if held_stage == stage:
                del self.held[i]
                return lap
        return None


def _iterations(program: Sequence[Op], params: dict[str, int], context: tuple[str, ...] = ()):
    """(op, loop context) for every op of `program` with its loops unrolled."""
    for op in program:
        if isinstance(op, Loop):
            count = params[op.count] if isinstance(op.count, str) else op.count
            for i in range(count):
                yield from _iterations(op.body, params, context + (f"{op.var} {i}", ))
        else:
            yield op, " ".join(context)


def _concrete_steps(role: Role, barriers: _Barriers, params: dict[str, int],
                    cta: int = 0) -> tuple[list[_WaitStep | _ArriveStep], list[tuple[str, int, int]]]:
    """The role's shared-memory actions in CTA `cta`, in program order, each with the barrier, parity and phase it
    means; and the (pipeline, stage, lap) acquisitions it still holds at its end."""
    lags = dict(role.release_lag)
    cursors = {name: _Cursor(model, lags.get(name, 0)) for name, model in barriers.pipelines.items()}
    # a producer that acquires must signal once per acquisition; one that never acquires only signals (a one-way
    # barrier), and means the next phase each time
    acquiring = {op.pipeline for op in _ops(role.program) if isinstance(op, Wait) and op.side == "producer"}
    # two-CTA MMA rings whose MMA side this role is: it waits and signals there in the lead CTA only, and its
    # signals (commits) land in every CTA
    lead = {name for name, model in barriers.pipelines.items() if role.name in model.lead_roles}
    everywhere = range(barriers.ctas)
    steps: list[_WaitStep | _ArriveStep] = []
    passed: dict[int, int] = {}  # full barrier -> the phases this role has seen by passing over other roles' uses

    def wait(op: Wait, cur: _Cursor, where: str, drain: bool = False) -> None:
        if cta > 0 and op.pipeline in lead:
            return
        s = cur.index
        if op.side == "producer":
            barrier, parity, target = barriers.empty(op.pipeline, s, cta), cur.phase ^ 1, cur.fills[s]
            if not drain:
                cur.filling.append(s)
        else:
            barrier, parity, target = barriers.full(op.pipeline, s, cta), cur.phase, cur.seen[s] + 1
            if op.hold:
                cur.held.append((s, cur.seen[s]))
            cur.seen[s] += 1
        steps.append(_WaitStep(barrier, parity ^ op.flip, target, where, drain))
        if op.side == "producer" and cta == 0 and barriers.multicast(op.pipeline):  # both CTAs released the slot
            steps.append(_WaitStep(barriers.pair(op.pipeline, s), parity ^ op.flip, target, where, drain))

    def arrive(pipeline: str, slots: list[int], cur: _Cursor, where: str, both: bool = True) -> None:
        if slots:  # `both`: a multicast ring's release also reaches the pair barrier, a split ring's every CTA
            pair = both and barriers.multicast(pipeline)
            ctas = everywhere if pipeline in lead or both and barriers.split(pipeline) else (cta, )
            arrivals = tuple((barrier, intent) for s in slots for intent in (cur.release_intent(s), )
                             for barrier in tuple(barriers.empty(pipeline, s, c) for c in ctas)
                             + ((barriers.pair(pipeline, s), ) if pair else ()))
            steps.append(_ArriveStep(arrivals, where))

    for op, where in _iterations(role.program, params):
        cur = cursors[op.pipeline]
        if cta > 0 and op.pipeline in lead and isinstance(op, Signal):
            continue  # the lead CTA's MMA and commit stand for the pair
        if isinstance(op, Wait):
            wait(op, cur, where)
        elif isinstance(op, Step):
            cur.step()
        elif isinstance(op, PassOver):
            cur.seen[cur.index] += 1
            passed[barriers.full(op.pipeline, cur.index, cta)] = cur.seen[cur.index]
            cur.step()
        elif isinstance(op, Flush):
            arrive(op.pipeline, cur.flush_slots(), cur, where)
        elif isinstance(op, Drain):
            for _ in range(cur.model.stages):
                wait(Wait(op.pipeline, "producer"), cur, "drain", drain=True)
                cur.step()
        elif op.side == "producer":
            s = cur.index
            holds = op.pipeline not in acquiring or s in cur.filling
            intent = cur.fills[s] if holds else None
            # a multicast fill (or a lead-CTA MMA commit) from the first CTA lands in every CTA: one more arrival on
            # each peer's full barrier
            coupled = barriers.multicast(op.pipeline) or op.pipeline in lead
            peers = range(1, barriers.ctas) if cta == 0 and coupled else ()
            if barriers.split(op.pipeline):  # each CTA's half lands in every CTA
                peers = tuple(c for c in everywhere if c != cta)
            steps.append(_ArriveStep(tuple((barriers.full(op.pipeline, s, c), intent) for c in (cta, *peers)),
                                     where))
            if holds:
                cur.fills[s] += 1
                if s in cur.filling:
                    cur.filling.remove(s)
        else:
            arrive(op.pipeline, cur.release_slots(), cur, where, not op.own_cta_only)
    return steps, [(name, stage, lap) for name, cur in cursors.items() for stage, lap in cur.held], passed


def _consumed(steps: list[_WaitStep | _ArriveStep], barriers: _Barriers, passed: dict[int, int]) -> dict[int, int]:
    """Full barrier -> how many of its phases a role's steps wait for or pass over (consuming roles only)."""
    seen = dict(passed)
    for step in steps:
        if isinstance(step, _WaitStep) and barriers.describe(step.barrier)[1] == "full":
            seen[step.barrier] = max(seen.get(step.barrier, 0), step.target)
    return seen


# ---- exploration -------------------------------------------------------------------------------------------------


def _meant(target: int) -> str:
    """What a wait that means `target` completed phases waits for."""
    return f"for phase {target - 1}" if target else "a fresh barrier: passes at once"


def _describe_step(role: str, step: _WaitStep | _ArriveStep, barriers: _Barriers) -> str:
    if isinstance(step, _WaitStep):
        what = f"wait {barriers.name(step.barrier)} parity {step.parity} ({_meant(step.target)})"
    else:
        what = "arrive " + ", ".join(barriers.name(b) for b, _ in step.arrivals)
    return f"{role}: {what}" + (f" ({step.where})" if step.where else "")


class _Explorer:
    """Breadth-first search over interleavings. A state is one int packing each role's program counter and each
    barrier's arrivals so far (its completed phases and the current phase's arrivals are their quotient and remainder
    by the barrier's count): hashing and stepping an int is several times cheaper than nested tuples."""

    issuers: tuple = ()
    """The roles whose commits companion programs hold (_AsyncExplorer), the companions after the roles' programs."""

    def __init__(self, protocol: Protocol, params: dict[str, int]) -> None:
        self.barriers = _Barriers(protocol.pipelines, protocol.ctas)
        ctas = range(protocol.ctas)
        self.roles = [role.name + (f"@cta{cta}" if protocol.ctas > 1 else "") for cta in ctas for role in protocol.roles]
        self.programs, self.unreleased, passed = zip(*(_concrete_steps(role, self.barriers, params, cta)
                                                       for cta in ctas for role in protocol.roles))
        self.consumed = [_consumed(steps, self.barriers, p) for steps, p in zip(self.programs, passed)]
        self.counts = self.barriers.counts()
        self.case = ", ".join(f"{k}={v}" for k, v in params.items())
        self.parent: dict[int, int | None] = {}
        self.findings: dict[tuple[str, str, str], Finding] = {}

    def _guard(self, r: int, pc: int) -> tuple[int, int] | None:
        """(role, index): program r's step pc waits until that role's program counter passed index; None: no wait."""
        return None

    def _layout(self) -> None:
        """The packed state's bit fields: each program's counter, then each barrier's arrivals (as many bits as all
        programs' arrivals there need). A barrier counting no arrivals never completes a phase: its divisor exceeds
        any total."""
        totals = [0] * len(self.counts)
        for program in self.programs:
            for step in program:
                for barrier, _ in getattr(step, "arrivals", ()):
                    totals[barrier] += 1
        widths = [len(program).bit_length() for program in self.programs] + [t.bit_length() for t in totals]
        self.shifts = [sum(widths[:i]) for i in range(len(widths))]
        self.masks = [(1 << w) - 1 for w in widths]
        self.divisors = [count or total + 1 for count, total in zip(self.counts, totals)]

    def form(self) -> str:
        """What decides this search's states and whether it finds anything, without the names its findings carry:
        each program's steps as run() reads them, the barriers' counts, what each role ends holding or has seen, and
        which programs are companions. Protocols of other kernels (a cluster's 1x2 and 2x1, a variant's epilogue)
        often compile to the same form for a trip-count case."""
        steps = self.steps  # first: laying the state out sets the divisors
        return repr((steps, self.divisors, self.counts,
                     [[(s, lap) for _, s, lap in held] for held in self.unreleased],
                     [sorted(consumed.items()) for consumed in self.consumed], len(self.issuers)))

    @cached_property
    def steps(self) -> tuple[tuple, ...]:
        """Every program's steps as the search reads them (_compiled), over the packed state's layout: laid out once
        for form() and run()."""
        self._layout()
        return tuple(self._compiled(r) for r in range(len(self.programs)))

    def _unpack(self, state: int) -> tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...]]:
        """(program counters, completed phases, arrivals in the current phase) of a packed state."""
        fields = [(state >> shift) & mask for shift, mask in zip(self.shifts, self.masks)]
        totals = fields[len(self.programs):]
        return (tuple(fields[:len(self.programs)]), tuple(t // d for t, d in zip(totals, self.divisors)),
                tuple(t % d for t, d in zip(totals, self.divisors)))

    def _compiled(self, r: int) -> tuple:
        """Program r's steps as the search reads them: (is_wait, guard, fields...), guard as (shift, mask, index)."""
        barrier_field = len(self.programs)
        out = []
        for pc, step in enumerate(self.programs[r]):
            guard = self._guard(r, pc)
            guard = guard and (self.shifts[guard[0]], self.masks[guard[0]], guard[1])
            if isinstance(step, _WaitStep):
                f = barrier_field + step.barrier
                out.append((True, guard, self.shifts[f], self.masks[f], self.divisors[f - barrier_field], step.parity,
                            step.target))
            else:
                out.append((False, guard, tuple((b, self.shifts[barrier_field + b], self.masks[barrier_field + b],
                                                 self.divisors[b], intent, 1 << self.shifts[barrier_field + b])
                                                for b, intent in step.arrivals)))
        return tuple(out)

    def run(self) -> int:
        """Breadth-first over the packed states from the initial one (all zeros); returns how many it reached. A
        reached state keeps the state it was first reached from (the role that stepped is the one whose program
        counter differs: _trace)."""
        programs = [(r, self.shifts[r], self.masks[r], steps + (None, ), 1 << self.shifts[r])
                    for r, steps in enumerate(self.steps)]  # a finished program's next step: None
        parent = self.parent
        parent[0] = None
        queue = deque([0])
        pop, push = queue.popleft, queue.append
        while queue:
            state = pop()
            moved = False
            for r, shift, mask, steps, step_one in programs:
                step = steps[(state >> shift) & mask]
                if step is None:
                    continue
                guard = step[1]
                if guard is not None and guard[2] >= (state >> guard[0]) & guard[1]:
                    continue
                if step[0]:
                    _, _, b_shift, b_mask, divisor, parity, target = step
                    done = ((state >> b_shift) & b_mask) // divisor
                    if done & 1 == parity:
                        continue
                    moved = True
                    if done != target:
                        self._aliasing(state, r, self.programs[r][(state >> shift) & mask], done)
                        continue
                    nxt = state + step_one
                else:
                    moved = True
                    nxt = state + step_one
                    for barrier, b_shift, b_mask, divisor, intent, one in step[2]:
                        total = (nxt >> b_shift) & b_mask
                        if intent != total // divisor:
                            self._over_arrival(state, r, self.programs[r][(state >> shift) & mask], barrier, intent,
                                               total // divisor, total % divisor)
                            nxt = None
                            break
                        nxt += one
                    if nxt is None:
                        continue
                if nxt not in parent:
                    parent[nxt] = state
                    push(nxt)
                    if len(parent) > MAX_STATES:
                        raise RuntimeError(f"more than {MAX_STATES} states in case {self.case}: use smaller "
                                           "trip counts")
            if not moved:
                self._terminal(state)
        return len(parent)

    def _trace(self, state: int, last: str | None = None) -> tuple[str, ...]:
        steps = [] if last is None else [last]
        while self.parent[state] is not None and len(steps) < _TRACE_STEPS:
            prev = self.parent[state]
            before, after = self._unpack(prev)[0], self._unpack(state)[0]
            r = next(i for i, (pc, moved) in enumerate(zip(before, after)) if pc != moved)  # the role that stepped
            steps.append(_describe_step(self.roles[r], self.programs[r][before[r]], self.barriers))
            state = prev
        return tuple(reversed(steps))

    def _reported(self, kind: str, r: int, pipeline: str) -> bool:
        """Whether role r already has a `kind` finding on `pipeline`: a finding is reported at its first (shortest)
        interleaving, and a search may meet a seeded bug in millions of states, so callers ask before naming it."""
        return (kind, self.roles[r], pipeline) in self.findings

    def _report(self, kind: str, r: int, pipeline: str, message: str, state: int, stage: int | None = None,
                phase: int | None = None, where: str = "", last: str | None = None) -> None:
        if not self._reported(kind, r, pipeline):
            self.findings[kind, self.roles[r], pipeline] = Finding(kind, self.roles[r], pipeline, message, stage,
                                                                   phase, where, self.case, self._trace(state, last))

    def _aliasing(self, state: int, r: int, step: _WaitStep, done: int) -> None:
        pipe, _, s = self.barriers.describe(step.barrier)
        if self._reported("phase-aliasing", r, pipe):
            return
        seen = ("a phase before the one it waits for (the stage is not ready)" if done < step.target else
                f"{done - step.target} phase(s) beyond it (lapped)")
        message = (f"parity-{step.parity} wait on {self.barriers.name(step.barrier)} passes at {done} completed phase(s) but means "
                   f"{step.target} ({_meant(step.target)}): it sees {seen}")
        self._report("phase-aliasing", r, pipe, message, state, s, step.target - 1, step.where,
                     _describe_step(self.roles[r], step, self.barriers))

    def _over_arrival(self, state: int, r: int, step: _ArriveStep, barrier: int, intent: int | None, done: int,
                      arrived: int) -> None:
        pipe, _, s = self.barriers.describe(barrier)
        if self._reported("over-arrival", r, pipe):
            return
        if intent is None:
            message = (f"arrives on {self.barriers.name(barrier)} for a stage it does not hold (a second signal, or "
                       "one without acquiring the stage)")
        else:
            message = (f"arrival on {self.barriers.name(barrier)} means phase {intent} but lands in phase {done} "
                       f"({arrived} of {self.counts[barrier]} arrivals there already)")
        self._report("over-arrival", r, pipe, message, state, s, intent, step.where,
                     _describe_step(self.roles[r], step, self.barriers))

    def _terminal(self, state: int) -> None:
        pcs, completed, arrived = self._unpack(state)
        blocked = [r for r, program in enumerate(self.programs) if pcs[r] < len(program)]
        if blocked:
            self._deadlock(state, blocked)
            return
        for barrier, count in enumerate(arrived):
            if count:
                pipe, _, s = self.barriers.describe(barrier)
                last = max(range(len(self.programs)), key=lambda r: self._arrives_on(r, 0, barrier))
                self._report("leftover", last, pipe, f"{self.barriers.name(barrier)} ends with phase {completed[barrier]} "
                             f"part-arrived: {count} of {self.counts[barrier]} arrivals", state, stage=s,
                             phase=completed[barrier])
        for r, held in enumerate(self.unreleased):
            for pipe, s, lap in held:
                self._report("leftover", r, pipe, f"ends holding stage {s} (lap {lap}) without releasing it", state,
                             stage=s, phase=lap)
        for r, consumed in enumerate(self.consumed):
            for barrier, seen in consumed.items():
                if completed[barrier] > seen:
                    pipe, _, s = self.barriers.describe(barrier)
                    self._report("leftover", r, pipe, f"{self.barriers.name(barrier)} completed {completed[barrier]} "
                                 "phase(s) "
                                 f"but this role waited for {seen}: a filled stage it never saw", state, stage=s,
                                 phase=seen)

    def _arrives_on(self, r: int, pc: int, barrier: int) -> int:
        """How many times role r arrives on `barrier` from program step `pc` on."""
        return sum(1 for step in self.programs[r][pc:] if isinstance(step, _ArriveStep)
                   for b, _ in step.arrivals if b == barrier)

    def _deadlock(self, state: int, blocked: list[int]) -> None:
        pcs, completed, arrived = self._unpack(state)
        lines, scores = [], []
        for r in blocked:
            step = self.programs[r][pcs[r]]
            pipe, _, s = self.barriers.describe(step.barrier)
            needed = (step.target - completed[step.barrier]) * self.counts[step.barrier] - arrived[step.barrier]
            coming = sum(self._arrives_on(o, pcs[o], step.barrier) for o in range(len(self.programs)))
            lines.append(f"'{self.roles[r]}' waits on {self.barriers.name(step.barrier)} parity {step.parity} "
                         f"({'drain, ' if step.drain else ''}{completed[step.barrier]} phase(s) completed, "
                         f"{arrived[step.barrier]} of {self.counts[step.barrier]} arrivals in phase "
                         f"{completed[step.barrier]}, {coming} more to come from any role)")
            # the root cause first: a wait nobody can satisfy, then a part-arrived phase, then a drain
            scores.append((coming < needed, arrived[step.barrier] > 0, step.drain))
        root = max(range(len(blocked)), key=lambda i: scores[i])
        r = blocked[root]
        step = self.programs[r][pcs[r]]
        pipe, _, s = self.barriers.describe(step.barrier)
        finished = [name for i, name in enumerate(self.roles) if i not in blocked]
        message = ("no role can move" + (f" (finished: {', '.join(finished)})" if finished else "") + "; " +
                   "; ".join(lines))
        self._report("deadlock", r, pipe, message, state, s, step.target - 1,
                     "drain" if step.drain else step.where)


class _AsyncExplorer(_Explorer):
    """_Explorer where a role's Commit arrivals land asynchronously: each committing role gets a companion program
    (its "commits") holding those arrivals in issue order, which may take its next one at any time after the role
    issued it; the role's own program skips them (in a cluster: each CTA's role its own companion). Without Commits
    it explores exactly as _Explorer."""

    def __init__(self, protocol: Protocol, params: dict[str, int]) -> None:
        super().__init__(protocol, params)
        self.issuers: list[tuple[int, list[int]]] = []  # (role, its commit steps' indices), one per companion
        programs, roles = list(self.programs), list(self.roles)
        for r, (cta, role) in enumerate((cta, role) for cta in range(protocol.ctas) for role in protocol.roles):
            indices = _commit_steps(role, self.barriers, params, cta)  # _Explorer's order: CTA, then role
            if not indices:
                continue
            program = list(programs[r])
            programs.append([program[i] for i in indices])
            for i in indices:
                program[i] = _ArriveStep((), program[i].where)  # issued: the role goes on
            programs[r] = program
            roles.append(f"{self.roles[r]} (commits)")
            self.issuers.append((r, indices))
        self.programs, self.roles = tuple(programs), roles
        self.unreleased += ([], ) * len(self.issuers)
        self.consumed += [{}] * len(self.issuers)

    def _guard(self, r: int, pc: int) -> tuple[int, int] | None:
        """A companion's next arrival only once its role has issued it."""
        first = len(self.programs) - len(self.issuers)
        if r < first:
            return None
        role, indices = self.issuers[r - first]
        return role, indices[pc]

    def _deadlock(self, state: int, blocked: list[int]) -> None:
        """Blocked roles only: a companion waits for nothing but its role."""
        super()._deadlock(state, [r for r in blocked if r < len(self.programs) - len(self.issuers)])


def _commit_steps(role: Role, barriers: _Barriers, params: dict[str, int], cta: int = 0) -> list[int]:
    """Indices, among the role's concrete steps in CTA `cta` (_concrete_steps), of the arrivals its Commits make."""
    flat = [op for op, _ in _iterations(role.program, params)]
    if not any(isinstance(op, Commit) for op in flat):
        return []
    counts = [len(_concrete_steps(Role(role.name, role.function, tuple(flat[:i]), role.release_lag), barriers,
                                  params, cta)[0]) for i in range(len(flat) + 1)]
    return [counts[i] for i, op in enumerate(flat) if isinstance(op, Commit) and counts[i + 1] > counts[i]]


# ---- static checks -----------------------------------------------------------------------------------------------


def _ops(program: Sequence[Op]):
    for op in program:
        if isinstance(op, Loop):
            yield from _ops(op.body)
        else:
            yield op


def _declaration_findings(protocol: Protocol) -> list[Finding]:
    """Roles that signal a pipeline their storage does not name them for, and pipelines no storage declares."""
    pipelines, findings = protocol.pipelines, []
    for role in protocol.roles:
        for op in _ops(role.program):
            model = pipelines.get(op.pipeline)
            if model is None:
                findings.append(Finding("declaration", role.name, op.pipeline,
                                        f"no storage declares pipeline '{op.pipeline}' (declared: "
                                        f"{', '.join(pipelines) or 'none'})"))
                break
            if isinstance(op, Signal):
                named = model.producers if op.side == "producer" else model.consumers
                if role.name not in named:
                    findings.append(Finding("declaration", role.name, op.pipeline,
                                            f"signals the {op.side} side, which the storage gives to "
                                            f"{' + '.join(named)}"))
    return list({(f.role, f.pipeline, f.message): f for f in findings}.values())


# ---- cross-check with tracing ------------------------------------------------------------------------------------


def _declared_records(protocol: Protocol) -> tuple[set, set]:
    """What tracing should record: (role, side, pipeline) for stage handles, (role, pipeline, barrier) for signals."""
    stages, signals = set(), set()
    for i, role in enumerate(protocol.roles):
        name = _trace.role_label(role.function, i)
        for op in _ops(role.program):
            if isinstance(op, Wait) and op.traced:
                stages.add((name, op.side, op.pipeline))
            elif isinstance(op, Signal):
                signals.add((name, op.pipeline, "full" if op.side == "producer" else "empty"))
    return stages, signals


def trace_sessions(spec) -> list:
    """Trace a KernelSpec's kernel in this process (to TTIR, no GPU); returns its recorded warp_specialize sessions."""
    from triton._C.libtriton import ir
    from triton.backends.compiler import GPUTarget
    from triton.compiler.compiler import make_backend
    from triton.experimental.gluon._runtime import GluonASTSource

    from tilepipe.kernels.spec import TARGETS

    fn = spec.function()
    target = GPUTarget("cuda", TARGETS[spec.target], 32)
    backend = make_backend(target)
    options = backend.parse_options(spec.compile_options())
    context = ir.context()
    ir.load_dialects(context)
    backend.load_dialects(context)
    source = GluonASTSource(fn, signature=spec.signature, constexprs=spec.constexprs, attrs={})
    with _trace.recording() as sessions:
        source.make_ir(target, options, backend.get_codegen_implementation(options), backend.get_module_map(), context)
    return sessions


def _drift(protocol: Protocol) -> list[Finding]:
    """_drift_findings, once per process and per test session (as _explored keeps explorations): keyed by the
    declaration, the traced spec and the source of tilepipe and of the kernel's module (tracing a kernel costs
    about as much as exploring its protocol)."""
    from tilepipe.verify.compile import _source_digest

    spec = protocol.trace()
    key = json.dumps([repr((protocol.storages, protocol.roles, protocol.scope)), asdict(spec),
                      _source_digest(spec.fn.partition(":")[0])], sort_keys=True)
    return list(_kept("drift", key, lambda: tuple(_drift_findings(protocol, spec))))


def _drift_findings(protocol: Protocol, spec) -> list[Finding]:
    """Differences between the declared roles and what tracing the kernel (`spec`, protocol.trace()) records."""
    sessions = trace_sessions(spec)
    scoped = lambda pipe: not protocol.scope or pipe in protocol.scope  # noqa: E731
    stages = {(rec.role, rec.side, rec.pipeline) for s in sessions for rec in s.stages.values() if scoped(rec.pipeline)}
    signals = {(role, pipe, barrier) for s in sessions for (pipe, barrier), roles in s.signals.items()
               for role in roles if scoped(pipe)}
    want_stages, want_signals = _declared_records(protocol)
    names = {_trace.role_label(role.function, i): role.name for i, role in enumerate(protocol.roles)}
    findings = []
    for got, want, describe in (
            (stages, want_stages, lambda role, side, pipe: (pipe, f"{role} acquires {side} stages of '{pipe}'")),
            (signals, want_signals, lambda role, pipe, barrier: (pipe, f"{role} signals the '{barrier}' barriers "
                                                                       f"of '{pipe}'"))):
        for record in sorted(got ^ want):
            pipeline, what = describe(*record)
            where = "the traced kernel, not in the declaration" if record in got else "the declaration only"
            findings.append(Finding("drift", names.get(record[0], record[0]), pipeline, f"{what}: in {where}"))
    models = protocol.pipelines
    for session in sessions:
        for pipe, (producers, consumers) in session.declared.items():
            if not scoped(pipe):
                continue
            model = models.get(pipe)
            if model is None or model.per_cta_arrivals() != (producers, consumers):
                declared = "no storage" if model is None else ("the storage declares {}/{}".format(
                    *model.per_cta_arrivals()))
                findings.append(Finding("drift", "-", pipe, f"the kernel's pipeline has {producers}/{consumers} "
                                        f"producer/consumer arrivals; {declared}"))
    return list({(f.role, f.pipeline, f.message): f for f in findings}.values())


# ---- entry points ------------------------------------------------------------------------------------------------


def check(protocol: Protocol, trace: bool = False) -> CheckResult:
    """Explore every declared trip-count case of `protocol`; with `trace`, also compare it with the traced kernel."""
    result = CheckResult(protocol.kernel, protocol.config)
    result.findings = _declaration_findings(protocol)
    if trace and protocol.trace is not None:
        result.findings += _drift(protocol)
        result.traced = True
    if result.findings:
        return result
    seen = set()
    for case in protocol.cases:
        states, findings = _explored(protocol, case)
        result.states += states
        result.cases += 1
        for finding in findings:
            if (finding.kind, finding.role, finding.pipeline) not in seen:
                seen.add((finding.kind, finding.role, finding.pipeline))
                result.findings.append(finding)
    return result


def check_all(protocols: Callable[[], Sequence[Protocol]], trace: bool = False) -> list[CheckResult]:
    """check() over every protocol `protocols()` builds (a module-level function, which worker processes call
    again), spread over as many processes as there are cores: the explorations are independent."""
    built = protocols()
    count = len(built)
    jobs = min(count, len(os.sched_getaffinity(0)))
    if jobs < 2:
        return [check(protocol, trace) for protocol in built]
    with ProcessPoolExecutor(jobs, mp_context=multiprocessing.get_context("spawn")) as pool:
        return list(pool.map(_check_one, repeat(protocols), range(count), repeat(trace),
                             chunksize=max(1, count // (4 * jobs))))


def _check_one(protocols: Callable[[], Sequence[Protocol]], index: int, trace: bool) -> CheckResult:
    return check(_built(protocols)[index], trace)


@cache
def _built(protocols: Callable[[], Sequence[Protocol]]) -> Sequence[Protocol]:
    """A worker's protocols, built once."""
    return protocols()


def _explored(protocol: Protocol, case: tuple[tuple[str, int], ...]) -> tuple[int, tuple[Finding, ...]]:
    """(states, findings) of one trip-count case, once per model and case. Cases of the same form (_Explorer.form:
    half of the shipped kernels' cases share one with another kernel's) explore alike, so a form is explored once; a
    form with findings is explored under each model that has it, for findings that name its roles. Both once per
    process, and once per test session where TILEPIPE_CHECK_CACHE names a directory (keyed by this checker's
    source too)."""
    def explore() -> tuple[int, tuple[Finding, ...]]:
        explorer = _AsyncExplorer(protocol, dict(case))
        states, found = _kept("form", explorer.form(), lambda: (explorer.run(), bool(explorer.findings)))
        if found and not explorer.findings:  # the form's result was kept from another model's run: run this one
            explorer.run()
        return states, tuple(explorer.findings.values())

    return _kept("explored", repr((protocol.storages, protocol.roles, protocol.ctas, case)), explore)


def _kept(kind: str, model: str, compute: Callable[[], T]) -> T:
    """compute()'s result for `model` (a text that determines it), once per process, and once per test session where
    TILEPIPE_CHECK_CACHE names a directory (written whole, then renamed, for readers in other processes; a result
    another process is computing is awaited: tilepipe.verify.claims)."""
    key = hashlib.sha256(f"{kind}\0{model}\0{_CHECKER_SOURCE}".encode()).hexdigest()
    if key not in _KEPT:
        directory = os.environ.get("TILEPIPE_CHECK_CACHE")
        path = Path(directory) / f"{key}.pickle" if directory else None
        _KEPT[key] = compute() if path is None else claims.once(
            path, path.with_suffix(".claim"), lambda p: pickle.loads(p.read_bytes()), compute, _store)
    return _KEPT[key]


def _store(path: Path, value: Any) -> None:
    """Write `value` whole, then rename it into `path`."""
    claims.store_whole(path, pickle.dumps(value))


_KEPT: dict[str, Any] = {}
_CHECKER_SOURCE = Path(__file__).read_text()


def trip_cases(**ranges: Iterable[int]) -> tuple[tuple[tuple[str, int], ...], ...]:
    """Every combination of trip counts: trip_cases(tiles=(1, 3), k=(1, 5))."""
    names = list(ranges)
    return tuple(tuple(zip(names, values)) for values in product(*(tuple(r) for r in ranges.values())))


def format_results(results: Sequence[CheckResult]) -> str:
    """A table of the checked configurations, then every finding with its interleaving."""
    rows = [("kernel", "config", "cases", "states", "traced", "result")]
    for r in results:
        rows.append((r.kernel, r.config, str(r.cases), str(r.states), "yes" if r.traced else "no",
                     "ok" if r.ok else f"{len(r.findings)} finding(s)"))
    details = [f"{r.kernel} {r.config}: {finding}" for r in results for finding in r.findings]
    return "\n\n".join([format_table(rows), *details])
