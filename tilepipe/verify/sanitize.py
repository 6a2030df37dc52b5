"""compute-sanitizer (memcheck, racecheck, synccheck) over small shapes of every shipped kernel variant; fails on
any report the checked-in allow-list (scripts/sanitize-allow.json) does not explain.

`python -m tilepipe.verify.sanitize [--json PATH]` (gpu_check.sh's sanitize part) first runs the driver once
without the sanitizer, so every kernel is compiled and cached, then each tool over the driver and over
scripts/sanitize_repro.py (tilepipe-free kernels with the same hand-offs), the runs side by side. The driver
launches each variant of kernels/catalogue.py: shipped_variants once on a small ragged problem, with the host told
the GPU has SANITIZE_SMS SMs so every persistent program runs several tiles, and checks its result. Reports are
grouped by (tool, what, kernels, source lines); a group passes when an allow-list entry names its tool, kernels
and exact source lines, with the reason. Groups from the reproduction kernels are listed, never failed: a hazard
racecheck reports there too is the tool not modelling that hand-off (docs/verification.md).
"""

import argparse
import json
import os
import re
import shutil
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from functools import cache
from pathlib import Path
from typing import Any, Callable

from tilepipe.kernels.catalogue import TENSOR_PARALLEL, Variant, shipped_variants
from tilepipe.probes.debug import REPO_ROOT, GuardedRun, run_all_guarded, run_guarded

TOOLS = ("memcheck", "racecheck", "synccheck")
SANITIZER_OPTIONS = ("--print-limit", "1000000", "--show-backtrace", "no")  # every report, without host stacks
ALLOW_LIST = REPO_ROOT / "scripts" / "sanitize-allow.json"
REPRO = "scripts/sanitize_repro.py"
MARK = "tilepipe-sanitize:"  # the driver's (and the repro's) lines that say which variant runs
SANITIZE_SMS = 2
SHAPE, FP8_SHAPE = (320, 264, 328), (320, 264, 352)
"""Ragged problems: 3 x 2 tiles of 128 x 256 (3 per program on SANITIZE_SMS SMs), 6 k-steps of 64 (the last
partial); the FP8 K spans 3 scale blocks of 128, the last partial."""
BUDGET_S, WARM_TIMEOUT_S = 480, 150
"""The whole check's time (the sanitizer runs get what the warm-up left), and the warm-up's, within one device call."""


def find_sanitizer() -> str:
    """$COMPUTE_SANITIZER, else compute-sanitizer on PATH, else CUDA's default install; FileNotFoundError naming
    where it looked otherwise."""
    candidates = [os.environ.get("COMPUTE_SANITIZER"), shutil.which("compute-sanitizer"),
                  "/usr/local/cuda/bin/compute-sanitizer"]
    for path in candidates:
        if path and os.access(path, os.X_OK):
            return path
    raise FileNotFoundError("compute-sanitizer not found: set COMPUTE_SANITIZER, put it on PATH, or install CUDA's "
                            "toolkit at /usr/local/cuda (looked at $COMPUTE_SANITIZER, PATH, "
                            "/usr/local/cuda/bin/compute-sanitizer)")


# ---------------------------------------------------------------------------------------------- the driver (GPU)


def few_sms(count: int) -> None:
    """Make the host side see `count` SMs: every tilepipe module's `sm_count` (imported from host.device) answers
    `count`, so persistent grids shrink and each program runs several tiles of a small problem."""
    from tilepipe.host.device import sm_count

    for name, module in list(sys.modules.items()):
        if name.startswith("tilepipe.") and getattr(module, "sm_count", None) is sm_count:
            module.sm_count = lambda index: count


def close(got: Any, reference: Any, tolerance: float = 2e-2) -> bool:
    """A launch computed its result: finite and within `tolerance` relative Frobenius error of a CPU reference."""
    import torch

    got = got.detach().cpu().double()
    return bool(torch.isfinite(got).all()) and float((got - reference).norm()) <= tolerance * float(reference.norm())


def run_matmul(options: dict, config=None) -> bool:
    """matmul_kernel in one catalogue variant (epilogue and scheduler, a two-CTA cluster, swap-AB, a pieced tile, D in
    sub-tiles, or the ping-pong kernel) on SHAPE, B K-major, in the configuration its options name (variant_config);
    `config` (a MatmulConfig) forced where given (the sm_100a two-CTA form)."""
    import torch

    import tilepipe
    from tilepipe.host.configs import variant_config

    dtypes = {"fp16": torch.float16, "bf16": torch.bfloat16, "fp32": torch.float32}
    M, N, K = SHAPE
    dtype, out_dtype = dtypes[options["dtype"]], dtypes[options["c_dtype"]]
    a, w = torch.randn(M, K, dtype=dtype, device="cuda"), torch.randn(N, K, dtype=dtype, device="cuda")
    c, beta = None, 0.0
    if options.get("has_c"):
        c, beta = torch.randn(M, N, dtype=dtypes[options.get("source_dtype") or options["c_dtype"]], device="cuda"), 0.5
    elif options.get("bias_dtype"):  # one row broadcast: read as a bias
        c, beta = torch.randn(N, dtype=dtypes[options["bias_dtype"]], device="cuda").expand(M, N), 1.0
    reference = a.cpu().double() @ w.cpu().double().t() + (0.0 if c is None else beta * c.cpu().double())
    cluster = options.get("cluster")
    config = config if cluster is None else tilepipe.MatmulConfig(
        128, 128, 64, stages=4, cluster_m=cluster[0], cluster_n=cluster[1],
        split_multicast=options.get("split_multicast", False))
    config = variant_config(options, out_dtype, config)
    got = tilepipe.matmul(a, w.t(), out_dtype=out_dtype, c=c, beta=beta, scheduler=options.get("schedule"),
                          config=config)
    return close(got, reference)


def torch_activation(epilogue: object) -> Callable:
    """The torch function of a shipped activation or gated epilogue function (ACTIVATIONS and GATED share their names:
    a gated one's is its gate's activation)."""
    from tilepipe.api.linear import ACTIVATIONS, GATED, TORCH_ACTIVATIONS

    table = GATED if epilogue in GATED.values() else ACTIVATIONS
    return TORCH_ACTIVATIONS[next(name for name, fn in table.items() if fn is epilogue)]


def run_fused(options: dict) -> bool:
    """A fused-epilogue variant (kernels/catalogue.py: an activation over a bias, or gated over a weight of 2H = 384
    rows packed by pack_gate_up) in the configuration its options name and its schedule, on SHAPE's M and K, through
    matmul's path with the epilogue function (as tilepipe.linear and gated_linear launch it), against float64."""
    import torch

    from tilepipe.api.linear import GATED, pack_gate_up
    from tilepipe.api.matmul import _matmul
    from tilepipe.host.configs import LARGE_16BIT, variant_config
    from tilepipe.kernels.epilogue_functions import epilogue_function

    M, N, K = SHAPE
    epilogue = epilogue_function(options["epilogue"])
    gated = epilogue in GATED.values()
    act = torch_activation(epilogue)
    a = torch.randn(M, K, dtype=torch.bfloat16, device="cuda")
    w = torch.randn(384 if gated else N, K, dtype=torch.bfloat16, device="cuda")
    bias = torch.randn(N, dtype=torch.bfloat16, device="cuda") if options.get("bias_dtype") else None
    y = a.cpu().double() @ w.cpu().double().t() + (0.0 if bias is None else bias.cpu().double())
    if gated:
        gate, up = y.chunk(2, dim=1)
        reference, w = act(gate) * up, pack_gate_up(w)
    else:
        reference = act(y)
    got = _matmul(a, w.t(), None, None, None if bias is None else bias.expand(M, N), 1.0, 0.0 if bias is None else 1.0,
                  variant_config(options, torch.bfloat16, LARGE_16BIT), options.get("schedule"), None, None, epilogue)
    return close(got, reference)


def run_quantizing(options: dict) -> bool:
    """A quantizing variant (kernels/catalogue.py MATMUL_QUANTIZING) through tilepipe.linear_fp8 on SHAPE's M and K
    and 256 columns (whole 1x128 groups), in the configuration linear_fp8 chooses: D * scales against float64 within
    e4m3's rounding (2^-4 of the value, plus a subnormal step of the scale)."""
    import torch

    import tilepipe

    M, _, K = SHAPE
    x = torch.randn(M, K, dtype=torch.bfloat16, device="cuda")
    w = torch.randn(256, K, dtype=torch.bfloat16, device="cuda") / K ** 0.5
    reference = x.cpu().double() @ w.cpu().double().t()
    if options["epilogue"].endswith("quantize_1x128"):
        d, scales = tilepipe.linear_fp8(x, w)
        scale = scales.cpu().double().repeat_interleave(128, 1)
    else:
        d, _ = tilepipe.linear_fp8(x, w, scale=torch.tensor([0.01], device="cuda"))
        scale = torch.full_like(reference, 0.01)
    error = (d.cpu().double() * scale - reference).abs()
    return bool((error <= 2.0 ** -4 * reference.abs() * 1.001 + 2.0 ** -9 * scale).all())


def run_fp8(scaling: str, cluster: tuple[int, int] | None = None, schedule: str | None = None,
            swap: bool = False, split: bool = False) -> bool:
    """matmul_fp8 with per-tensor, per-row or blockwise scales on FP8_SHAPE: in a two-CTA `cluster` when given, under
    `schedule` when given (forced, whatever matmul_fp8 would choose), for per-tensor and per-row scales in swap-AB's
    tile with `swap`; `split`: the cluster's CTAs split the shared operand's multicast."""
    import torch

    import tilepipe
    from tilepipe.host.configs import SCALE_BLOCK

    M, N, K = FP8_SHAPE
    a = torch.randn(M, K, device="cuda").to(torch.float8_e4m3fn)
    w = torch.randn(N, K, device="cuda").to(torch.float8_e4m3fn)
    kb, nb = -(-K // SCALE_BLOCK), -(-N // SCALE_BLOCK)
    shapes = {"tensor": ((), ()), "row": ((M, 1), (1, N)), "blockwise": ((kb, M), (nb, kb))}[scaling]
    sa, sb = (torch.rand(shape, device="cuda") + 0.5 for shape in shapes)
    if scaling == "blockwise":  # torch's layouts: (M, kb) and (kb, nb), both transposed views
        sa, sb = sa.t(), sb.t()
        full_a = sa.cpu().double().repeat_interleave(SCALE_BLOCK, 1)[:, :K]
        full_b = sb.cpu().double().repeat_interleave(SCALE_BLOCK, 0)[:K].repeat_interleave(SCALE_BLOCK, 1)[:, :N]
    else:
        full_a, full_b = sa.cpu().double(), sb.cpu().double()
    reference = (a.cpu().double() * full_a) @ (w.cpu().double().t() * full_b)
    config = None
    if cluster is not None:
        from tilepipe.host.configs import fp8_configs

        config = replace(fp8_configs(scaling == "blockwise", torch.bfloat16)[0], cluster_m=cluster[0],
                         cluster_n=cluster[1], split_multicast=split)
    if swap:
        from tilepipe.host.configs import swap_config

        config = swap_config(32, torch.bfloat16, kernel="scaled")
    got = tilepipe.matmul_fp8(a, w.t(), sa, sb, config=config, scheduler=schedule)
    return close(got, reference)


def run_block_scaled(fmt: str) -> bool:
    """matmul_block_scaled in format `fmt` on FP8_SHAPE, random block scales."""
    import tilepipe
    from tilepipe.host.block_scales import block_scaled_operands

    a, b, sa, sb, reference = block_scaled_operands(*FP8_SHAPE, fmt)
    return close(tilepipe.matmul_block_scaled(a, b, sa, sb, format=fmt), reference.cpu())


def run_grouped(options: dict) -> bool:
    """grouped_matmul_kernel (tilepipe.grouped_mm, or grouped_gated_mm for a gated epilogue, D of N rounded down to
    64 columns) over ragged groups (an empty one, one under a tile, one past a tile; of few rows for the variant of
    the decode tile) of SHAPE's K and N, B K-major, with the variant's bias, epilogue and schedule (static or
    dynamic), against a float64 reference; the rows past the groups must stay NaN."""
    import torch

    import tilepipe
    from tilepipe.api.linear import ACTIVATIONS, GATED, TORCH_ACTIVATIONS, pack_gate_up

    dtypes = {"bf16": torch.bfloat16, "fp32": torch.float32}
    _, N, K = SHAPE
    sizes = [0, 7, 50, 1] if options.get("rows_per_group") else [0, 37, 300, 1]  # grouped_config's two tiles
    function = options.get("epilogue", "").rpartition(":")[2]
    gated = next((name for name, fn in GATED.items() if fn.__name__ == function), None)
    activation = next((name for name, fn in ACTIVATIONS.items() if fn.__name__ == function), None)
    N = N // 64 * 64 if gated else N  # D's H columns: a multiple of 64 (pack_gate_up's blocks)
    a = torch.randn(sum(sizes) + 5, K, dtype=dtypes[options["dtype"]], device="cuda")
    w = torch.randn(len(sizes), 2 * N if gated else N, K, dtype=a.dtype, device="cuda")
    bias = torch.randn(len(sizes), N, dtype=a.dtype, device="cuda") if options.get("bias") else None
    offs = torch.tensor(sizes, device="cuda").cumsum(0).to(torch.int32)
    out = torch.full((a.shape[0], N), float("nan"), dtype=dtypes[options["c_dtype"]], device="cuda")
    scheduler = options["schedule"]
    if gated:
        tilepipe.grouped_gated_mm(a, pack_gate_up(w).transpose(1, 2), offs, gated, out=out, scheduler=scheduler)
    else:
        tilepipe.grouped_mm(a, w.transpose(1, 2), offs, out=out, bias=bias, activation=activation, scheduler=scheduler)
    ends = [0] + offs.tolist()
    parts = []
    for g, (start, end) in enumerate(zip(ends, ends[1:])):
        y = a[start:end].cpu().double() @ w[g].cpu().double().t() + (0.0 if bias is None else bias[g].cpu().double())
        gate, up = y.chunk(2, dim=1) if gated else (y, None)
        act = TORCH_ACTIVATIONS[gated or activation] if gated or activation else (lambda x: x)
        parts.append(act(gate) * up if gated else act(y))
    reference, got, rows = torch.cat(parts), out.cpu().double(), ends[-1]
    return bool(torch.isnan(got[rows:]).all()) and float((got[:rows] - reference).norm() / reference.norm()) < 1e-2


def run_grouped_3d(options: dict) -> bool:
    """grouped_matmul_kernel over the masked layout (grouped_mm_masked: counts of 0, under a tile, past a tile and
    past the capacity) or the batched one (grouped_mm's 3D x 3D) of SHAPE's K and N, B K-major, against a float64
    reference; each group's rows from its count on must stay NaN."""
    import torch

    import tilepipe

    _, N, K = SHAPE
    capacity, counts = 200, [0, 37, 200, 1000]
    counts = counts if options["schedule"] == "masked" else [capacity] * len(counts)
    a = torch.randn(len(counts), capacity, K, dtype=torch.bfloat16, device="cuda")
    w = torch.randn(len(counts), N, K, dtype=a.dtype, device="cuda")
    out = torch.full((len(counts), capacity, N), float("nan"), dtype=torch.bfloat16, device="cuda")
    if options["schedule"] == "masked":
        tilepipe.grouped_mm_masked(a, w.transpose(1, 2), torch.tensor(counts, dtype=torch.int32, device="cuda"),
                                   out=out)
    else:
        tilepipe.grouped_mm(a, w.transpose(1, 2), out=out)
    got, ok = out.cpu().double(), True
    for g, count in enumerate(min(count, capacity) for count in counts):
        reference = a[g, :count].cpu().double() @ w[g].cpu().double().t()
        ok &= bool(torch.isnan(got[g, count:]).all())
        ok &= count == 0 or float((got[g, :count] - reference).norm() / reference.norm()) < 1e-2
    return ok


def run_grouped_fp8(options: dict) -> bool:
    """kernels/grouped_fp8.py (tilepipe.grouped_mm_fp8, per-row or blockwise scales) over ragged groups (an empty one,
    one under a tile, one past a tile) at N = 256, K = 384 (3 scale blocks), under the variant's schedule, against
    the dequantized operands in float64; the rows past the groups must stay NaN."""
    import torch

    import tilepipe

    sizes, N, K, blockwise = [0, 37, 200, 1], 256, 384, options["blockwise"]
    G, M = len(sizes), sum(sizes) + 5
    a = torch.randn(M, K, device="cuda").to(torch.float8_e4m3fn)
    w = torch.randn(G, N, K, device="cuda").to(torch.float8_e4m3fn)
    sa = torch.rand(M, K // 128 if blockwise else 1, device="cuda") + 0.5
    sb = torch.rand(G, N // 128, K // 128, device="cuda") + 0.5 if blockwise else torch.rand(G, N, device="cuda") + 0.5
    offs = torch.tensor(sizes, device="cuda").cumsum(0).to(torch.int32)
    out = torch.full((M, N), float("nan"), dtype=torch.bfloat16, device="cuda")
    tilepipe.grouped_mm_fp8(a, w.transpose(1, 2), sa, sb.transpose(1, 2) if blockwise else sb, offs, out=out,
                            scheduler=options["schedule"])
    full_a = (sa.repeat_interleave(128, 1) if blockwise else sa).cpu().double() * a.cpu().double()
    full_w = (sb.repeat_interleave(128, 1).repeat_interleave(128, 2) if blockwise else sb[:, :, None]).cpu().double()
    ends = [0] + offs.tolist()
    reference = torch.cat([full_a[start:end] @ (w[g].cpu().double() * full_w[g]).t()
                           for g, (start, end) in enumerate(zip(ends, ends[1:]))])
    got = out.cpu().double()
    return bool(torch.isnan(got[ends[-1]:]).all()) and close(got[:ends[-1]], reference)


def run_grouped_wgrad(options: dict) -> bool:
    """grouped_wgrad_kernel (tilepipe.grouped_mm, 2-D a and b) over ragged K groups (an empty one, one under a k-step,
    one past several, K past offs[-1] unread) of SHAPE's M and N in the variant's layouts, against float64."""
    import torch

    import tilepipe

    dtypes = {"bf16": torch.bfloat16, "fp32": torch.float32}
    M, N, _ = SHAPE
    sizes = [0, 37, 200, 1]
    K = sum(sizes) + 10  # a multiple of 8: a K-major operand's rows on 16 bytes
    a = torch.randn(M, K, dtype=dtypes[options["dtype"]], device="cuda")
    b = torch.randn(K, N, dtype=a.dtype, device="cuda")
    a = a if options["a_kmajor"] else a.t().contiguous().t()
    b = b.t().contiguous().t() if options["b_kmajor"] else b
    offs = torch.tensor(sizes, device="cuda").cumsum(0).to(torch.int32)
    out = torch.full((len(sizes), M, N), float("nan"), dtype=dtypes[options["c_dtype"]], device="cuda")
    tilepipe.grouped_mm(a, b, offs, out=out)
    ends = [0] + offs.tolist()
    reference = torch.stack([a[:, s:e].cpu().double() @ b[s:e].cpu().double() for s, e in zip(ends, ends[1:])])
    return float((out.cpu().double() - reference).norm() / reference.norm()) < 1e-2


def run_restage() -> bool:
    """The restaging copy on rows 16 bytes off 32-byte sectors."""
    import torch

    from tilepipe.host.staging import restaged

    t = torch.randn(40, 264, device="cuda", dtype=torch.bfloat16)
    return bool(torch.equal(restaged(t, t.device.index or 0).cpu(), t.cpu()))


def run_shift() -> bool:
    """The grouped blockwise GEMM's shifted scale copies of an M-major scale_a whose M is not a multiple of 4."""
    import torch

    from tilepipe.host.staging import shifted_scale_rows

    scale_a = torch.rand(7, 130, device="cuda").t()
    shifted = shifted_scale_rows(scale_a, scale_a.device.index or 0).view(4, 7, 132)
    return all(bool(torch.equal(shifted[j, :, :130 - j], scale_a[j:].t())) for j in range(4))


def launcher(variant: Variant, index: int) -> Callable[[], bool]:
    """How the driver runs a catalogue variant (ValueError for a variant it does not know: add it here)."""
    from tilepipe.examples import pipeline_demo

    options = variant.options
    if variant.kernel == "matmul_kernel" and "quantize" in options.get("epilogue", ""):
        return lambda: run_quantizing(options)
    if variant.kernel == "matmul_kernel" and "epilogue" in options:
        return lambda: run_fused(options)
    if variant.kernel == "matmul_kernel":
        return lambda: run_matmul(options)
    if variant.kernel == "sm100_matmul_kernel":  # tilepipe.matmul dispatches to it on sm_100/sm_103 only
        return lambda: run_matmul(options) if _on_sm100() else _skipped(variant, "needs an sm_100 or sm_103 GPU")
    if variant.kernel == "sm100_matmul_kernel 2-CTA":  # tilepipe.matmul with its config (a 2x1 cluster), sm_100 only
        from tilepipe.host.configs import SM100_PAIR_CONFIGS

        return lambda: run_matmul(options, SM100_PAIR_CONFIGS[0]) if _on_sm100() else _skipped(
            variant, "needs an sm_100 or sm_103 GPU")
    if variant.kernel == "sm100_scaled_matmul_kernel":  # tilepipe.matmul_fp8 dispatches to it on sm_100/sm_103 only
        return lambda: (run_fp8("tensor") and run_fp8("row")) if _on_sm100() else _skipped(
            variant, "needs an sm_100 or sm_103 GPU")
    if variant.kernel == "sm100_blockwise_matmul_kernel":  # matmul_fp8's blockwise scales on sm_100/sm_103
        return lambda: run_fp8("blockwise") if _on_sm100() else _skipped(variant, "needs an sm_100 or sm_103 GPU")
    if variant.kernel == "sm100_block_scaled_kernel":  # tilepipe.matmul_block_scaled runs on sm_100/sm_103 only
        return lambda: run_block_scaled(options["fmt"]) if _on_sm100() else _skipped(
            variant, "needs an sm_100 or sm_103 GPU")
    schedule = options.get("schedule", "static")  # an FP8 variant's schedule, forced
    if variant.kernel == "matmul_fp8 scaled":
        return lambda: run_fp8("tensor", schedule=schedule) and run_fp8("row", schedule=schedule)
    if variant.kernel == "matmul_fp8 scaled cluster":
        split = options.get("split_multicast", False)
        return lambda: run_fp8("tensor", options["cluster"], split=split) and run_fp8("row", options["cluster"],
                                                                                  split=split)
    if variant.kernel == "matmul_fp8 scaled swap-AB":
        return lambda: run_fp8("tensor", schedule=schedule, swap=True) and run_fp8("row", schedule=schedule, swap=True)
    if variant.kernel == "matmul_fp8 blockwise":
        return lambda: run_fp8("blockwise", schedule=schedule)
    if variant.kernel == "matmul_fp8 blockwise cluster":
        return lambda: run_fp8("blockwise", options["cluster"], split=options.get("split_multicast", False))
    if variant.kernel == "grouped_matmul_kernel":
        return lambda: run_grouped(options) if options["schedule"] in ("static", "dynamic") else run_grouped_3d(options)
    if variant.kernel == "grouped_wgrad_kernel":
        return lambda: run_grouped_wgrad(options)
    if variant.kernel == "grouped_mm_fp8":
        return lambda: run_grouped_fp8(options)
    if variant.kernel == "restage_rows_kernel":
        return run_restage
    if variant.kernel == "shift_scale_rows_kernel":
        return run_shift
    if variant.kernel in TENSOR_PARALLEL:  # needs a process group on 2 GPUs
        return lambda: _skipped(variant, "runs under torchrun on 2 GPUs: tests/gpu/tp_cases.py (scripts/gpu_tp.sh)")
    if variant.kernel == "pipeline_demo stress":
        style = list(pipeline_demo.STYLES)[index % len(pipeline_demo.STYLES)]
        return lambda: pipeline_demo.run_stress(style, options["stages"], options["consumers"],
                                                3 * options["stages"] + 1)["ok"]
    if variant.kernel == "pipeline_demo wgmma":
        return lambda: pipeline_demo.run_wgmma(options["stages"], 2, options["stages"] + 2)["ok"]
    raise ValueError(f"the sanitizer driver cannot launch {variant.kernel!r} ({variant.name}): add it to launcher()")


def _on_sm100() -> bool:
    import torch

    from tilepipe.host.device import device_target

    return device_target(torch.cuda.current_device()) == "sm_100a"


def _skipped(variant: Variant, why: str) -> bool:
    """A variant this GPU cannot run: said in the log, not counted as wrong."""
    print(f"{MARK} skipped {variant.name}: {why}", flush=True)
    return True


def drive(indices: list[int] | None = None) -> int:
    """Run the catalogue's variants (those at `indices`, else all) on the GPU, each between two MARK lines; exit
    status 1 when a result was wrong."""
    import torch

    import tilepipe  # noqa: F401  (every module that reads sm_count is loaded before few_sms)

    few_sms(SANITIZE_SMS)
    torch.manual_seed(0)
    wrong = []
    for index, variant in enumerate(shipped_variants()):
        if indices is not None and index not in indices:
            continue
        print(f"{MARK} variant {variant.name}", flush=True)
        ok = launcher(variant, index)()
        torch.cuda.synchronize()
        print(f"{MARK} done {variant.name} ok={ok}", flush=True)
        if not ok:
            wrong.append(variant.name)
    print(f"{MARK} wrong results: {wrong}" if wrong else f"{MARK} all results right", flush=True)
    return 1 if wrong else 0


# -------------------------------------------------------------------------------------------- the reports (host)


@dataclass
class Report:
    """One sanitizer report: its tool, what it says (numbers blanked), the kernels and source lines it names, how
    many hazards it stands for, and the variant that was running."""
    tool: str
    what: str
    kernels: tuple[str, ...]
    locations: tuple[str, ...]
    hazards: int
    variant: str | None
    text: str

    @property
    def key(self) -> tuple:
        return (self.tool, self.what, self.kernels, self.locations)


BANNERS = ("COMPUTE-SANITIZER", "ERROR SUMMARY", "RACECHECK SUMMARY", "LEAK SUMMARY", "Target application returned",
           "SYNCCHECK SUMMARY")
KERNEL_AT = re.compile(r"\bat (?:0x[0-9a-fA-F]+ in )?([A-Za-z_][\w:$.]*?)(?:\([^)]*\))?\+0x[0-9a-fA-F]+")
KERNEL_AFTER_LINE = re.compile(r"\bin \S+?:\d+:([A-Za-z_][\w:$.]*)")
LOCATION = re.compile(r"\bin (\S+?):(\d+)\b")
HAZARDS = re.compile(r"\[(\d+) hazards?\]")


def location(path: str, line: str) -> str:
    """A source line as its file's last two path parts and the line: 'pipeline/ring.py:210'."""
    return "/".join(Path(path).parts[-2:]) + ":" + line


def describe(lines: list[str]) -> str:
    """What a report says, without addresses, numbers and source positions: the first line, and its 'and ...'
    second line for a racecheck pair."""
    kept = [lines[0]] + [line for line in lines[1:2] if line.startswith("and ")]
    text = " / ".join(re.split(r"\s+at\s+", line)[0] for line in kept)
    text = HAZARDS.sub("", text)
    return re.sub(r"0x[0-9a-fA-F]+|\d+", "#", text).strip()


def parse(tool: str, output: str) -> list[Report]:
    """The reports in a sanitizer run's console output (its '=========' lines), each attributed to the variant
    whose MARK line came last before it."""
    reports, lines, variant = [], None, None

    def finish() -> None:
        if lines:
            body = [line for line in lines if "Saved host backtrace" not in line]
            text = "\n".join(body)
            kernels = sorted({m.group(1) for m in KERNEL_AT.finditer(text)} |
                             {m.group(1) for m in KERNEL_AFTER_LINE.finditer(text)})
            locations = sorted({location(*m.groups()) for m in LOCATION.finditer(text)})
            hazards = sum(int(n) for n in HAZARDS.findall(text)) or 1
            reports.append(Report(tool, describe(body), tuple(kernels), tuple(locations), hazards, variant, text))

    for raw in output.splitlines():
        if raw.startswith(MARK):
            words = raw[len(MARK):].split(maxsplit=1)
            if words and words[0] == "variant":
                variant = words[1] if len(words) > 1 else None
            continue
        if not raw.startswith("========="):
            continue
        body = raw[len("========="):]
        text = body.strip()
        if not text or text.startswith(BANNERS):
            finish()
            lines = None
        elif body.startswith("  ") and lines is not None:
            if "Host Frame" not in text and "Device Frame" not in text:
                lines.append(text)
        else:
            finish()
            lines = [text]
    finish()
    return reports


@dataclass
class Group:
    """Reports with one key: how many, how many hazards, under which variants, and the allow-list's reason."""
    tool: str
    what: str
    kernels: tuple[str, ...]
    locations: tuple[str, ...]
    reports: int = 0
    hazards: int = 0
    variants: list[str] = field(default_factory=list)
    example: str = ""
    reason: str | None = None

    def entry(self) -> dict[str, Any]:
        """An allow-list entry for this group, its reason left to fill in."""
        return {"tool": self.tool, "kernels": list(self.kernels), "locations": list(self.locations),
                "what": self.what, "verdict": "TODO: tool limitation (name the repro) or real race (fix it)",
                "reason": "TODO"}


def group(reports: list[Report]) -> list[Group]:
    groups: dict[tuple, Group] = {}
    for report in reports:
        found = groups.setdefault(report.key, Group(*report.key, example=report.text))
        found.reports += 1
        found.hazards += report.hazards
        if report.variant and report.variant not in found.variants:
            found.variants.append(report.variant)
    return list(groups.values())


def load_allow_list(path: Path = ALLOW_LIST) -> list[dict[str, Any]]:
    """The allow-list's entries; each must say why (a non-empty reason and verdict, not TODO). A report without a
    kernel or source line (a CUDA API error) is named by its tool and what it says, with empty kernels and locations."""
    entries = json.loads(path.read_text())["entries"]
    for entry in entries:
        missing = [k for k in ("tool", "reason", "verdict") if not entry.get(k)]
        missing += [k for k in ("kernels", "locations") if not isinstance(entry.get(k), list)]
        if not (entry.get("kernels") and entry.get("locations")) and not entry.get("what"):
            missing.append("what (an entry without kernels and locations names the report by what it says)")
        if missing or "TODO" in entry["reason"] or "TODO" in entry["verdict"]:
            raise ValueError(f"{path.name}: entry {entry} lacks {missing or 'a reason (TODO left in)'}")
    return entries


@cache
def resolve(location: str) -> str:
    """An allow-list location as reports write it, worked out once per location (explain asks for every group).
    'def MODULE:FUNCTION' is the line of that @gluon.jit function's `def`, where racecheck places code Triton
    generates for the whole kernel (warp_specialize's dispatch), so the entry follows the function when lines above
    it move; 'in MODULE:FUNCTION' is any line of that function ('FILE:FIRST-LAST'), so an entry for an access the
    function makes (a ring slot's load or store) follows it too; any other location is taken as written."""
    kind, _, where = location.partition(" ")
    if kind not in ("def", "in"):
        return location
    import importlib
    import inspect

    module, _, name = where.partition(":")
    fn = getattr(importlib.import_module(module), name)
    fn = getattr(fn, "fn", fn)  # a JITFunction wraps the Python function
    lines, first = inspect.getsourcelines(fn)
    offset = next(i for i, line in enumerate(lines) if line.lstrip().startswith("def "))
    file = Path(inspect.getsourcefile(fn)).name
    return f"{file}:{first + offset}" if kind == "def" else f"{file}:{first + offset}-{first + len(lines) - 1}"


def _covers(where: str, location: str) -> bool:
    """Whether an allow-list location, resolved ('FILE:LINE' or 'FILE:FIRST-LAST'), names a report's location."""
    file, _, lines = Path(resolve(where)).name.partition(":")
    reported_file, _, line = Path(location).name.partition(":")
    first, _, last = lines.partition("-")
    return file == reported_file and (line == first if not last else int(first) <= int(line) <= int(last))


def explain(group: Group, entries: list[dict[str, Any]]) -> str | None:
    """The reason of the allow-list entry that names this group's tool, kernels (the group's among the entry's) and
    source lines (each of the group's named by one of the entry's, and each of the entry's naming one; and, if it
    says, what the report says), else None."""
    for entry in entries:
        wheres = entry["locations"]
        if (entry["tool"] == group.tool and set(group.kernels) <= set(entry["kernels"])
                and bool(group.kernels) == bool(entry["kernels"]) and len(wheres) == len(group.locations)
                and all(any(_covers(w, loc) for w in wheres) for loc in group.locations)
                and all(any(_covers(w, loc) for loc in group.locations) for w in wheres)
                and entry.get("what", group.what) == group.what):
            return f"{entry['verdict']}: {entry['reason']}"
    return None


# -------------------------------------------------------------------------------------------------- the runner


def claimed(output: str) -> int:
    """How many errors or hazards the sanitizer's own summary lines count (a run whose reports did not parse
    still fails: `sanitize` compares this with the parsed reports)."""
    return sum(int(n) for n in re.findall(r"(?:ERROR SUMMARY: |RACECHECK SUMMARY: )(\d+)", output))


def finished(output: str) -> list[str]:
    """The variants whose MARK 'done' line the run printed."""
    return [line.split(" done ", 1)[1].rsplit(" ok=", 1)[0] for line in output.splitlines()
            if line.startswith(f"{MARK} done ")]


def sanitize(tools: tuple[str, ...] = TOOLS, budget_s: float = BUDGET_S, indices: list[int] | None = None
             ) -> dict[str, Any]:
    """Warm the kernel cache, run every tool over the driver (every shipped variant, or those at `indices`) and the
    repro kernels side by side (stopped when `budget_s` runs out: the variants done so far count, and the run is
    incomplete), and sort every report group into explained and unexplained; the JSON-able summary."""
    deadline = time.monotonic() + budget_s
    sanitizer = find_sanitizer()
    indices = list(range(len(shipped_variants()))) if indices is None else indices
    count = len(indices)
    slices = [",".join(map(str, indices[start::4])) for start in range(4)]
    warm = run_all_guarded([["-m", "tilepipe.verify.sanitize", "--drive", "--only", s] for s in slices if s]
                           + [[REPRO]], WARM_TIMEOUT_S, parallel=5)
    os.environ["PYTORCH_NO_CUDA_MEMORY_CACHING"] = "1"  # every tensor its own allocation: memcheck sees its bounds
    drive_args = ["-m", "tilepipe.verify.sanitize", "--drive", "--only", ",".join(map(str, indices))]
    runs: list[tuple[str, str, list[str]]] = [(tool, target, args) for tool in tools for target, args in
                                              (("tilepipe", drive_args), ("repro", [REPRO]))]
    with ThreadPoolExecutor(len(runs)) as pool:
        done: list[GuardedRun] = list(pool.map(
            lambda run: run_guarded(run[2], max(deadline - time.monotonic(), 30),
                                    [sanitizer, "--tool", run[0], *SANITIZER_OPTIONS]), runs))
    entries = load_allow_list()
    summary: dict[str, Any] = {"sanitizer": sanitizer, "variants": count, "warm_up": [
        {"args": list(w.args), "status": w.status, "seconds": round(w.seconds, 1), "tail": w.output[-1500:]}
        for w in warm if w.status != "ok"], "runs": [], "groups": [], "repro_groups": []}
    for (tool, target, _), run in zip(runs, done):
        reports = parse(tool, run.output)
        summary["runs"].append({"tool": tool, "target": target, "status": run.status, "seconds": round(run.seconds, 1),
                                "variants_done": len(finished(run.output)), "reports": len(reports),
                                "claimed": claimed(run.output), "tail": run.output[-2500:]})
        for found in group(reports):
            if target == "tilepipe":
                found.reason = explain(found, entries)
            summary["groups" if target == "tilepipe" else "repro_groups"].append(found.__dict__)
    for found in summary["groups"]:
        require_reproduced(found, summary["repro_groups"])
    unexplained = [g for g in summary["groups"] if g["reason"] is None]
    incomplete = [r for r in summary["runs"] if r["target"] == "tilepipe" and (
        r["status"] != "ok" or r["variants_done"] != count or (r["claimed"] and not r["reports"]))]
    summary.update(unexplained=len(unexplained), ok=not unexplained and not incomplete and not summary["warm_up"])
    return summary


REPRODUCED_BY = re.compile(r"reproduced by scripts/sanitize_repro\.py (\w+)")


def require_reproduced(found: dict[str, Any], repro_groups: list[dict[str, Any]]) -> None:
    """An explanation that says a repro kernel reproduces the report holds only if, in this very run, that kernel
    got a report from the same tool; otherwise the group is unexplained again (`unreproduced` names the kernel)."""
    named = REPRODUCED_BY.search(found["reason"] or "")
    if named and not any(r["tool"] == found["tool"] and f"repro {named.group(1)}" in r["variants"]
                         for r in repro_groups):
        found.update(reason=None, unreproduced=named.group(1))


def print_summary(summary: dict[str, Any]) -> None:
    print(f"compute-sanitizer ({summary['sanitizer']}) over {summary['variants']} shipped variants")
    for failed in summary["warm_up"]:
        print(f"WARM-UP {failed['status']}: {failed['args']}\n{failed['tail']}")
    for run in summary["runs"]:
        print(f"  {run['tool']:9s} {run['target']:8s} {run['status']:6s} {run['seconds']:6.1f} s  "
              f"variants done {run['variants_done']}, reports {run['reports']} (the sanitizer counts {run['claimed']})")
        if run["status"] != "ok":
            print("    " + run["tail"][-1200:].replace("\n", "\n    "))
    for title, key in (("tilepipe", "groups"), ("repro (tilepipe-free kernels, never failed)", "repro_groups")):
        print(f"{title}: {len(summary[key])} report groups")
        for g in summary[key]:
            status = "explained" if g["reason"] else ("UNEXPLAINED" if key == "groups" else "seen")
            print(f"  [{status}] {g['tool']} {g['what']} in {', '.join(g['kernels']) or '?'} at "
                  f"{', '.join(g['locations']) or '?'}: {g['reports']} reports, {g['hazards']} hazards; variants: "
                  f"{', '.join(g['variants'][:6])}{' ...' if len(g['variants']) > 6 else ''}")
            if g["reason"]:
                print(f"      {g['reason']}")
            if g.get("unreproduced"):
                print(f"      its allow-list entry says repro {g['unreproduced']} reproduces it, which it did not in this run")
    unexplained = [g for g in summary["groups"] if g["reason"] is None]
    if unexplained:
        print("allow-list entries to judge (scripts/sanitize-allow.json), one per unexplained group:")
        for g in unexplained:
            print("  " + json.dumps(Group(**{k: g[k] for k in ("tool", "what", "kernels", "locations")}).entry()))
    print(f"sanitize: {summary['unexplained']} unexplained report groups; {'OK' if summary['ok'] else 'FAILED'}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tilepipe.verify.sanitize", description=__doc__.split("\n\n")[0])
    parser.add_argument("--tools", default=",".join(TOOLS), help="comma-separated: memcheck,racecheck,synccheck")
    parser.add_argument("--budget", type=float, default=BUDGET_S, help="seconds for the whole check")
    parser.add_argument("--json", type=Path, help="write the summary here")
    parser.add_argument("--drive", action="store_true", help="(the sanitized process) run the variants here")
    parser.add_argument("--only", help="the catalogue indices to run, comma-separated (default: every variant)")
    args = parser.parse_args(argv)
    only = None if args.only is None else [int(i) for i in args.only.split(",") if i]
    if args.drive:
        return drive(only)
    try:
        summary = sanitize(tuple(args.tools.split(",")), args.budget, only)
    except FileNotFoundError as error:
        print(f"sanitize: {error}", file=sys.stderr)
        return 2
    if args.json:
        args.json.write_text(json.dumps(summary, indent=1))
    print_summary(summary)
    return 0 if summary["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
