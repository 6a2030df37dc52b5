"""GPU correctness of the fused epilogues (tilepipe.linear, tilepipe.gated_linear) for one case; prints JSON.

`python -m tests.gpu.linear_cases linear gelu bf16 bias`: linear over ragged shapes (2-D and 3-D x, decode M), as the op
chooses its tile, against a float64 reference on fresh random inputs, the output poisoned with NaN first.
`... forced gelu bf16`: the activation in every sm_90a tile form and schedule (sub-tiles, whole stage, stream-K,
dynamic, swap-AB, a pieced tile, ping-pong), forced through matmul's path. `... gated silu bf16`: gated_linear on
ragged M, H and K, as chosen and in forced tiles, and at decode M (swap-AB's gated tile). `... graphs bf16`: a
gated MLP under torch.compile(fullgraph=True) and linear replayed from a CUDA graph, against eager torch.
"""

import json
import sys
from dataclasses import replace

import torch

import tilepipe
from tilepipe.api.linear import ACTIVATIONS, GATE_COLUMNS, GATED, TORCH_ACTIVATIONS, pack_gate_up
from tilepipe.api.matmul import _matmul
from tilepipe.host import configs

DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}
TOLERANCE = {torch.bfloat16: 1e-2, torch.float16: 2e-3}  # relative Frobenius error against float64
SHAPES = [((1, ), 256, 64), ((7, ), 8, 8), ((129, ), 200, 63), ((2, 65), 264, 520), ((300, ), 513, 1000),
          ((16, ), 4096, 4096), ((1000, ), 1, 64), ((2048, ), 2048, 256), ((257, ), 4096, 128), ((3, ), 40, 0),
          ((0, ), 64, 64)]
"""(x's leading dims, N, K): ragged M, N and K, 3-D x, decode (swap-AB), N = 1, K = 0 and M = 0 (no launch)."""


def error(got: torch.Tensor, ref: torch.Tensor) -> float:
    """‖got − ref‖ / ‖ref‖ (‖got‖ where the reference is zero)."""
    diff = (got.double() - ref).norm()
    return float(diff / ref.norm()) if ref.norm() > 0 else float(got.double().norm())


def verdict(case: str, results: list[tuple[str, float, bool]], dtype: torch.dtype) -> dict:
    """The case's JSON: ok when every result is finite and within the dtype's tolerance."""
    failures = [{"what": what, "rel_err": err} for what, err, finite in results
                if not (finite and err < TOLERANCE[dtype])]
    return {"case": case, "ok": not failures, "checked": len(results),
            "worst_rel_err": max((err for _, err, _ in results), default=0.0), "failures": failures[:8]}


def run_linear(activation: str, dtype: str, bias: str) -> dict:
    """tilepipe.linear on SHAPES (into a NaN-poisoned `out` and into a new tensor) against act(x @ w^T + b)."""
    torch.manual_seed(0)
    dt, act = DTYPES[dtype], None if activation == "none" else activation
    results = []
    for lead, N, K in SHAPES:
        x = torch.randn(*lead, K, device="cuda", dtype=dt)
        w = torch.randn(N, K, device="cuda", dtype=dt)
        b = torch.randn(N, device="cuda", dtype=dt) if bias == "bias" else None
        ref = x.double() @ w.double().t() + (0.0 if b is None else b.double())
        ref = TORCH_ACTIVATIONS[act](ref) if act else ref
        out = torch.full((*lead, N), float("nan"), device="cuda", dtype=dt)
        into = tilepipe.linear(x, w, b, activation=act, out=out)
        new = tilepipe.linear(x, w, b, activation=act)
        torch.cuda.synchronize()
        results += [(f"{lead}x{N}x{K} out=", error(out, ref), into is out and bool(torch.isfinite(out).all())),
                    (f"{lead}x{N}x{K}", error(new, ref), new.shape == ref.shape and bool(torch.isfinite(new).all()))]
    return verdict(f"linear {activation} {dtype} {bias}", results, dt)


SWAP_GATED = replace(configs.swap_config(32, torch.bfloat16, 2 * GATE_COLUMNS), epilogue_n=GATE_COLUMNS)
"""gated_linear's decode tile (gated_config's for M <= 32): swap-AB's 128 rows of N (a gate-up pair) x 32 of M, D
in 64-column sub-tiles."""
FORCED = [(configs.LARGE_SUBTILED_16BIT, "static"), (configs.LARGE_SUBTILED_16BIT, "streamk"),
          (configs.LARGE_16BIT, "dynamic"), (configs.MEDIUM, "splitk"), (configs.SMALL, "static"),
          (configs.swap_config(32, torch.bfloat16), "static"), (configs.swap_config(32, torch.bfloat16), "streamk"),
          (configs.PIECED_WHOLE_16BIT, "dynamic"), (configs.PINGPONG_16BIT, "static"),
          (replace(configs.PINGPONG_16BIT, stages=5, epilogue_n=None), "static"), (SWAP_GATED, "static"),
          (SWAP_GATED, "dynamic")]
"""(config, schedule) pairs an activation is forced through: every sm_90a tile form the fused epilogue passes (the
swap-AB tile in sub-tiles: two 64-column parts of its transposed accumulator)."""
FORCED_SHAPES = [(300, 513, 1000), (33, 264, 520), (129, 200, 64)]


def run_forced(activation: str, dtype: str) -> dict:
    """The activation's epilogue with a bias in every FORCED tile and schedule, through matmul's path (as linear
    launches it), into a NaN-poisoned D."""
    torch.manual_seed(1)
    dt = DTYPES[dtype]
    results = []
    for cfg, schedule in FORCED:
        for M, N, K in FORCED_SHAPES:
            x, w = torch.randn(M, K, device="cuda", dtype=dt), torch.randn(N, K, device="cuda", dtype=dt)
            b = torch.randn(N, device="cuda", dtype=dt)
            ref = TORCH_ACTIVATIONS[activation](x.double() @ w.double().t() + b.double())
            out = torch.full((M, N), float("nan"), device="cuda", dtype=dt)
            _matmul(x, w.t(), out, None, b.expand(M, N), 1.0, 1.0, cfg, schedule, None, None, ACTIVATIONS[activation])
            torch.cuda.synchronize()
            results.append((f"{cfg} {schedule} {M}x{N}x{K}", error(out, ref), bool(torch.isfinite(out).all())))
    return verdict(f"forced {activation} {dtype}", results, dt)


GATED_SHAPES = [((1, ), 64, 64), ((16, ), 14336, 4096), ((129, ), 192, 63), ((2, 150), 320, 1000),
                ((2048, ), 1024, 256), ((300, ), 128, 8), ((5, ), 64, 0)]
"""(x's leading dims, H, K): H a multiple of 64 (odd multiples leave half a 128x256 tile's pairs past D)."""
GATED_FORCED = [replace(configs.MEDIUM, epilogue_n=GATE_COLUMNS), replace(configs.SMALL, epilogue_n=GATE_COLUMNS),
                configs.LARGE_SUBTILED_16BIT, configs.PINGPONG_16BIT, SWAP_GATED]
DECODE_M, DECODE_H, DECODE_K = (1, 7, 16, 32), (64, 192, 14336), (64, 1000, 4096)
"""gated_linear's decode shapes (M <= 32: swap-AB's gated tile, as chosen): ragged M, one to 112 pairs, K ragged."""


def run_gated(activation: str, dtype: str, forced: str = "forced") -> dict:
    """gated_linear on GATED_SHAPES (a new tensor and a NaN-poisoned out) and, with `forced`, in GATED_FORCED tiles
    (static and dynamic) against act(x @ Wg^T) * (x @ Wu^T) in float64, the weight packed by pack_gate_up."""
    torch.manual_seed(2)
    dt, act = DTYPES[dtype], TORCH_ACTIVATIONS[activation]
    results = []
    for lead, H, K in GATED_SHAPES:
        x = torch.randn(*lead, K, device="cuda", dtype=dt)
        gate, up = torch.randn(H, K, device="cuda", dtype=dt), torch.randn(H, K, device="cuda", dtype=dt)
        ref = act(x.double() @ gate.double().t()) * (x.double() @ up.double().t())
        w = pack_gate_up(torch.cat((gate, up)))
        out = torch.full((*lead, H), float("nan"), device="cuda", dtype=dt)
        for got in (tilepipe.gated_linear(x, w, activation), tilepipe.gated_linear(x, w, activation, out=out)):
            torch.cuda.synchronize()
            results.append((f"{lead}x{H}x{K}", error(got, ref), bool(torch.isfinite(got).all()) and
                            got.shape == ref.shape))
        if forced == "forced" and K and len(lead) == 1:
            for cfg in GATED_FORCED:
                for schedule in ("static", ) if cfg.pingpong else ("static", "dynamic"):
                    d = _matmul(x, w.t(), None, None, None, 1.0, 0.0, cfg, schedule, None, None, GATED[activation])
                    torch.cuda.synchronize()
                    results.append((f"{cfg} {schedule} {lead}x{H}x{K}", error(d, ref), bool(torch.isfinite(d).all())))
    return verdict(f"gated {activation} {dtype}", results + gated_decode(activation, dt), dt)


def gated_decode(activation: str, dt: torch.dtype) -> list[tuple[str, float, bool]]:
    """gated_linear at M <= 32 (DECODE_M x DECODE_H x DECODE_K, where it chooses swap-AB's gated tile:
    tests/test_linear.py) into a new tensor and a NaN-poisoned out, against act(x @ Wg^T) * (x @ Wu^T) in float64."""
    act, results = TORCH_ACTIVATIONS[activation], []
    for H in DECODE_H:
        for K in DECODE_K:
            gate, up = torch.randn(H, K, device="cuda", dtype=dt), torch.randn(H, K, device="cuda", dtype=dt)
            w, gate, up = pack_gate_up(gate, up), gate.double(), up.double()
            for M in DECODE_M:
                x = torch.randn(M, K, device="cuda", dtype=dt)
                ref = act(x.double() @ gate.t()) * (x.double() @ up.t())
                out = torch.full((M, H), float("nan"), device="cuda", dtype=dt)
                for into, got in (("", tilepipe.gated_linear(x, w, activation)),
                                  (" out=", tilepipe.gated_linear(x, w, activation, out=out))):
                    torch.cuda.synchronize()
                    results.append((f"decode {M}x{H}x{K}{into}", error(got, ref),
                                    bool(torch.isfinite(got).all()) and got.shape == ref.shape))
    return results


def run_graphs(dtype: str) -> dict:
    """A gated MLP (gate-up with SwiGLU, then down with a bias and GELU) under torch.compile(fullgraph=True), and
    linear captured in a CUDA graph and replayed on new inputs, against eager torch in float64."""
    torch.manual_seed(3)
    dt = DTYPES[dtype]
    x, gate, up = (torch.randn(96, 512, device="cuda", dtype=dt), torch.randn(1024, 512, device="cuda", dtype=dt),
                   torch.randn(1024, 512, device="cuda", dtype=dt))
    down, b = torch.randn(512, 1024, device="cuda", dtype=dt) / 32, torch.randn(512, device="cuda", dtype=dt)
    w = pack_gate_up(gate, up)

    def mlp(x, w, down, b):
        return tilepipe.linear(tilepipe.gated_linear(x, w), down, b, activation="gelu")

    h = torch.nn.functional.silu(x.double() @ gate.double().t()) * (x.double() @ up.double().t())
    ref = torch.nn.functional.gelu(h.to(dt).double() @ down.double().t() + b.double())
    torch._dynamo.reset()
    got = torch.compile(mlp, fullgraph=True)(x, w, down, b)
    results = [("compiled mlp", error(got, ref), bool(torch.isfinite(got).all()))]
    static_x, w2 = torch.randn(64, 512, device="cuda", dtype=dt), down.t().contiguous()
    tilepipe.linear(static_x, w2, None, activation="silu")  # compiled and planned before the capture
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        y = tilepipe.linear(static_x, w2, None, activation="silu")
    for _ in range(2):
        static_x.copy_(torch.randn(64, 512, device="cuda", dtype=dt))
        graph.replay()
        torch.cuda.synchronize()
        ref = torch.nn.functional.silu(static_x.double() @ w2.double().t())
        results.append(("graph replay", error(y, ref), bool(torch.isfinite(y).all())))
    return verdict(f"graphs {dtype}", results, dt)


if __name__ == "__main__":
    kind, *args = sys.argv[1:]
    runners = {"linear": run_linear, "forced": run_forced, "gated": run_gated, "graphs": run_graphs}
    result = runners[kind](*args)
    print(json.dumps(result))
    sys.exit(0 if result["ok"] else 1)
