"""`python -m tilepipe [demo|bench|report|check]`: run the kernels against torch on a GPU, benchmark them against
cuBLAS, report what each compiles to (no GPU needed), or run the pipeline protocol checker."""

import argparse
import sys
from dataclasses import replace
from pathlib import Path

from tilepipe._text import format_table
from tilepipe.examples import pipeline_demo
from tilepipe.probes.debug import run_all_guarded
from tilepipe.verify.report import report

DEMO_TIMEOUT_S = 120


def demo() -> int:
    """On the GPU, each in its own process under a timeout: the pipeline self-checks, then the public ops on
    default shapes against torch (tilepipe.tools.bench's family table)."""
    cases = [("stress", style, "4", "2", "8192") for style in pipeline_demo.STYLES] + [("wgmma", "4", "8", "1024")]
    commands = [["-m", "tilepipe.examples.pipeline_demo", *case] for case in cases] + [["-m", "tilepipe.tools.bench"]]
    runs = run_all_guarded(commands, DEMO_TIMEOUT_S)
    rows = [("case", "status", "seconds", "detail")]
    for run in runs[:-1]:
        detail = run.result or {"output": run.output.strip().splitlines()[-1:] if run.output.strip() else ""}
        rows.append((" ".join(run.args[2:]), run.status, f"{run.seconds:.1f}",
                     ", ".join(f"{k}={v}" for k, v in detail.items() if k not in ("case", "ok"))))
    print("pipeline self-checks\n")
    print(format_table(rows))
    family = runs[-1]
    print(f"\npublic ops against torch ({family.status}, {family.seconds:.1f} s)\n")
    print("\n".join(line for line in family.output.splitlines() if not line.startswith("{")))
    return 0 if all(run.status == "ok" and run.result and run.result["ok"] for run in runs) else 1


def check() -> int:
    """Run the protocol checker over the shipped kernels (tilepipe.verify.checker); non-zero when any finding."""
    from tilepipe.verify.checker import format_results
    from tilepipe.verify.protocols import check_shipped_kernels

    results = check_shipped_kernels()
    print(format_results(results))
    return 0 if all(result.ok for result in results) else 1


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tilepipe", description=__doc__)
    parser.add_argument("command", nargs="?", choices=("demo", "bench", "report", "check"), default="demo",
                        help="demo (default): the kernels against torch on the GPU, or report when there is none; "
                             "bench: tilepipe.matmul against cuBLAS, written to bench/results/NAME.json and .png; "
                             "report: compile the kernels the ops launch for a few common calls and print their "
                             "resources (no GPU needed; --all: every shipped kernel); "
                             "check: the pipeline protocol checker")
    parser.add_argument("--all", action="store_true", help="report: every shipped kernel and the storage plans")
    parser.add_argument("--name", help="bench: the results file name (default: matmul-bf16; with --shapes, shapes; "
                             "with --clusters, clusters; with --grouped, grouped-h200; with --epilogues, "
                             "epilogues-h200)")
    parser.add_argument("--pairs", type=int, default=5, help="bench: interleaved timing pairs per shape")
    parser.add_argument("--plot", type=Path, metavar="JSON", help="bench: only redraw the plot of a results file")
    parser.add_argument("--family", choices=("all", "bf16", "fp8"), default="all",
                        help="bench: the bf16/fp16 GEMMs (NAME.json), the FP8 GEMMs (NAME-fp8.json), or both")
    parser.add_argument("--schedulers", action="store_true",
                        help="bench: the static against the dynamic tile scheduler (tilepipe/schedulers/)")
    parser.add_argument("--clusters", action="store_true",
                        help="bench: issue 18's table: bf16, residual and FP8 GEMMs in 1x2 and 2x1 clusters "
                             "(TMA multicast) against the unclustered tile and torch")
    parser.add_argument("--shapes", action="store_true",
                        help="bench: every shape a model runs (tilepipe.tools.bench_shapes: decode, prefill, ragged, "
                             "FP8) against torch, with each row's predicted time, in one JSON")
    parser.add_argument("--grouped", action="store_true",
                        help="bench: issue 39's grouped GEMMs on MoE shapes against torch._grouped_mm and the dense "
                             "GEMM over the same rows (tilepipe.tools.bench_grouped: NAME), the masked decode form "
                             "(NAME with grouped-masked), the weight gradient (grouped-wgrad), FP8 (grouped-fp8) and "
                             "the dynamic schedule beside held SMs (grouped-busy, grouped-fp8-busy)")
    parser.add_argument("--epilogues", action="store_true",
                        help="bench: issue 40's fused epilogues (gated_linear, linear + bias + GELU, linear_fp8, a MoE "
                             "expert MLP) against torch eager and torch.compile (tilepipe.tools.bench_epilogues)")
    args = parser.parse_args(argv)
    if args.command == "check":
        return check()
    if args.command == "report":
        return report(args.all)
    from tilepipe.tools import bench

    if args.command == "bench" and args.plot:
        print(f"wrote {bench.plot(args.plot)}")
        return 0
    import torch

    if not torch.cuda.is_available():
        if args.command == "bench":
            print("bench needs a CUDA GPU (none here); `--plot JSON` redraws a results file", file=sys.stderr)
            return 2
        print("no CUDA GPU here: compile report for sm_90a and sm_100a instead of the GPU demo\n")
        return report()
    name = args.name or ("shapes" if args.shapes else "clusters" if args.clusters else
                         "grouped-h200" if args.grouped else "epilogues-h200" if args.epilogues else "matmul-bf16")
    if args.command == "bench" and args.shapes:
        from tilepipe.tools import bench_shapes

        bench_shapes.run(name, pairs=args.pairs)
        return 0
    if args.command == "bench" and args.grouped:  # NAME, then NAME with -masked, -wgrad, -fp8, -busy after "grouped"
        from tilepipe.tools import bench_grouped, bench_grouped_fp8, bench_grouped_wgrad

        form = lambda tag: name.replace("grouped", f"grouped-{tag}", 1)  # noqa: E731
        bench_grouped.run(name, pairs=args.pairs)
        bench_grouped.run(form("masked"), "masked", pairs=args.pairs)
        bench_grouped_wgrad.run(form("wgrad"), pairs=args.pairs)
        bench_grouped_fp8.run(form("fp8"), pairs=args.pairs)
        bench_grouped.run(form("busy"), "busy", pairs=args.pairs)
        bench_grouped_fp8.run(form("fp8-busy"), "busy", pairs=args.pairs)
        return 0
    if args.command == "bench" and args.epilogues:
        from tilepipe.tools import bench_epilogues

        bench_epilogues.run(name, pairs=args.pairs)
        return 0
    if args.command == "bench" and args.schedulers:
        bench.run_schedulers(name, pairs=args.pairs)
        return 0
    if args.command == "bench" and args.clusters:
        from tilepipe.tools import bench_clusters

        bench_clusters.run(name, pairs=args.pairs)
        return 0
    if args.command == "bench":
        if args.family in ("all", "bf16"):
            bench.run(name, pairs=args.pairs)
        if args.family in ("all", "fp8"):
            from tilepipe.tools import bench_fp8

            bench_fp8.run(f"{name}-fp8", pairs=args.pairs)
        return 0
    return demo()


if __name__ == "__main__":
    sys.exit(main())
