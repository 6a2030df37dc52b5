"""Benchmark tilepipe.matmul against cuBLAS (torch.matmul, torch.addmm) in one process, on the same random inputs.

`python -m tilepipe.tools.bench family` is the demo's GPU part: each public op on a few default shapes against torch,
as a table and a last JSON line (tilepipe.probes.debug.run_guarded runs it in a child process under a timeout).

Timings are `triton.testing.do_bench` medians taken in interleaved pairs (ours, cuBLAS, ours, ...): an H100
drops from about 795 to 690 TFLOP/s within seconds as it reaches its power limit, so blocks of one kernel
then the other would be unfair. The ratio reported is the median of the per-pair ratios.
"""

import json
import statistics
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import torch

import tilepipe
from tilepipe._text import format_table

RESULTS_DIR = Path(__file__).resolve().parents[2] / "bench" / "results"
SCHEDULER_SHAPES = [(896, 4864, 4096), (8192, 8192, 1024), (7000, 5000, 3000), (2304, 4096, 8192), (3840, 3840, 4096),
                    (8192, 8192, 8192), (2048, 2048, 2048), (1536, 2816, 4096)]
"""Partial last waves on 132 SMs in 128x256 tiles (133 tiles = SMs + 1; 15.5 waves; a ragged 8.3; 2.2; 3.4), then
15.5 waves at large K, one wave (128 tiles) and exactly one full wave."""
SHAPES = [(8192, 8192, 8192), (4096, 4096, 4096), (8192, 8192, 1024), (2048, 2048, 2048), (1024, 1024, 1024),
          (16384, 4096, 4096), (16384, 14336, 4096), (16384, 4096, 14336), (7919, 4133, 3000)]


@dataclass
class Row:
    shape: str
    variant: str  # what tilepipe ran: "matmul B kmajor", "matmul B rowmajor", "addmm (beta=1)"
    baseline: str  # what it was timed against, in the same process on the same inputs
    tilepipe_tflops: float
    baseline_tflops: float
    ratio: float  # median over pairs of baseline_time / tilepipe_time: > 1 means tilepipe is faster
    rel_err: float  # ||tilepipe - baseline|| / ||baseline||
    pair_ratios: list[float]


def compare(ours, theirs, flops: float, pairs: int, rep_ms: int,
            settle: int = 0) -> tuple[float, float, float, list[float]]:
    """Interleaved do_bench medians of two callables: (our TFLOP/s, their TFLOP/s, median ratio, ratios). `settle`
    pairs run first and are dropped (the first pair after a switch of kernels often lies 5-10% off the others)."""
    from triton.testing import do_bench

    t_ours, t_theirs = [], []
    for _ in range(settle + pairs):
        t_ours.append(do_bench(ours, warmup=25, rep=rep_ms, return_mode="median"))
        t_theirs.append(do_bench(theirs, warmup=25, rep=rep_ms, return_mode="median"))
    t_ours, t_theirs = t_ours[settle:], t_theirs[settle:]
    ratios = [t / o for o, t in zip(t_ours, t_theirs)]
    return (flops / statistics.median(t_ours) * 1e-9, flops / statistics.median(t_theirs) * 1e-9,
            statistics.median(ratios), [round(r, 4) for r in ratios])


def warmed_graph(call) -> torch.cuda.CUDAGraph:
    """`call()` captured in a CUDA graph after two warm-up calls on a side stream (the first compiles the kernel and
    caches its launcher, which capture must not do)."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(2):
            call()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        call()
    return graph


def _operands(M: int, N: int, K: int, b_layout: str) -> tuple[torch.Tensor, torch.Tensor]:
    a = torch.randn(M, K, device="cuda", dtype=torch.bfloat16)
    b = (torch.randn(N, K, device="cuda", dtype=torch.bfloat16).t() if b_layout == "kmajor"
         else torch.randn(K, N, device="cuda", dtype=torch.bfloat16))
    return a, b


def _rel_err(x: torch.Tensor, ref: torch.Tensor) -> float:
    return float((x.float() - ref.float()).norm() / ref.float().norm())


def bench_matmul(M: int, N: int, K: int, b_layout: str, pairs: int, rep_ms: int) -> Row:
    a, b = _operands(M, N, K, b_layout)
    ours = torch.full((M, N), float("nan"), device="cuda", dtype=torch.bfloat16)
    theirs = torch.empty((M, N), device="cuda", dtype=torch.bfloat16)
    tilepipe.matmul(a, b, out=ours)
    torch.matmul(a, b, out=theirs)
    err = _rel_err(ours, theirs)
    result = compare(lambda: tilepipe.matmul(a, b, out=ours), lambda: torch.matmul(a, b, out=theirs),
                     2.0 * M * N * K, pairs, rep_ms)
    return Row(f"{M}x{N}x{K}", f"matmul B {b_layout}", "cuBLAS (torch.matmul)", *result[:3], err, result[3])


def bench_residual(M: int, N: int, K: int, pairs: int, rep_ms: int) -> list[Row]:
    """D = A @ B + C: against torch.addmm, and against tilepipe's own plain matmul (the residual's cost)."""
    a, b = _operands(M, N, K, "kmajor")
    c = torch.randn(M, N, device="cuda", dtype=torch.bfloat16)
    ours = torch.full((M, N), float("nan"), device="cuda", dtype=torch.bfloat16)
    theirs = torch.empty_like(ours)
    plain = torch.empty_like(ours)
    residual = lambda: tilepipe.matmul(a, b, out=ours, c=c, beta=1.0)  # noqa: E731
    residual()
    torch.addmm(c, a, b, out=theirs)
    err = _rel_err(ours, theirs)
    flops = 2.0 * M * N * K
    vs_addmm = compare(residual, lambda: torch.addmm(c, a, b, out=theirs), flops, pairs, rep_ms)
    vs_plain = compare(residual, lambda: tilepipe.matmul(a, b, out=plain), flops, pairs, rep_ms)
    shape = f"{M}x{N}x{K}"
    return [Row(shape, "addmm (beta=1)", "cuBLAS (torch.addmm)", *vs_addmm[:3], err, vs_addmm[3]),
            Row(shape, "addmm (beta=1)", "tilepipe.matmul (no C)", *vs_plain[:3], err, vs_plain[3])]


def bench_bias(M: int, N: int, K: int, pairs: int, rep_ms: int) -> Row:
    """addmm with a bias row (nn.Linear's bias): tilepipe reads N values in the epilogue, cuBLASLt fuses it too."""
    a, b = _operands(M, N, K, "kmajor")
    bias = torch.randn(N, device="cuda", dtype=torch.bfloat16)
    ours = torch.full((M, N), float("nan"), device="cuda", dtype=torch.bfloat16)
    theirs = torch.empty_like(ours)
    tilepipe.addmm(bias, a, b, out=ours)
    torch.addmm(bias, a, b, out=theirs)
    result = compare(lambda: tilepipe.addmm(bias, a, b, out=ours), lambda: torch.addmm(bias, a, b, out=theirs),
                     2.0 * M * N * K, pairs, rep_ms)
    return Row(f"{M}x{N}x{K}", "addmm (bias row)", "cuBLAS (torch.addmm)", *result[:3], _rel_err(ours, theirs),
               result[3])


HOST_SHAPE = 256


def host_overhead(calls: int = 2000, repeats: int = 15) -> dict:
    """Host time per call at 256^3 (bf16, B K-major) of tilepipe.matmul and torch.matmul, allocating and with out=.

    Each repeat times `calls` back-to-back calls of each function in turn (perf_counter, no sync inside: the
    GPU work, a few us per call, finishes faster than the host enqueues it); the figures are medians of repeats.
    """
    a, b = _operands(HOST_SHAPE, HOST_SHAPE, HOST_SHAPE, "kmajor")
    out = torch.empty(HOST_SHAPE, HOST_SHAPE, device="cuda", dtype=torch.bfloat16)
    variants = {"tilepipe": lambda: tilepipe.matmul(a, b), "torch": lambda: torch.matmul(a, b),
                "tilepipe_out": lambda: tilepipe.matmul(a, b, out=out), "torch_out": lambda: torch.matmul(a, b, out=out)}
    times: dict[str, list[float]] = {name: [] for name in variants}
    for _ in range(repeats):
        for name, fn in variants.items():
            fn()
            torch.cuda.synchronize()
            start = time.perf_counter()
            for _ in range(calls):
                fn()
            times[name].append((time.perf_counter() - start) / calls * 1e6)
            torch.cuda.synchronize()
    us = {name: round(statistics.median(ts), 2) for name, ts in times.items()}
    return {"shape": f"{HOST_SHAPE}^3 bf16, B K-major", "calls": calls, "repeats": repeats, "method":
            " ".join(host_overhead.__doc__.split("\n\n")[1].split()), "us_per_call": us,
            "over_torch_us": round(us["tilepipe"] - us["torch"], 2),
            "over_torch_out_us": round(us["tilepipe_out"] - us["torch_out"], 2)}


def bench_schedulers(M: int, N: int, K: int, pairs: int, rep_ms: int) -> list[Row]:
    """Each scheduler, and matmul's own choice ("default"), against cuBLAS on the same inputs; then dynamic and
    stream-K against static. Static and dynamic run the tile choose_config picks for whole-tile waves, stream-K the
    largest tile."""
    from tilepipe.host.configs import choose_config, config_for, default_configs, schedule_for, tile_count
    from tilepipe.host.gpus import device_model

    gpu = device_model(torch.cuda.current_device())
    a, b = _operands(M, N, K, "kmajor")
    theirs = torch.empty((M, N), device="cuda", dtype=torch.bfloat16)
    torch.matmul(a, b, out=theirs)
    whole, split = choose_config(M, N, torch.bfloat16, gpu.sms), default_configs(torch.bfloat16)[0]
    chosen = config_for(M, N, K, torch.bfloat16, torch.bfloat16, True, torch.cuda.current_device())
    default = schedule_for(M, N, K, chosen, gpu)
    variants = {"static": (whole, "static"), "dynamic": (whole, "dynamic"), "streamk": (split, "streamk"),
                f"default ({default})": (None, None)}
    runs, rows, flops = {}, [], 2.0 * M * N * K
    for name, (cfg, scheduler) in variants.items():
        ours = torch.full((M, N), float("nan"), device="cuda", dtype=torch.bfloat16)
        runs[name] = lambda out=ours, c=cfg, s=scheduler: tilepipe.matmul(a, b, out=out, config=c, scheduler=s)
        runs[name]()
        err = _rel_err(ours, theirs)
        tile = cfg or chosen
        result = compare(runs[name], lambda: torch.matmul(a, b, out=theirs), flops, pairs, rep_ms)
        rows.append(Row(f"{M}x{N}x{K}", f"{name} ({tile_count(M, N, tile)} tiles of "
                        f"{tile.block_m}x{tile.block_n})", "cuBLAS (torch.matmul)", *result[:3], err, result[3]))
    for name in ("dynamic", "streamk"):
        result = compare(runs[name], runs["static"], flops, pairs, rep_ms)
        rows.append(Row(f"{M}x{N}x{K}", name, "tilepipe static", *result[:3], rows[0].rel_err, result[3]))
    return rows


def run(name: str, pairs: int = 5, rep_ms: int = 100, out_dir: Path = RESULTS_DIR) -> Path:
    """Benchmark every shape (B K-major, plus B row-major, the residual and the bias row at 8192^3) and the host
    overhead at 256^3, print a table, and write bench/results/NAME.json and its plot NAME.png."""
    start = time.time()
    host = host_overhead()
    rows = [bench_matmul(M, N, K, "kmajor", pairs, rep_ms) for M, N, K in SHAPES]
    rows.append(bench_matmul(8192, 8192, 8192, "rowmajor", pairs, rep_ms))
    rows += bench_residual(8192, 8192, 8192, pairs, rep_ms)
    rows.append(bench_bias(8192, 8192, 8192, pairs, rep_ms))
    path = _write(name, rows, start, pairs, rep_ms, out_dir, {"host_overhead": host})
    us = host["us_per_call"]
    print(f"host time per call at {host['shape']}: tilepipe {us['tilepipe']} us, torch.matmul {us['torch']} us "
          f"(+{host['over_torch_us']} us); with out=: {us['tilepipe_out']} vs {us['torch_out']} us "
          f"(+{host['over_torch_out_us']} us)")
    return path


def run_schedulers(name: str, pairs: int = 5, rep_ms: int = 100, out_dir: Path = RESULTS_DIR) -> Path:
    """Benchmark the tile schedulers on SCHEDULER_SHAPES and write bench/results/NAME.json."""
    start = time.time()
    rows = [row for M, N, K in SCHEDULER_SHAPES for row in bench_schedulers(M, N, K, pairs, rep_ms)]
    return _write(name, rows, start, pairs, rep_ms, out_dir)


def _write(name: str, rows: list[Row], start: float, pairs: int, rep_ms: int, out_dir: Path,
           extra: dict | None = None) -> Path:
    """Print the table, write the rows with the run's environment to OUT_DIR/NAME.json, and plot it."""
    out = run_record(name, "bf16 in, bf16 out (C bf16)", __doc__, pairs, rep_ms, start, rows, **(extra or {}))
    path = write_results(out, rows, out_dir)
    print(f"\n{out['gpu']}, torch {out['torch']}, triton {out['triton']}: wrote {path} and {plot(path).name}")
    return path


def write_results(record: dict, rows: list[Row], out_dir: Path) -> Path:
    """Write a run's record (run_record) to OUT_DIR/<its name>.json and print its rows as a table; returns the file."""
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / f"{record['name']}.json"
    path.write_text(json.dumps(record, indent=1) + "\n")
    print_table(rows)
    return path


def run_record(name: str, dtype: str, method: str, pairs: int, rep_ms: int, start: float, rows: list[Row],
               environment: dict | None = None, **extra) -> dict:
    """A results file's content: the rows, with the command that ran, the GPU, the versions (`environment`, taken
    once by the caller, or run_environment(name) now) and the method."""
    return {**(environment or run_environment(name)), "dtype": dtype, "method": method.strip(), "pairs": pairs,
            "rep_ms": rep_ms, "seconds": round(time.time() - start, 1), "rows": [asdict(row) for row in rows], **extra}


def run_environment(name: str) -> dict:
    """What every results file records first: its name, the command that ran, the GPU and the versions."""
    import triton

    return {"name": name, "command": " ".join([Path(sys.executable).name, *sys.orig_argv[1:]]),
            "gpu": torch.cuda.get_device_name(), "torch": torch.__version__, "triton": triton.__version__,
            "cuda": torch.version.cuda}


def plot(results: Path) -> Path:
    """Draw a results JSON as a bar chart of TFLOP/s by shape, tilepipe against its baseline; returns the PNG."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    record = json.loads(results.read_text())
    rows = [row for row in record["rows"] if "tilepipe" not in row["baseline"]]
    labels = [f"{row['shape']}\n{row['variant'].replace('matmul ', '')}" for row in rows]
    x = range(len(rows))
    fig, ax = plt.subplots(figsize=(max(6.0, 1.1 * len(rows)), 4.5))
    ax.bar([i - 0.2 for i in x], [row["tilepipe_tflops"] for row in rows], 0.4, label="tilepipe")
    ax.bar([i + 0.2 for i in x], [row["baseline_tflops"] for row in rows], 0.4, label="cuBLAS (torch)")
    ax.set_xticks(list(x), labels, fontsize=7, rotation=30, ha="right")
    ax.set_ylabel("TFLOP/s")
    ax.set_title(f"{record['name']}: {record['gpu']}, {record['dtype']}", fontsize=9)
    ax.legend(loc="lower left")
    fig.tight_layout()
    path = results.with_suffix(".png")
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


FAMILY_SHAPES = [(1024, 1024, 1024), (4096, 4096, 4096), (7919, 4133, 3000)]


def family(rep_ms: int = 50) -> list[tuple[str, ...]]:
    """Each public op on FAMILY_SHAPES against its torch counterpart: a table of error and speed."""
    from triton.testing import do_bench

    torch.manual_seed(0)
    rows = [("op", "shape", "dtype", "rel err", "tilepipe ms", "torch ms", "speedup")]
    for M, N, K in FAMILY_SHAPES:
        a, b = _operands(M, N, K, "kmajor")
        bias = torch.randn(N, device="cuda", dtype=torch.bfloat16)
        a16, b16 = a.half(), b.contiguous().half()
        cases = [("matmul", "bf16, B K-major", lambda: tilepipe.matmul(a, b), lambda: torch.matmul(a, b)),
                 ("matmul", "fp16, B row-major", lambda: tilepipe.matmul(a16, b16), lambda: a16 @ b16),
                 ("matmul", "bf16 -> fp32 (torch: mm, cast)", lambda: tilepipe.matmul(a, b, out_dtype=torch.float32),
                  lambda: torch.matmul(a, b).float()),
                 ("addmm", "bf16, bias row", lambda: tilepipe.addmm(bias, a, b), lambda: torch.addmm(bias, a, b))]
        for op, dtype, ours, theirs in cases:
            err = _rel_err(ours(), theirs())
            t_ours = do_bench(ours, warmup=10, rep=rep_ms, return_mode="median")
            t_theirs = do_bench(theirs, warmup=10, rep=rep_ms, return_mode="median")
            rows.append((op, f"{M}x{N}x{K}", dtype, f"{err:.1e}", f"{t_ours:.3f}", f"{t_theirs:.3f}",
                         f"{t_theirs / t_ours:.2f}x"))
    return rows


def print_table(rows: list[Row]) -> None:
    table = [("shape", "tilepipe", "vs", "tilepipe TFLOP/s", "baseline TFLOP/s", "ratio", "rel err")]
    table += [(r.shape, r.variant, r.baseline, f"{r.tilepipe_tflops:.0f}", f"{r.baseline_tflops:.0f}",
               f"{r.ratio:.3f}", f"{r.rel_err:.1e}") for r in rows]
    print(format_table(table))


if __name__ == "__main__":
    table = family()
    print(format_table(table))
    worst = max(float(row[3]) for row in table[1:])
    print(json.dumps({"case": "family", "ok": worst < 2e-2, "worst_rel_err": worst}))
    sys.exit(0 if worst < 2e-2 else 1)
