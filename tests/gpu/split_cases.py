"""GPU correctness of split multicast (issue 42: each CTA of a two-CTA cluster issues its half of the shared tile),
one case per process; prints JSON.

`python -m tests.gpu.split_cases matmul 1x2 plain bf16 bf16 kmajor dynamic [leader]`: tilepipe.matmul with a split
1x2 (A shared) or 2x1 (B shared, K-major) cluster forced under a scheduler, plain or through the residual epilogues
(C, C aliasing D, a bias row), or the cluster's leader-issued form (`leader`: its pair barriers); `... fp8 tensor
2x1 streamk`: matmul_fp8 (tensor, row or blockwise scales) in a split cluster under a schedule; `... graph 1x2`: a
split GEMM captured in a CUDA graph and replayed on new inputs. Every shape against float64 on NaN-poisoned outputs
(tests/gpu/matmul_cases.py, fp8_cases.py).
"""

import json
import sys
from dataclasses import replace

import torch

import tilepipe
from tests.gpu import fp8_cases, matmul_cases

RAGGED = [(1000, 3000, 700), (333, 517, 200), (2048, 2048, 4096), (8192, 1024, 1024), (1024, 8192, 1024)]
"""Besides matmul_cases.SHAPES: a ragged cluster edge (the second CTA's rows or columns past D), many k-laps, more
cluster tiles than clusters both ways."""


def split_config(cluster: str, form: str = "split") -> tilepipe.MatmulConfig:
    """The 128x128 tile in `cluster` ("1x2", "2x1"), split multicast or (`form` "leader") the first CTA's."""
    cm, cn = map(int, cluster.split("x"))
    return tilepipe.MatmulConfig(128, 128, 64, stages=4, cluster_m=cm, cluster_n=cn, split_multicast=form == "split")


def run_matmul(cluster: str, epilogue: str, dtype: str, out_dtype: str, layout: str, scheduler: str,
               form: str = "split") -> dict:
    """tilepipe.matmul in a split (or `form` "leader": leader-issued) `cluster` under `scheduler`: every shape, or
    the residual epilogues."""
    config = split_config(cluster, form)
    if epilogue == "residual":
        result = matmul_cases.run_residual(dtype, out_dtype, layout, config, scheduler)
    else:
        shapes = matmul_cases.SPLITK_SHAPES if scheduler == "splitk" else matmul_cases.SHAPES + RAGGED
        result = matmul_cases.run(dtype, out_dtype, layout, shapes, scheduler=scheduler, config=config)
    return {**result, "case": f"{form} {cluster} {epilogue} {result['case']}"}


def run_fp8(scaling: str, cluster: str, schedule: str) -> dict:
    """tilepipe.matmul_fp8 with `scaling` scales (e4m3, bf16 out) in a split `cluster` at the scaling's largest tile,
    under `schedule`."""
    from tilepipe.host.configs import fp8_configs

    base = split_config(cluster)
    config = replace(fp8_configs(scaling == "blockwise", torch.bfloat16)[0], cluster_m=base.cluster_m,
                     cluster_n=base.cluster_n, split_multicast=True)
    torch.manual_seed(0)
    failures, worst = [], 0.0
    for M, N, K in fp8_cases.SHAPES + RAGGED:
        a, b, sa, sb, ref = fp8_cases.operands(M, N, K, torch.float8_e4m3fn, torch.float8_e4m3fn, scaling)
        out = torch.full((M, N), float("nan"), device="cuda", dtype=torch.bfloat16)
        got = tilepipe.matmul_fp8(a, b, sa, sb, out=out, config=config, scheduler=schedule)
        torch.cuda.synchronize()
        err = float((got.double() - ref).norm() / ref.norm())
        worst = max(worst, err)
        if not (got is out and torch.isfinite(got).all() and err < fp8_cases.TOLERANCE[scaling]):
            failures.append({"shape": [M, N, K], "rel_err": err})
    return {"case": f"split {cluster} fp8 {scaling} schedule={schedule}", "ok": not failures, "worst_rel_err": worst,
            "failures": failures[:5]}


def run_graph(cluster: str) -> dict:
    """A split GEMM (bf16, ragged 1000x3000x700, B K-major) captured in a CUDA graph, then replayed three times on
    fresh inputs copied into the captured ones: each replay against float64."""
    torch.manual_seed(2)
    M, N, K = 1000, 3000, 700
    a = torch.randn(M, K, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(N, K, device="cuda", dtype=torch.bfloat16).t()
    out = torch.empty(M, N, device="cuda", dtype=torch.bfloat16)
    config = split_config(cluster)
    tilepipe.matmul(a, b, out=out, config=config)  # compiled and staged before capture
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        tilepipe.matmul(a, b, out=out, config=config)
    errors = []
    for _ in range(3):
        a.copy_(torch.randn_like(a))
        b.copy_(torch.randn(K, N, device="cuda", dtype=torch.bfloat16))
        out.fill_(float("nan"))
        graph.replay()
        torch.cuda.synchronize()
        ref = a.double() @ b.double()
        errors.append(float((out.double() - ref).norm() / ref.norm()))
    ok = all(e < matmul_cases.TOLERANCE[torch.bfloat16] for e in errors) and bool(torch.isfinite(out).all())
    return {"case": f"split {cluster} CUDA graph replay", "ok": ok, "rel_errs": errors}


if __name__ == "__main__":
    kind, *args = sys.argv[1:]
    result = {"matmul": run_matmul, "fp8": run_fp8, "graph": run_graph}[kind](*args)
    print(json.dumps(result))
    sys.exit(0 if result["ok"] else 1)
