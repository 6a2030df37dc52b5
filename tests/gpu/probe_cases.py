"""GPU cases of debug and trace modes on the GEMM; each prints one JSON line.

`python -m tests.gpu.probe_cases debug`: tilepipe.matmul(debug=True), and TILEPIPE_DEBUG=1, match a float64
reference (the watchdog must not fire on a healthy kernel), under the static, dynamic and stream-K schedules.
`... trace PATH M N K [CLUSTER]`: a traced bf16 GEMM (in a "2x1" or "1x2" cluster if given) is correct and its
timeline is sane (every acquisition recorded once, in order, on one SM per CTA, both CTAs of every cluster present);
the summary carries each role's wait fractions.
"""

import json
import os
import sys
from collections import defaultdict

import torch

import tilepipe
from tilepipe.host.configs import choose_config
from tilepipe.probes import timeline

SHAPES = [(129, 200, 63), (300, 513, 1000), (2048, 2048, 256)]


def _rel_err(got: torch.Tensor, ref: torch.Tensor) -> float:
    return float((got.double() - ref).norm() / ref.norm())


def debug_mode() -> dict:
    torch.manual_seed(0)
    errors = []
    for i, (M, N, K) in enumerate(SHAPES):
        a = torch.randn(M, K, device="cuda", dtype=torch.bfloat16)
        b = torch.randn(K, N, device="cuda", dtype=torch.bfloat16)
        c = torch.randn(M, N, device="cuda", dtype=torch.bfloat16)
        out = torch.full((M, N), float("nan"), device="cuda", dtype=torch.bfloat16)
        if i == 0:
            os.environ["TILEPIPE_DEBUG"] = "1"  # the environment switch
            tilepipe.matmul(a, b, out=out, c=c, alpha=0.5, beta=2.0)
            del os.environ["TILEPIPE_DEBUG"]
        else:
            tilepipe.matmul(a, b, out=out, c=c, alpha=0.5, beta=2.0, debug=True)
        torch.cuda.synchronize()
        errors.append(_rel_err(out, 0.5 * (a.double() @ b.double()) + 2.0 * c.double()))
    for scheduler in ("dynamic", "streamk"):  # the other schedules' roles and waits under the watchdog too
        a = torch.randn(1000, 700, device="cuda", dtype=torch.bfloat16)
        b = torch.randn(700, 3000, device="cuda", dtype=torch.bfloat16)
        out = torch.full((1000, 3000), float("nan"), device="cuda", dtype=torch.bfloat16)
        tilepipe.matmul(a, b, out=out, scheduler=scheduler, debug=True)
        torch.cuda.synchronize()
        errors.append(_rel_err(out, a.double() @ b.double()))
    for cm, cn in ((1, 2), (2, 1)):  # two-CTA clusters: multicast rings and per-CTA records under the watchdog
        a = torch.randn(1000, 700, device="cuda", dtype=torch.bfloat16)
        b = torch.randn(700, 3000, device="cuda", dtype=torch.bfloat16)
        out = torch.full((1000, 3000), float("nan"), device="cuda", dtype=torch.bfloat16)
        config = tilepipe.MatmulConfig(128, 128, 64, stages=4, cluster_m=cm, cluster_n=cn)
        tilepipe.matmul(a, b, out=out, config=config, debug=True)
        torch.cuda.synchronize()
        errors.append(_rel_err(out, a.double() @ b.double()))
    return {"case": "debug matmul", "ok": all(e < 1e-2 for e in errors), "rel_errs": errors}


def trace_mode(path: str, M: int, N: int, K: int, cluster: str = "1x1") -> dict:
    torch.manual_seed(0)
    a = torch.randn(M, K, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(N, K, device="cuda", dtype=torch.bfloat16).t()
    cm, cn = map(int, cluster.split("x"))
    cfg = (choose_config(M, N, torch.bfloat16, torch.cuda.get_device_properties(0).multi_processor_count)
           if cluster == "1x1" else tilepipe.MatmulConfig(128, 128, 64, stages=4, cluster_m=cm, cluster_n=cn))
    config = None if cluster == "1x1" else cfg
    tilepipe.matmul(a, b, config=config)  # warm up: compile both binaries before the traced launch
    out = torch.full((M, N), float("nan"), device="cuda", dtype=torch.bfloat16)
    tilepipe.matmul(a, b, out=out, config=config, trace=path)
    err = _rel_err(out, a.double() @ b.double())
    trace = json.load(open(path))
    spans = timeline.spans_of(trace)
    problems = []
    lanes = defaultdict(list)
    for s in spans:
        lanes[s.program, s.cta, s.role, s.pipeline].append(s)
        if not 0 < s.wait_start <= s.acquired <= s.released:
            problems.append(f"times out of order: {s}")
    for lane in lanes.values():
        lane.sort(key=lambda s: s.iteration)
        if [s.iteration for s in lane] != list(range(len(lane))):
            problems.append(f"missing acquisitions in {lane[0].role}/{lane[0].pipeline} of program {lane[0].program} "
                            f"CTA {lane[0].cta}")
        problems += [f"overlapping acquisitions: {x} {y}" for x, y in zip(lane, lane[1:]) if y.wait_start < x.released]
    tiles, k_tiles = -(-M // cfg.block_m) * -(-N // cfg.block_n), -(-K // cfg.block_k)
    # a CTA computes a block_m x block_n part of its cluster's tile: ragged clusters still run both CTAs' k-steps
    tiles = -(-M // cfg.tile_m) * -(-N // cfg.tile_n) * cm * cn
    mma_input = sum(len(v) for (_, _, role, pipe), v in lanes.items() if (role, pipe) == ("mma", "input"))
    if mma_input != tiles * k_tiles:
        problems.append(f"mma acquired {mma_input} input stages, expected {tiles * k_tiles}")
    programs = {s.program for s in spans}
    sms = {(s.program, s.cta): s.sm for s in spans}
    if len(set(sms.values())) != len(sms):
        problems.append("two CTAs reported the same SM")
    if len(sms) != len(programs) * cm * cn:
        problems.append(f"{len(sms)} CTAs traced for {len(programs)} programs of {cm * cn} CTAs")
    roles = {(s.role, s.pipeline) for s in spans}
    if not {("mma", "input"), ("load", "input"), ("mma", "output"), ("store", "output")} <= roles:
        problems.append(f"roles/pipelines seen: {sorted(roles)}")
    summary = trace["tilepipe"]
    if summary["truncated"]:
        problems.append("trace truncated")
    ok = err < 1e-2 and not problems
    return {"case": f"trace matmul {M}x{N}x{K} {cluster}", "ok": ok, "rel_err": err, "problems": problems[:5],
            "config": [cfg.block_m, cfg.block_n, cfg.block_k, cfg.stages], "programs": len(programs),
            "spans": len(spans), "wait_fraction": summary["wait_fraction"],
            "span_us": (max(s.released for s in spans) - min(s.wait_start for s in spans)) / 1e3,
            "device": torch.cuda.get_device_name()}


if __name__ == "__main__":
    kind, *args = sys.argv[1:]
    result = debug_mode() if kind == "debug" else trace_mode(args[0], *map(int, args[1:4]), *args[4:])
    print(json.dumps(result), flush=True)
