"""Hang guard: run GPU work in child processes under a timeout, so a stuck pipeline is a named failure."""

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent


@dataclass(frozen=True)
class GuardedRun:
    """What one child process did: `status` is "ok", "failed" (non-zero exit) or "hung" (killed at the timeout)."""
    args: tuple[str, ...]
    status: str
    seconds: float
    output: str
    result: dict | None  # the last JSON object line the child printed, if any


def run_guarded(args: Sequence[str], timeout: float) -> GuardedRun:
    """Run `python ARGS` from the repository root; kill its whole process group if it outlives `timeout`."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(REPO_ROOT), os.environ.get("PYTHONPATH")])))
    start = time.monotonic()
    child = subprocess.Popen([sys.executable, *args], cwd=REPO_ROOT, env=env, stdout=subprocess.PIPE,
                             stderr=subprocess.STDOUT, text=True, start_new_session=True)
    try:
        output, _ = child.communicate(timeout=timeout)
        status = "ok" if child.returncode == 0 else "failed"
    except subprocess.TimeoutExpired:
        os.killpg(child.pid, signal.SIGKILL)
        output, _ = child.communicate()
        status = "hung"
    return GuardedRun(tuple(args), status, time.monotonic() - start, output, _last_json(output))


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
