"""GPU cases of tilepipe.distributed, run by every rank under torchrun:

    torchrun --nproc-per-node 2 -m tests.gpu.tp_cases CASE [CASE ...]

CASE: ag-DTYPE-LAYOUT and rs-DTYPE-LAYOUT (DTYPE bf16/fp16, LAYOUT rowmajor/kmajor, or fp8-kmajor: the FP8
per-tensor form, e4m3 operands, bf16 D; both ops, overlapped and as the NCCL sequence, on ragged M against a float64
reference of the unsplit GEMM, out poisoned with NaN; the reduce-scatter's ring on 2 ranks), graph (CUDA-graph
replays bitwise equal to eager calls, both ops), compile (torch.compile fullgraph of a layer calling both), badargs
(ranks that disagree, M not split evenly), hang-ag and hang-rs (rank 1 skips a call; rank 0's debug mode must name
the chunk and the peer; run each in its own torchrun).
Each rank prints a JSON line per case; rank 0 prints the summary {"ok": ...} last. NVLink multicast stays off."""

import json
import os
import sys
import time
import traceback

import torch
import torch.distributed as dist

from tilepipe.distributed.workspace import MULTICAST_OFF

DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp8": torch.float8_e4m3fn}
SHAPES = ((333, 1040, 776), (129, 4096, 264), (333, 528, 4104))  # rows a rank, K, N: M = 2 x rows is no multiple
# of 2 x 128, K of 16 bytes in FP8; the all-gather takes 128x128 tiles on the first two, 128x256 on the third
# (plan.py gather_config); the reduce-scatter 128x256 on all
TOLERANCE = 1e-2


def scale_of(operand: str, rank: int) -> float:
    """The FP8 form's per-tensor scales: A's one scale in the all-gather (the same on every rank), each rank's own
    otherwise."""
    return 0.5 if operand == "a_shared" else {"a": 0.5, "b": 0.25}[operand] * (rank + 1)


def scaled(dtype: str, operand: str, rank: int) -> dict:
    """The scale keyword of `operand` for a call of `dtype` (none for 16-bit)."""
    if dtype != "fp8":
        return {}
    name = "scale_a" if operand.startswith("a") else "scale_b"
    return {name: torch.tensor([scale_of(operand, rank)], device="cuda")}


def value(t: torch.Tensor, dtype: str, operand: str, rank: int) -> torch.Tensor:
    """`t` in float64 as the op reads it: times its scale in the FP8 form."""
    return t.double() * (scale_of(operand, rank) if dtype == "fp8" else 1.0)


def rel_err(out: torch.Tensor, ref: torch.Tensor) -> float:
    return ((out.double() - ref).norm() / ref.norm()).item()


def shared_randn(*shape, dtype, seed: int) -> torch.Tensor:
    """The same values on every rank (one generator seed on every GPU)."""
    generator = torch.Generator(device="cuda").manual_seed(seed)
    return torch.randn(*shape, generator=generator, device="cuda", dtype=torch.float32).to(dtype)


def b_of(full: torch.Tensor, layout: str) -> torch.Tensor:
    """`full` [K, N] as row-major or as the transpose of a contiguous [N, K] tensor."""
    return full.t().contiguous().t() if layout == "kmajor" else full.contiguous()


def case_ag(dtype: str, layout: str) -> dict:
    from tilepipe.distributed import all_gather_matmul

    rank, world = dist.get_rank(), dist.get_world_size()
    out_dtype = torch.bfloat16 if dtype == "fp8" else DTYPES[dtype]
    errors = {}
    for rows, K, N in SHAPES:
        a_full = shared_randn(rows * world, K, dtype=DTYPES[dtype], seed=rows)
        b = b_of(shared_randn(K, N, dtype=DTYPES[dtype], seed=1000 + rank), layout)
        ref = value(a_full, dtype, "a_shared", rank) @ value(b, dtype, "b", rank)
        kw = {**scaled(dtype, "a_shared", rank), **scaled(dtype, "b", rank)}
        for overlap in (True, False):
            out = torch.full((rows * world, N), float("nan"), device="cuda", dtype=out_dtype)
            all_gather_matmul(a_full[rank * rows:(rank + 1) * rows], b, out=out, overlap=overlap, **kw)
            errors[f"{rows}x{N}x{K} overlap={overlap}"] = rel_err(out, ref)
            again = all_gather_matmul(a_full[rank * rows:(rank + 1) * rows], b, overlap=overlap, **kw)  # next epoch
            errors[f"{rows}x{N}x{K} overlap={overlap} again"] = rel_err(again, ref)
    return {"ok": all(e < TOLERANCE for e in errors.values()), "rel_err": errors}


def case_rs(dtype: str, layout: str) -> dict:
    from tilepipe.distributed import matmul_reduce_scatter

    rank, world = dist.get_rank(), dist.get_world_size()
    out_dtype = torch.bfloat16 if dtype == "fp8" else DTYPES[dtype]
    errors = {}
    for rows, K, N in SHAPES:
        a_full = shared_randn(rows * world, K * world, dtype=DTYPES[dtype], seed=rows)
        b_full = shared_randn(K * world, N, dtype=DTYPES[dtype], seed=2000 + rows)
        ref = sum(value(a_full[rows * rank:rows * (rank + 1), r * K:(r + 1) * K], dtype, "a", r)
                  @ value(b_full[r * K:(r + 1) * K], dtype, "b", r) for r in range(world))  # each rank's scales
        a = a_full[:, rank * K:(rank + 1) * K].contiguous()
        b = b_of(b_full[rank * K:(rank + 1) * K], layout)
        kw = {**scaled(dtype, "a", rank), **scaled(dtype, "b", rank)}
        for overlap in (True, False):
            out = torch.full((rows, N), float("nan"), device="cuda", dtype=out_dtype)
            matmul_reduce_scatter(a, b, out=out, overlap=overlap, **kw)
            errors[f"{rows}x{N}x{K} overlap={overlap}"] = rel_err(out, ref)
            again = matmul_reduce_scatter(a, b, overlap=overlap, **kw)  # the next epoch
            errors[f"{rows}x{N}x{K} overlap={overlap} again"] = rel_err(again, ref)
    return {"ok": all(e < TOLERANCE for e in errors.values()), "rel_err": errors}


def case_graph() -> dict:
    """Both ops captured once (after an eager call set up their workspaces), replayed on new inputs: each replay's
    output bitwise equal to an eager call's on the same inputs."""
    from tilepipe.distributed import all_gather_matmul, matmul_reduce_scatter

    rows, K, N = 333, 1040, 776
    a = torch.randn(rows, K, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(K, N, device="cuda", dtype=torch.bfloat16)
    a_rs = torch.randn(rows * dist.get_world_size(), K, device="cuda", dtype=torch.bfloat16)
    ops = {"all_gather_matmul": lambda: all_gather_matmul(a, b, overlap=True),
           "matmul_reduce_scatter": lambda: matmul_reduce_scatter(a_rs, b, overlap=True)}
    equal = {}
    for name, op in ops.items():
        op()
        torch.cuda.synchronize()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            captured = op()
        for replay in range(3):
            for t in (a, b, a_rs):
                t.normal_()
            graph.replay()
            eager = op()
            torch.cuda.synchronize()
            equal[f"{name} replay {replay}"] = torch.equal(captured, eager)
    return {"ok": all(equal.values()), "bitwise_equal": equal}


def case_compile() -> dict:
    """torch.compile(fullgraph=True) of a layer calling both ops traces them as tilepipe's custom ops; its output
    equals the eager call's."""
    from tilepipe.distributed import all_gather_matmul, matmul_reduce_scatter

    rows, K, N = 333, 1032, 776
    a = torch.randn(rows, K, device="cuda", dtype=torch.bfloat16)
    w_up = torch.randn(K, N, device="cuda", dtype=torch.bfloat16)
    w_down = torch.randn(N, K, device="cuda", dtype=torch.bfloat16)

    def layer(x):
        return matmul_reduce_scatter(torch.relu(all_gather_matmul(x, w_up, overlap=True)), w_down, overlap=True)

    compiled = torch.compile(layer, fullgraph=True)
    eager, traced = layer(a), compiled(a)
    torch.cuda.synchronize()
    return {"ok": torch.equal(eager, traced), "rel_err": rel_err(traced, eager.double())}


def case_badargs() -> dict:
    """Ranks that disagree on a_shard's shape are refused on every rank, naming a_shard; M not a multiple of W."""
    from tilepipe.distributed import all_gather_matmul, matmul_reduce_scatter

    rank = dist.get_rank()
    b = torch.randn(256, 264, device="cuda", dtype=torch.bfloat16)
    messages = {}
    for name, call in (
            ("disagree", lambda: all_gather_matmul(torch.randn(200 + rank, 256, device="cuda", dtype=torch.bfloat16),
                                                   b)),
            ("uneven", lambda: matmul_reduce_scatter(torch.randn(333, 256, device="cuda", dtype=torch.bfloat16), b))):
        try:
            call()
            messages[name] = "no error"
        except ValueError as error:
            messages[name] = str(error)
    ok = all(expect in messages[name] for name, expect in (("disagree", "a_shard differs across the group"),
                                                          ("uneven", "must split evenly")))
    return {"ok": ok, "messages": messages}


def case_hang(op: str) -> dict:
    """Rank 1 skips the second call: rank 0, in debug mode, must report the chunk and the peer within the stall time
    (TILEPIPE_DEBUG_STALL_S = 3) instead of hanging."""
    from tilepipe.distributed import all_gather_matmul, matmul_reduce_scatter

    os.environ["TILEPIPE_DEBUG_STALL_S"] = "3"
    rank, world = dist.get_rank(), dist.get_world_size()
    a = torch.randn(256, 1024, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(1024, 1024, device="cuda", dtype=torch.bfloat16)
    call = {"ag": lambda: all_gather_matmul(a, b, overlap=True, debug=True),
            "rs": lambda: matmul_reduce_scatter(a, b, overlap=True, debug=True)}[op]
    call()
    torch.cuda.synchronize()
    dist.barrier()
    if rank != 0:
        time.sleep(10)  # skips the call; stays alive while rank 0 waits for it (3 s)
        return {"ok": True, "skipped": True}
    start = time.monotonic()
    try:
        call()
        torch.cuda.synchronize()
        return {"ok": False, "error": "no TimeoutError"}
    except TimeoutError as error:
        seconds = time.monotonic() - start
        role = "load" if op == "ag" else "epilogue_load"
        named = f"role '{role}'" in str(error) and f"peer rank {world - 1}" in str(error)
        return {"ok": named and seconds < 20, "seconds": round(seconds, 1), "report": str(error)}


def run(case: str) -> dict:
    kind, *args = case.split("-")
    return {"ag": case_ag, "rs": case_rs, "graph": case_graph, "compile": case_compile, "badargs": case_badargs,
            "hang": case_hang}[kind](*args)


def main(cases: list[str]) -> int:
    for name, value in MULTICAST_OFF.items():  # before NCCL or symmetric memory start
        os.environ.setdefault(name, value)
    local = int(os.environ.get("LOCAL_RANK", "0"))
    torch.cuda.set_device(local)
    dist.init_process_group("nccl", device_id=torch.device("cuda", local))
    rank = dist.get_rank()
    results = []
    for case in cases:
        print(f"[rank {rank}] case {case} ...", flush=True)
        start = time.monotonic()
        try:
            result = run(case)
        except Exception as error:  # a failed case is a result: the next case still runs
            result = {"ok": False, "error": f"{type(error).__name__}: {error}", "traceback": traceback.format_exc()}
        result = {"case": case, "rank": rank, "seconds": round(time.monotonic() - start, 1), **result}
        results.append(result)
        if result.get("skipped"):  # not JSON: a harness reads the last JSON line, rank 0's summary
            print(f"[rank {rank}] skipped {case}", flush=True)
        else:
            print(json.dumps(result), flush=True)
    if any(case.startswith("hang") for case in cases):  # the skipped call leaves the group out of step: no barrier
        if rank == 0:
            print(json.dumps({"ok": all(r["ok"] for r in results), "cases": len(results)}), flush=True)
        os._exit(0 if all(r["ok"] for r in results) else 1)
    everyone: list = [None] * dist.get_world_size()
    dist.all_gather_object(everyone, results)
    ok = all(r["ok"] for rank_results in everyone for r in rank_results)
    if rank == 0:
        print(json.dumps({"ok": ok, "cases": sum(len(r) for r in everyone),
                          "failed": [f"{r['case']} rank {r['rank']}" for rs in everyone for r in rs if not r["ok"]]}),
              flush=True)
    dist.destroy_process_group()
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
