"""Benchmark the fused epilogues against the torch sequence a user would write, eager and under torch.compile, in one
process on the same inputs, interleaved (tools/bench.py: compare).

`python -m tilepipe.tools.bench_epilogues [NAME [OUT_DIR [PAIRS]]]` writes OUT_DIR/NAME.json (default
bench/results/epilogues-h200.json) with the GPU, versions and command. Rows (issue 40's goals), all bf16 in:
- gated gate-up (SwiGLU): tilepipe.gated_linear against `silu(g) * u` over `g, u = F.linear(x, [Wg; Wu]).chunk(2, -1)`,
  eager and torch.compile'd, at Llama-3-8B's MLP (H = 14336, D = 4096; also Mixtral-8x7B's expert, 14336 x 4096) for
  M = 16, 512 and 8192;
- linear + bias + GELU: tilepipe.linear against `F.gelu(F.linear(x, w, b))`, eager and compiled, same shapes;
- FP8 output with 1x128 scales: tilepipe.linear_fp8 against F.linear followed by a torch.compile'd 1x128
  quantization (DeepGEMM's per-token cast), same shapes;
- an MLP block (tilepipe.nn.GatedMLP: gated_linear then the down projection) under torch.compile(fullgraph=True)
  against the same block on torch's nn.Linear layers, compiled, same shapes, called and replayed from CUDA graphs;
- a MoE expert MLP (SwiGLU): tilepipe.grouped_gated_mm then grouped_mm against torch._grouped_mm, silu * mul and
  torch._grouped_mm, at Mixtral-8x7B (8 experts, 16384 routed rows) and DeepSeek-V3 at EP8 (32 experts of 2048 x
  7168, 32768 rows), uniform and Zipf (s = 1.1) expert sizes.
"""

import json
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

import tilepipe
from tilepipe.tools.bench import (RESULTS_DIR, Row, _rel_err, compare, run_environment, run_record, warmed_graph,
                                  write_results)
from tilepipe.tools.bench_grouped import expert_sizes

MLP = (14336, 4096)
"""Llama-3-8B's MLP and Mixtral-8x7B's expert: H, D."""
ROWS_M = (16, 512, 8192)
MOE_CASES = [("Mixtral-8x7B", 8, 14336, 4096, 16384), ("DeepSeek-V3 EP8", 32, 2048, 7168, 32768)]
"""(name, experts, H, D, routed rows)."""
DTYPE = "bf16 in; bf16 out (linear_fp8: e4m3 and fp32 scales)"


def timed_rows(shape: str, variant: str, ours, baselines: dict, flops: float, pairs: int, rep_ms: int,
               err: float) -> list[Row]:
    """A row per baseline (its name: a callable), each timed interleaved with `ours`."""
    rows = []
    for name, theirs in baselines.items():
        tp, base, ratio, ratios = compare(ours, theirs, flops, pairs, rep_ms, settle=1)
        rows.append(Row(shape, variant, name, tp, base, ratio, err, ratios))
    return rows


def eager_and_compiled(theirs, description: str) -> dict:
    """The torch sequence `theirs` eager and torch.compile'd (compiled here, on its first call)."""
    compiled = torch.compile(theirs, dynamic=False)
    compiled()
    return {f"{description} eager": theirs, f"{description} torch.compile": compiled}


def bench_gated(M: int, pairs: int, rep_ms: int) -> list[Row]:
    """SwiGLU gate-up: tilepipe.gated_linear against torch's GEMM over [Wg; Wu], chunk, silu and product."""
    H, D = MLP
    x = torch.randn(M, D, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(2 * H, D, device="cuda", dtype=torch.bfloat16) / D ** 0.5
    packed = tilepipe.pack_gate_up(w)

    def theirs() -> torch.Tensor:
        gate, up = F.linear(x, w).chunk(2, -1)
        return F.silu(gate) * up

    ours = lambda: tilepipe.gated_linear(x, packed)  # noqa: E731
    return timed_rows(f"{M}x{2 * H}x{D}", "gated_linear silu", ours,
                      eager_and_compiled(theirs, "silu(g) * u of F.linear(x, [Wg; Wu])"), 2 * M * 2 * H * D, pairs,
                      rep_ms, _rel_err(ours(), theirs()))


def bench_gelu(M: int, pairs: int, rep_ms: int) -> list[Row]:
    """linear + bias + GELU: tilepipe.linear against F.gelu(F.linear(x, w, b))."""
    H, D = MLP
    x = torch.randn(M, D, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(H, D, device="cuda", dtype=torch.bfloat16) / D ** 0.5
    b = torch.randn(H, device="cuda", dtype=torch.bfloat16)
    ours = lambda: tilepipe.linear(x, w, b, activation="gelu")  # noqa: E731
    theirs = lambda: F.gelu(F.linear(x, w, b))  # noqa: E731
    baselines = eager_and_compiled(theirs, "F.gelu(F.linear(x, w, b))")
    return timed_rows(f"{M}x{H}x{D}", "linear +bias gelu", ours, baselines, 2 * M * H * D, pairs, rep_ms,
                      _rel_err(ours(), theirs()))


def quantize_1x128(y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """torch's 1x128 quantization of y [M, N] (DeepGEMM's per-token cast): e4m3 values and [M, N / 128] scales."""
    groups = y.float().view(y.shape[0], -1, 128)
    amax = groups.abs().amax(-1, keepdim=True).clamp(min=1e-4)
    return (groups * (448.0 / amax)).to(torch.float8_e4m3fn).view(y.shape), (amax / 448.0).squeeze(-1)


def dequantized(d: torch.Tensor, scales: torch.Tensor) -> torch.Tensor:
    return d.float() * scales.float().repeat_interleave(128, 1)


def bench_fp8_output(M: int, pairs: int, rep_ms: int) -> list[Row]:
    """FP8 output with 1x128 scales: tilepipe.linear_fp8 against F.linear then a torch.compile'd quantize_1x128."""
    H, D = MLP
    x = torch.randn(M, D, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(H, D, device="cuda", dtype=torch.bfloat16) / D ** 0.5
    quantize = torch.compile(quantize_1x128, dynamic=False)
    ours = lambda: tilepipe.linear_fp8(x, w)  # noqa: E731
    theirs = lambda: quantize(F.linear(x, w))  # noqa: E731
    err = _rel_err(dequantized(*ours()), dequantized(*theirs()))
    return timed_rows(f"{M}x{H}x{D}", "linear_fp8 1x128", ours,
                      {"F.linear, then torch.compile'd 1x128 quantization": theirs}, 2 * M * H * D, pairs, rep_ms,
                      err)


def bench_mlp_block(M: int, pairs: int, rep_ms: int) -> list[Row]:
    """A Llama MLP block, down(silu(gate(x)) * up(x)), under torch.compile(fullgraph=True): tilepipe.nn.GatedMLP
    (from the same nn.Linear layers) against the block on torch's layers, compiled the same way; then both compiled
    blocks replayed from CUDA graphs, the GPU's time alone (the compiled calls at M = 16 are decided by the host's:
    perf-log row 140)."""
    H, D = MLP
    gate, up = (torch.nn.Linear(D, H, bias=False, device="cuda", dtype=torch.bfloat16) for _ in range(2))
    down = torch.nn.Linear(H, D, bias=False, device="cuda", dtype=torch.bfloat16)
    ours_block = torch.compile(tilepipe.nn.GatedMLP.from_linears(gate, up, down), fullgraph=True, dynamic=False)
    theirs_block = torch.compile(lambda x: down(F.silu(gate(x)) * up(x)), fullgraph=True, dynamic=False)
    x = torch.randn(M, D, device="cuda", dtype=torch.bfloat16)
    shape, variant, theirs = (f"{M}x{2 * H}x{D} + {M}x{D}x{H}", "nn.GatedMLP, torch.compile(fullgraph=True)",
                              "down(silu(gate(x)) * up(x)) on nn.Linear, torch.compile")
    with torch.no_grad():
        err = _rel_err(ours_block(x), theirs_block(x))
        rows = timed_rows(shape, variant, lambda: ours_block(x), {theirs: lambda: theirs_block(x)}, 6 * M * H * D,
                          pairs, rep_ms, err)
        ours_graph, theirs_graph = warmed_graph(lambda: ours_block(x)), warmed_graph(lambda: theirs_block(x))
    return rows + timed_rows(shape, f"{variant}, CUDA-graph replay", ours_graph.replay,
                             {f"{theirs}, CUDA-graph replay": theirs_graph.replay}, 6 * M * H * D, pairs, rep_ms, err)


def bench_moe(name: str, G: int, H: int, D: int, rows: int, distribution: str, pairs: int, rep_ms: int) -> list[Row]:
    """A MoE expert MLP: grouped_gated_mm (SwiGLU) then grouped_mm, against torch._grouped_mm, silu * mul and
    torch._grouped_mm over the same experts (K-major, as MoE layers hold them)."""
    sizes = expert_sizes(rows, G, distribution)
    offs = torch.tensor(sizes, device="cuda").cumsum(0).to(torch.int32)
    x = torch.randn(rows, D, device="cuda", dtype=torch.bfloat16)
    w_gate_up = torch.randn(G, 2 * H, D, device="cuda", dtype=torch.bfloat16) / D ** 0.5
    w_down = (torch.randn(G, D, H, device="cuda", dtype=torch.bfloat16) / H ** 0.5).transpose(1, 2)
    packed = tilepipe.pack_gate_up(w_gate_up).transpose(1, 2)
    theirs_gate_up = w_gate_up.transpose(1, 2)

    def ours() -> torch.Tensor:
        return tilepipe.grouped_mm(tilepipe.grouped_gated_mm(x, packed, offs), w_down, offs)

    def theirs() -> torch.Tensor:
        gate, up = torch._grouped_mm(x, theirs_gate_up, offs=offs).chunk(2, -1)
        return torch._grouped_mm(F.silu(gate) * up, w_down, offs=offs)

    shape = f"{name} MoE MLP: G={G} {rows}x{D}, H={H} {distribution} (largest {max(sizes)})"
    return timed_rows(shape, "grouped_gated_mm silu + grouped_mm", ours,
                      {"torch._grouped_mm, silu(g) * u, torch._grouped_mm eager": theirs}, 6.0 * rows * H * D, pairs,
                      rep_ms, _rel_err(ours(), theirs()))


def run(name: str = "epilogues-h200", out_dir: Path = RESULTS_DIR, pairs: int = 3, rep_ms: int = 40) -> Path:
    """Every row, into out_dir/name.json: rewritten after each section, so a run stopped by its time limit keeps
    the rows it finished."""
    start, environment = time.time(), run_environment(name)
    sections = [(bench, M) for bench in (bench_gated, bench_gelu, bench_fp8_output, bench_mlp_block) for M in ROWS_M]
    sections += [(bench_moe, (*case, distribution)) for case in MOE_CASES for distribution in ("uniform", "zipf")]
    rows: list[Row] = []
    path = out_dir / f"{name}.json"
    out_dir.mkdir(parents=True, exist_ok=True)
    for bench, arguments in sections:
        rows += bench(*(arguments if isinstance(arguments, tuple) else (arguments, )), pairs, rep_ms)
        record = run_record(name, DTYPE, __doc__, pairs, rep_ms, start, rows, environment)
        path.write_text(json.dumps(record, indent=1) + "\n")
    write_results(record, rows, out_dir)
    print(f"{record['gpu']}, torch {record['torch']}, triton {record['triton']}: wrote {path} "
          f"({record['seconds']} s)")
    return path


if __name__ == "__main__":
    run(*sys.argv[1:2], *(Path(arg) for arg in sys.argv[2:3]), *(int(arg) for arg in sys.argv[3:4]))
