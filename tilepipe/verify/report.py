"""The compile report (`python -m tilepipe report`): what the kernels compile to, without a GPU. By default the
kernels a user's first calls run (what matmul, addmm and matmul_fp8 choose on an H100/H200 for a few common shapes,
and the sm_100a family); with `--all` every shipped variant. Compiled only: nothing here runs a kernel."""

import sys
from collections.abc import Callable
from dataclasses import replace
from typing import NamedTuple

import torch

from tilepipe._text import format_table
from tilepipe.distributed.plan import catalogue_spec
from tilepipe.host.configs import (LARGE_16BIT, LARGE_FP32, LARGE_SUBTILED_FP32, MEDIUM_FP32_SOURCE,
                                   SM100_BLOCK_SCALED_CONFIGS, SM100_CONFIGS, SM100_FP8_CONFIGS, SM100_PAIR_CONFIGS,
                                   SMALL, MatmulConfig, fp8_config_for, fp8_configs, fp8_schedule_for,
                                   modelled_config, schedule_for, sm100_block_scaled_config,
                                   sm100_block_scaled_fitted, sm100_blockwise_config, sm100_config, sm100_fitted,
                                   sm100_fp8_config, small_m_configs, swap_config, variant_config)
from tilepipe.host.gpus import H100, GpuModel
from tilepipe.kernels.catalogue import TENSOR_PARALLEL, shipped_variants
from tilepipe.kernels.matmul import matmul_plan, matmul_spec
from tilepipe.kernels.spec import KernelSpec
from tilepipe.verify.compile import CompileError, KernelReport, compile_kernels

FIRST_CALLS = ((16, 4096, 4096), (512, 4096, 4096), (4096, 4096, 4096))
"""M x N x K of the default report's bf16 calls: a decode step, a mid-size batch and a prefill."""


class Row(NamedTuple):
    """One kernel of the report: what it is for (a call or a catalogue variant), its configuration, its spec."""

    label: str
    config: str
    spec: KernelSpec


def describe(cfg: MatmulConfig, schedule: str = "") -> str:
    """A configuration in a few characters: tile x BK, stages, the schedule (where the label does not say it), the
    cluster, swap-AB, ping-pong (pp) and D's sub-tile columns (D/n)."""
    extras = [schedule, f"{cfg.cluster_m}x{cfg.cluster_n}" if cfg.cluster.num_ctas > 1 else "",
              "swap" if cfg.swap_ab else "", "pp" if cfg.pingpong else "", f"D/{cfg.epilogue_n}" if cfg.epilogue_n else ""]
    return " ".join([f"{cfg.tile_m}x{cfg.tile_n}x{cfg.block_k}", f"s{cfg.stages}", *filter(None, extras)])


def shape(M: int, N: int, K: int) -> str:
    """A problem's size as the table prints it: M x N x K, or n³ for a cube."""
    return f"{M}³" if M == N == K else f"{M}x{N}x{K}"


def first_call_rows(gpu: GpuModel = H100) -> list[Row]:
    """The kernels matmul, addmm and matmul_fp8 launch for FIRST_CALLS on GPU model `gpu` (B K-major, bf16), chosen
    by the same functions the ops call, and the sm_100a family at 4096^3 on as many SMs (compiled, never run)."""
    from tilepipe.kernels.matmul_fp8 import scaled_spec
    from tilepipe.kernels.matmul_fp8_blockwise import blockwise_spec
    from tilepipe.kernels.sm100_block_scaled import FORMATS, block_scaled_spec
    from tilepipe.kernels.sm100_matmul import sm100_matmul_spec

    bf16 = torch.bfloat16
    rows = []
    calls = [("matmul", size, {}) for size in FIRST_CALLS]
    calls += [("addmm", FIRST_CALLS[-1], {"bias_dtype": "bf16"}), ("matmul +C", FIRST_CALLS[-1], {"has_c": True})]
    for label, (M, N, K), epilogue in calls:
        cfg = modelled_config(M, N, K, bf16, bf16, True, gpu, has_c=epilogue.get("has_c", False))
        schedule = schedule_for(M, N, K, cfg, gpu)
        rows.append(Row(f"{label} {shape(M, N, K)}", describe(cfg, schedule),
                        matmul_spec(cfg, "bf16", "bf16", True, schedule=schedule, **epilogue)))
    for scaling, (M, N, K) in (("per-tensor", (4096, 4096, 4096)), ("blockwise", (4096, 2048, 7168))):
        blockwise = scaling == "blockwise"
        cfg = fp8_config_for(M, N, K, blockwise, bf16, gpu)
        schedule = fp8_schedule_for(M, N, K, cfg, blockwise, gpu)
        spec = (blockwise_spec(cfg, "fp8e4nv", "fp8e4nv", "bf16", schedule) if blockwise else
                scaled_spec(cfg, "fp8e4nv", "fp8e4nv", "bf16", False, schedule))
        rows.append(Row(f"fp8 {scaling} {shape(M, N, K)}", describe(cfg, schedule), spec))
    M = N = K = 4096
    cfg = sm100_config(M, N, bf16, bf16, gpu.sms)
    rows.append(Row(f"sm100 matmul {shape(M, N, K)}", describe(cfg, "static"),
                    sm100_matmul_spec(cfg, "bf16", "bf16", True)))
    cfg = sm100_fp8_config(M, N, bf16, gpu.sms)
    rows.append(Row(f"sm100 fp8 per-row {shape(M, N, K)}", describe(cfg, "static"),
                    scaled_spec(cfg, "fp8e4nv", "fp8e4nv", "bf16", True, target="sm_100a")))
    cfg = sm100_blockwise_config(bf16)
    rows.append(Row(f"sm100 fp8 blockwise {shape(M, N, K)}", describe(cfg, "static"),
                    blockwise_spec(cfg, "fp8e4nv", "fp8e4nv", "bf16", target="sm_100a")))
    fmt = FORMATS["nvfp4"]
    cfg = sm100_block_scaled_config(M, N, "nvfp4", fmt.dtype, bf16, gpu.sms)
    rows.append(Row(f"sm100 nvfp4 {shape(M, N, K)}", describe(cfg, "static"),
                    block_scaled_spec(cfg, "nvfp4", fmt.dtype, fmt.dtype, "bf16")))
    return rows


def catalogue_rows() -> list[Row]:
    """Every shipped variant (kernels/catalogue.py) for its target, at the largest tile that takes it, plus the
    other sm_90a tiles, the sm_100a medium tile, and the pipeline demo's kernels for both targets."""
    from tilepipe.api.grouped import variant_spec
    from tilepipe.api.grouped_fp8 import fp8_variant_spec
    from tilepipe.api.grouped_wgrad import wgrad_variant_spec
    from tilepipe.examples import pipeline_demo
    from tilepipe.kernels.matmul_fp8 import scaled_spec
    from tilepipe.kernels.matmul_fp8_blockwise import blockwise_spec
    from tilepipe.kernels.restage import restage_spec, shift_scale_rows_spec
    from tilepipe.kernels.sm100_block_scaled import FORMATS, block_scaled_spec
    from tilepipe.kernels.sm100_matmul import sm100_matmul_spec

    bf16 = torch.bfloat16
    scaled, blockwise = fp8_configs(False, bf16), fp8_configs(True, bf16)
    rows = [Row(f"stress {style}", "stages=4 consumers=2", pipeline_demo.stress_spec(style, 4, 2, target))
            for target in ("sm_90a", "sm_100a") for style in pipeline_demo.STYLES]
    rows.append(Row("wgmma demo", "stages=4", pipeline_demo.wgmma_spec(4)))
    for v in shipped_variants():
        o = v.options
        if v.kernel == "matmul_kernel":
            cfg = variant_config(o, bf16, MEDIUM_FP32_SOURCE if "source_dtype" in o else LARGE_16BIT)
            rows.append(Row(v.name, describe(cfg), matmul_spec(cfg, b_kmajor=True, **o)))
        elif v.kernel == "sm100_matmul_kernel":
            cfg = sm100_fitted(SM100_CONFIGS[0], o["dtype"], o["c_dtype"], o.get("has_c", False),
                               o.get("source_dtype"), o["schedule"] == "clc")
            rows.append(Row(v.name, describe(cfg), sm100_matmul_spec(cfg, b_kmajor=True, **o)))
        elif v.kernel == "sm100_matmul_kernel 2-CTA":
            cfg = sm100_fitted(SM100_PAIR_CONFIGS[0], o["dtype"], o["c_dtype"])
            rows.append(Row(v.name, describe(cfg), sm100_matmul_spec(cfg, b_kmajor=True, **o)))
        elif v.kernel == "sm100_blockwise_matmul_kernel":
            cfg = sm100_blockwise_config(bf16)
            rows.append(Row(v.name, describe(cfg), blockwise_spec(cfg, "fp8e4nv", "fp8e4nv", "bf16",
                                                                  target="sm_100a")))
        elif v.kernel == "sm100_block_scaled_kernel":
            fmt = FORMATS[o["fmt"]]
            for cfg in SM100_BLOCK_SCALED_CONFIGS:
                cfg = sm100_block_scaled_fitted(cfg, o["fmt"], fmt.dtype, "bf16")
                rows.append(Row(v.name, describe(cfg), block_scaled_spec(cfg, o["fmt"], fmt.dtype, fmt.dtype,
                                                                         "bf16")))
        elif v.kernel == "sm100_scaled_matmul_kernel":
            rows += [Row(v.name, describe(sm100_fitted(cfg, "fp8e4nv", "bf16")),
                         scaled_spec(sm100_fitted(cfg, "fp8e4nv", "bf16"), "fp8e4nv", "fp8e4nv", "bf16", True,
                                     target="sm_100a")) for cfg in SM100_FP8_CONFIGS]
        elif v.kernel in ("matmul_fp8 scaled", "matmul_fp8 blockwise"):
            schedule = o.get("schedule", "static")
            tiles = scaled if v.kernel.endswith("scaled") else blockwise
            cfg = tiles[0] if schedule == "static" else tiles[1]
            spec = (scaled_spec(cfg, "fp8e4nv", "fp8e4nv", "bf16", schedule == "static", schedule)
                    if tiles is scaled else blockwise_spec(cfg, "fp8e4nv", "fp8e4nv", "bf16", schedule))
            rows.append(Row(v.name, describe(cfg), spec))
        elif v.kernel in ("matmul_fp8 scaled cluster", "matmul_fp8 blockwise cluster"):
            m, n = o["cluster"]
            cfg = replace((scaled if "scaled" in v.kernel else blockwise)[0], cluster_m=m, cluster_n=n,
                          split_multicast=o.get("split_multicast", False))
            spec = (scaled_spec(cfg, "fp8e4nv", "fp8e4nv", "bf16", False) if "scaled" in v.kernel else
                    blockwise_spec(cfg, "fp8e4nv", "fp8e4nv", "bf16"))
            rows.append(Row(v.name, describe(cfg), spec))
        elif v.kernel == "matmul_fp8 scaled swap-AB":
            cfg = swap_config(32, bf16, kernel="scaled")
            rows.append(Row(v.name, describe(cfg),
                            scaled_spec(cfg, "fp8e4nv", "fp8e4nv", "bf16", True, o["schedule"])))
        elif v.kernel == "grouped_matmul_kernel":  # tilepipe.grouped_mm's tile, B K-major
            cfg, spec = variant_spec(o)
            rows.append(Row(v.name, describe(cfg), spec))
        elif v.kernel == "grouped_wgrad_kernel":  # tilepipe.grouped_mm's 2D x 2D form
            cfg, spec = wgrad_variant_spec(o)
            rows.append(Row(v.name, describe(cfg), spec))
        elif v.kernel == "grouped_mm_fp8":  # tilepipe.grouped_mm_fp8, per-row or blockwise
            cfg, spec = fp8_variant_spec(o)
            rows.append(Row(v.name, describe(cfg), spec))
        elif v.kernel == "restage_rows_kernel":
            rows.append(Row(v.name, "", restage_spec()))
        elif v.kernel == "shift_scale_rows_kernel":
            rows.append(Row(v.name, "", shift_scale_rows_spec()))
        elif v.kernel in TENSOR_PARALLEL:
            cfg, spec = catalogue_spec(v.kernel)
            rows.append(Row(v.name, describe(cfg), spec))
    other_tiles = ((LARGE_FP32, "fp32", "static"), (SMALL, "bf16", "static"), (LARGE_SUBTILED_FP32, "fp32", "static"),
                   (small_m_configs(bf16)[0], "bf16", "streamk"))  # the last: small M's tile under split-K
    rows += [Row(f"matmul {d_dtype} D {schedule}", describe(cfg), matmul_spec(cfg, "bf16", d_dtype, True,
                                                                             schedule=schedule))
             for cfg, d_dtype, schedule in other_tiles]
    rows.append(Row("sm100 matmul fp16 -> fp32 static", describe(SM100_CONFIGS[1]),
                    sm100_matmul_spec(SM100_CONFIGS[1], "fp16", "fp32", False)))
    return rows


def table(rows: list[Row], reports: list[KernelReport | CompileError]) -> tuple[str, int]:
    """The report's table (under 120 columns) and how many kernels failed to compile. Columns: shared memory (KB),
    TMEM columns, registers a thread, spilled bytes, mbarrier.init, MMA instructions (wgmma or tcgen05.mma), TMA
    copies (cp.async.bulk.tensor) and TMEM loads (tcgen05.ld), each counted in the PTX."""
    lines = [("kernel", "config", "target", "smemKB", "TMEM", "regs", "spill", "mbar", "mma", "tma", "tm.ld")]
    failed = 0
    for row, rep in zip(rows, reports):
        if isinstance(rep, CompileError):
            failed += 1
            lines.append((row.label, row.config, row.spec.target, "FAILED", str(rep).splitlines()[0][:50], *[""] * 6))
            continue
        mma = rep.count("wgmma.mma_async") + rep.count("tcgen05.mma")
        lines.append((row.label, row.config, rep.target, f"{rep.shared / 1024:.1f}", str(rep.tmem),
                      str(rep.registers), str(rep.spill_stores + rep.spill_loads), str(rep.count("mbarrier.init")),
                      str(mma), str(rep.count("cp.async.bulk.tensor")), str(rep.count("tcgen05.ld"))))
    return format_table(lines), failed


def progress_bar(out=sys.stderr) -> Callable[[int, int], None]:
    """A compile_kernels progress callback: a bar redrawn in place on a terminal, a line every tenth otherwise."""
    shown = [-1]

    def show(done: int, total: int) -> None:
        if out.isatty():
            filled = 30 * done // total
            out.write(f"\rcompiling [{'#' * filled}{'.' * (30 - filled)}] {done}/{total}")
            out.write("\n" if done == total else "")
        elif 10 * done // total > shown[0]:
            shown[0] = 10 * done // total
            out.write(f"compiled {done}/{total} kernels\n")
        out.flush()

    return show


def report(everything: bool = False) -> int:
    """Compile the report's kernels side by side with a progress bar and print the table (with `everything`, the
    whole catalogue and the shared-memory plans); non-zero when any kernel fails to compile."""
    rows = catalogue_rows() if everything else first_call_rows()
    text, failed = table(rows, compile_kernels([row.spec for row in rows], progress=progress_bar()))
    print(text)
    if everything:
        print(plans())
    else:
        print(f"\nThe kernels tilepipe's ops launch for these calls on a {H100.sms}-SM Hopper GPU (H100, H200), "
              "and the sm_100a family\n(compiled for sm_100a, never run). `python -m tilepipe report --all`: every "
              "shipped kernel and the storage plans.")
    return 1 if failed else 0


def plans() -> str:
    """The shared (and tensor) memory plans of the demo's wgmma kernel and of the sm_90a and sm_100a GEMMs."""
    from tilepipe.examples import pipeline_demo
    from tilepipe.kernels.sm100_block_scaled import FORMATS
    from tilepipe.kernels.sm100_blockwise import sm100_blockwise_plan
    from tilepipe.kernels.sm100_matmul import sm100_plan

    parts = ["shared-memory plan of wgmma_kernel (4 stages, fp16 128x64 A and 64x64 B tiles):",
             str(pipeline_demo.wgmma_plan.fn(4, [128, 64], [64, 64], "fp16"))]
    cfg = LARGE_16BIT
    parts += [f"shared-memory plan of matmul_kernel ({cfg.block_m}x{cfg.block_n}x{cfg.block_k}, {cfg.stages} stages, "
              "bf16, B K-major, with C):",
              str(matmul_plan.fn(cfg.block_m, cfg.block_n, cfg.block_k, cfg.stages, cfg.c_stages, "bf16", "bf16", True,
                                 True))]
    cfg = SM100_CONFIGS[0]
    parts += [f"shared and tensor memory plan of sm100_matmul_kernel ({cfg.block_m}x{cfg.block_n}x{cfg.block_k}, "
              f"{cfg.stages} stages, bf16, B K-major; compiled for sm_100a, never run):",
              str(sm100_plan.fn(cfg.block_m, cfg.block_n, cfg.block_k, cfg.stages, cfg.c_stages, "bf16", "bf16",
                                True))]
    cfg, fmt = sm100_block_scaled_fitted(SM100_BLOCK_SCALED_CONFIGS[0], "nvfp4", "uint8", "bf16"), FORMATS["nvfp4"]
    parts += [f"shared and tensor memory plan of sm100_block_scaled_kernel (NVFP4, {cfg.block_m}x{cfg.block_n}x"
              f"{cfg.block_k * fmt.per_element}, {cfg.stages} stages; compiled for sm_100a, never run):",
              str(sm100_plan.fn(cfg.block_m, cfg.block_n, cfg.block_k, cfg.stages, cfg.c_stages, "uint8", "bf16",
                                True, scales=fmt.scales(cfg.block_k)))]
    cfg = sm100_blockwise_config(torch.bfloat16)
    parts += [f"shared and tensor memory plan of sm100_blockwise_matmul_kernel ({cfg.block_m}x{cfg.block_n}x"
              f"{cfg.block_k}, {cfg.stages} stages, e4m3, bf16 D; compiled for sm_100a, never run):",
              str(sm100_blockwise_plan.fn(cfg.block_m, cfg.block_n, cfg.stages, "fp8e4nv", "fp8e4nv", "bf16"))]
    return "".join(f"\n{title}\n\n{plan}\n" for title, plan in zip(parts[::2], parts[1::2]))
