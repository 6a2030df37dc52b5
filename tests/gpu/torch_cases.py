"""GPU cases of the PyTorch integration, one per process (`python -m tests.gpu.torch_cases CASE`); prints JSON.

compile: a small model on tilepipe ops under torch.compile(fullgraph=True) against a float64 eager reference.
cudagraph: matmul, an allocating matmul, addmm and an in-place residual captured in one CUDA graph, replayed
    with new values copied into the static inputs.
repeat: the host fast path (cached plans and bound addresses) over repeated, moved, misaligned and aliased calls,
    and bias rows at new addresses.
autotune: tilepipe.autotune on one problem; prints what this process timed (run twice by the test).
fp8: tilepipe.matmul_fp8 (per-tensor and per-row scales) under torch.compile(fullgraph=True) and in a CUDA graph
    replayed with new operands and scales, against a float64 reference of the dequantized inputs.
"""

import json
import sys

import torch

import tilepipe
from tilepipe import ops, tuning

TOL = 2e-2  # bf16 results, relative Frobenius error against float64


def rel_err(x: torch.Tensor, ref: torch.Tensor) -> float:
    return float((x.double() - ref).norm() / ref.norm())


def randn(*shape: int, dtype: torch.dtype = torch.bfloat16) -> torch.Tensor:
    return torch.randn(*shape, device="cuda", dtype=dtype)


def mlp(x, w1, w2, bias):
    h = torch.relu(tilepipe.addmm(bias, x, w1.t()))
    y = tilepipe.matmul(h, w2.t(), out_dtype=torch.float32)
    return tilepipe.matmul(h, w2.t(), out=y, c=y, beta=0.5)  # y = 1.5 * h @ w2.t()


def mlp_reference(x, w1, w2, bias):
    h = torch.relu(x.double() @ w1.double().t() + bias.double()).to(torch.bfloat16).double()
    return 1.5 * (h @ w2.double().t())


def case_compile() -> dict:
    torch.manual_seed(0)
    compiled = torch.compile(mlp, fullgraph=True)
    errs = []
    for M in (256, 200, 256):  # the ragged batch recompiles (or traces dynamic), the repeat reuses
        x, w1, w2, bias = randn(M, 512), randn(384, 512), randn(320, 384), randn(384)
        y = compiled(x, w1, w2, bias)
        errs.append(rel_err(y, mlp_reference(x, w1, w2, bias)))
        errs.append(rel_err(y, mlp(x, w1, w2, bias).double()))
    return {"case": "compile", "ok": max(errs) < TOL, "errs": errs}


def case_cudagraph() -> dict:
    torch.manual_seed(1)
    a, b, bias = randn(300, 512), randn(256, 512).t(), randn(256)
    out, resid = torch.full((300, 256), float("nan"), device="cuda", dtype=torch.bfloat16), randn(300, 256)

    def step():
        tilepipe.matmul(a, b, out=out)
        tilepipe.matmul(a, b, out=resid, c=resid, beta=1.0)  # resid += a @ b
        return tilepipe.matmul(a, b, out_dtype=torch.float32), tilepipe.addmm(bias, a, b)

    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # warm up: compile and plan every call before capture
        for _ in range(3):
            step()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        fresh, added = step()
    errs = []
    for _ in range(3):
        a.copy_(randn(*a.shape)), b.copy_(randn(*b.shape)), bias.copy_(randn(*bias.shape))
        start = randn(*resid.shape)
        resid.copy_(start)
        out.fill_(float("nan"))
        graph.replay()
        torch.cuda.synchronize()
        ref = a.double() @ b.double()
        errs += [rel_err(out, ref), rel_err(resid, ref + start.double()), rel_err(fresh, ref),
                 rel_err(added, ref + bias.double())]
    return {"case": "cudagraph", "ok": max(errs) < TOL, "errs": [round(e, 5) for e in errs]}


def case_repeat() -> dict:
    torch.manual_seed(2)
    errs, notes = [], []
    M, N, K = 256, 256, 256
    base = randn(M + 8, K)
    for step in range(6):
        a = base[:M] if step % 2 == 0 else randn(M, K)  # alternate a fixed and a new address
        b = randn(N, K).t()
        out = torch.full((M, N), float("nan"), device="cuda", dtype=torch.bfloat16)
        errs.append(rel_err(tilepipe.matmul(a, b, out=out), a.double() @ b.double()))
        errs.append(rel_err(tilepipe.matmul(a, b), a.double() @ b.double()))
    for _ in range(3):  # a bias row through a cached plan: each call's own bias address, never a stale one
        bias = randn(N)
        errs.append(rel_err(tilepipe.addmm(bias, a, b), a.double() @ b.double() + bias.double()))
        errs.append(rel_err(tilepipe.matmul(a, b, c=bias.expand(M, N), beta=0.5),
                            a.double() @ b.double() + 0.5 * bias.double()))
    plans = len(ops._PLANS)
    shifted = base[1:M + 1, :]  # same geometry, base address 2 * K bytes on: 512, aligned
    errs.append(rel_err(tilepipe.matmul(shifted, b), shifted.double() @ b.double()))
    odd = torch.empty(M * K + 1, device="cuda", dtype=torch.bfloat16)[1:].view(M, K).copy_(randn(M, K))
    errs.append(rel_err(tilepipe.matmul(odd, b), odd.double() @ b.double()))  # misaligned base: staged copy
    big, other = randn(M, K + N), randn(M, K + N)
    for _ in range(2):  # plan this geometry (a and out are column slices of M x (K + N) tensors)
        errs.append(rel_err(tilepipe.matmul(big[:, :K], b, out=other[:, K:]), big[:, :K].double() @ b.double()))
    try:  # the cached plan must still reject an out overlapping a
        tilepipe.matmul(big[:, :K], b, out=big[:, K:])
        notes.append("overlap not rejected")
    except ValueError as exc:
        notes.append(str(exc))
    ok = max(errs) < TOL and plans >= 2 and notes == ["out must not share memory with a"]
    return {"case": "repeat", "ok": ok, "errs": [round(e, 5) for e in errs], "plans": plans, "notes": notes}


def case_autotune() -> dict:
    M = N = K = 256
    candidates = [ops.SMALL, ops.MEDIUM]
    key_config = ops.config_for(M, N, K, torch.bfloat16, torch.bfloat16, True, torch.cuda.current_device())
    best = tilepipe.autotune(M, N, K, candidates=candidates)
    a, b = randn(M, K), randn(N, K).t()
    err = rel_err(tilepipe.matmul(a, b), a.double() @ b.double())
    used = ops.config_for(M, N, K, torch.bfloat16, torch.bfloat16, True, torch.cuda.current_device())
    return {"case": "autotune", "ok": used == best and err < TOL, "best": tuning.describe(best),
            "config_before": tuning.describe(key_config), "timed": tuning.STATS["timed"],
            "cache_hits": tuning.STATS["cache_hits"], "err": err}


def case_fp8() -> dict:
    torch.manual_seed(3)
    M, N, K = 200, 256, 384
    a = randn(M, K).to(torch.float8_e4m3fn)
    w = randn(N, K).to(torch.float8_e4m3fn)
    sa, sb = torch.rand(M, 1, device="cuda") + 0.5, torch.rand(1, N, device="cuda") + 0.5
    one = torch.full((), 0.75, device="cuda")

    def reference() -> torch.Tensor:
        return (a.double() * sa.double()) @ (w.double().t() * sb.double())

    def layer(a, w, sa, sb, one):
        return torch.relu(tilepipe.matmul_fp8(a, w.t(), sa, sb)), tilepipe.matmul_fp8(a, w.t(), one, one)

    compiled = torch.compile(layer, fullgraph=True)
    y, y1 = compiled(a, w, sa, sb, one)
    errs = [rel_err(y, torch.relu(reference())), rel_err(y1, 0.5625 * (a.double() @ w.double().t()))]
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(2):
            layer(a, w, sa, sb, one)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        g, _ = layer(a, w, sa, sb, one)
    for _ in range(2):
        a.copy_(randn(M, K).to(torch.float8_e4m3fn)), w.copy_(randn(N, K).to(torch.float8_e4m3fn))
        sa.copy_(torch.rand(M, 1, device="cuda") + 0.5)
        g.fill_(float("nan"))
        graph.replay()
        torch.cuda.synchronize()
        errs.append(rel_err(g, torch.relu(reference())))
    return {"case": "fp8", "ok": max(errs) < TOL, "errs": [round(e, 5) for e in errs]}


if __name__ == "__main__":
    result = globals()[f"case_{sys.argv[1]}"]()
    print(json.dumps(result))
    sys.exit(0 if result["ok"] else 1)
