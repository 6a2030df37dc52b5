"""GPU correctness of grouped_mm's 2D x 2D (weight-gradient) form for one case; prints JSON (run by
tests/gpu/test_grouped_wgrad_gpu.py).

`python -m tests.gpu.grouped_wgrad_cases ragged bf16 bf16 mmajor nmajor`: ragged K groups (empty groups, one-row
groups, sizes not multiples of 8, 64 or 128, offs[-1] < K with Inf in a's and b's rows past it) over M x N of several
sizes (M under one tile, M and N not multiples of the tile), a (M, K) M-major (X.t()) or K-major and b (K, N) N-major
(row-major) or K-major, with padded strides, against a float64 reference per group, out poisoned with NaN first: every
group must match, an empty group's out[g] be exactly zero.
`... clamped`: decreasing offs and ends past K never fault: each group is [clamp(offs[g-1]), max(clamp(offs[g]), that)).
`... cudagraph`: captured once, replayed with new offs values (and new inputs).
`... compile`: grouped_mm(X.t(), dY, offs) under torch.compile(fullgraph=True), fp32 out.
`... badargs`: invalid CUDA arguments each raise an error naming the argument, the NaN-poisoned out left untouched.
"""

import json
import sys

import torch

import tilepipe
from tests.gpu.guarded import unexpected_errors, warmed_graph
from tilepipe.host import launch

DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}
TOLERANCE = {torch.bfloat16: 1e-2, torch.float16: 2e-3, torch.float32: 1e-4}  # relative Frobenius error, per group
SHAPES = [  # (K group sizes, K past the last group, M, N)
    ([0, 1, 0, 7, 130, 64, 0, 300, 1], 5, 264, 520),
    ([128, 256, 0, 1], 0, 256, 256),
    ([1000, 3, 77, 513], 17, 1024, 1024),
    ([0, 0, 0], 9, 64, 128),
    ([129, 255, 2049, 0, 9, 333, 1, 127], 100, 200, 136),
    ([63, 65, 8, 57], 0, 40, 72),
    ([2048, 2048], 0, 512, 1024),
    ([1] * 40, 3, 128, 264),
]


def offsets(sizes: list[int]) -> torch.Tensor:
    return torch.tensor(sizes, dtype=torch.int64).cumsum(0).to(torch.int32).cuda()


def padded(rows: int, cols: int, dtype: torch.dtype) -> torch.Tensor:
    """A random rows x cols tensor whose rows are 8 elements longer than needed, rounded to 8 (16 bytes)."""
    return torch.randn(rows, -(-(cols + 8) // 8) * 8, device="cuda", dtype=dtype)[:, :cols]


def operands(M: int, N: int, K: int, dtype: torch.dtype, a_layout: str, b_layout: str) -> tuple:
    """a (M, K): K-major, or M-major (a transposed (K, M) tensor, as X.t() is); b (K, N): N-major or K-major."""
    a = padded(M, K, dtype) if a_layout == "kmajor" else padded(K, M, dtype).t()
    b = padded(K, N, dtype) if b_layout == "nmajor" else padded(N, K, dtype).t()
    return a, b


def check(out: torch.Tensor, a: torch.Tensor, b: torch.Tensor, ends: list[int], tol: float) -> list[dict]:
    """The failures of `out` (G, M, N) against a float64 reference per group [ends[g], ends[g + 1]); an empty group's
    out[g] must be zeros."""
    failures = []
    for g, (start, end) in enumerate(zip(ends, ends[1:])):
        got = out[g].double()
        if end <= start:
            if not bool((got == 0).all()):
                failures.append({"group": g, "empty": True, "nonzero": int((got != 0).sum())})
            continue
        ref = a[:, start:end].double() @ b[start:end].double()
        err = float((got - ref).norm() / ref.norm()) if ref.norm() > 0 else float(got.norm())
        if not torch.isfinite(got).all() or err > tol:
            failures.append({"group": g, "k": end - start, "rel_err": err, "finite": bool(torch.isfinite(got).all())})
    return failures


def run_ragged(dtype: str, out_dtype: str, a_layout: str, b_layout: str) -> dict:
    torch.manual_seed(0)
    failures = []
    for sizes, extra, M, N in SHAPES:
        K = sum(sizes) + extra
        a, b = operands(M, N, K, DTYPES[dtype], a_layout, b_layout)
        a[:, sum(sizes):] = float("inf")  # past offs[-1]: never read into a group (Inf * 0 would be NaN)
        b[sum(sizes):] = float("inf")
        out = torch.full((len(sizes), M, N), float("nan"), device="cuda", dtype=DTYPES[out_dtype])
        got = tilepipe.grouped_mm(a, b, offsets(sizes), out=out)
        torch.cuda.synchronize()
        ends = [0] + offsets(sizes).tolist()
        found = check(out, a, b, ends, TOLERANCE[DTYPES[out_dtype]])
        if got is not out:
            found.append({"returned": "not out"})
        failures += [{"sizes": sizes[:10], "M": M, "N": N, "K": K, **f} for f in found]
    # the calls after the first took the fast launcher, which hands the kernel its global scratch (its tensor maps)
    fast = list(launch._GROUPED["tilepipe.kernels.grouped_wgrad:grouped_wgrad_kernel"].values())
    if not fast or any(launcher.scratch == 0 for launcher in fast):
        failures.append({"fast launcher": "missing, or without global scratch"})
    return {"case": f"grouped wgrad {dtype}->{out_dtype} a={a_layout} b={b_layout}", "ok": not failures,
            "failures": failures[:10]}


def run_clamped() -> dict:
    """Decreasing offs, a negative one and ends past K: group g is [start, end) with start = clamp(offs[g-1], 0, K)
    (0 for the first) and end = max(clamp(offs[g], 0, K), start); no fault, and no group empty there written."""
    torch.manual_seed(4)
    M, N, K = 136, 264, 300
    a, b = operands(M, N, K, torch.bfloat16, "mmajor", "nmajor")
    raw = [50, 20, 120, -5, 290, 5000, 310]
    out = torch.full((len(raw), M, N), float("nan"), device="cuda", dtype=torch.float32)
    tilepipe.grouped_mm(a, b, torch.tensor(raw, dtype=torch.int32, device="cuda"), out=out)
    torch.cuda.synchronize()
    failures = []
    for g, (before, end) in enumerate(zip([0] + raw, raw)):
        start = min(max(before, 0), K)
        end = max(min(max(end, 0), K), start)
        failures += [{"group": g, **f} for f in check(out[g:g + 1], a, b, [start, end], TOLERANCE[torch.float32])]
    return {"case": "grouped wgrad clamped offs", "ok": not failures, "failures": failures}


def run_cudagraph() -> dict:
    """One capture, three replays with new offs (empty groups, a shorter total, one group of all K) and new inputs."""
    torch.manual_seed(1)
    G, M, N, K = 6, 256, 512, 700
    a, b = operands(M, N, K, torch.bfloat16, "mmajor", "nmajor")
    offs = offsets([100] * G)
    out = torch.full((G, M, N), float("nan"), device="cuda", dtype=torch.bfloat16)
    graph = warmed_graph(lambda: tilepipe.grouped_mm(a, b, offs, out=out))
    failures = []
    for sizes in ([0, 300, 1, 0, 129, 200], [700, 0, 0, 0, 0, 0], [5, 5, 5, 5, 5, 5]):
        a.copy_(torch.randn_like(a))
        b.copy_(torch.randn_like(b))
        offs.copy_(offsets(sizes))
        out.fill_(float("nan"))
        graph.replay()
        torch.cuda.synchronize()
        ends = [0] + offsets(sizes).tolist()
        failures += [{"sizes": sizes, **f} for f in check(out, a, b, ends, TOLERANCE[torch.bfloat16])]
    return {"case": "grouped wgrad cudagraph", "ok": not failures, "failures": failures}


def run_compile() -> dict:
    """The weight gradient of a MoE layer's experts, X.t() @ dY per expert, inside torch.compile(fullgraph=True)."""
    torch.manual_seed(2)
    sizes, D, H = [33, 0, 250, 7], 256, 512
    x = torch.randn(sum(sizes), D, device="cuda", dtype=torch.bfloat16)
    dy = torch.randn(sum(sizes), H, device="cuda", dtype=torch.bfloat16)

    @torch.compile(fullgraph=True)
    def weight_grad(x: torch.Tensor, dy: torch.Tensor, offs: torch.Tensor) -> torch.Tensor:
        return tilepipe.grouped_mm((x * 1.0).t(), dy, offs, out_dtype=torch.float32)

    out = weight_grad(x, dy, offsets(sizes))
    torch.cuda.synchronize()
    failures = check(out, x.t(), dy, [0] + offsets(sizes).tolist(), TOLERANCE[torch.float32])
    ok = not failures and out.dtype == torch.float32 and out.shape == (len(sizes), D, H)
    return {"case": "grouped wgrad compile", "ok": ok, "failures": failures}


def run_badargs() -> dict:
    torch.manual_seed(3)
    a, b = operands(64, 48, 96, torch.bfloat16, "mmajor", "nmajor")
    offs = offsets([10, 20, 30])
    out = torch.full((3, 64, 48), float("nan"), device="cuda", dtype=torch.bfloat16)
    shared = torch.randn(96 * 64 + 3 * 64 * 48, device="cuda", dtype=torch.bfloat16)  # an a and an out overlapping it
    before = shared.clone()
    calls = [("offs must be int32", lambda: tilepipe.grouped_mm(a, b, offs.long(), out=out)),
             ("offs must be on a's device", lambda: tilepipe.grouped_mm(a, b, offs.cpu(), out=out)),
             ("a is (64, 96) and b is (95, 48)", lambda: tilepipe.grouped_mm(a, b[:95], offs, out=out)),
             ("a must be row-major (K-major) or a transposed", lambda: tilepipe.grouped_mm(
                 padded(96, 60, torch.bfloat16).t(), b, offs)),  # M-major with M = 60
             ("b must have a's dtype", lambda: tilepipe.grouped_mm(a, b.half(), offs, out=out)),
             ("out must have shape (2, 64, 48)", lambda: tilepipe.grouped_mm(a, b, offs[:2], out=out)),
             ("out must be row-major", lambda: tilepipe.grouped_mm(a, b, offs, out=out.transpose(0, 1).contiguous()
                                                                   .transpose(0, 1))),
             ("grouped_mm's 2D x 2D", lambda: tilepipe.grouped_mm(a, b, offs, out=out, activation="relu")),
             ("out must not share memory with a", lambda: tilepipe.grouped_mm(
                 shared[:96 * 64].view(96, 64).t(), b, offs, out=shared[2048:2048 + 3 * 64 * 48].view(3, 64, 48)))]
    failures = unexpected_errors(calls)
    torch.cuda.synchronize()
    if not torch.isnan(out).all() or not torch.equal(shared, before):
        failures.append({"out": "written"})
    return {"case": "grouped wgrad badargs", "ok": not failures, "failures": failures}


if __name__ == "__main__":
    kind, *args = sys.argv[1:]
    result = {"ragged": run_ragged, "clamped": run_clamped, "cudagraph": run_cudagraph, "compile": run_compile,
              "badargs": run_badargs}[kind](*args)
    print(json.dumps(result))
