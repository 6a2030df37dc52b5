"""GPU correctness of tilepipe.matmul_fp8 for one (scaling, A dtype, B dtype, out dtype), over ragged shapes.

`python -m tests.gpu.fp8_cases blockwise e4m3 e5m2 bf16` prints one JSON line; a fifth argument (streamk, splitk)
forces that schedule (default: matmul_fp8's own choice per shape), a cluster shape or swap-AB (swap-static, ...). Each shape gets fresh random fp8
operands and random scales (varying over rows, columns and K blocks, so a wrong scale index shows), a NaN-poisoned
output, and a float64 reference of the dequantized inputs. Tolerances: the output dtype's rounding plus fp8
wgmma's limited-precision accumulation (per-tensor/per-row accumulate over all of K; blockwise promotes every 128).
"""

import json
import sys
from dataclasses import replace

import torch

import tilepipe

FP8 = {"e4m3": torch.float8_e4m3fn, "e5m2": torch.float8_e5m2}
OUT = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}
TOLERANCE = {"tensor": 2e-2, "row": 2e-2, "blockwise": 1e-2}  # relative Frobenius error
SHAPES = [(1, 256, 128), (7, 8, 8), (129, 200, 63), (128, 256, 128), (300, 513, 1000), (1000, 1, 64),
          (64, 1000, 4096), (2048, 2048, 256), (1, 1, 1), (133, 131, 7), (4096, 264, 520), (257, 4096, 384),
          (256, 7168, 2048), (520, 384, 129), (1000, 1500, 1024), (1500, 1000, 2048)]
BLOCK = 128


def random_scales(*shape: int) -> torch.Tensor:
    """Powers of two between 1/4 and 4 times a random mantissa: distinct per element, never zero."""
    return (2.0 ** torch.randint(-2, 3, shape, device="cuda")) * (0.5 + torch.rand(shape, device="cuda"))


def expand_blocks(scale: torch.Tensor, rows: int, cols: int, block_rows: int, block_cols: int) -> torch.Tensor:
    """A per-block scale grid expanded to one value per element of a rows x cols matrix."""
    return scale.repeat_interleave(block_rows, 0).repeat_interleave(block_cols, 1)[:rows, :cols]


def operands(M: int, N: int, K: int, a_dtype: torch.dtype, b_dtype: torch.dtype, scaling: str):
    """(a, b, scale_a, scale_b, reference): b = w.t() of a row-major (N, K) weight, as torch._scaled_mm wants."""
    a = (torch.randn(M, K, device="cuda") * 2).to(a_dtype)
    w = (torch.randn(N, K, device="cuda") * 2).to(b_dtype)
    kb = -(-K // BLOCK)
    if scaling == "tensor":
        sa, sb = random_scales(), random_scales()
        full_a, full_b = sa.expand(M, K), sb.expand(N, K)
    elif scaling == "row":
        sa, sb = random_scales(M, 1), random_scales(1, N)
        full_a, full_b = sa.expand(M, K), sb.t().expand(N, K)
    else:  # torch's layouts: scale_a outer-dim-major (M, kb), scale_b (kb, N blocks) as the transpose of (N blocks, kb)
        sa = random_scales(kb, M).t()
        sb = random_scales(-(-N // BLOCK), kb).t()
        full_a = expand_blocks(sa, M, K, 1, BLOCK)
        full_b = expand_blocks(sb.t(), N, K, BLOCK, BLOCK)
    ref = (a.double() * full_a.double()) @ (w.double() * full_b.double()).t()
    return a, w.t(), sa, sb, ref


def run(scaling: str, a_name: str, b_name: str, out_name: str, schedule: str | None = None) -> dict:
    """`schedule`: "static", "streamk", "splitk" forced; a cluster shape ("2x1", "1x2") forced through config= (the
    scaling's largest tile); or
    "swap-" and a schedule: swap-AB's 64x32 tile (host/configs.py swap_config) forced, under that schedule."""
    config = scheduler = None
    if schedule in ("2x1", "1x2"):
        from tilepipe.host.configs import fp8_configs

        cm, cn = map(int, schedule.split("x"))
        config = replace(fp8_configs(scaling == "blockwise", OUT[out_name])[0], cluster_m=cm, cluster_n=cn)
    elif schedule is not None:
        from tilepipe.host.configs import swap_config

        if schedule.startswith("swap-"):
            config = swap_config(32, OUT[out_name], kernel="scaled")
        scheduler = schedule.removeprefix("swap-")
    torch.manual_seed(0)
    failures, worst = [], 0.0
    for M, N, K in SHAPES:
        a, b, sa, sb, ref = operands(M, N, K, FP8[a_name], FP8[b_name], scaling)
        out = torch.full((M, N), float("nan"), device="cuda", dtype=OUT[out_name])
        got = tilepipe.matmul_fp8(a, b, sa, sb, out=out, config=config, scheduler=scheduler)
        torch.cuda.synchronize()
        err = float((got.double() - ref).norm() / ref.norm())
        worst = max(worst, err)
        if not (got is out and torch.isfinite(got).all() and err < TOLERANCE[scaling]):
            failures.append({"shape": [M, N, K], "rel_err": err})
    return {"case": f"{scaling} {a_name}x{b_name}->{out_name} schedule={schedule}", "ok": not failures,
            "worst_rel_err": worst, "failures": failures[:5]}


if __name__ == "__main__":
    result = run(*sys.argv[1:])
    print(json.dumps(result))
    sys.exit(0 if result["ok"] else 1)
