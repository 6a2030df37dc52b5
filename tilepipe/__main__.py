"""`python -m tilepipe [demo|report]`: on a GPU, run the kernels against references; without one, a compile report."""

import argparse
import sys

from tilepipe._text import format_table
from tilepipe.compile import CompileError, compile_kernels
from tilepipe.debug import run_all_guarded
from tilepipe.kernels import pipeline_demo
from tilepipe.kernels.matmul import matmul_spec
from tilepipe.ops import LARGE_16BIT, LARGE_FP32, SMALL

DEMO_TIMEOUT_S = 120


def report() -> int:
    """Compile every shipped kernel for sm_90a and sm_100a (wgmma kernels: sm_90a only) and print what they hold."""
    specs = [pipeline_demo.stress_spec(style, 4, 2, target) for target in ("sm_90a", "sm_100a")
             for style in pipeline_demo.STYLES]
    specs += [pipeline_demo.wgmma_spec(4)]
    # the GEMM uses wgmma, which exists on sm_90a only (its sm_100a form, with tcgen05, is later work)
    specs += [matmul_spec(cfg, "bf16", "fp32" if cfg is LARGE_FP32 else "bf16", True)
              for cfg in (LARGE_16BIT, LARGE_FP32, SMALL)]
    rows = [("kernel", "target", "smem B", "regs", "spills B", "mbarriers", "mma", "tma")]
    failed = 0
    for spec, rep in zip(specs, compile_kernels(specs)):
        name = f"{spec.fn.split(':')[1]} {_describe(spec)}"
        if isinstance(rep, CompileError):
            failed += 1
            rows.append((name, spec.target, "FAILED", "", "", "", "", str(rep).splitlines()[0][:60]))
            continue
        mma = rep.count("wgmma.mma_async") + rep.count("tcgen05.mma")
        rows.append((name, spec.target, str(rep.shared), str(rep.registers), str(rep.spill_stores + rep.spill_loads),
                     str(rep.count("mbarrier.init")), str(mma), str(rep.count("cp.async.bulk.tensor"))))
    print(format_table(rows))
    print("\nshared-memory plan of wgmma_kernel (4 stages, fp16 128x64 A and 64x64 B tiles):\n")
    print(pipeline_demo.wgmma_plan.fn(4, [128, 64], [64, 64], "fp16"))
    return 1 if failed else 0


def _describe(spec) -> str:
    """Short text for a kernel's specialization: its constexprs and, for TMA kernels, the tile boxes."""
    boxes = [sig.split("[")[1].split("]")[0].replace(", ", "x") for sig in spec.signature.values()
             if sig.startswith("tensordesc")]
    return " ".join([*(f"{k}={v}" for k, v in spec.constexprs.items()), *(f"box={b}" for b in boxes[:1])])


def demo() -> int:
    """Run the pipeline self-checks on the GPU, each in its own process under a timeout."""
    cases = [("stress", style, "4", "2", "8192") for style in pipeline_demo.STYLES] + [("wgmma", "4", "8", "1024")]
    runs = run_all_guarded([["-m", "tilepipe.kernels.pipeline_demo", *case] for case in cases], DEMO_TIMEOUT_S)
    rows = [("case", "status", "seconds", "detail")]
    for run in runs:
        detail = run.result or {"output": run.output.strip().splitlines()[-1:] if run.output.strip() else ""}
        rows.append((" ".join(run.args[2:]), run.status, f"{run.seconds:.1f}",
                     ", ".join(f"{k}={v}" for k, v in detail.items() if k not in ("case", "ok"))))
    print(format_table(rows))
    return 0 if all(run.status == "ok" and run.result and run.result["ok"] for run in runs) else 1


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tilepipe", description=__doc__)
    parser.add_argument("command", nargs="?", choices=("demo", "report", "bench"), default="demo",
                        help="demo (default): run on the GPU, or report when there is none; report: compile only; "
                             "bench: tilepipe.matmul against cuBLAS, written to bench/results/NAME.json")
    parser.add_argument("--name", default="matmul-bf16", help="bench: the results file name")
    parser.add_argument("--pairs", type=int, default=5, help="bench: interleaved timing pairs per shape")
    parser.add_argument("--schedulers", action="store_true",
                        help="bench: the static against the dynamic tile scheduler (tilepipe/scheduler.py)")
    args = parser.parse_args(argv)
    if args.command == "bench":
        from tilepipe import bench

        (bench.run_schedulers if args.schedulers else bench.run)(args.name, pairs=args.pairs)
        return 0
    if args.command == "demo":
        import torch

        if torch.cuda.is_available():
            return demo()
        print("no CUDA GPU here: compile report for sm_90a and sm_100a instead of the GPU demo\n")
    return report()


if __name__ == "__main__":
    sys.exit(main())
