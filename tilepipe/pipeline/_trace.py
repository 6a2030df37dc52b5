"""Trace-time protocol bookkeeping: linear stage handles and which roles signal which barriers.

Gluon traces each kernel once, in Python, before any IR runs. The pipeline layer records every
stage handle it hands out and every barrier signal here, so that misuse (a stage never released,
released twice, released in another block than it was acquired in, or a pipeline whose declared
arrival counts disagree with the roles that signal it) becomes a compile error naming the source
line, not a GPU hang. `tilepipe.pipeline.roles.warp_specialize` opens and checks a tracing session.
"""

import ast
import itertools
import re
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from fractions import Fraction

from triton.language.core import _unwrap_if_constexpr


class ProtocolError(Exception):
    """A pipeline protocol violation found while tracing a kernel."""


_LOCATION = re.compile(r'"([^"]+)":(\d+):\d+')


def source_line(semantic) -> str:
    """`file:line` of the statement being traced (from the builder's current MLIR location)."""
    loc = str(semantic.builder.get_loc())  # loc("/path/file.py":12:4), or loc("name"("/path/file.py":12:4))
    found = _LOCATION.findall(loc)
    return f"{found[-1][0]}:{found[-1][1]}" if found else loc


class StageToken:
    """A stage handle's trace-time identity, carried as a constexpr field of the handle.

    Tokens compare equal to each other so that a name bound to stage handles on both sides of a runtime `if` still
    merges (Triton merges every name both branches assign); their text differs, so Triton's per-type specialization
    of jit helpers that take a stage keeps them apart.
    """

    def __init__(self, number: int) -> None:
        self.number = number

    def __eq__(self, other: object) -> bool:
        return isinstance(other, StageToken)

    def __hash__(self) -> int:
        return 0

    def __repr__(self) -> str:
        return f"stage{self.number}"


@dataclass
class StageRecord:
    """One acquired stage handle: where it was acquired, what it did, whether it was released."""
    side: str  # "producer" or "consumer"
    pipeline: str
    acquired_at: str
    block: object
    role: str | None
    signalled: bool = False
    released_at: str | None = None


@dataclass
class Session:
    """Everything recorded while the partitions of one `warp_specialize` call are traced."""
    role: str | None = None
    stages: dict[int, StageRecord] = field(default_factory=dict)
    # (pipeline name, "full" | "empty") -> {role: first line that signalled}
    signals: dict[tuple[str, str], dict[str, str]] = field(default_factory=dict)
    # (pipeline name, "full" | "empty") -> {role: how many roles take turns at that side (1: none)}
    turns: dict[tuple[str, str], dict[str, int]] = field(default_factory=dict)
    declared: dict[str, tuple[int, int]] = field(default_factory=dict)
    pipelines: dict[str, int] = field(default_factory=dict)  # pipeline name -> number in probe trace buffers


_tokens = itertools.count(1)
_sessions: list[Session] = []
_recordings: list[list[Session]] = []


def _session() -> Session | None:
    return _sessions[-1] if _sessions else None


def begin_session() -> Session:
    session = Session()
    _sessions.append(session)
    return session


def end_session(session: Session) -> None:
    _sessions.remove(session)
    for sessions in _recordings:
        sessions.append(session)


@contextmanager
def recording() -> Iterator[list[Session]]:
    """Collect every session that ends inside the block (tilepipe.verify.checker compares them with its declarations)."""
    sessions: list[Session] = []
    _recordings.append(sessions)
    try:
        yield sessions
    finally:
        _recordings.remove(sessions)


def role_label(function: str, partition: int) -> str:
    """How traced records name a role: its function and its warp_specialize partition index."""
    return f"{function} (partition {partition})"


def set_role(name: str | None) -> None:
    """Name the partition now being traced; signals and stages are attributed to it."""
    session = _session()
    if session is not None:
        session.role = name


def record_signal(pipeline: str, barrier: str, producer_arrivals: int, consumer_arrivals: int, semantic,
                  turns: int = 1) -> None:
    """Note that the current role signals `barrier` ("full" or "empty") of `pipeline`, and its declared counts;
    `turns` roles taking turns at that side (each stage use signalled by one of them) count as one arrival."""
    session = _session()
    if session is not None and session.role is not None:
        pipeline = _unwrap_if_constexpr(pipeline)
        session.declared[pipeline] = (_unwrap_if_constexpr(producer_arrivals), _unwrap_if_constexpr(consumer_arrivals))
        session.signals.setdefault((pipeline, barrier), {}).setdefault(session.role, source_line(semantic))
        session.turns.setdefault((pipeline, barrier), {})[session.role] = _unwrap_if_constexpr(turns)


def pipeline_number(name: str) -> int:
    """A number for pipeline `name`, the same for every role of the kernel being traced (0, 1, ... by first use)."""
    session = _session()
    if session is None:
        raise ProtocolError(f"pipeline '{name}' is probed outside tilepipe.pipeline.roles.warp_specialize")
    return session.pipelines.setdefault(name, len(session.pipelines))


def current_role() -> str:
    """The role now being traced ("" outside warp_specialize): a constexpr that keeps a helper shared by several
    roles traced once per role, so each role's signals are recorded (Triton traces one specialization once)."""
    session = _session()
    return (session.role or "") if session is not None else ""


def open_stage(side: str, pipeline: str, semantic) -> StageToken:
    """Register a freshly acquired stage handle; returns its token."""
    token = next(_tokens)
    session = _session()
    if session is not None:
        session.stages[token] = StageRecord(side, _unwrap_if_constexpr(pipeline), source_line(semantic),
                                            semantic.builder.get_insertion_block(), session.role)
    return StageToken(token)


def _record(token: StageToken) -> StageRecord | None:
    session = _session()
    return session.stages.get(_unwrap_if_constexpr(token).number) if session is not None else None


def mark_signalled(token: StageToken) -> None:
    record = _record(token)
    if record is not None:
        record.signalled = True


def close_stage(token: StageToken, semantic, *, needs_signal: bool) -> None:
    """Release a stage handle exactly once, in the block that acquired it, after it signalled."""
    record = _record(token)
    if record is None:
        return
    here = source_line(semantic)
    what = f"{record.side} stage of pipeline '{record.pipeline}' acquired at {record.acquired_at}"
    if record.released_at is not None:
        raise ProtocolError(f"{what} is released twice: first at {record.released_at}, again at {here}")
    if semantic.builder.get_insertion_block() != record.block:
        raise ProtocolError(
            f"{what} is released at {here} inside a nested branch or loop: release a stage in the block that "
            "acquired it, so it is released on every path (signal conditionally with arrive(), then "
            "release_without_signal())")
    if needs_signal and not record.signalled:
        raise ProtocolError(
            f"{what} is released at {here} without signalling its peers: call expect_bytes() (TMA), arrive(), "
            "or hand mbar() to the operation that completes it")
    record.released_at = here


def check_session(session: Session) -> None:
    """Raise for stages never released and for arrival counts that disagree with the signalling roles."""
    for record in session.stages.values():
        if record.released_at is None:
            role = f" in role '{record.role}'" if record.role else ""
            raise ProtocolError(f"{record.side} stage of pipeline '{record.pipeline}' acquired at "
                                f"{record.acquired_at}{role} is never released")
    for name, (producers, consumers) in session.declared.items():
        for barrier, declared, side in (("full", producers, "producer"), ("empty", consumers, "consumer")):
            roles = session.signals.get((name, barrier), {})
            turns = session.turns.get((name, barrier), {})
            arrivals = sum(Fraction(1, turns.get(role, 1)) for role in roles)  # roles taking turns share one
            if roles and arrivals != declared:
                listing = ", ".join(f"'{r}' ({line})" + (f" taking {turns[r]} turns" if turns.get(r, 1) > 1 else "")
                                    for r, line in roles.items())
                raise ProtocolError(
                    f"pipeline '{name}' declares {declared} {side} arrival(s) per stage, but {arrivals} role(s) "
                    f"signal its '{barrier}' barriers: {listing}")


def with_statement_target(kind: str) -> tuple[object, str]:
    """Return (code generator, variable name) for the `with VAR.kind(...)` statement now being traced.

    `with` statements construct their context manager without handing it the code generator, so the
    pipeline contexts find the generator's `visit_With` frame to rebind the pipeline variable on exit.
    """
    frame = sys._getframe(1)
    while frame is not None and frame.f_code.co_name not in ("visit_With", "call_Function"):
        frame = frame.f_back
    if frame is None or frame.f_code.co_name != "visit_With":
        raise ProtocolError(f"{kind}() returns a context manager: use it as `with pipe.{kind}() as stage:`")
    call = frame.f_locals["call"]
    if not (isinstance(call.func, ast.Attribute) and isinstance(call.func.value, ast.Name)):
        raise ProtocolError(f"`with ...{kind}()` needs the pipeline in a plain local variable "
                            f"(`pipe = ...; with pipe.{kind}() as stage:`) so it can advance it on exit")
    return frame.f_locals["self"], call.func.value.id


class StageContext:
    """`with OWNER.kind() as stage:` for any pipeline-like aggregate: acquire on enter; on exit release, and rebind
    the caller's OWNER variable to the advanced value that `release(stage)` returns."""

    def __init__(self, kind: str, acquire: Callable[[], object], release: Callable[[object], object],
                 semantic) -> None:
        self.generator, self.target = with_statement_target(kind)
        self.acquire, self.release, self.semantic = acquire, release, semantic
        self.location = semantic.builder.get_loc()  # the `with` line: the release is reported and emitted there
        self.stage = None

    def __enter__(self):
        self.stage = self.acquire()
        return self.stage

    def __exit__(self, *exc) -> None:
        builder = self.semantic.builder
        body_end = builder.get_loc()
        builder.set_loc(self.location)
        advanced = self.release(self.stage)
        builder.set_loc(body_end)
        self.generator.set_value(self.target, advanced)
