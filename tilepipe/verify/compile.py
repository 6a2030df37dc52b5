"""Ahead-of-time compile harness: build @gluon.jit kernels for sm_90a / sm_100a without a GPU and report on them.

Compilation runs in child interpreters (`_CHILD`: `_serve` under a bare tilepipe package) because some compile
errors are LLVM fatal errors that abort the process (e.g. wgmma compiled for sm_100a); as many children run at once as
there are cores (TILEPIPE_COMPILE_JOBS overrides). A child outlives its call and serves the process's next ones (its
imports and Triton's start-up, about a second a child, paid once), until the source of tilepipe or of a kernel's
module changes, or a spec crashes it. Each call uses a fresh Triton cache directory, so an edited kernel,
or an edited @builtin helper that Triton leaves out of its cache key, is never served stale. Where
TILEPIPE_COMPILE_CACHE names a directory (the test session sets one), reports are kept there, keyed by the spec, the
Triton version and the source of tilepipe and of the spec's module, so one spec compiles once however many tests and
commands ask for it.
"""

import atexit
import base64
import hashlib
import importlib.util
import json
import os
import re
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any, NamedTuple

from tilepipe.kernels.spec import TARGETS, KernelSpec
from tilepipe.verify import claims

_SOURCES = ("ptx", "sass", "ttgir")
_LOG_LIMIT = 8000  # characters of a failed spec's console output kept in its CompileError


@dataclass(frozen=True)
class KernelReport:
    """What one compiled kernel looks like: its code at three levels and its resource use. The SASS is disassembled
    from the cubin when first read: most reports (the compile report's) never read it, and cuobjdump costs a
    fraction of a CPU-second a kernel."""

    name: str
    target: str
    ptx: str = field(repr=False)
    cubin: str = field(repr=False)  # base64
    ttgir: str = field(repr=False)
    shared: int  # bytes of shared memory (metadata.shared)
    tmem: int  # TMEM columns allocated (metadata.tmem_size; 0 without TMEM, and on sm_90a)
    num_warps: int  # all warps of the kernel, worker partitions included
    registers: int  # per thread, from ptxas -v
    spill_stores: int  # bytes
    spill_loads: int  # bytes

    @cached_property
    def sass(self) -> str:
        return _sass(base64.b64decode(self.cubin))

    @cached_property
    def ptxas_log(self) -> str:
        """The bundled ptxas's -v log for this PTX, run when first read: its warnings (C7514: wgmmas serialized where
        an instruction reads the accumulator inside a pipeline stage) are what tests look for."""
        from triton.backends.nvidia.compiler import get_ptxas

        with tempfile.TemporaryDirectory(prefix="tilepipe-ptxas-") as tmp:
            path = Path(tmp) / "kernel.ptx"
            path.write_text(self.ptx)
            return _run_tool([get_ptxas(TARGETS[self.target]).path, "-v", f"--gpu-name={self.target}", str(path),
                              "-o", os.devnull]).stderr

    def count(self, pattern: str, where: str = "ptx") -> int:
        """Occurrences of the literal substring `pattern` in the PTX, SASS or TTGIR."""
        if where not in _SOURCES:
            raise ValueError(f"where must be one of {_SOURCES}, got {where!r}")
        return getattr(self, where).count(pattern)


class CompileError(RuntimeError):
    """A spec failed to compile; the message carries the compiler's own error text (Triton or LLVM)."""


def compile_kernel(spec: KernelSpec, timeout: float = 300) -> KernelReport:
    """Compile one kernel in a child interpreter; raise CompileError if it fails."""
    result = compile_kernels([spec], timeout)[0]
    if isinstance(result, CompileError):
        raise result
    return result


def compile_kernels(specs: Sequence[KernelSpec], timeout: float = 600,
                    progress: Callable[[int, int], None] | None = None) -> list[KernelReport | CompileError]:
    """Compile many kernels (results in the order given) in child interpreters run side by side, one per job, each
    taking every jobs-th spec; specs already in the report cache are not compiled again.

    If a child dies (abort, segfault, timeout), the spec it was compiling gets a CompileError with that spec's own
    output, and the specs after it go on in a new child (children otherwise serve later calls: _Server). `timeout`
    (seconds) bounds the whole call. `progress` is called with (done, total) as each spec finishes.
    """
    sources = _source_digests({spec.fn.partition(":")[0] for spec in specs})
    keys = [_spec_key(spec, sources[spec.fn.partition(":")[0]]) for spec in specs]
    found = {key: _cached(key) for key in dict.fromkeys(keys)}
    todo = [key for key in found if found[key] is None]
    counted = _Progress(len(found) - len(todo), len(found), progress)
    deadline = time.monotonic() + timeout
    specs_of = dict(zip(keys, specs))
    theirs = [key for key in todo if not _claim(key)]
    _compile_into(found, [key for key in todo if key not in theirs], specs_of, sources, deadline, timeout, counted)
    left = _await_others(found, theirs, deadline, counted)
    for key in left:  # failed or orphaned there: compiled here (a live owner past the deadline keeps its claim)
        _claim(key)
    _compile_into(found, left, specs_of, sources, deadline, timeout, counted)
    return [found[key] for key in keys]  # type: ignore[misc]  # every key is filled by now


def _compile_into(found: dict, todo: list[str], specs_of: dict[str, KernelSpec], sources: dict[str, str],
                  deadline: float, timeout: float, counted: "_Progress") -> None:
    """Compile the specs of keys `todo` in children side by side, one per job, each taking every jobs-th spec; keep
    each result in `found` and the report cache, and give up this process's claim on it. `sources`: the digests of
    the modules the specs compile from (and of tilepipe), which a child must have imported as they are now."""
    if not todo:
        return
    jobs = max(1, min(_jobs(), len(todo)))
    with tempfile.TemporaryDirectory(prefix="tilepipe-compile-") as tmp:
        call = _Call(Path(tmp), sources)
        with ThreadPoolExecutor(max_workers=jobs) as pool:
            share = [todo[job::jobs] for job in range(jobs)]
            running = [pool.submit(_compile_batch, [specs_of[k] for k in keys_], call, deadline, timeout,
                                   counted.step) for keys_ in share]
            for keys_, future in zip(share, running):
                for key, result in zip(keys_, future.result()):
                    found[key] = result
                    _store(key, result)
                    _release(key)


class _Progress:
    """Specs done out of the call's total, counted from every child's thread, told to a progress callback."""

    def __init__(self, done: int, total: int, callback: Callable[[int, int], None] | None) -> None:
        self.done, self.total, self.callback, self.lock = done, total, callback, threading.Lock()

    def step(self, finished: int) -> None:
        with self.lock:
            self.done += finished
            if self.callback is not None and finished:
                self.callback(self.done, self.total)


def _jobs() -> int:
    """How many compiler children run at once: TILEPIPE_COMPILE_JOBS, else the cores this process may use."""
    return int(os.environ.get("TILEPIPE_COMPILE_JOBS") or len(os.sched_getaffinity(0)))


class _Call(NamedTuple):
    """What one compile_kernels call gives its children: its directory (run directories and a fresh Triton cache
    inside) and the source digests the children must be fresh for."""

    tmp: Path
    sources: dict[str, str]


def _compile_batch(batch: list[KernelSpec], call: _Call, deadline: float, timeout: float,
                   finished: Callable[[int], None]) -> list[KernelReport | CompileError]:
    """Compile `batch` in order in as few children as its failures allow (a new child after each crash); `finished`
    is told how many more specs are done as they finish."""
    results: list[KernelReport | CompileError | None] = [None] * len(batch)
    pending = list(range(len(batch)))
    while pending:
        run_dir = Path(tempfile.mkdtemp(dir=call.tmp, prefix="run-"))
        records, stop = _run_child([batch[i] for i in pending], run_dir, call, deadline, timeout, finished)
        for i, record in zip(pending, records):
            results[i] = _from_record(batch[i], record)
        pending = pending[len(records):]
        if stop is None:
            continue
        # The spec the child was compiling takes the blame; if it had not started one, all that are left do.
        blamed = pending[:1] if stop.in_spec else pending
        for i in blamed:
            results[i] = CompileError(f"{_describe(batch[i])}: {stop.reason}")
        pending = pending[len(blamed):]
        finished(len(blamed))
    return results  # type: ignore[return-value]  # every slot is filled by now


# ------------------------------------------------------------------------------------------------- report cache


def _cache_dir() -> Path | None:
    directory = os.environ.get("TILEPIPE_COMPILE_CACHE")
    return Path(directory) if directory else None


def _spec_key(spec: KernelSpec, source_digest: str) -> str:
    """The spec, the Triton version and the source it compiles from, hashed: equal keys build the same kernel."""
    import triton

    text = json.dumps([asdict(spec), triton.__version__, source_digest], sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()


def _source_digest(module: str) -> str:
    """A digest of every tilepipe source file and of `module`'s (a test kernel's module lives outside tilepipe), read
    at each call, so an edit between two calls compiles again."""
    return _source_digests({module})[module]


def _source_digests(modules: set[str]) -> dict[str, str]:
    """_source_digest of each of `modules`, and tilepipe's own under "tilepipe", reading tilepipe's files once."""
    package = Path(__file__).resolve().parents[1]
    digest = hashlib.sha256()
    for path in sorted(package.rglob("*.py")):
        digest.update(str(path).encode() + b"\0" + path.read_bytes())
    digests = {"tilepipe": digest.hexdigest()}
    for module in modules:
        spec = importlib.util.find_spec(module)
        own = digest.copy()
        if spec and spec.origin:
            own.update(spec.origin.encode() + b"\0" + Path(spec.origin).read_bytes())
        digests[module] = own.hexdigest()
    return digests


def _cached(key: str) -> KernelReport | None:
    directory = _cache_dir()
    path = directory / f"{key}.json" if directory else None
    if path is None or not path.exists():
        return None
    return KernelReport(**json.loads(path.read_text()))


def _store(key: str, result: KernelReport | CompileError) -> None:
    """Keep a built kernel's report (written whole, then renamed, for readers in other processes); failures are
    compiled again, since a timeout or a crash need not repeat."""
    directory = _cache_dir()
    if directory is None or isinstance(result, CompileError):
        return
    claims.store_whole(directory / f"{key}.json", json.dumps(asdict(result)).encode())


def _claim_path(key: str) -> Path | None:
    directory = _cache_dir()
    return directory / f"{key}.claim" if directory else None


def _claim(key: str) -> bool:
    """Whether this process takes spec `key` to compile: it holds the cache's claim on it (or there is no cache). Test
    workers running side by side (pytest -n) then compile a spec both ask for once (tilepipe.verify.claims)."""
    path = _claim_path(key)
    return path is None or claims.claim(path)


def _claimed_by_other(key: str) -> bool:
    """Whether another live process holds the claim on `key`."""
    path = _claim_path(key)
    return path is not None and claims.claimed_by_other(path)


def _release(key: str) -> None:
    """Give up this process's claim on `key` (another's is left alone)."""
    path = _claim_path(key)
    if path is not None:
        claims.release(path)


def _await_others(found: dict, keys: list[str], deadline: float, counted: "_Progress") -> list[str]:
    """Wait for the reports other processes are compiling (their claims on `keys`); the keys whose owner finished
    without a report (a failure, never cached) or died, or that the deadline left open, are returned to compile."""
    waiting = list(keys)
    while waiting:
        owned = [key for key in waiting if _claimed_by_other(key)]  # looked at before the reports: an owner stores
        for key in list(waiting):                                    # its report, then gives up its claim
            report = _cached(key)
            if report is not None:
                found[key] = report
                counted.step(1)
                waiting.remove(key)
        if not set(owned) & set(waiting) or time.monotonic() >= deadline:
            break
        time.sleep(0.2)
    return waiting


class _Stop(NamedTuple):
    """Why a child ended before finishing its batch, and whether it was inside a spec at the time."""

    reason: str
    in_spec: bool


def _describe(spec: KernelSpec) -> str:
    return f"{spec.fn} for {spec.target}"


def _from_record(spec: KernelSpec, record: dict[str, Any]) -> KernelReport | CompileError:
    if "error" in record:
        return CompileError(f"{_describe(spec)}: {record['error']}")
    return KernelReport(**record["report"])


def _child_env() -> dict[str, str]:
    """The parent's environment plus its import path (so test modules resolve)."""
    return {**os.environ, "PYTHONPATH": os.pathsep.join(os.path.abspath(p) for p in sys.path)}


def _env_key() -> tuple:
    """What a child's start fixes that a later call may change: the import path and the compiler's settings."""
    settings = sorted((k, v) for k, v in os.environ.items() if k.startswith(("TRITON_", "TILEPIPE_", "MLIR_", "LLVM_"))
                      and k != "TRITON_CACHE_DIR")
    return sys.executable, tuple(os.path.abspath(p) for p in sys.path), tuple(settings)


_CHILD = ("import sys, types; package = types.ModuleType('tilepipe'); package.__path__ = [sys.argv[1]]; "
          "sys.modules['tilepipe'] = package; from tilepipe.verify.compile import _serve; _serve()")
"""The child's program: tilepipe's subpackages under a bare package module, without running tilepipe/__init__.py
(the torch ops and their registration, about 2 s of imports a child; a kernel needs neither), then _serve."""


class _Server:
    """A compiler child that serves batch after batch (one JSON line each on its stdin, "done" on its stdout) until
    its stdin closes. It remembers the source digests it compiled from: an edit since retires it (its imports are of
    the old source)."""

    def __init__(self) -> None:
        self.key = _env_key()
        self.sources: dict[str, str] = {}
        self.dir = Path(tempfile.mkdtemp(prefix="tilepipe-compiler-"))
        package = str(Path(__file__).resolve().parents[1])
        with open(self.dir / "stderr", "w") as stderr:  # what the child prints outside a spec's log (a crash)
            self.proc = subprocess.Popen([sys.executable, "-c", _CHILD, package], stdin=subprocess.PIPE,
                                         stdout=subprocess.PIPE, stderr=stderr, env=_child_env(), text=True)

    def fresh_for(self, sources: dict[str, str]) -> bool:
        return self.proc.poll() is None and all(self.sources.get(m, d) == d for m, d in sources.items())

    def stderr(self) -> str:
        return (self.dir / "stderr").read_text(errors="replace")

    def stop(self) -> int:
        """End the child (killed if it is still running) and return its exit status."""
        if self.proc.poll() is None:
            self.proc.kill()
        status = self.proc.wait()
        for stream in (self.proc.stdin, self.proc.stdout):
            try:
                stream.close()
            except OSError:  # a pipe to a killed child
                pass
        shutil.rmtree(self.dir, ignore_errors=True)
        return status


_IDLE: list[_Server] = []
_IDLE_LOCK = threading.Lock()


def _server(sources: dict[str, str]) -> _Server:
    """An idle child fresh for `sources` (a stale one is stopped), else a new one."""
    key = _env_key()
    with _IDLE_LOCK:
        server = next((s for s in _IDLE if s.key == key and s.fresh_for(sources)), None)
        if server is not None:
            _IDLE.remove(server)
        stale = [s for s in _IDLE if s.key == key and not s.fresh_for(sources)]
        for s in stale:
            _IDLE.remove(s)
    for s in stale:
        s.stop()
    server = server or _Server()
    server.sources.update(sources)
    return server


def _idle(server: _Server) -> None:
    """Keep `server` for the next call (at most as many idle as there are jobs: the oldest goes)."""
    with _IDLE_LOCK:
        _IDLE.append(server)
        extra = _IDLE[:max(0, len(_IDLE) - _jobs())]
        del _IDLE[:len(extra)]
    for s in extra:
        s.stop()


@atexit.register
def _stop_idle() -> None:
    with _IDLE_LOCK:
        servers = list(_IDLE)
        _IDLE.clear()
    for server in servers:
        server.stop()


def _run_child(batch: list[KernelSpec], run_dir: Path, call: _Call, deadline: float, timeout: float,
               finished: Callable[[int], None]) -> tuple[list[dict[str, Any]], _Stop | None]:
    """Have a child compile `batch`, telling `finished` of each spec it completes; return the records it finished
    and, if it stopped early, why."""
    if deadline - time.monotonic() <= 0:
        return [], _Stop(f"not compiled: the {timeout:g} s timeout ran out", in_spec=False)
    server = _server(call.sources)
    results = run_dir / "results.jsonl"
    request = {"run_dir": str(run_dir), "cache": str(call.tmp / "triton-cache"), "specs": [asdict(s) for s in batch]}
    ended = None
    try:
        server.proc.stdin.write(json.dumps(request) + "\n")
        server.proc.stdin.flush()
    except OSError:
        ended = "compiler process stopped early"
    told = 0
    while ended is None:
        ready, _, _ = select.select([server.proc.stdout], [], [], max(0.01, min(0.5, deadline - time.monotonic())))
        if ready:
            line = server.proc.stdout.readline()
            if line.strip() == "done":
                break
            if not line:
                ended = "compiler process stopped early"
        elif time.monotonic() >= deadline:
            ended = f"compile timed out (timeout {timeout:g} s)"
        done = _lines(results)
        finished(done - told)
        told = done
    records = [json.loads(line) for line in results.read_text().splitlines()] if results.exists() else []
    finished(len(records) - told)
    if ended is None:
        _idle(server)
        return records, None
    output = server.stderr()
    status = server.stop()
    if status < 0 and not ended.startswith("compile timed out"):
        ended = f"compiler process killed by {signal.Signals(-status).name}"
    elif status > 0 and not ended.startswith("compile timed out"):
        ended = f"compiler process exited with status {status}"
    if len(records) == len(batch):
        return records, None
    log = run_dir / f"{len(records)}.log"
    if log.exists():
        return records, _Stop(f"{ended}\n{_clip(log.read_text(errors='replace'))}".rstrip(), in_spec=True)
    return records, _Stop(f"{ended}\n{_clip(output)}".rstrip(), in_spec=False)


def _lines(path: Path) -> int:
    """Complete lines in a file a child is appending to (0 before it exists)."""
    try:
        return path.read_text().count("\n")
    except FileNotFoundError:
        return 0


def _clip(text: str) -> str:
    """Keep both ends of a long log: the first error and the final fatal message are what matter."""
    text = text.strip()
    if len(text) <= _LOG_LIMIT:
        return text
    half = _LOG_LIMIT // 2
    return f"{text[:half]}\n[... {len(text) - 2 * half} characters cut ...]\n{text[-half:]}"


# ----------------------------------------------------------------------------------------------- child side


def _serve() -> None:
    """The child: compile each batch read from stdin (a JSON line: run directory, Triton cache directory, specs)
    with _worker, then say "done" on stdout; end when stdin closes."""
    for line in sys.stdin:
        request = json.loads(line)
        os.environ["TRITON_CACHE_DIR"] = request["cache"]
        _worker(Path(request["run_dir"]), request["specs"])
        print("done", flush=True)


def _worker(run_dir: Path, specs: list[dict[str, Any]]) -> None:
    """Compile `specs`, one JSON line per spec appended to run_dir/results.jsonl.

    Each spec's console output (Python and native, stdout and stderr) goes to run_dir/<i>.log, so whoever
    reads the results after a crash knows which spec was running and what it printed.
    """
    with open(run_dir / "results.jsonl", "w") as results:
        for i, spec in enumerate(specs):
            log = run_dir / f"{i}.log"
            with _console_to(log):
                try:
                    record: dict[str, Any] = {"report": _compile_one(spec, run_dir, log)}
                except Exception as exc:  # every failure becomes that spec's CompileError
                    record = {"error": _error_text(exc)}
            output = log.read_text(errors="replace").strip()
            if "error" in record and output:
                record["error"] += f"\n--- compiler output ---\n{_clip(output)}"
            results.write(json.dumps(record) + "\n")
            results.flush()


def _error_text(exc: BaseException) -> str:
    """The error and, when Triton wrapped it per call site, its root cause (which holds the real message)."""
    text = "".join(traceback.format_exception_only(exc)).strip()
    root, seen = exc, {id(exc)}
    while (nxt := root.__cause__ or root.__context__) is not None and id(nxt) not in seen:
        root = nxt
        seen.add(id(root))
    if root is not exc:
        text += "\n--- root cause ---\n" + "".join(traceback.format_exception_only(root)).strip()
    return text


@contextmanager
def _console_to(path: Path) -> Iterator[None]:
    """Point file descriptors 1 and 2 at `path`, catching what LLVM and ptxas write as well as Python."""
    sys.stdout.flush()
    sys.stderr.flush()
    saved = os.dup(1), os.dup(2)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)
    try:
        yield
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os.dup2(saved[0], 1)
        os.dup2(saved[1], 2)
        os.close(saved[0])
        os.close(saved[1])


def _compile_one(spec: dict[str, Any], run_dir: Path, log: Path) -> dict[str, Any]:
    """Compile one spec (a KernelSpec as a dict) and measure it, with its console going to `log`; returns
    KernelReport fields."""
    import triton
    from triton import knobs
    from triton.backends.compiler import GPUTarget
    from triton.experimental.gluon._runtime import GluonASTSource

    kernel_spec = KernelSpec(**spec)
    fn = kernel_spec.function()
    signature = spec["signature"]
    aligned = spec["divisible_by_16"]
    if aligned is None:
        aligned = [name for name, ty in signature.items() if ty.startswith("*")]
    attrs = {(fn.arg_names.index(name), ): [["tt.divisibility", 16]] for name in aligned}
    source = GluonASTSource(fn, signature=signature, constexprs=spec["constexprs"], attrs=attrs)
    capability = TARGETS[spec["target"]]
    with knobs.nvidia.scope():
        knobs.nvidia.dump_ptxas_log = True  # Triton prints its `ptxas -v` log into the spec's console log
        kernel = triton.compile(source, target=GPUTarget("cuda", capability, 32),
                                options=kernel_spec.compile_options())
    md = kernel.metadata
    sys.stdout.flush()
    console = log.read_text(errors="replace")
    if f"Compiling entry function '{md.name}'" in console:  # the cubin's own registers and spills
        registers, spill_stores, spill_loads = _parse_ptxas_log(console, md.name)
    else:  # served from Triton's cache (another spec of the same call built the same kernel): no ptxas ran
        registers, spill_stores, spill_loads = _ptxas_usage(kernel.asm["ptx"], md, spec["target"], run_dir)
    return {
        "name": md.name, "target": spec["target"], "ptx": kernel.asm["ptx"], "ttgir": kernel.asm["ttgir"],
        "cubin": base64.b64encode(kernel.asm["cubin"]).decode(), "shared": md.shared, "tmem": getattr(md, "tmem_size", None) or 0,
        "num_warps": md.num_warps,
        "registers": registers, "spill_stores": spill_stores, "spill_loads": spill_loads,
    }


def _sass(cubin: bytes) -> str:
    """Disassemble with Triton's bundled cuobjdump (CUDA 13.1 in triton 3.9; it reads sm_90a and sm_100a cubins)."""
    from triton import knobs

    with tempfile.TemporaryDirectory(prefix="tilepipe-sass-") as tmp:
        path = Path(tmp) / "kernel.cubin"
        path.write_bytes(cubin)
        return _run_tool([knobs.nvidia.cuobjdump.path, "-sass", str(path)]).stdout


def _ptxas_usage(ptx: str, md: Any, target: str, run_dir: Path) -> tuple[int, int, int]:
    """(registers, spill store bytes, spill load bytes) of the kernel entry, from the bundled ptxas -v.

    The flags mirror Triton's own ptxas call so the numbers describe the cubin Triton built.
    """
    from triton.backends.nvidia.compiler import get_ptxas

    path = run_dir / "kernel.ptx"
    path.write_text(ptx)
    cmd = [get_ptxas(TARGETS[target]).path, "-lineinfo", "-v", "--regAllocOptLevel=2", f"--gpu-name={target}",
           str(path), "-o", os.devnull]
    if not md.enable_fp_fusion:
        cmd.insert(1, "--fmad=false")
    if md.ptx_options:
        cmd[1:1] = md.ptx_options.split(" ")
    log = _run_tool(cmd).stderr
    return _parse_ptxas_log(log, md.name)


def _run_tool(cmd: list[str]) -> subprocess.CompletedProcess:
    """Run a bundled CUDA tool; on failure raise with its own error output, which is what explains it."""
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode:
        raise RuntimeError(f"{' '.join(cmd)} failed with status {proc.returncode}:\n{proc.stderr}{proc.stdout}")
    return proc


def _parse_ptxas_log(log: str, entry: str) -> tuple[int, int, int]:
    """(registers, spill store bytes, spill load bytes) of `entry` in a `ptxas -v` log; other functions are ignored."""
    start = log.find(f"Compiling entry function '{entry}'")
    if start < 0:
        raise ValueError(f"ptxas log has no entry function {entry!r}:\n{log}")
    block = log[start:].split("Compiling entry function", 2)[1]
    spills = re.search(rf"Function properties for {re.escape(entry)}\n.*?(\d+) bytes spill stores, (\d+) bytes spill loads",
                       block)
    registers = re.search(r"Used (\d+) registers", block)
    if spills is None or registers is None:
        raise ValueError(f"cannot read register or spill counts for {entry!r} from ptxas log:\n{log}")
    return int(registers.group(1)), int(spills.group(1)), int(spills.group(2))
