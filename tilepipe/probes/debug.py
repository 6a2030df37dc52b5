"""Hang guards: a watchdog that names the stuck roles of a kernel launched in debug mode, and child processes under
a timeout for GPU tests, so a stuck pipeline is a named failure instead of a lost GPU.

Debug mode (`tilepipe.matmul(..., debug=True)` or TILEPIPE_DEBUG=1): the kernel is compiled with PROBE=DEBUG
(tilepipe.pipeline.probe), so before every pipeline wait each role writes where it is to a record in pinned host memory.
`watch` launches, then polls the records until the kernel finishes; when none changed for `stall_seconds()`
(TILEPIPE_DEBUG_STALL_S, default 5 s) it prints a report naming the kernel and, per role, the pipeline, side,
stage, phase and iteration it waits at, and ends the process with HANG_EXIT_CODE: a hung kernel cannot be
stopped, and the CUDA context dies with the process.
"""

import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from tilepipe.pipeline import probe as _probe

DEBUG_VARIABLE = "TILEPIPE_DEBUG"
"""The environment variable that turns debug mode on when a call passes no `debug`."""
REPO_ROOT = Path(__file__).resolve().parents[2]


@dataclass(frozen=True)
class GuardedRun:
    """What one child process did: `status` is "ok", "failed" (non-zero exit) or "hung" (killed at the timeout)."""
    args: tuple[str, ...]
    returncode: int | None  # None when it was killed at the timeout
    seconds: float
    output: str
    result: dict | None  # the last JSON object line the child printed, if any

    @property
    def status(self) -> str:
        return "hung" if self.returncode is None else "ok" if self.returncode == 0 else "failed"


def run_guarded(args: Sequence[str], timeout: float, wrapper: Sequence[str] = ()) -> GuardedRun:
    """Run `python ARGS` from the repository root, under `wrapper` (a tool that runs a command, e.g.
    compute-sanitizer with its options) when given; kill its whole process group if it outlives `timeout`."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(REPO_ROOT), os.environ.get("PYTHONPATH")])))
    start = time.monotonic()
    child = subprocess.Popen([*wrapper, sys.executable, *args], cwd=REPO_ROOT, env=env, stdout=subprocess.PIPE,
                             stderr=subprocess.STDOUT, text=True, start_new_session=True)
    try:
        output, _ = child.communicate(timeout=timeout)
        returncode = child.returncode
    except subprocess.TimeoutExpired:
        os.killpg(child.pid, signal.SIGKILL)
        output, _ = child.communicate()
        returncode = None
    return GuardedRun(tuple(args), returncode, time.monotonic() - start, output, _last_json(output))


def run_all_guarded(commands: Sequence[Sequence[str]], timeout: float, parallel: int = 4) -> list[GuardedRun]:
    """run_guarded over many commands, `parallel` at a time, in order."""
    with ThreadPoolExecutor(parallel) as pool:
        return list(pool.map(lambda args: run_guarded(args, timeout), commands))


def _last_json(output: str) -> dict | None:
    for line in reversed(output.splitlines()):
        if line.startswith("{"):
            try:
                return json.loads(line)
            except json.JSONDecodeError:
                return None
    return None


HANG_EXIT_CODE = 3
DEFAULT_STALL_S = 5.0
_POLL_S = 0.05
_SIDES = {_probe.PRODUCER: "producer, waits for the consumers' release (empty barrier)",
          _probe.CONSUMER: "consumer, waits for the producer's fill (full barrier)",
          _probe.PAIR: "producer, waits for both CTAs' release (pair barrier, in the cluster's first CTA)"}


def debug_requested(debug: bool | None) -> bool:
    """The debug switch: `debug` when given, else the environment variable TILEPIPE_DEBUG (1/true/yes/on)."""
    if debug is not None:
        if not isinstance(debug, bool):
            raise TypeError(f"debug must be a bool or None, got {type(debug).__name__}")
        return debug
    return os.environ.get(DEBUG_VARIABLE, "").strip().lower() in ("1", "true", "yes", "on")


def stall_seconds() -> float:
    """How long no role may make progress before the watchdog reports a hang (TILEPIPE_DEBUG_STALL_S)."""
    text = os.environ.get("TILEPIPE_DEBUG_STALL_S", "")
    try:
        value = float(text) if text else DEFAULT_STALL_S
    except ValueError:
        raise ValueError(f"TILEPIPE_DEBUG_STALL_S must be a number of seconds, got {text!r}") from None
    if value <= 0:
        raise ValueError(f"TILEPIPE_DEBUG_STALL_S must be positive, got {value}")
    return value


@dataclass(frozen=True)
class RoleProgress:
    """Where one role of one CTA (`cta`: its rank in program `program`'s cluster) last was, from its record."""
    program: int
    cta: int
    partition: int
    role: str
    waiting: bool  # False: its last wait passed (the role runs, or finished)
    pipeline: str
    side: int
    stage: int
    phase: int
    iteration: int

    def where(self) -> str:
        return (f"pipeline '{self.pipeline}' as {_SIDES[self.side]}, stage {self.stage}, phase {self.phase}, "
                f"iteration {self.iteration}")


def progress_buffer(ctas: int):
    """Zeroed progress records for `ctas` CTAs (programs x CTAs per cluster), in pinned host memory the GPU writes
    through UVA."""
    import torch

    return torch.zeros((ctas, _probe.MAX_ROLES, _probe.PROGRESS_WORDS), dtype=torch.int32).pin_memory()


def read_progress(records, ctas: int = 1) -> list[RoleProgress]:
    """Every record a role wrote (CTAs x MAX_ROLES x PROGRESS_WORDS int32, a tensor or array), with `ctas` CTAs
    per program."""
    found = []
    names = _probe.PROGRESS_NAME_WORD
    for cta, roles in enumerate(records.tolist()):
        for partition, words in enumerate(roles):
            if words[0] == 0:
                continue
            found.append(RoleProgress(cta // ctas, cta % ctas, partition,
                                      _probe.unpack_name(words[names + 4:names + 8], 32),
                                      words[0] == _probe.WAITING, _probe.unpack_name(words[names:names + 4], 32),
                                      *words[1:5]))
    return found


def hang_report(kernel: str, progress: Sequence[RoleProgress], stalled_s: float, programs: int,
                ctas: int = 1) -> str:
    """What a stalled kernel's roles were doing: per role (and, in a cluster kernel, per CTA rank), each distinct
    wait and how many programs sit in it."""
    clusters = f", clusters of {ctas} CTAs" if ctas > 1 else ""
    lines = [f"tilepipe debug: kernel '{kernel}' made no progress for {stalled_s:.1f} s "
             f"({programs} programs{clusters})."]
    by_role: dict[tuple[int, int, str], Counter] = {}
    for p in progress:
        by_role.setdefault((p.partition, p.cta, p.role), Counter())[(p.waiting, p.where())] += 1
    stuck = sorted({role + (f" in CTA {cta}" if ctas > 1 else "")
                    for (_, cta, role), waits in by_role.items() if any(waiting for waiting, _ in waits)})
    lines.append(f"stuck roles: {', '.join(stuck) if stuck else 'none in a pipeline wait'}")
    for (partition, cta, role), waits in sorted(by_role.items()):
        where_cta = f", CTA {cta} of each cluster" if ctas > 1 else ""
        for (waiting, where), count in sorted(waits.items(), key=lambda item: (not item[0][0], -item[1]))[:4]:
            state = "STUCK waiting at" if waiting else "last wait passed (running or done):"
            lines.append(f"  role {role} (partition {partition}{where_cta}): {state} {where}  [{count} program(s)]")
    silent = programs - len({p.program for p in progress})
    if silent:
        lines.append(f"  {silent} program(s) recorded no wait at all")
    return "\n".join(lines)


def watch(kernel: str, records, launch: Callable[[], None], stall_s: float | None = None, ctas: int = 1) -> None:
    """Run `launch` (one kernel launch writing `records`, `ctas` CTAs per program) and wait until the kernel
    finished; if its roles make no progress for `stall_s` seconds, print the hang report to stderr and end the
    process with HANG_EXIT_CODE."""
    import torch

    stall_s = stall_seconds() if stall_s is None else stall_s
    started, finished = torch.cuda.Event(), torch.cuda.Event()
    started.record()
    launch()
    finished.record()
    snapshot, changed_at = None, time.monotonic()
    while not finished.query():
        now = time.monotonic()
        current = records.numpy().tobytes()
        if current != snapshot or not started.query():  # earlier work on the stream is no stall of this kernel
            snapshot, changed_at = current, now
        elif now - changed_at > stall_s:
            print(hang_report(kernel, read_progress(records, ctas), now - changed_at, records.shape[0] // ctas, ctas),
                  file=sys.stderr, flush=True)
            sys.stdout.flush()
            os._exit(HANG_EXIT_CODE)
        time.sleep(_POLL_S)
