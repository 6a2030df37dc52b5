"""GPU correctness of tilepipe.grouped_mm for one case; prints JSON (run by tests/gpu/test_grouped_gpu.py).

`python -m tests.gpu.grouped_cases ragged bf16 bf16 kmajor`: ragged group sizes (empty groups, one-row groups, sizes
not multiples of 8, 64 or 128, offs[-1] < M) against a float64 reference per group, on fresh random inputs, with the
output poisoned with NaN first: the groups' rows must match and the rows past offs[-1] stay NaN.
`... ragged bf16 bf16 kmajor dynamic`: the same under the dynamic schedule, each size called twice, the tile counter
back at 0 after each call. `... cudagraph [dynamic]`: grouped_mm captured in a CUDA graph and replayed with new offs
values (and new inputs).
`... compile`: grouped_mm under torch.compile(fullgraph=True).
`... epilogue gelu bf16 bf16 kmajor bias`: grouped_mm with a per-expert bias and an activation, on SIZES.
`... gated silu bf16 bf16 rowmajor [dynamic]`: grouped_gated_mm over pack_gate_up's experts against act(a Wg^T) *
(a Wu^T).
`... moe`: a MoE expert MLP (grouped_gated_mm SwiGLU, then grouped_mm down with a bias), eager and under
torch.compile(fullgraph=True), against float64.
`... masked bf16 bf16 kmajor`: grouped_mm_masked over (G, C, K) capacities with counts of 0, 1, odd, C and past C
(clamped), against float64 per group; each group's rows from its count on stay NaN. `... masked_epilogue`: with a
bias and GELU, under torch.compile(fullgraph=True) too. `... masked_cudagraph`: one capture replayed with new
masked_m values (`... masked_cudagraph 16`: under expected_m = 16). `... masked bf16 bf16 kmajor 16`: the same with
expected_m = 16 (swap-AB's tile over every capacity; row-major B: the 64-row tile).
`... batched bf16 fp32 rowmajor`: grouped_mm's 3D x 3D form against float64 bmm, with a bias and SiLU.
`... badargs`: invalid CUDA arguments (offs int64 or on the CPU, G disagreeing, K off 16 bytes, mixed dtypes, an out
overlapping a) each raise an error naming the argument, with the NaN-poisoned out left untouched.
"""

import json
import sys

import torch

import tilepipe
from tests.gpu.guarded import unexpected_errors, warmed_graph
from tilepipe.api.linear import TORCH_ACTIVATIONS
from tilepipe.host.choose import grouped_config

DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}
TOLERANCE = {torch.bfloat16: 1e-2, torch.float16: 2e-3, torch.float32: 1e-4}  # relative Frobenius error, per group
SIZES = [  # (group sizes, rows of A past the last group, N, K)
    ([0, 1, 0, 7, 130, 64, 0, 300, 1], 5, 264, 520),
    ([128, 256, 0, 1], 0, 256, 64),
    ([1000, 3, 77, 513], 17, 1024, 1024),
    ([0, 0, 0], 9, 64, 128),
    ([129, 255, 2049, 0, 9, 333, 1, 127], 100, 520, 136),
    ([4096, 4096], 0, 2048, 2048),
    ([1] * 40, 3, 4096, 256),
    ([5, 17, 0, 33, 2, 31, 16, 40], 7, 392, 264),  # few rows a group: swap-AB (B K-major), groups past its 32 rows
]


def offsets(sizes: list[int]) -> torch.Tensor:
    return torch.tensor(sizes, dtype=torch.int64).cumsum(0).to(torch.int32).cuda()


def weights(G: int, K: int, N: int, dtype: torch.dtype, layout: str) -> torch.Tensor:
    """b (G, K, N): a transposed (G, N, K) tensor (K-major) or row-major."""
    if layout == "kmajor":
        return torch.randn(G, N, K, device="cuda", dtype=dtype).transpose(1, 2)
    return torch.randn(G, K, N, device="cuda", dtype=dtype)


def check(out: torch.Tensor, a: torch.Tensor, b: torch.Tensor, sizes: list[int], tol: float,
          reference=lambda rows, g, b: rows @ b[g].double()) -> list[dict]:
    """The failures of `out` against a float64 reference per group (`reference`(a's rows in float64, g, b)), and
    rows past the groups not NaN."""
    failures, start = [], 0
    for g, size in enumerate(sizes):
        got = out[start:start + size].double()
        ref = reference(a[start:start + size].double(), g, b)
        err = float((got - ref).norm() / ref.norm()) if size and ref.norm() > 0 else 0.0
        if not torch.isfinite(got).all() or err > tol:
            failures.append({"group": g, "rows": size, "rel_err": err, "finite": bool(torch.isfinite(got).all())})
        start += size
    if not torch.isnan(out[start:]).all():
        failures.append({"rows_past_offs_written": int((~torch.isnan(out[start:])).sum())})
    return failures


def run_ragged(dtype: str, out_dtype: str, layout: str, scheduler: str = "static") -> dict:
    """SIZES under `scheduler`; the dynamic one twice a size (its tile counter must be back at 0 after each call)."""
    torch.manual_seed(0)
    failures = []
    for sizes, extra, N, K in SIZES:
        K = K if layout == "kmajor" else -(-K // 16) * 16  # a row-major b takes K in multiples of 16
        M = sum(sizes) + extra
        a = torch.randn(M, K, device="cuda", dtype=DTYPES[dtype])
        b = weights(len(sizes), K, N, DTYPES[dtype], layout)
        for call in range(2 if scheduler == "dynamic" else 1):
            out = torch.full((M, N), float("nan"), device="cuda", dtype=DTYPES[out_dtype])
            got = tilepipe.grouped_mm(a, b, offsets(sizes), out=out, scheduler=scheduler)
            torch.cuda.synchronize()
            found = check(out, a, b, sizes, TOLERANCE[DTYPES[out_dtype]])
            if got is not out:
                found.append({"returned": "not out"})
            failures += [{"sizes": sizes[:10], "N": N, "K": K, "call": call, **f} for f in found]
            cfg = grouped_config(K, DTYPES[out_dtype], layout == "kmajor", False, M / len(sizes))
            failures += tile_counter_left_at_zero(scheduler, cfg)
    return {"case": f"grouped {dtype}->{out_dtype} b={layout} {scheduler}", "ok": not failures,
            "failures": failures[:10]}


def tile_counter_left_at_zero(scheduler: str, cfg) -> list[dict]:
    """A failure where the dynamic schedule's tile counter (word 0 of the stream's workspace for `cfg`, the call's
    configuration) is not 0 after a call."""
    if scheduler != "dynamic":
        return []
    from tilepipe.host.launch import scheduler_workspace

    counter = int(scheduler_workspace(0, torch.cuda.current_stream().cuda_stream, cfg)[0])
    return [{"tile_counter": counter}] if counter else []


def fused_reference(activation: str | None, bias: torch.Tensor | None):
    """grouped_mm's reference with the epilogue: activation(rows @ b[g] + bias[g]) in float64."""
    act = TORCH_ACTIVATIONS[activation] if activation != "none" else (lambda x: x)

    def reference(rows: torch.Tensor, g: int, b: torch.Tensor) -> torch.Tensor:
        return act(rows @ b[g].double() + (0 if bias is None else bias[g].double()))

    return reference


def gated_reference(activation: str, w: torch.Tensor):
    """grouped_gated_mm's reference from the unpacked experts w (G, 2H, K) = [Wg; Wu]: act(rows Wg^T) * rows Wu^T."""
    def reference(rows: torch.Tensor, g: int, b: torch.Tensor) -> torch.Tensor:
        gate, up = w[g].double().chunk(2)
        return TORCH_ACTIVATIONS[activation](rows @ gate.t()) * (rows @ up.t())

    return reference


def gate_up_experts(G: int, K: int, H: int, dtype: torch.dtype, layout: str) -> tuple[torch.Tensor, torch.Tensor]:
    """Random [Wg; Wu] experts w (G, 2H, K) and grouped_gated_mm's b_gate_up of them in `layout`."""
    w = torch.randn(G, 2 * H, K, device="cuda", dtype=dtype) / K ** 0.25
    packed = tilepipe.pack_gate_up(w).transpose(1, 2)
    return w, packed if layout == "kmajor" else packed.contiguous()


def run_epilogue(activation: str, dtype: str, out_dtype: str, layout: str, bias: str) -> dict:
    """grouped_mm with `bias` ("bias": a random (G, N) one, else "nobias") and `activation` ("none" or a name)."""
    torch.manual_seed(4)
    failures = []
    for sizes, extra, N, K in SIZES:
        K = K if layout == "kmajor" else -(-K // 16) * 16
        M = sum(sizes) + extra
        a = torch.randn(M, K, device="cuda", dtype=DTYPES[dtype])
        b = weights(len(sizes), K, N, DTYPES[dtype], layout)
        biases = torch.randn(len(sizes), N, device="cuda", dtype=DTYPES[dtype]) * 8 if bias == "bias" else None
        out = torch.full((M, N), float("nan"), device="cuda", dtype=DTYPES[out_dtype])
        tilepipe.grouped_mm(a, b, offsets(sizes), out=out, bias=biases,
                            activation=None if activation == "none" else activation)
        torch.cuda.synchronize()
        found = check(out, a, b, sizes, TOLERANCE[DTYPES[out_dtype]], fused_reference(activation, biases))
        failures += [{"sizes": sizes[:10], "N": N, "K": K, **f} for f in found]
    return {"case": f"grouped {activation} {bias} {dtype}->{out_dtype} b={layout}", "ok": not failures,
            "failures": failures[:10]}


def run_gated(activation: str, dtype: str, out_dtype: str, layout: str, scheduler: str = "static") -> dict:
    """grouped_gated_mm on SIZES with H = N rounded up to 64 (D of H columns), under `scheduler`."""
    torch.manual_seed(5)
    failures = []
    for sizes, extra, N, K in SIZES:
        K, H = (K if layout == "kmajor" else -(-K // 16) * 16), -(-N // 64) * 64
        M = sum(sizes) + extra
        a = torch.randn(M, K, device="cuda", dtype=DTYPES[dtype])
        w, b = gate_up_experts(len(sizes), K, H, DTYPES[dtype], layout)
        out = torch.full((M, H), float("nan"), device="cuda", dtype=DTYPES[out_dtype])
        tilepipe.grouped_gated_mm(a, b, offsets(sizes), activation, out=out, scheduler=scheduler)
        torch.cuda.synchronize()
        found = check(out, a, b, sizes, TOLERANCE[DTYPES[out_dtype]], gated_reference(activation, w))
        found += tile_counter_left_at_zero(scheduler, grouped_config(K, DTYPES[out_dtype], layout == "kmajor", True,
                                                                     M / len(sizes)))
        failures += [{"sizes": sizes[:10], "H": H, "K": K, **f} for f in found]
    return {"case": f"grouped gated {activation} {dtype}->{out_dtype} b={layout} {scheduler}", "ok": not failures,
            "failures": failures[:10]}


def run_moe() -> dict:
    """A MoE expert MLP on ragged experts (empty ones included): down(silu(x Wg^T) * x Wu^T) + bias per expert, eager
    and compiled, against float64; rows past offs[-1] of the compiled result are not compared (a new tensor)."""
    torch.manual_seed(6)
    sizes, D, H = [0, 37, 300, 0, 1, 129, 530, 3], 512, 1408
    x = torch.randn(sum(sizes), D, device="cuda", dtype=torch.bfloat16)
    w, w_gate_up = gate_up_experts(len(sizes), D, H, torch.bfloat16, "kmajor")
    w_down = (torch.randn(len(sizes), D, H, device="cuda", dtype=torch.bfloat16) / H ** 0.5).transpose(1, 2)
    b_down = torch.randn(len(sizes), D, device="cuda", dtype=torch.bfloat16)
    offs = offsets(sizes)

    def experts(x: torch.Tensor) -> torch.Tensor:
        return tilepipe.grouped_mm(tilepipe.grouped_gated_mm(x, w_gate_up, offs), w_down, offs, bias=b_down)

    def reference(rows: torch.Tensor, g: int, _: torch.Tensor) -> torch.Tensor:
        hidden = gated_reference("silu", w)(rows, g, None)
        return hidden @ w_down[g].double() + b_down[g].double()

    failures = []
    for name, fn in (("eager", experts), ("compile", torch.compile(experts, fullgraph=True))):
        out = fn(x)
        torch.cuda.synchronize()
        failures += [{"run": name, **f} for f in check(out, x, w_down, sizes, 2e-2, reference)
                     if "rows_past_offs_written" not in f]
    return {"case": "grouped moe mlp", "ok": not failures, "failures": failures}


def run_cudagraph(scheduler: str = "static") -> dict:
    """One capture, three replays with new offs (including empty groups and a shorter total) and new inputs."""
    torch.manual_seed(1)
    G, N, K, M = 6, 512, 256, 700
    a = torch.randn(M, K, device="cuda", dtype=torch.bfloat16)
    b = weights(G, K, N, torch.bfloat16, "kmajor")
    offs = offsets([100, 100, 100, 100, 100, 100])
    out = torch.full((M, N), float("nan"), device="cuda", dtype=torch.bfloat16)
    graph = warmed_graph(lambda: tilepipe.grouped_mm(a, b, offs, out=out, scheduler=scheduler))
    failures = []
    for sizes in ([0, 300, 1, 0, 129, 200], [700, 0, 0, 0, 0, 0], [5, 5, 5, 5, 5, 5]):
        a.copy_(torch.randn_like(a))
        offs.copy_(offsets(sizes))
        out.fill_(float("nan"))
        graph.replay()
        torch.cuda.synchronize()
        failures += [{"sizes": sizes, **f} for f in check(out, a, b, sizes, TOLERANCE[torch.bfloat16])]
    return {"case": f"grouped cudagraph {scheduler}", "ok": not failures, "failures": failures}


def run_compile() -> dict:
    """grouped_mm inside a torch.compile(fullgraph=True) function, against the eager float64 reference."""
    torch.manual_seed(2)
    sizes, N, K = [33, 0, 250, 7], 256, 512
    a = torch.randn(sum(sizes), K, device="cuda", dtype=torch.bfloat16)
    b = weights(len(sizes), K, N, torch.bfloat16, "rowmajor")

    @torch.compile(fullgraph=True)
    def moe(x: torch.Tensor, w: torch.Tensor, offs: torch.Tensor) -> torch.Tensor:
        return tilepipe.grouped_mm(x * 1.0, w, offs, out_dtype=torch.float32)

    out = moe(a, b, offsets(sizes))
    torch.cuda.synchronize()
    failures = check(out, a, b, sizes, TOLERANCE[torch.float32])
    ok = not failures and out.dtype == torch.float32
    return {"case": "grouped compile", "ok": ok, "failures": failures}


MASKED_SIZES = [  # (counts, capacity C, N, K): counts past C are clamped to it, negative ones to 0
    ([0, 1, 7, 130, 64, 300, 129, 256], 256, 264, 520),
    ([16] * 32, 16, 4096, 256),
    ([5, 0, 33, 1000, -3], 40, 512, 128),
    ([2048, 1, 2047], 2048, 1024, 1024),
]


def check_masked(out: torch.Tensor, a: torch.Tensor, b: torch.Tensor, counts: list[int], tol: float,
                 reference=lambda rows, g, b: rows @ b[g].double()) -> list[dict]:
    """`out` (G, C, N) against check's float64 reference per group over its first counts[g] rows (clamped to [0, C]),
    its other rows NaN."""
    failures = []
    for g, count in enumerate(counts):
        rows = min(max(count, 0), a.shape[1])
        failures += [{"group": g, **f} for f in check(out[g], a[g], b, [rows], tol,
                                                        lambda r, _, b, g=g: reference(r, g, b))]
    return failures


def run_masked(dtype: str, out_dtype: str, layout: str, expected_m: str = "none") -> dict:
    """grouped_mm_masked on MASKED_SIZES; `expected_m` a number: that hint (its tile) for every size."""
    torch.manual_seed(7)
    hint = None if expected_m == "none" else int(expected_m)
    failures = []
    for counts, C, N, K in MASKED_SIZES:
        K = K if layout == "kmajor" else -(-K // 16) * 16
        G = len(counts)
        a = torch.randn(G, C, K, device="cuda", dtype=DTYPES[dtype])
        b = weights(G, K, N, DTYPES[dtype], layout)
        out = torch.full((G, C, N), float("nan"), device="cuda", dtype=DTYPES[out_dtype])
        masked_m = torch.tensor(counts, dtype=torch.int32, device="cuda")
        got = tilepipe.grouped_mm_masked(a, b, masked_m, out=out, expected_m=hint)
        torch.cuda.synchronize()
        found = check_masked(out, a, b, counts, TOLERANCE[DTYPES[out_dtype]])
        if got is not out:
            found.append({"returned": "not out"})
        failures += [{"counts": counts[:10], "C": C, "N": N, "K": K, **f} for f in found]
    return {"case": f"grouped masked {dtype}->{out_dtype} b={layout} expected_m={expected_m}", "ok": not failures,
            "failures": failures[:10]}


def run_masked_epilogue() -> dict:
    """grouped_mm_masked with a per-expert bias and GELU, eager and under torch.compile(fullgraph=True) into a new
    tensor (its rows past the counts are not compared)."""
    torch.manual_seed(8)
    counts, C, N, K = [3, 0, 200, 64, 129], 200, 384, 256
    a = torch.randn(len(counts), C, K, device="cuda", dtype=torch.bfloat16)
    b = weights(len(counts), K, N, torch.bfloat16, "kmajor")
    bias = torch.randn(len(counts), N, device="cuda", dtype=torch.bfloat16) * 4
    masked_m = torch.tensor(counts, dtype=torch.int32, device="cuda")
    reference = fused_reference("gelu", bias)
    out = torch.full((len(counts), C, N), float("nan"), device="cuda", dtype=torch.bfloat16)
    tilepipe.grouped_mm_masked(a, b, masked_m, out=out, bias=bias, activation="gelu")
    compiled = torch.compile(lambda a, m: tilepipe.grouped_mm_masked(a, b, m, bias=bias, activation="gelu"),
                             fullgraph=True)(a, masked_m)
    torch.cuda.synchronize()
    failures = [{"run": "eager", **f} for f in check_masked(out, a, b, counts, 1e-2, reference)]
    failures += [{"run": "compile", **f} for f in check_masked(compiled, a, b, counts, 1e-2, reference)
                 if "rows_past_offs_written" not in f]
    return {"case": "grouped masked epilogue", "ok": not failures, "failures": failures}


def run_masked_cudagraph(expected_m: str = "none") -> dict:
    """One capture of the decode form (`expected_m` a number: that hint, 16 the swap-AB tile), three replays with new
    masked_m values and new inputs."""
    torch.manual_seed(9)
    G, C, N, K = 8, 64, 512, 256
    hint = None if expected_m == "none" else int(expected_m)
    a = torch.randn(G, C, K, device="cuda", dtype=torch.bfloat16)
    b = weights(G, K, N, torch.bfloat16, "kmajor")
    masked_m = torch.full((G, ), C, dtype=torch.int32, device="cuda")
    out = torch.full((G, C, N), float("nan"), device="cuda", dtype=torch.bfloat16)
    graph = warmed_graph(lambda: tilepipe.grouped_mm_masked(a, b, masked_m, out=out, expected_m=hint))
    failures = []
    for counts in ([0, 64, 1, 0, 33, 17, 63, 2], [64] * 8, [5, 0, 0, 0, 0, 0, 0, 70]):
        a.copy_(torch.randn_like(a))
        masked_m.copy_(torch.tensor(counts, dtype=torch.int32))
        out.fill_(float("nan"))
        graph.replay()
        torch.cuda.synchronize()
        failures += [{"counts": counts, **f} for f in check_masked(out, a, b, counts, TOLERANCE[torch.bfloat16])]
    return {"case": f"grouped masked cudagraph expected_m={expected_m}", "ok": not failures, "failures": failures}


def run_batched(dtype: str, out_dtype: str, layout: str) -> dict:
    """grouped_mm(a (G, M, K), b (G, K, N)) with a per-group bias and SiLU against float64, every row written."""
    torch.manual_seed(10)
    failures = []
    for G, M, N, K in ((4, 300, 264, 520), (16, 64, 1024, 256), (3, 1, 64, 128), (2, 2048, 2048, 1024)):
        K = K if layout == "kmajor" else -(-K // 16) * 16
        a = torch.randn(G, M, K, device="cuda", dtype=DTYPES[dtype])
        b = weights(G, K, N, DTYPES[dtype], layout)
        bias = torch.randn(G, N, device="cuda", dtype=DTYPES[dtype])
        out = torch.full((G, M, N), float("nan"), device="cuda", dtype=DTYPES[out_dtype])
        tilepipe.grouped_mm(a, b, out=out, bias=bias, activation="silu")
        torch.cuda.synchronize()
        found = check_masked(out, a, b, [M] * G, TOLERANCE[DTYPES[out_dtype]], fused_reference("silu", bias))
        failures += [{"G": G, "M": M, "N": N, "K": K, **f} for f in found]
    return {"case": f"grouped batched {dtype}->{out_dtype} b={layout}", "ok": not failures, "failures": failures[:10]}


def run_badargs() -> dict:
    torch.manual_seed(3)
    a = torch.randn(64, 32, device="cuda", dtype=torch.bfloat16)
    b = weights(3, 32, 48, torch.bfloat16, "kmajor")
    offs = offsets([10, 20, 30])
    out = torch.full((64, 48), float("nan"), device="cuda", dtype=torch.bfloat16)
    shared = torch.randn(64 * 32 + 64 * 48, device="cuda", dtype=torch.bfloat16)  # a and an out overlapping it
    before = shared.clone()
    calls = [("offs must be int32", lambda: tilepipe.grouped_mm(a, b, offs.long(), out=out)),
             ("offs must be on a's device", lambda: tilepipe.grouped_mm(a, b, offs.cpu(), out=out)),
             ("offs has 2 group ends but b has 3", lambda: tilepipe.grouped_mm(a, b, offs[:2], out=out)),
             ("a must be row-major with rows on 16 bytes", lambda: tilepipe.grouped_mm(
                 torch.randn(64, 36, device="cuda", dtype=torch.bfloat16), weights(3, 36, 48, torch.bfloat16,
                                                                                    "kmajor"), offs, out=out)),
             ("b must have a's dtype", lambda: tilepipe.grouped_mm(a, b.half(), offs, out=out)),
             ("out must be row-major", lambda: tilepipe.grouped_mm(a, b, offs, out=out.t().contiguous().t())),
             ("out must not share memory with a", lambda: tilepipe.grouped_mm(
                 shared[:64 * 32].view(64, 32), b, offs, out=shared[1024:1024 + 64 * 48].view(64, 48)))]
    failures = unexpected_errors(calls)
    torch.cuda.synchronize()
    if not torch.isnan(out).all() or not torch.equal(shared, before):
        failures.append({"out": "written"})
    return {"case": "grouped badargs", "ok": not failures, "failures": failures}


if __name__ == "__main__":
    kind, *args = sys.argv[1:]
    result = {"ragged": run_ragged, "cudagraph": run_cudagraph, "compile": run_compile, "badargs": run_badargs,
              "epilogue": run_epilogue, "gated": run_gated, "moe": run_moe, "masked": run_masked,
              "masked_epilogue": run_masked_epilogue, "masked_cudagraph": run_masked_cudagraph,
              "batched": run_batched}[kind](*args)
    print(json.dumps(result))
    sys.exit(0 if result["ok"] else 1)
