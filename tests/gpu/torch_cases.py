"""GPU cases of the PyTorch integration, one per process (`python -m tests.gpu.torch_cases CASE`); prints JSON.

compile: a small model on tilepipe ops under torch.compile(fullgraph=True) against a float64 eager reference.
cudagraph: matmul, an allocating matmul, addmm and an in-place residual captured in one CUDA graph, replayed
    with new values copied into the static inputs.
repeat: the host fast path (cached plans and bound addresses) over repeated, moved, misaligned and aliased calls,
    and bias rows at new addresses.
autotune: tilepipe.autotune on one problem; prints what this process timed (run twice by the test).
fp8: tilepipe.matmul_fp8 (per-tensor and per-row scales) under torch.compile(fullgraph=True) and in a CUDA graph
    replayed with new operands and scales, against a float64 reference of the dequantized inputs.
fp8_repeat: matmul_fp8's host fast path over repeated calls of every scaling, staged scales and an aliased out.
"""

import json
import sys

import torch

import tilepipe
from tilepipe.api import fp8
from tilepipe.api import matmul as matmul_api
from tilepipe.host import configs, launch
from tilepipe.tools import autotune

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
    plans = len(matmul_api._PLANS)
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
    fast = len(launch._GEMMS)  # none if this Triton's launcher did not look as FastLauncher expects
    ok = max(errs) < TOL and plans >= 2 and fast >= 1 and notes == ["out must not share memory with a"]
    return {"case": "repeat", "ok": ok, "errs": [round(e, 5) for e in errs], "plans": plans, "fast_launchers": fast,
            "notes": notes}


def case_autotune() -> dict:
    M = N = K = 256
    candidates = [configs.SMALL, configs.MEDIUM]
    key_config = configs.config_for(M, N, K, torch.bfloat16, torch.bfloat16, True, torch.cuda.current_device())
    best = tilepipe.autotune(M, N, K, candidates=candidates)
    a, b = randn(M, K), randn(N, K).t()
    err = rel_err(tilepipe.matmul(a, b), a.double() @ b.double())
    used = configs.config_for(M, N, K, torch.bfloat16, torch.bfloat16, True, torch.cuda.current_device())
    return {"case": "autotune", "ok": used == best and err < TOL, "best": autotune.describe(best),
            "config_before": autotune.describe(key_config), "timed": autotune.STATS["timed"],
            "cache_hits": autotune.STATS["cache_hits"], "err": err}


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


def case_fp8_repeat() -> dict:
    """matmul_fp8's host fast path (tilepipe/api/fp8.py: _PLANS): each scaling repeated with new operands and scales, at a fixed
    and at new addresses, allocating and into `out`; then staged scales, and an overlapping out through the plan."""
    torch.manual_seed(4)

    M, N, K = 192, 256, 512
    errs, notes = [], []

    def fp8_randn(*shape: int) -> torch.Tensor:
        return randn(*shape).to(torch.float8_e4m3fn)

    def scales(mode: str) -> tuple[torch.Tensor, torch.Tensor]:
        if mode == "tensor":
            return torch.rand((), device="cuda") + 0.5, torch.rand((), device="cuda") + 0.5
        if mode == "row":
            return torch.rand(M, 1, device="cuda") + 0.5, torch.rand(1, N, device="cuda") + 0.5
        return torch.rand(K // 128, M, device="cuda").t() + 0.5, torch.rand(N // 128, K // 128, device="cuda").t() + 0.5

    def reference(a, w, sa, sb) -> torch.Tensor:
        a, w = a.double(), w.double()
        if sa.dim() == 2 and sa.shape[1] == K // 128:  # blockwise: expand the block scales over their elements
            return (a * sa.double().repeat_interleave(128, 1)) @ (w * sb.double().t().repeat_interleave(128, 0)
                                                                  .repeat_interleave(128, 1)).t()
        return (a * sa.double()) @ (w.t() * sb.double())

    fixed_a = fp8_randn(M, K)
    for mode in ("tensor", "row", "blockwise"):
        out = torch.full((M, N), float("nan"), device="cuda", dtype=torch.bfloat16)
        for step in range(4):
            a = fixed_a if step % 2 == 0 else fp8_randn(M, K)
            a.copy_(fp8_randn(M, K))
            w = fp8_randn(N, K)
            sa, sb = scales(mode)
            errs.append(rel_err(tilepipe.matmul_fp8(a, w.t(), sa, sb), reference(a, w, sa, sb)))
            out.fill_(float("nan"))
            errs.append(rel_err(tilepipe.matmul_fp8(a, w.t(), sa, sb, out=out), reference(a, w, sa, sb)))
    plans = len(fp8._PLANS)
    sa, sb = scales("row")
    sa_strided = torch.rand(M, 2, device="cuda")[:, :1] + 0.5  # (M, 1) with row stride 2: staged, never planned
    errs.append(rel_err(tilepipe.matmul_fp8(fixed_a, w.t(), sa_strided, sb), reference(fixed_a, w, sa_strided, sb)))
    a_rows = fp8_randn(M, 2 * K)  # a is its left half (row pitch 2K bytes)
    a, other = a_rows[:, :K], torch.empty(M, 2 * N, device="cuda", dtype=torch.bfloat16)
    for _ in range(2):  # plan this geometry: out is a column slice of an M x 2N tensor (row pitch 4N = 2K bytes)
        errs.append(rel_err(tilepipe.matmul_fp8(a, w.t(), sa, sb, out=other[:, N:]), reference(a, w, sa, sb)))
    try:  # the cached plan must still reject an out of that geometry overlapping a (K = 2N: the right half's bytes)
        tilepipe.matmul_fp8(a, w.t(), sa, sb, out=a_rows[:, K:].view(torch.bfloat16))
        notes.append("overlap not rejected")
    except ValueError as exc:
        notes.append(str(exc))
    ok = max(errs) < TOL and plans == 6 and len(fp8._PLANS) == 7 and notes == ["out must not share memory with a"]
    return {"case": "fp8_repeat", "ok": ok, "errs": [round(e, 5) for e in errs], "plans": plans, "notes": notes}


if __name__ == "__main__":
    result = globals()[f"case_{sys.argv[1]}"]()
    print(json.dumps(result))
    sys.exit(0 if result["ok"] else 1)
