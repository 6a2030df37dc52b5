"""The GPU tests' pattern: every case runs as `python -m MODULE *case` in its own process under a timeout (a hung
kernel fails its case instead of the session) and prints a JSON result with an `ok` field."""

from tilepipe.probes.debug import GuardedRun, run_all_guarded
from tilepipe.tools.bench import warmed_graph  # noqa: F401  (the graph cases' capture)


def run_cases(module: str, cases: list[tuple], timeout_s: float, parallel: int = 1) -> dict[tuple, GuardedRun]:
    """Run every case of `module`, `parallel` processes at a time; the runs by case."""
    commands = [["-m", module, *map(str, case)] for case in cases]
    return dict(zip(cases, run_all_guarded(commands, timeout_s, parallel=parallel)))


def assert_ok(run: GuardedRun) -> None:
    """The case's process finished in time and its result says ok (else its output, to see why)."""
    assert run.status == "ok", f"{run.status} after {run.seconds:.1f}s:\n{run.output[-4000:]}"
    assert run.result is not None and run.result["ok"], run.result or run.output[-2000:]


def unexpected_errors(calls: list[tuple]) -> list[dict]:
    """Each (expected message start, call) whose call did not raise a TypeError or ValueError starting so."""
    failures = []
    for expected, call in calls:
        try:
            call()
            failures.append({expected: "no error"})
        except (TypeError, ValueError) as error:
            if not str(error).startswith(expected):
                failures.append({expected: str(error)})
    return failures
