"""GPU correctness of tilepipe.matmul_block_scaled for one (format, A dtype, B dtype, out dtype), over ragged shapes.

`python -m tests.gpu.block_scaled_cases mxfp8 e4m3 e5m2 bf16` prints one JSON line. Each shape gets fresh random
operands and block scales (varying over rows and K groups, so a wrong scale index shows; host/block_scales.py), a
NaN-poisoned output, and a float64 reference of the dequantized inputs. The products of block-scaled data are exact
in the MMA's fp32 accumulation up to its rounding: the tolerance is the output dtype's. Never run: it needs an
sm_100/sm_103 GPU (tests/gpu/test_sm100_gpu.py skips it elsewhere).
"""

import json
import sys

import torch

import tilepipe
from tilepipe.host.block_scales import block_scaled_operands

DATA = {"e4m3": torch.float8_e4m3fn, "e5m2": torch.float8_e5m2, "e2m1": torch.float4_e2m1fn_x2}
OUT = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}
TOLERANCE = 1e-2  # relative Frobenius error
SHAPES = [(1, 256, 128), (7, 8, 64), (129, 200, 96), (128, 256, 128), (300, 513, 1000), (1000, 1, 64),
          (64, 1000, 4096), (2048, 2048, 256), (133, 131, 32), (4096, 264, 520), (257, 4096, 384), (520, 384, 160)]


def run(fmt: str, a_name: str, b_name: str, out_name: str) -> dict:
    torch.manual_seed(0)
    failures, worst = [], 0.0
    for M, N, K in SHAPES:
        a, b, sa, sb, ref = block_scaled_operands(M, N, K + K % 2, fmt, DATA[a_name], DATA[b_name])
        out = torch.full((M, N), float("nan"), device="cuda", dtype=OUT[out_name])
        got = tilepipe.matmul_block_scaled(a, b, sa, sb, format=fmt, out=out)
        torch.cuda.synchronize()
        err = float((got.double() - ref).norm() / ref.norm())
        worst = max(worst, err)
        if not (got is out and torch.isfinite(got).all() and err < TOLERANCE):
            failures.append({"shape": [M, N, K], "rel_err": err})
    return {"case": f"{fmt} {a_name}x{b_name}->{out_name}", "ok": not failures, "worst_rel_err": worst,
            "failures": failures[:5]}


if __name__ == "__main__":
    result = run(*sys.argv[1:])
    print(json.dumps(result))
    sys.exit(0 if result["ok"] else 1)
