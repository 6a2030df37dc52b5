"""Every choice the cost model makes on a grid of a few thousand calls, as one snapshot file, so a change to the model
shows as the list of calls it moves (tests/test_choices.py compares the code with the snapshot).

    python -m tilepipe.tools.choices             # list the moves against the committed snapshot
    python -m tilepipe.tools.choices --write     # accept them: rewrite the snapshot (commit it with its A/B numbers)

A choice is the configuration and schedule matmul (bf16 or fp32 D; with or without C, an fp32 C too; B K-major or
row-major) or matmul_fp8 (per-tensor or blockwise scales) takes on an H100 (host/gpus/h100.json) without an autotune
entry: host/configs.py's modelled_config, schedule_for, fp8_config_for and fp8_schedule_for.
"""

import argparse
import json
import sys
from pathlib import Path

import torch

from tilepipe.host.configs import fp8_config_for, fp8_schedule_for, modelled_config, schedule_for
from tilepipe.host.gpus import H100, GpuModel
from tilepipe.verify.report import describe

SNAPSHOT = Path(__file__).resolve().parents[2] / "tests" / "fixtures" / "choices-hopper.json"
GRID_M = (1, 8, 16, 32, 48, 64, 96, 128, 129, 192, 256, 320, 384, 448, 512, 640, 768, 1000, 1024, 1536, 2048, 2560,
          3072, 4096, 8192)
GRID_NK = ((1024, 1024), (2048, 7168), (4096, 4096), (4096, 14336), (6144, 4096), (7168, 2048), (8960, 1536),
           (14336, 4096), (2560, 2560), (4000, 3500), (5120, 5120))
BF16_FORMS = (("bf16", "", True), ("bf16", "", False), ("fp32", "", True), ("bf16", "+C", True), ("fp32", "+C", True),
              ("bf16", "+C fp32", True))
"""matmul's calls per shape: (D's dtype, C, B K-major)."""


def grid(gpu: GpuModel = H100) -> dict[str, str]:
    """{call: choice} on GPU model `gpu` over GRID_M x GRID_NK, matmul's forms (BF16_FORMS) and matmul_fp8's two
    scalings."""
    dtypes = {"bf16": torch.bfloat16, "fp32": torch.float32}
    choices = {}
    for M in GRID_M:
        for N, K in GRID_NK:
            for d, c, b_kmajor in BF16_FORMS:
                cfg = modelled_config(M, N, K, torch.bfloat16, dtypes[d], b_kmajor, gpu, own_source=c == "+C fp32",
                                      has_c=bool(c))
                layout = "B K-major" if b_kmajor else "B row-major"
                choices[f"matmul {M}x{N}x{K} -> {d} {c} {layout}".replace("  ", " ")] = (
                    f"{describe(cfg)} {schedule_for(M, N, K, cfg, gpu)}")
            for blockwise in (False, True):
                cfg = fp8_config_for(M, N, K, blockwise, torch.bfloat16, gpu)
                scaling = "blockwise" if blockwise else "per-tensor"
                choices[f"matmul_fp8 {scaling} {M}x{N}x{K}"] = (
                    f"{describe(cfg)} {fp8_schedule_for(M, N, K, cfg, blockwise, gpu)}")
    return choices


def moves(before: dict[str, str], after: dict[str, str]) -> list[str]:
    """Each call whose choice differs between two grids, as "call: before -> after" (new or dropped calls too)."""
    return [f"{call}: {before.get(call, '(none)')} -> {after.get(call, '(none)')}"
            for call in sorted(before.keys() | after.keys()) if before.get(call) != after.get(call)]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tilepipe.tools.choices", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--write", action="store_true", help="rewrite the snapshot with the code's choices")
    args = parser.parse_args(argv)
    now = grid()
    before = json.loads(SNAPSHOT.read_text()) if SNAPSHOT.exists() else {}
    listed = moves(before, now)
    print("\n".join(listed) or "no moves", f"\n{len(listed)} of {len(now)} calls move", sep="\n")
    if args.write:
        SNAPSHOT.write_text(json.dumps(now, indent=0, sort_keys=True) + "\n")
        print(f"wrote {SNAPSHOT}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
