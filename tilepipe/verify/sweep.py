"""Randomized GPU sweep: a seeded list of a few hundred calls of every public op, each compared with a float64
reference on fresh random inputs.

Calls cover every op family (matmul under each scheduler and the automatic choice, addmm, matmul_fp8 with
per-tensor, per-row and blockwise scales), shapes from 1 to 16384 (ragged, unaligned, a few exactly aligned),
both B layouts, strided and offset views, `out` given, returned or aliased with `c`, and alpha/beta. Each call runs
twice (the second launch takes the op's cached fast path) into an output poisoned with NaN first, and passes when
the relative Frobenius error is within a tolerance fit for the output dtype and the accumulation. Batches of calls
run in child processes under a timeout (a hang fails its batch and names the call it stopped at), several at a
time. `python -m tilepipe.verify.sweep [--seed S] [--count N] [--json PATH]` runs it (gpu_check.sh's sweep part).
"""

import argparse
import json
import random
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Callable

import torch

from tilepipe.api.fp8 import matmul_fp8
from tilepipe.api.matmul import addmm, matmul
from tilepipe.host.configs import SCALE_BLOCK
from tilepipe.probes.debug import GuardedRun, run_guarded
from tilepipe.schedulers import SCHEDULERS

SEED, COUNT, BATCH, PARALLEL, BATCH_TIMEOUT_S, BUDGET_S = 21, 256, 16, 8, 240, 300
"""The sweep's defaults; BUDGET_S bounds the whole run (a batch starts only with time left, and gets at most that
long), so it fits one device call beside the fuzz."""
FAMILIES: tuple[tuple[str, str | None], ...] = (*(("matmul", s) for s in (None, *SCHEDULERS)), ("addmm", None),
                                                *(("matmul_fp8", s) for s in ("tensor", "row", "blockwise")))
"""(op, scheduler or FP8 scaling): call i is of family i mod 8, so every family gets an eighth of the calls."""
RESIDUALS = {"matmul": ("none", "full", "fp32", "bias", "in_place", "ignored"),
             "addmm": ("row", "bias", "full", "column", "scalar")}
"""matmul's C: none, one of D's dtype, fp32 with a 16-bit D, a bias row broadcast, `out` itself, or NaNs with beta
= 0 (must be ignored). addmm's input: (N,), (1, N), (M, N), (M, 1) or 0-D."""
VIEWS = ("contiguous", "offset", "padded", "transposed")
"""An operand as stored: contiguous; a column slice starting 1-7 elements into wider rows (unaligned base); the
leading columns of wider rows (a row stride past its width); a transposed tensor's .t() (16-bit A only)."""
OUT_VIEWS = ("returned", "contiguous", "offset", "padded")
MAX_DIM, MAX_MACS, MAX_ELEMENTS = 16384, 1 << 34, 1 << 27
"""Dimensions up to 16384, at most 2^34 multiply-adds and 2^27 elements per operand, output or reference."""
OUT_TOLERANCE = {"bf16": 1e-2, "fp16": 2e-3, "fp32": 1e-4}
FP8_TOLERANCE = {"tensor": 2e-2, "row": 2e-2, "blockwise": 1e-2}
"""Relative Frobenius error: the output dtype's rounding; FP8 adds wgmma's reduced-precision accumulation
(per-tensor and per-row over all of K, blockwise promoted to fp32 every 128): tests/gpu/fp8_cases.py measures both."""
DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32, "e4m3": torch.float8_e4m3fn,
          "e5m2": torch.float8_e5m2}
REPEATS = 2


@dataclass(frozen=True)
class SweepCall:
    """One call of the sweep: everything that decides its inputs (their values come from `seed`)."""
    index: int
    op: str  # "matmul", "addmm" or "matmul_fp8"
    shape: tuple[int, int, int]  # M, N, K
    dtype: str  # A's dtype (and B's for 16-bit ops)
    b_dtype: str
    out_dtype: str
    b_kmajor: bool
    a_view: str
    b_view: str
    out_view: str
    residual: str  # matmul/addmm: RESIDUALS; matmul_fp8: the scaling
    alpha: float
    beta: float
    scheduler: str | None
    seed: int

    @property
    def family(self) -> str:
        """matmul under its scheduler ("auto": matmul's own choice), addmm, or matmul_fp8 with its scaling."""
        if self.op == "matmul":
            return f"matmul {self.scheduler or 'auto'}"
        return f"matmul_fp8 {self.residual}" if self.op == "matmul_fp8" else self.op

    @property
    def tolerance(self) -> float:
        return max(OUT_TOLERANCE[self.out_dtype], FP8_TOLERANCE.get(self.residual, 0.0))


def random_dim(rng: random.Random) -> int:
    """1-16, a multiple of 64/128/256, one of those off by 1-8, log-uniform up to 16384, or an edge (1, 16383, 16384)."""
    kind = rng.random()
    if kind < 0.2:
        return rng.randint(1, 16)
    if kind < 0.4:
        return rng.choice((64, 128, 256)) * rng.randint(1, 64)
    if kind < 0.6:
        return max(1, rng.choice((64, 128, 256)) * rng.randint(1, 64) + rng.choice((-1, 1)) * rng.randint(1, 8))
    if kind < 0.95:
        return int(2 ** rng.uniform(0, 14))
    return rng.choice((1, MAX_DIM - 1, MAX_DIM))


def fit_budget(M: int, N: int, K: int) -> tuple[int, int, int]:
    """Halve the largest dimension (rounding up) until the call fits MAX_MACS and MAX_ELEMENTS."""
    dims = [min(d, MAX_DIM) for d in (M, N, K)]
    while dims[0] * dims[1] * dims[2] > MAX_MACS or max(dims[0] * dims[1], dims[0] * dims[2],
                                                        dims[1] * dims[2]) > MAX_ELEMENTS:
        i = dims.index(max(dims))
        dims[i] = dims[i] // 2 + dims[i] % 2
    return tuple(dims)


def sweep_calls(seed: int = SEED, count: int = COUNT) -> list[SweepCall]:
    """`count` calls from `seed`, the families in turn; the same arguments always give the same calls."""
    calls = []
    for index in range(count):
        rng = random.Random(seed * 1_000_003 + index)
        op, choice = FAMILIES[index % len(FAMILIES)]
        shape = fit_budget(random_dim(rng), random_dim(rng), random_dim(rng))
        alpha = rng.choice((1.0, 0.5, -1.25, 2.0))
        if op == "matmul_fp8":
            dtype = rng.choice(("e4m3", "e5m2"))
            b_dtype = "e4m3" if dtype == "e5m2" else rng.choice(("e4m3", "e5m2"))
            out_dtype, b_kmajor, residual = rng.choice(("bf16", "fp16", "fp32")), True, choice
            a_view, b_view = rng.choice(VIEWS[:3]), rng.choice(VIEWS[:3])  # FP8 operands must stay K-major
            scheduler, alpha, beta = None, 1.0, 0.0
        else:
            dtype = b_dtype = rng.choice(("bf16", "fp16"))
            out_dtype = dtype if op == "addmm" else rng.choice((dtype, dtype, "fp32", "bf16", "fp16"))
            b_kmajor = rng.random() < 0.5
            a_view, b_view = rng.choice(VIEWS), rng.choice(VIEWS[:3])
            residual = rng.choice(RESIDUALS[op])
            if residual == "fp32" and out_dtype == "fp32":
                residual = "full"
            beta = 0.0 if residual in ("none", "ignored") else rng.choice((1.0, -0.5, 2.0, 0.0 if op == "addmm" else 1))
            scheduler = choice
        out_view = rng.choice(OUT_VIEWS[1:] if residual == "in_place" else OUT_VIEWS)
        calls.append(SweepCall(index, op, shape, dtype, b_dtype, out_dtype, b_kmajor, a_view, b_view, out_view,
                               residual, alpha, beta, scheduler, rng.randrange(1 << 31)))
    return calls


class Inputs:
    """A call's tensors on one device, drawn from its seed: the op's arguments (`args`, `kwargs`) and the float64
    reference of the result."""

    def __init__(self, call: SweepCall, device: str) -> None:
        self.call, self.device = call, device
        self.gen = torch.Generator(device=device).manual_seed(call.seed)
        self.rng = random.Random(call.seed)
        M, N, K = call.shape
        dtype, b_dtype = DTYPES[call.dtype], DTYPES[call.b_dtype]
        a = self.operand(M, K, dtype, call.a_view)
        b = self.operand(N, K, b_dtype, call.b_view).t() if call.b_kmajor else self.operand(K, N, b_dtype, call.b_view)
        self.out = None if call.out_view == "returned" else self.operand(M, N, DTYPES[call.out_dtype], call.out_view)
        self.c0 = None
        if call.op == "matmul_fp8":
            sa, sb, full_a, full_b = self.scales(M, N, K)
            self.args, self.kwargs = (a, b, sa, sb), dict(out_dtype=DTYPES[call.out_dtype], out=self.out)
            self.reference = (a.double() * full_a) @ (b.double() * full_b)
            return
        c = self.residual(M, N)
        self.reference = call.alpha * (a.double() @ b.double()) + (call.beta * c.double() if call.beta != 0 else 0.0)
        if call.op == "addmm":
            self.args, self.kwargs = (c, a, b), dict(alpha=call.alpha, beta=call.beta, out=self.out)
        else:
            self.args = (a, b)
            self.kwargs = dict(out=self.out, c=c, alpha=call.alpha, beta=call.beta, scheduler=call.scheduler,
                               out_dtype=DTYPES[call.out_dtype])
        self.c0 = c.clone() if call.residual == "in_place" else None

    def randn(self, *shape: int) -> torch.Tensor:
        return torch.randn(shape, generator=self.gen, device=self.device)

    def operand(self, rows: int, cols: int, dtype: torch.dtype, view: str) -> torch.Tensor:
        """A (rows, cols) tensor of random values of `dtype`, stored as `view` says (VIEWS)."""
        if view == "transposed":
            return self.randn(cols, rows).to(dtype).t()
        if view == "offset":
            shift = self.rng.randint(1, 7)
            return self.randn(rows, cols + shift).to(dtype)[:, shift:]
        if view == "padded":
            return self.randn(rows, cols + self.rng.choice((8, 13, 64))).to(dtype)[:, :cols]
        return self.randn(rows, cols).to(dtype)

    def residual(self, M: int, N: int) -> torch.Tensor | None:
        """matmul's `c` or addmm's `input`, as the call's residual kind says (RESIDUALS)."""
        call, out_dtype = self.call, DTYPES[self.call.out_dtype]
        kind = call.residual
        if kind == "none":
            return None
        if kind == "in_place":
            self.out.copy_(self.randn(M, N))
            return self.out
        if kind == "ignored":
            return torch.full((M, N), float("nan"), dtype=out_dtype, device=self.device)
        if kind in ("bias", "row"):
            row = self.randn(N).to(out_dtype)
            return row.expand(M, N) if call.op == "matmul" else row if kind == "row" else row[None]
        shape = {"column": (M, 1), "scalar": ()}.get(kind, (M, N))
        return self.randn(*shape).to(torch.float32 if kind == "fp32" else out_dtype)

    def scales(self, M: int, N: int, K: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        """FP8 scales in [0.25, 0.75) or [1.5, 4.5), distinct per element (so a wrong index shows) and never near 1
        (so a dropped one shows), and their float64 expansion to A's (M, K) and B's (K, N) elements. Blockwise
        scale_a is M-major or K-block-major at random."""
        def scale(*shape: int) -> torch.Tensor:
            high = torch.rand(shape, generator=self.gen, device=self.device) < 0.5
            return (0.25 + 0.5 * torch.rand(shape, generator=self.gen, device=self.device)) * (1 + 5 * high)

        kind = self.call.residual
        if kind == "tensor":
            sa, sb = scale(), scale()
            return sa, sb, sa.double(), sb.double()
        if kind == "row":
            sa, sb = scale(M, 1), scale(1, N)
            return sa, sb, sa.double(), sb.double()
        kb, nb = -(-K // SCALE_BLOCK), -(-N // SCALE_BLOCK)
        sa = scale(kb, M).t() if self.rng.random() < 0.5 else scale(M, kb)
        sb = scale(nb, kb).t()
        full_a = sa.double().repeat_interleave(SCALE_BLOCK, 1)[:, :K]
        full_b = sb.double().repeat_interleave(SCALE_BLOCK, 0)[:K].repeat_interleave(SCALE_BLOCK, 1)[:, :N]
        return sa, sb, full_a, full_b

    def poison(self) -> torch.Tensor | None:
        """Fill `out` with NaN (an in-place C with its original values), or, for a returned result, free a NaN
        block of its size so the allocator hands it to the op's torch.empty; returns that block's tensor first."""
        if self.c0 is not None:
            self.out.copy_(self.c0)
        elif self.out is not None:
            self.out.fill_(float("nan"))
        else:
            return torch.full(self.call.shape[:2], float("nan"), dtype=DTYPES[self.call.out_dtype], device=self.device)
        return None


def relative_error(got: torch.Tensor, reference: torch.Tensor) -> float:
    """||got - reference||_F / ||reference||_F in float64 (the plain norm of `got` when the reference is zero); NaN
    when `got` has a NaN or infinity."""
    got = got.double()
    norm = float(reference.norm())
    return float((got - reference).norm()) / norm if norm > 0 else float(got.norm())


def verdict(call: SweepCall, got: Any, inputs: Inputs) -> str | None:
    """None when the result is right: the given `out` itself (or a new tensor of the right shape and dtype), all
    finite, within the call's tolerance; else why not."""
    if inputs.out is not None and got is not inputs.out:
        return "the result is not the given out"
    if not isinstance(got, torch.Tensor) or tuple(got.shape) != call.shape[:2] or got.dtype != DTYPES[call.out_dtype]:
        return f"wrong result: {type(got).__name__} {getattr(got, 'shape', '')} {getattr(got, 'dtype', '')}"
    if not bool(torch.isfinite(got).all()):
        return f"{int((~torch.isfinite(got)).sum())} of {got.numel()} elements not finite (unwritten NaN poison?)"
    err = relative_error(got, inputs.reference)
    return None if err <= call.tolerance else f"relative error {err:.3g} > {call.tolerance:g}"


def run_call(call: SweepCall, device: str = "cuda", ops: dict[str, Callable[..., torch.Tensor]] | None = None
             ) -> dict[str, Any]:
    """Run one call REPEATS times on fresh poison; a JSON-able record with its error and, on failure, why."""
    ops = ops or {"matmul": matmul, "addmm": addmm, "matmul_fp8": matmul_fp8}
    start = time.monotonic()
    inputs = Inputs(call, device)
    why, err = None, 0.0
    for _ in range(REPEATS):
        poisoned = inputs.poison()
        del poisoned  # freed just before the op allocates its result
        got = ops[call.op](*inputs.args, **inputs.kwargs)
        if device == "cuda":
            torch.cuda.synchronize()
        why = verdict(call, got, inputs)
        err = max(err, relative_error(got, inputs.reference)) if isinstance(got, torch.Tensor) else err
        if why is not None:
            break
    return {"index": call.index, "family": call.family, "ok": why is None, "why": why, "rel_err": err,
            "tolerance": call.tolerance, "seconds": round(time.monotonic() - start, 3)}


def batches(calls: list[SweepCall], size: int = BATCH) -> list[list[SweepCall]]:
    """Calls grouped by what their kernels are built for (op, dtypes, layout, residual, scheduler), so a batch's
    process compiles few binaries, then cut into batches of `size`."""
    ordered = sorted(calls, key=lambda c: (c.op, c.scheduler or "", c.residual, c.dtype, c.b_dtype, c.out_dtype,
                                           c.b_kmajor, c.index))
    return [ordered[i:i + size] for i in range(0, len(ordered), size)]


def records(output: str) -> list[dict[str, Any]]:
    """The per-call JSON lines a batch process printed."""
    found = []
    for line in output.splitlines():
        if line.startswith('{"index"'):
            try:
                found.append(json.loads(line))
            except json.JSONDecodeError:
                continue
    return found


def sweep(seed: int = SEED, count: int = COUNT, size: int = BATCH, parallel: int = PARALLEL,
          timeout_s: float = BATCH_TIMEOUT_S, budget_s: float = BUDGET_S) -> dict[str, Any]:
    """Every call, batch by batch in child processes, `parallel` at a time, within `budget_s`; the summary
    (failures, calls that never ran, worst errors)."""
    calls = sweep_calls(seed, count)
    groups = batches(calls, size)
    commands = [["-m", "tilepipe.verify.sweep", "--seed", str(seed), "--count", str(count), "--calls",
                 ",".join(str(c.index) for c in group)] for group in groups]
    start = time.monotonic()
    deadline = start + budget_s

    def run(command: list[str]) -> GuardedRun | None:
        left = deadline - time.monotonic()
        return run_guarded(command, min(timeout_s, left)) if left > 10 else None  # None: not started

    with ThreadPoolExecutor(parallel) as pool:
        runs = list(pool.map(run, commands))
    results, failures, unrun, batch_log = {}, [], [], []
    for group, run in zip(groups, runs):
        if run is None:
            unrun.append({"call": asdict(group[0]), "why": "batch not started: the sweep's time budget ran out",
                          "output": "", "not_run_after_it": [c.index for c in group[1:]]})
            continue
        done = {r["index"]: r for r in records(run.output)}
        results.update(done)
        missing = [c for c in group if c.index not in done]
        batch_log.append({"calls": [c.index for c in group], "status": run.status, "seconds": round(run.seconds, 1)})
        if missing:  # the first missing call is where the process hung or died
            unrun.append({"call": asdict(missing[0]), "why": f"batch {run.status} at this call",
                          "output": run.output[-3000:], "not_run_after_it": [c.index for c in missing[1:]]})
    for call in calls:
        record = results.get(call.index)
        if record is not None and not record["ok"]:
            failures.append({"call": asdict(call), **record})
    worst: dict[str, float] = {}
    for record in results.values():
        if record["ok"] or record["rel_err"]:  # a call that raised has no error to count
                worst[record["family"]] = max(worst.get(record["family"], 0.0), record["rel_err"])
    return {"seed": seed, "count": count, "calls_run": len(results), "ok": not failures and not unrun,
            "failures": failures, "unrun": unrun, "worst_rel_err": worst, "seconds": round(time.monotonic() - start, 1),
            "batches": batch_log, "torch": torch.__version__}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tilepipe.verify.sweep", description=__doc__.split("\n\n")[0])
    parser.add_argument("--seed", type=int, default=SEED)
    parser.add_argument("--count", type=int, default=COUNT)
    parser.add_argument("--batch", type=int, default=BATCH)
    parser.add_argument("--parallel", type=int, default=PARALLEL)
    parser.add_argument("--timeout", type=float, default=BATCH_TIMEOUT_S, help="seconds per batch")
    parser.add_argument("--budget", type=float, default=BUDGET_S, help="seconds for the whole sweep")
    parser.add_argument("--json", type=Path, help="write the summary here")
    parser.add_argument("--calls", help="(a batch process) run these call indices here, one JSON line each")
    args = parser.parse_args(argv)
    if args.calls is not None:
        calls = sweep_calls(args.seed, args.count)
        for index in map(int, args.calls.split(",")):
            try:
                record = run_call(calls[index])
            except Exception as error:  # noqa: BLE001 (a valid call that raises is a failure of its own)
                record = {"index": index, "family": calls[index].family, "ok": False, "rel_err": 0.0,
                          "why": f"raised {type(error).__name__}: {str(error)[:500]}"}
            print(json.dumps(record), flush=True)
        return 0
    summary = sweep(args.seed, args.count, args.batch, args.parallel, args.timeout, args.budget)
    if args.json:
        args.json.write_text(json.dumps(summary, indent=1))
    import triton

    print(f"sweep seed {summary['seed']}: {summary['calls_run']} of {summary['count']} calls ran in "
          f"{summary['seconds']} s (torch {torch.__version__}, triton {triton.__version__}); "
          f"{len(summary['failures'])} failed, {len(summary['unrun'])} batches stopped early")
    for family, err in sorted(summary["worst_rel_err"].items()):
        print(f"  {family:24s} worst relative error {err:.2e}")
    for failure in summary["failures"][:20]:
        print("FAILED", json.dumps(failure))
    for stop in summary["unrun"]:
        print("STOPPED", json.dumps({k: v for k, v in stop.items() if k != "output"}), "\n", stop["output"][-1500:])
    return 0 if summary["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
