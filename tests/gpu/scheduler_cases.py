"""GPU: every tile scheduler computes every output tile exactly once, over many shapes, repeated launches and
CUDA-graph replays; prints JSON.

`python -m tests.gpu.scheduler_cases launches SCHEDULER fp32|bf16` and `... graphs SCHEDULER`, where SCHEDULER is
static, dynamic, streamk, splitk, or default (matmul's own choice per shape); `... bias SCHEDULER` checks a bias row and
alpha against a float64 reference. A last argument 2x1 or 1x2 (launches, graphs) forces a two-CTA cluster of 128 x 128
CTA blocks (CLUSTER_CONFIGS): a program is then a cluster, stream-K's flags are one per CTA, and the dynamic
scheduler's tickets are drawn once per cluster (its ticket rows lie past the flags, which must still rest at 0).
Integer-valued inputs make A @ B exact in the fp32 accumulator and in the output dtype, and every launch runs in
place (D = A @ B + D), so after R launches D must equal D0 + R * (A @ B) exactly: a tile skipped or computed twice in
some launch is off by a whole multiple of its own A @ B, which the failure report gives per tile. After every launch
the workspace must be back at 0: the dynamic scheduler's counter (each launch drew exactly num_tiles tickets) and
stream-K's flags (every published partial tile was added by its finisher). Stream-K's partial sums are exact too:
integers in fp32. Forced onto shapes with fewer tiles than SMs, stream-K splits single tiles many ways (K = 4096
over 8 tiles: about 16 programs per tile), the longest chains of partial sums.
"""

import json
import sys

import torch

import tilepipe
from tilepipe.host.configs import choose_config
from tilepipe.host.device import sm_count
from tilepipe.host.launch import _WORKSPACES
from tilepipe.pipeline.partials import FLAG_WORDS

LAUNCHES = 3
FP32_SHAPES = [(1, 1, 1), (7, 8, 8), (129, 200, 63), (300, 513, 1000), (1000, 1, 64), (64, 1000, 4096),
               (2048, 2048, 256), (4096, 264, 520), (257, 4096, 128), (1536, 1536, 64), (4096, 4096, 64),
               (896, 2432, 32), (1408, 1408, 16)]
# bf16 holds integers up to 256 exactly: sparse 0/1 operands and K <= 128 keep D0 + R * A @ B below that
BF16_SHAPES = [(8192, 8192, 64), (896, 4864, 64), (7000, 5000, 128), (2048, 2048, 128), (4096, 4096, 64),
               (1536, 2816, 64), (3072, 2816, 32), (1, 256, 64), (133, 131, 7), (17024, 256, 64), (2560, 2560, 64)]
GRAPH_SHAPES = [(8192, 8192, 64, "bf16"), (300, 513, 1000, "fp32"), (2048, 2048, 256, "fp32"), (896, 4864, 64, "bf16"),
                (896, 4864, 128, "bf16")]
DTYPES = {"bf16": torch.bfloat16, "fp32": torch.float32}
CLUSTER_CONFIGS = {"1x1": None, "2x1": tilepipe.MatmulConfig(128, 128, 64, stages=4, cluster_m=2),
                   "1x2": tilepipe.MatmulConfig(128, 128, 64, stages=4, cluster_n=2)}
"""The configuration each cluster argument forces (1x1: matmul's own choice)."""


def operands(M: int, N: int, K: int, out: str, kmajor: bool) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Integer-valued a (M x K), b (K x N, K-major or row-major) and D0 (M x N, the output dtype)."""
    if out == "fp32":
        a, b = torch.randint(-2, 3, (M, K), device="cuda"), torch.randint(-2, 3, (N, K), device="cuda")
    else:
        a = (torch.rand(M, K, device="cuda") < 0.25).int()
        b = (torch.rand(N, K, device="cuda") < 0.25).int()
    a, b = a.to(torch.bfloat16), b.to(torch.bfloat16)
    b = b.t() if kmajor else b.t().contiguous()
    return a, b, torch.randint(0, 9, (M, N), device="cuda").to(DTYPES[out])


def check(d: torch.Tensor, d0: torch.Tensor, a: torch.Tensor, b: torch.Tensor, launches: int, shape,
          out: str, config: tilepipe.MatmulConfig | None = None) -> dict | None:
    """None if d == d0 + launches * a @ b exactly, else which tiles (of `config`'s CTA blocks, default the chosen
    configuration's) differ and by how many launches' worth."""
    product = a.double() @ b.double()
    expected = d0.double() + launches * product
    if out == "bf16" and expected.abs().max() > 256:
        raise AssertionError(f"{shape}: the reference is not exact in bf16; lower K")
    diff = d.double() - expected
    if not torch.isfinite(diff).all() or diff.abs().max() > 0:
        cfg = config or choose_config(*shape[:2], DTYPES[out], sm_count(d.device.index or 0))
        bad = []
        for i in range(0, shape[0], cfg.block_m):
            for j in range(0, shape[1], cfg.block_n):
                tile, ab = diff[i:i + cfg.block_m, j:j + cfg.block_n], product[i:i + cfg.block_m, j:j + cfg.block_n]
                if not torch.isfinite(tile).all() or tile.abs().max() > 0:
                    extra = float((tile * ab).sum() / (ab * ab).sum()) if (ab * ab).sum() > 0 else float("nan")
                    bad.append({"tile": [i // cfg.block_m, j // cfg.block_n], "extra_launches": round(extra, 2)})
        return {"shape": list(shape), "bad_tiles": len(bad), "first": bad[:4]}
    return None


def busy_words(stream: torch.cuda.Stream) -> int:
    """Nonzero words of the stream's scheduler counter and flags (0 at rest; none before its first launch)."""
    here = (torch.cuda.current_device(), stream.cuda_stream)
    return sum(int(w[:FLAG_WORDS.value].count_nonzero()) for key, w in _WORKSPACES.items() if key[:2] == here)


def run_launches(name: str, out: str, cluster: str = "1x1") -> dict:
    torch.manual_seed(0)
    scheduler, config = None if name == "default" else name, CLUSTER_CONFIGS[cluster]
    failures = []
    shapes = FP32_SHAPES if out == "fp32" else BF16_SHAPES
    for index, (M, N, K) in enumerate(shapes):
        a, b, d0 = operands(M, N, K, out, kmajor=index % 2 == 0)
        d = d0.clone()
        for launch in range(LAUNCHES):
            tilepipe.matmul(a, b, out=d, c=d, beta=1.0, scheduler=scheduler, config=config)
            torch.cuda.synchronize()
            if busy_words(torch.cuda.current_stream()):
                failures.append({"shape": [M, N, K], "launch": launch,
                                 "busy_words": busy_words(torch.cuda.current_stream())})
        bad = check(d, d0, a, b, LAUNCHES, (M, N, K), out, config)
        if bad:
            failures.append(bad)
    return {"case": f"launches {name} {out} {cluster}", "ok": not failures, "shapes": len(shapes),
            "failures": failures[:6]}


def run_graphs(name: str, cluster: str = "1x1") -> dict:
    """One eager launch, a graph captured on its own stream and replayed 5 times, then one more eager launch."""
    torch.manual_seed(1)
    scheduler, config = None if name == "default" else name, CLUSTER_CONFIGS[cluster]
    failures = []
    for M, N, K, out in GRAPH_SHAPES:
        a, b, d0 = operands(M, N, K, out, kmajor=True)
        d = d0.clone()
        gemm = lambda: tilepipe.matmul(a, b, out=d, c=d, beta=1.0, scheduler=scheduler, config=config)  # noqa: E731
        gemm()
        torch.cuda.synchronize()
        stream, graph = torch.cuda.Stream(), torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, stream=stream):
            gemm()
        for _ in range(5):
            graph.replay()
        torch.cuda.synchronize()
        gemm()
        torch.cuda.synchronize()
        if busy_words(stream) or busy_words(torch.cuda.current_stream()):
            failures.append({"shape": [M, N, K], "busy_words": [busy_words(stream),
                                                                busy_words(torch.cuda.current_stream())]})
        bad = check(d, d0, a, b, 7, (M, N, K), out, config)
        if bad:
            failures.append(bad)
    return {"case": f"graphs {name} {cluster}", "ok": not failures, "failures": failures[:6]}


def run_bias(name: str) -> dict:
    """Random bf16 operands, a per-column bias row and alpha: D against a float64 reference (relative error)."""
    torch.manual_seed(2)
    failures = []
    for M, N, K in [(896, 4864, 4096), (300, 513, 1000), (2304, 4096, 520), (64, 1000, 4096)]:
        a = torch.randn(M, K, device="cuda", dtype=torch.bfloat16)
        b = torch.randn(N, K, device="cuda", dtype=torch.bfloat16).t()
        bias = torch.randn(N, device="cuda", dtype=torch.bfloat16)
        d = torch.full((M, N), float("nan"), device="cuda", dtype=torch.bfloat16)
        tilepipe.matmul(a, b, out=d, c=bias.expand(M, N), alpha=0.5, beta=2.0, scheduler=name)
        ref = 0.5 * (a.double() @ b.double()) + 2.0 * bias.double()
        err = float((d.double() - ref).norm() / ref.norm())
        if not err < 1e-2:
            failures.append({"shape": [M, N, K], "rel_err": err})
    return {"case": f"bias {name}", "ok": not failures, "failures": failures}


if __name__ == "__main__":
    kind, *args = sys.argv[1:]
    result = {"launches": run_launches, "graphs": run_graphs, "bias": run_bias}[kind](*args)
    print(json.dumps(result))
    sys.exit(0 if result["ok"] else 1)
