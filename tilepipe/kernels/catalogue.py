"""The shipped kernel variants, as data: what `python -m tilepipe report` compiles, what the protocol checker must
cover, and what the CPU tests sweep. Adding a variant here makes it show up in all three (and a test fails until
the checker covers it or says why not). Configurations (tile shapes, stages) are the host's: host/configs.py."""

from typing import NamedTuple

from tilepipe.schedulers import CLUSTER_SCHEDULES, KERNEL_SCHEDULE, SCHEDULERS, SM100_SCHEDULERS


class Variant(NamedTuple):
    """One shipped variant of a kernel: its kernel, its name, and the spec-builder arguments that make it."""
    kernel: str
    name: str
    options: dict


MATMUL_EPILOGUES = {
    "matmul": dict(dtype="fp16", c_dtype="fp16"),
    "matmul +C": dict(dtype="fp16", c_dtype="fp16", has_c=True),  # C in the output stage it is stored from
    "matmul +C fp32": dict(dtype="bf16", c_dtype="bf16", has_c=True, source_dtype="fp32"),  # C in its own stages
    "matmul +bias": dict(dtype="fp16", c_dtype="fp16", bias_dtype="fp16")}
"""matmul_kernel's epilogues, as matmul_spec arguments (the B layout does not change the protocol)."""
MATMUL_CLUSTERS = {
    "matmul cluster 1x2": dict(dtype="bf16", c_dtype="bf16", cluster=(1, 2)),  # A multicast
    "matmul cluster 2x1": dict(dtype="bf16", c_dtype="bf16", cluster=(2, 1)),  # B multicast
    "matmul +C cluster 2x1": dict(dtype="bf16", c_dtype="bf16", has_c=True, cluster=(2, 1)),
}
"""matmul_kernel in two-CTA clusters, as matmul_spec arguments, under CLUSTER_KERNEL_SCHEDULES."""
CLUSTER_KERNEL_SCHEDULES = tuple(dict.fromkeys(KERNEL_SCHEDULE.get(s, s) for s in CLUSTER_SCHEDULES))
"""The kernel schedules of CLUSTER_SCHEDULES: static, dynamic and stream-K (split-K runs the stream-K kernel)."""
MATMUL_SPLIT = {
    "matmul split 1x2": dict(dtype="bf16", c_dtype="bf16", cluster=(1, 2), split_multicast=True),
    "matmul +C split 2x1": dict(dtype="bf16", c_dtype="bf16", has_c=True, cluster=(2, 1), split_multicast=True),
}
"""matmul_kernel in two-CTA clusters whose CTAs each issue their half of the shared tile (pipeline/multicast.py), as
matmul_spec arguments, under SPLIT_SCHEDULES (few variants: the split changes only the input ring)."""
SPLIT_SCHEDULES = {"matmul split 1x2": CLUSTER_KERNEL_SCHEDULES, "matmul +C split 2x1": ("static", )}
FP8_SPLIT = (("matmul_fp8 scaled", (2, 1)), ("matmul_fp8 blockwise", (1, 2)))
"""The FP8 kernels' split multicast: per-tensor/per-row in a 2x1 cluster (B shared), blockwise 1x2 (A, its scales)."""
MATMUL_SWAP = {
    "matmul swap-AB": dict(dtype="bf16", c_dtype="bf16", swap_ab=True),
    "matmul +C swap-AB": dict(dtype="bf16", c_dtype="bf16", has_c=True, swap_ab=True),  # C tiles of D, transposed
}
"""matmul_kernel computing D^T = B^T A^T (small M, B K-major: host/configs.py swap_config), as matmul_spec arguments."""
MATMUL_PIECED = {
    "matmul pieced": dict(dtype="bf16", c_dtype="bf16", tile=(192, 128)),
    "matmul +bias pieced subtiled": dict(dtype="bf16", c_dtype="bf16", bias_dtype="bf16", tile=(128, 192),
                                         epilogue_n=32),  # D in sub-tiles: host/configs.py PIECED_SUBTILED_16BIT
    "matmul +C pieced subtiled": dict(dtype="bf16", c_dtype="bf16", has_c=True, tile=(128, 192), epilogue_n=32),
    "matmul +C pieced": dict(dtype="bf16", c_dtype="bf16", has_c=True, tile=(192, 128)),  # C in the stage's pieces
    "matmul pieced 128x160": dict(dtype="bf16", c_dtype="bf16", tile=(128, 160)),  # a 32-wide piece: 64-byte swizzle
    "matmul +C pieced 128x96": dict(dtype="bf16", c_dtype="bf16", has_c=True, tile=(128, 96)),
    "matmul +C pieced 64x96": dict(dtype="bf16", c_dtype="bf16", has_c=True, tile=(64, 96)),  # one warpgroup
    "matmul pieced 64x192": dict(dtype="bf16", c_dtype="bf16", tile=(64, 192)),  # one warpgroup
}
"""matmul_kernel with a tile side held as power-of-two pieces (pipeline/pieces.py: 192 = 128 + 64, 160 = 128 + 32,
96 = 64 + 32; host/configs.py PIECED_16BIT, whose 64-row ones run on one warpgroup; with epilogue_n, D in sub-tiles:
PIECED_SUBTILED_16BIT), as matmul_spec arguments, under PIECED_SCHEDULES."""
MATMUL_SUBTILED = {
    "matmul subtiled": dict(dtype="bf16", c_dtype="bf16", epilogue_n=64),
    "matmul +C subtiled": dict(dtype="bf16", c_dtype="bf16", has_c=True, epilogue_n=64),  # C in the sub-tile stages
    "matmul +bias subtiled": dict(dtype="bf16", c_dtype="bf16", bias_dtype="bf16", epilogue_n=64),
}
"""matmul_kernel writing D in sub-tiles of epilogue_n columns (host/configs.py LARGE_SUBTILED_16BIT), as matmul_spec
arguments, under every scheduler."""
EPILOGUES = "tilepipe.kernels.epilogue_functions"
"""The module of the shipped epilogue functions (a variant's `epilogue` is "module:name": spec constexprs are JSON)."""
MATMUL_ACTIVATIONS = {
    f"matmul {bias}{name}": dict(dtype="bf16", c_dtype="bf16", epilogue=f"{EPILOGUES}:{name}", epilogue_n=64,
                                 **({"bias_dtype": "bf16"} if bias else {}))
    for bias, name in (("", "relu"), ("+bias ", "gelu"), ("+bias ", "gelu_tanh"), ("+bias ", "silu"))}
"""matmul_kernel with an activation epilogue (tilepipe.linear) under ACTIVATION_SCHEDULES, D in sub-tiles as linear
writes the 128x256 tile (its whole stage spills GELU's erf: host/choose.py activation_config)."""
ACTIVATION_SCHEDULES = ("static", "streamk")
"""The schedules the activation variants are compiled and checked under (stream-K: its finisher's epilogue)."""
MATMUL_GATED = {
    "matmul swiglu": dict(dtype="bf16", c_dtype="bf16", epilogue=f"{EPILOGUES}:swiglu", epilogue_n=64),
    "matmul geglu": dict(dtype="bf16", c_dtype="bf16", epilogue=f"{EPILOGUES}:geglu", epilogue_n=64),
    "matmul swiglu swap-AB": dict(dtype="bf16", c_dtype="bf16", epilogue=f"{EPILOGUES}:swiglu", swap_ab=True,
                                  tile=(128, 32), epilogue_n=64),
}
"""matmul_kernel with a gated epilogue (tilepipe.gated_linear: act(gate) * up of 128-column gate-up pairs into 64
columns of D, in sub-tiles; at M <= 32 swap-AB's 128-row tile), as matmul_spec arguments, under GATED_SCHEDULES."""
GATED_SCHEDULES = ("static", "dynamic")  # gated_linear runs static; stream-K's partials are not built for it
QUANTIZERS = "tilepipe.kernels.quantize_epilogues"
"""The module of the FP8-output epilogue functions."""
MATMUL_QUANTIZING = {
    "matmul fp8 1x128": dict(dtype="bf16", c_dtype="fp8e4nv", bias_dtype="fp32",
                             epilogue=f"{QUANTIZERS}:quantize_1x128", epilogue_n=128),
    "matmul fp8 per-tensor": dict(dtype="bf16", c_dtype="fp8e4nv", bias_dtype="fp32",
                                  epilogue=f"{QUANTIZERS}:quantize_tensor", epilogue_n=128),
}
"""matmul_kernel writing e4m3 through a quantizing epilogue (tilepipe.linear_fp8: 1x128 scales written through the
bias pointer, or a per-tensor scale read there), D in 128-column sub-tiles (host/choose.py fp8_output_config), as
matmul_spec arguments; static only (stream-K's partial sums travel in D's dtype)."""
MATMUL_PINGPONG = {
    "matmul pingpong": dict(dtype="bf16", c_dtype="bf16", pingpong=True),
    "matmul +bias pingpong": dict(dtype="bf16", c_dtype="bf16", bias_dtype="bf16", pingpong=True),
    "matmul +bias gelu pingpong": dict(dtype="bf16", c_dtype="bf16", bias_dtype="bf16", pingpong=True,
                                       epilogue=f"{EPILOGUES}:gelu"),
    "matmul swiglu pingpong": dict(dtype="bf16", c_dtype="bf16", pingpong=True, epilogue=f"{EPILOGUES}:swiglu"),
}
"""matmul_pingpong_kernel (two MMA warpgroups taking turns, host/configs.py PINGPONG_16BIT; static, no C), as
matmul_spec arguments (a gated epilogue only with D in sub-tiles, as PINGPONG_16BIT writes it)."""
GROUPED = {
    "grouped_mm": dict(dtype="bf16", c_dtype="bf16"), "grouped_mm fp32": dict(dtype="bf16", c_dtype="fp32"),
    "grouped_mm +bias gelu": dict(dtype="bf16", c_dtype="bf16", bias=True, epilogue=f"{EPILOGUES}:gelu"),
    "grouped_mm swiglu": dict(dtype="bf16", c_dtype="bf16", epilogue=f"{EPILOGUES}:swiglu"),  # grouped_gated_mm
    "grouped_mm_masked": dict(dtype="bf16", c_dtype="bf16", schedule="masked"),
    "grouped_mm 3D": dict(dtype="bf16", c_dtype="bf16", schedule="batched"),
    "grouped_mm swap-AB": dict(dtype="bf16", c_dtype="bf16", rows_per_group=16),
    "grouped_mm 64-row +bias gelu": dict(dtype="bf16", c_dtype="bf16", rows_per_group=16, bias=True,
                                         epilogue=f"{EPILOGUES}:gelu")}
"""grouped_matmul_kernel (kernels/grouped_matmul.py) in its two D forms, with an epilogue (bias and GELU; SwiGLU over
packed gate-up experts), over each layout of the groups' rows (contiguous also dynamic), its tiles of few rows."""
GROUPED_WGRAD = {"grouped_mm wgrad": dict(dtype="bf16", c_dtype="bf16", a_kmajor=False, b_kmajor=False)}  # 2D x 2D
GROUPED_FP8 = {f"grouped_mm_fp8 {k}": dict(blockwise=k != "per-row", c_dtype="bf16") for k in ("per-row", "blockwise")}
DYNAMIC_GROUPED = ("grouped_mm", "grouped_mm_fp8 per-row", "grouped_mm_fp8 blockwise")  # also under "dynamic"
PIECED_SCHEDULES = ("static", "dynamic")  # a pieced tile's: stream-K's partial tiles are not built in pieces
SM100_EPILOGUES = {
    "sm100 matmul": dict(dtype="bf16", c_dtype="bf16"),
    "sm100 matmul +C": dict(dtype="bf16", c_dtype="bf16", has_c=True),  # C sub-tiles in source stages
    "sm100 matmul +C fp32": dict(dtype="bf16", c_dtype="bf16", has_c=True, source_dtype="fp32"),
    "sm100 matmul +bias": dict(dtype="bf16", c_dtype="bf16", bias_dtype="bf16"),
}
"""sm100_matmul_kernel's epilogues, as sm100_matmul_spec arguments (compiled for sm_100a only: never run here)."""
SM100_PAIR = {"sm100 matmul 2-CTA": dict(dtype="bf16", c_dtype="bf16")}
"""sm100_matmul_kernel's two-CTA form (a 2x1 cluster, cta_group::2 MMAs, static schedule; host/configs.py
SM100_PAIR_CONFIGS), as sm100_matmul_spec arguments (compiled for sm_100a only: never run here). Its epilogues are
the plain one and the bias (no pipeline of its own); with C both CTAs' eight roles take the checker past its state
budget (over 10^6 states for one tile of one k-step), so the host refuses C with a pair."""
SM100_FP8 = {"sm100 matmul_fp8 scaled": dict(per_row=True)}
"""sm100_scaled_matmul_kernel (per-tensor and per-row scales share it: only a scale stride differs; compiled for
sm_100a only: never run here)."""
SM100_BLOCKWISE = {"sm100 matmul_fp8 blockwise": {}}
"""sm100_blockwise_matmul_kernel (kernels/sm100_blockwise.py: DeepSeek-V3 blockwise scales, promoted per 128-wide K
tile; static schedule; compiled for sm_100a only: never run here)."""
SM100_BLOCK_SCALED = {"sm100 block_scaled mxfp8": dict(fmt="mxfp8"), "sm100 block_scaled mxfp4": dict(fmt="mxfp4"),
                      "sm100 block_scaled nvfp4": dict(fmt="nvfp4")}
"""sm100_block_scaled_kernel in each format (compiled for sm_100a only: never run here)."""
TENSOR_PARALLEL = ("ag_matmul_kernel", "rs_matmul_kernel")
"""tilepipe.distributed's kernels, one form each (distributed/plan.py catalogue_spec: bf16 128x256, 2 ranks)."""
FP8_KERNELS = ("matmul_fp8 scaled", "matmul_fp8 blockwise")
"""The FP8 kernels: per-tensor and per-row scaling share one (only a scale stride differs)."""
STRESS_STAGES = (1, 2, 4, 8)
WGMMA_STAGES = (2, 4, 8)


def shipped_variants() -> list[Variant]:
    """Every variant the library ships: matmul's epilogues under each scheduler (split-K runs stream-K's), its
    clusters, swap-AB, pieced tiles, sub-tiles, ping-pong, activation, gated and quantizing epilogues (each under the
    schedulers it runs: the lists above), the sm_100a GEMMs (epilogues, two-CTA form, FP8, block-scaled), the FP8
    kernels (stream-K, clusters, split), the grouped GEMMs (bf16 and FP8 also dynamic, fp32 D), the tensor-parallel
    kernels, the restaging copies and the demos."""
    variants = [Variant("matmul_kernel", f"{name} {schedule}", {**options, "schedule": schedule})
                for schedule in SCHEDULERS for name, options in MATMUL_EPILOGUES.items()]
    variants += [Variant("matmul_kernel", f"{name} {schedule}", {**options, "schedule": schedule})
                 for schedule in CLUSTER_KERNEL_SCHEDULES for name, options in MATMUL_CLUSTERS.items()]
    variants += [Variant("matmul_kernel", f"{name} {schedule}", {**options, "schedule": schedule})
                 for name, options in MATMUL_SPLIT.items() for schedule in SPLIT_SCHEDULES[name]]
    variants += [Variant("matmul_kernel", f"{name} {schedule}", {**options, "schedule": schedule})
                 for schedule in SCHEDULERS for name, options in MATMUL_SWAP.items()]
    variants += [Variant("matmul_kernel", f"{name} {schedule}", {**options, "schedule": schedule})
                 for schedule in PIECED_SCHEDULES for name, options in MATMUL_PIECED.items()]
    variants += [Variant("matmul_kernel", f"{name} {schedule}", {**options, "schedule": schedule})
                 for schedule in SCHEDULERS for name, options in MATMUL_SUBTILED.items()]
    variants += [Variant("matmul_kernel", f"{name} static", {**options, "schedule": "static"})
                 for name, options in MATMUL_PINGPONG.items()]
    variants += [Variant("matmul_kernel", f"{name} {schedule}", {**options, "schedule": schedule})
                 for schedule in ACTIVATION_SCHEDULES for name, options in MATMUL_ACTIVATIONS.items()]
    variants += [Variant("matmul_kernel", f"{name} {schedule}", {**options, "schedule": schedule})
                 for schedule in GATED_SCHEDULES for name, options in MATMUL_GATED.items()]
    variants += [Variant("matmul_kernel", f"{name} static", {**options, "schedule": "static"})
                 for name, options in MATMUL_QUANTIZING.items()]
    variants += [Variant("sm100_matmul_kernel", f"{name} {schedule}", {**options, "schedule": schedule})
                 for schedule in SM100_SCHEDULERS for name, options in SM100_EPILOGUES.items()]
    variants += [Variant("sm100_matmul_kernel 2-CTA", f"{name} static", options)
                 for name, options in SM100_PAIR.items()]
    variants += [Variant("sm100_scaled_matmul_kernel", name, options) for name, options in SM100_FP8.items()]
    variants += [Variant("sm100_blockwise_matmul_kernel", name, options) for name, options in SM100_BLOCKWISE.items()]
    variants += [Variant("sm100_block_scaled_kernel", name, options) for name, options in SM100_BLOCK_SCALED.items()]
    variants += [Variant(kernel, kernel, {}) for kernel in FP8_KERNELS]
    variants += [Variant(kernel, f"{kernel} streamk", {"schedule": "streamk"}) for kernel in FP8_KERNELS]  # +split-K
    variants += [Variant(f"{kernel} cluster", f"{kernel} cluster {m}x{n}", {"cluster": (m, n)})
                 for kernel in FP8_KERNELS for m, n in ((2, 1), (1, 2))]
    variants += [Variant(f"{kernel} cluster", f"{kernel} split {m}x{n}", {"cluster": (m, n), "split_multicast": True})
                 for kernel, (m, n) in FP8_SPLIT]
    variants += [Variant("matmul_fp8 scaled swap-AB", f"matmul_fp8 scaled swap-AB {schedule}", {"schedule": schedule})
                 for schedule in ("static", "streamk")]
    variants += [Variant(kernel, f"{name} {schedule}", {**options, "schedule": schedule})
                 for kernel, forms in (("grouped_matmul_kernel", GROUPED), ("grouped_wgrad_kernel", GROUPED_WGRAD),
                                       ("grouped_mm_fp8", GROUPED_FP8)) for name, options in forms.items()
                 for schedule in (options.get("schedule", "static"), "dynamic")[:1 + (name in DYNAMIC_GROUPED)]]
    variants += [Variant(kernel, f"tp {kernel}", {}) for kernel in TENSOR_PARALLEL]
    variants += [Variant("restage_rows_kernel", "restage", {}), Variant("shift_scale_rows_kernel", "shift scales", {})]
    variants += [Variant("pipeline_demo stress", f"stress stages={stages} consumers={consumers}",
                         dict(stages=stages, consumers=consumers))
                 for stages in STRESS_STAGES for consumers in (1, 2)]
    return variants + [Variant("pipeline_demo wgmma", f"wgmma stages={stages}", dict(stages=stages))
                       for stages in WGMMA_STAGES]
