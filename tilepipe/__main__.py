"""`python -m tilepipe [demo|bench|report|check]`: run the kernels against torch on a GPU, benchmark them against
cuBLAS, report what each compiles to (no GPU needed), or run the pipeline protocol checker."""

import argparse
import sys
from dataclasses import replace
from pathlib import Path

from tilepipe._text import format_table
from tilepipe.examples import pipeline_demo
from tilepipe.host.configs import (LARGE_16BIT, LARGE_FP32, LARGE_SUBTILED_FP32, MEDIUM_FP32_SOURCE,
                                   SM100_BLOCK_SCALED_CONFIGS, SM100_CONFIGS, SM100_FP8_CONFIGS, SM100_PAIR_CONFIGS,
                                   SMALL, fp8_configs, sm100_block_scaled_fitted, sm100_blockwise_config, sm100_fitted,
                                   small_m_configs, swap_config, variant_config)
from tilepipe.kernels.catalogue import shipped_variants
from tilepipe.kernels.matmul import matmul_plan, matmul_spec
from tilepipe.kernels.sm100_matmul import sm100_matmul_spec, sm100_plan
from tilepipe.probes.debug import run_all_guarded
from tilepipe.verify.compile import CompileError, compile_kernels

DEMO_TIMEOUT_S = 120


def report() -> int:
    """Compile every shipped kernel for its target (wgmma kernels for sm_90a, tcgen05 kernels for sm_100a, the stress
    kernel for both) and print what they hold. Compiled only: nothing here runs a kernel."""
    import torch

    from tilepipe.kernels.matmul_fp8 import scaled_spec
    from tilepipe.kernels.matmul_fp8_blockwise import blockwise_spec
    from tilepipe.kernels.restage import restage_spec
    from tilepipe.kernels.sm100_block_scaled import FORMATS, block_scaled_spec
    from tilepipe.kernels.sm100_blockwise import sm100_blockwise_plan

    specs = [pipeline_demo.stress_spec(style, 4, 2, target) for target in ("sm_90a", "sm_100a")
             for style in pipeline_demo.STYLES]
    specs += [pipeline_demo.wgmma_spec(4)]
    # the sm_90a GEMM (wgmma): every epilogue under every scheduler of the catalogue and the cluster GEMMs, at the
    # largest tile that takes it, plus the other tiles
    specs += [matmul_spec(variant_config(v.options, torch.bfloat16,
                                         MEDIUM_FP32_SOURCE if "source_dtype" in v.options else LARGE_16BIT),
                          b_kmajor=True, **v.options) for v in shipped_variants() if v.kernel == "matmul_kernel"]
    specs += [matmul_spec(cfg, "bf16", d_dtype, True) for cfg, d_dtype in ((LARGE_FP32, "fp32"), (SMALL, "bf16"),
                                                                          (LARGE_SUBTILED_FP32, "fp32"))]
    specs += [matmul_spec(small_m_configs(torch.bfloat16)[0], "bf16", "bf16", True, schedule="streamk")]  # split-K
    # the sm_100a GEMM (tcgen05, TMEM accumulators): each epilogue under each scheduler at the large tile (its stages
    # fitted as matmul would launch it), then the medium tile
    specs += [sm100_matmul_spec(sm100_fitted(SM100_CONFIGS[0], v.options["dtype"], v.options["c_dtype"],
                                             v.options.get("has_c", False), v.options.get("source_dtype"),
                                             v.options["schedule"] == "clc"), b_kmajor=True, **v.options)
              for v in shipped_variants() if v.kernel == "sm100_matmul_kernel"]
    specs += [sm100_matmul_spec(SM100_CONFIGS[1], "fp16", "fp32", False)]
    specs += [sm100_matmul_spec(sm100_fitted(SM100_PAIR_CONFIGS[0], v.options["dtype"], v.options["c_dtype"]),
                                b_kmajor=True, **v.options)
              for v in shipped_variants() if v.kernel == "sm100_matmul_kernel 2-CTA"]  # its two-CTA form
    specs += [scaled_spec(sm100_fitted(cfg, "fp8e4nv", "bf16"), "fp8e4nv", "fp8e4nv", "bf16", True, target="sm_100a")
              for cfg in SM100_FP8_CONFIGS]  # the sm_100a FP8 GEMM (tcgen05 f8f6f4)
    specs += [blockwise_spec(sm100_blockwise_config(torch.bfloat16), "fp8e4nv", "fp8e4nv", "bf16", target="sm_100a")
              for v in shipped_variants() if v.kernel == "sm100_blockwise_matmul_kernel"]  # promoted per K tile
    specs += [block_scaled_spec(sm100_block_scaled_fitted(cfg, v.options["fmt"], FORMATS[v.options["fmt"]].dtype,
                                                          "bf16"), v.options["fmt"], FORMATS[v.options["fmt"]].dtype,
                                FORMATS[v.options["fmt"]].dtype, "bf16")
              for v in shipped_variants() if v.kernel == "sm100_block_scaled_kernel"
              for cfg in SM100_BLOCK_SCALED_CONFIGS]  # MXFP8, MXFP4, NVFP4 (tcgen05_mma_scaled)
    specs += [scaled_spec(fp8_configs(False, torch.bfloat16)[0], "fp8e4nv", "fp8e4nv", "bf16", True),
              scaled_spec(fp8_configs(False, torch.bfloat16)[1], "fp8e4nv", "fp8e4nv", "bf16", False, "streamk"),
              blockwise_spec(fp8_configs(True, torch.bfloat16)[0], "fp8e4nv", "fp8e4nv", "bf16"),
              blockwise_spec(fp8_configs(True, torch.bfloat16)[1], "fp8e4nv", "fp8e4nv", "bf16", "streamk"),
              restage_spec()]
    specs += [scaled_spec(replace(fp8_configs(False, torch.bfloat16)[0], cluster_m=m, cluster_n=n), "fp8e4nv",
                          "fp8e4nv", "bf16", False) for m, n in (v.options["cluster"] for v in shipped_variants()
                                                                 if v.kernel == "matmul_fp8 scaled cluster")]
    specs += [blockwise_spec(replace(fp8_configs(True, torch.bfloat16)[0], cluster_m=m, cluster_n=n), "fp8e4nv",
                             "fp8e4nv", "bf16") for m, n in (v.options["cluster"] for v in shipped_variants()
                                                             if v.kernel == "matmul_fp8 blockwise cluster")]
    specs += [scaled_spec(swap_config(32, torch.bfloat16, kernel="scaled"), "fp8e4nv", "fp8e4nv", "bf16", True,
                          v.options["schedule"]) for v in shipped_variants() if v.kernel == "matmul_fp8 scaled swap-AB"]
    rows = [("kernel", "target", "smem B", "TMEM cols", "regs", "spills B", "mbarriers", "mma", "tma", "tmem ld")]
    failed = 0
    for spec, rep in zip(specs, compile_kernels(specs)):
        name = f"{spec.fn.split(':')[1]} {_describe(spec)}"
        if isinstance(rep, CompileError):
            failed += 1
            rows.append((name, spec.target, "FAILED", "", "", "", "", "", "", str(rep).splitlines()[0][:60]))
            continue
        mma = rep.count("wgmma.mma_async") + rep.count("tcgen05.mma")
        rows.append((name, spec.target, str(rep.shared), str(rep.tmem), str(rep.registers),
                     str(rep.spill_stores + rep.spill_loads), str(rep.count("mbarrier.init")), str(mma),
                     str(rep.count("cp.async.bulk.tensor")), str(rep.count("tcgen05.ld"))))
    print(format_table(rows))
    print("\nshared-memory plan of wgmma_kernel (4 stages, fp16 128x64 A and 64x64 B tiles):\n")
    print(pipeline_demo.wgmma_plan.fn(4, [128, 64], [64, 64], "fp16"))
    cfg = LARGE_16BIT
    print(f"\nshared-memory plan of matmul_kernel ({cfg.block_m}x{cfg.block_n}x{cfg.block_k}, {cfg.stages} stages, "
          "bf16, B K-major, with C):\n")
    print(matmul_plan.fn(cfg.block_m, cfg.block_n, cfg.block_k, cfg.stages, cfg.c_stages, "bf16", "bf16", True, True))
    cfg = SM100_CONFIGS[0]
    print(f"\nshared and tensor memory plan of sm100_matmul_kernel ({cfg.block_m}x{cfg.block_n}x{cfg.block_k}, "
          f"{cfg.stages} stages, bf16, B K-major; compiled for sm_100a, never run):\n")
    print(sm100_plan.fn(cfg.block_m, cfg.block_n, cfg.block_k, cfg.stages, cfg.c_stages, "bf16", "bf16", True))
    cfg, fmt = sm100_block_scaled_fitted(SM100_BLOCK_SCALED_CONFIGS[0], "nvfp4", "uint8", "bf16"), FORMATS["nvfp4"]
    print(f"\nshared and tensor memory plan of sm100_block_scaled_kernel (NVFP4, {cfg.block_m}x{cfg.block_n}x"
          f"{cfg.block_k * fmt.per_element}, {cfg.stages} stages; compiled for sm_100a, never run):\n")
    print(sm100_plan.fn(cfg.block_m, cfg.block_n, cfg.block_k, cfg.stages, cfg.c_stages, "uint8", "bf16", True,
                        scales=fmt.scales(cfg.block_k)))
    cfg = sm100_blockwise_config(torch.bfloat16)
    print(f"\nshared and tensor memory plan of sm100_blockwise_matmul_kernel ({cfg.block_m}x{cfg.block_n}x"
          f"{cfg.block_k}, {cfg.stages} stages, e4m3, bf16 D; compiled for sm_100a, never run):\n")
    print(sm100_blockwise_plan.fn(cfg.block_m, cfg.block_n, cfg.stages, "fp8e4nv", "fp8e4nv", "bf16"))
    return 1 if failed else 0


def _describe(spec) -> str:
    """Short text for a kernel's specialization: its constexprs and, for TMA kernels, the tile boxes."""
    boxes = [sig.split("<")[1].split("]")[0].replace("[", ":").replace(", ", "x") for sig in spec.signature.values()
             if sig.startswith("tensordesc")]  # dtype:block, e.g. u8:128x128
    shown = {k: v for k, v in spec.constexprs.items() if v is not None and not (k == "PROBE" and v == 0)}
    return " ".join([*(f"{k}={v}" for k, v in shown.items()), *(f"box={b}" for b in boxes[:1])])


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
                             "report: compile every kernel and print its resources (no GPU needed); "
                             "check: the pipeline protocol checker")
    parser.add_argument("--name", help="bench: the results file name (default: matmul-bf16; with --shapes, shapes; with "
                             "--clusters, clusters; with --grouped, grouped-h200)")
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
                        help="bench: issue 39's grouped GEMM (tilepipe.grouped_mm) on MoE shapes against "
                             "torch._grouped_mm and the dense GEMM over the same rows (tilepipe.tools.bench_grouped)")
    args = parser.parse_args(argv)
    if args.command == "check":
        return check()
    if args.command == "report":
        return report()
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
                         "grouped-h200" if args.grouped else "matmul-bf16")
    if args.command == "bench" and args.shapes:
        from tilepipe.tools import bench_shapes

        bench_shapes.run(name, pairs=args.pairs)
        return 0
    if args.command == "bench" and args.grouped:
        from tilepipe.tools import bench_grouped

        bench_grouped.run(name, pairs=args.pairs)
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
