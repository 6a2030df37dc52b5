"""Why a shape-table row runs below its baseline: the facts one results file of `bench --shapes` and one of the
baselines' kernels (`cublas-kernels-*.json`, torch.profiler) give for each row under 1.0x, as a markdown table.

    python -m tilepipe.tools.shape_gaps bench/results/archive/shapes-h100-v13.json bench/results/cublas-kernels-h100.json

Per row: our time and the baseline's; the fastest of our timed candidates (the ceiling with the tiles we have); the
cost model's bound and floor for our choice; the baseline's kernel tile, cluster and split-K; and the reasons these
facts support, in this order: "spread" (some interleaved pair ran at or above 1.0), "choice" (a timed candidate of
ours beat the one chosen by more than CHOICE_MARGIN), "tile" (the baseline's tile is not a power of two, which one
Gluon accumulator cannot be), "dram" (our choice is bound by DRAM bytes in the model), "split-K" (the baseline
splits K and we do not).
"""

import json
import re
import sys
from pathlib import Path

from tilepipe.host.configs import MatmulConfig, floor_us, loop_bound, predicted_parts
from tilepipe.host.gpus import H100, GpuModel

CHOICE_MARGIN = 1.02
"""A timed candidate this much faster than the chosen kernel counts as a better choice missed."""
_TILE = re.compile(r"_(\d+)x(\d+)_(\d+)x(\d+)_(\d+x\d+)?")
_CONFIG = re.compile(r"(\d+)x(\d+)x(\d+) s(\d+) w(\d+)( swap-AB)?(?: (\d)x(\d))?")


def baseline_kernel(name: str) -> dict:
    """Tile, cluster and split-K of a cuBLAS kernel, from its name (nvjet_sm90_tst_BMxBN_BKxSTAGES_CMxCN_... or
    cutlass_80_..._BMxBN_BKxSTAGES_...)."""
    match = _TILE.search(name)
    if match is None:
        return {"tile": "?", "cluster": "?", "split_k": "splitK" in name}
    bm, bn = int(match[1]), int(match[2])
    return {"tile": f"{bm}x{bn}", "pow2": all(v & (v - 1) == 0 for v in (bm, bn)), "cluster": match[5] or "1x1",
            "split_k": "splitK" in name}


def config_of(text: str) -> MatmulConfig:
    """The MatmulConfig a results file's config string (bench_shapes.describe) names."""
    bm, bn, bk, stages, warps, swap, cm, cn = _CONFIG.match(text).groups()
    return MatmulConfig(int(bm), int(bn), int(bk), stages=int(stages), num_warps=int(warps), swap_ab=bool(swap),
                        cluster_m=int(cm or 1), cluster_n=int(cn or 1))


def gaps(record: dict, kernels: dict, gpu: GpuModel = H100) -> list[dict]:
    """One entry per row under 1.0x: the facts above and its reasons, by GPU model `gpu`'s cost model."""
    by_shape = {(row["group"], row["shape"]): row["kernels"] for row in kernels["rows"]}
    out = []
    for row in record["rows"]:
        if row["ratio"] >= 1.0:
            continue
        M, N, K = map(int, row["shape"].split("x"))
        fp8 = row["group"].startswith("FP8")
        in_bytes = 1 if fp8 else 2
        bound = loop_bound(predicted_parts(M, N, K, config_of(row["config"]), row["schedule"], gpu, in_bytes))
        floor = floor_us(M, N, K, gpu, in_bytes)
        chosen = (row["schedule"], f"{row['config']} {row['schedule']}")  # the chosen kernel timed alone
        timed = {name: t["measured_us"] for name, t in row["schedules"].items()
                 if t.get("measured_us") and name not in chosen}
        best_name = min(timed, key=timed.__getitem__, default=None)
        best = min(timed[best_name], row["tilepipe_us"]) if best_name else row["tilepipe_us"]
        theirs = [baseline_kernel(k["name"]) for k in by_shape.get((row["group"], row["shape"]), [])
                  if "Reduce" not in k["name"] and "reduce" not in k["name"]]
        kernel = theirs[0] if theirs else {"tile": "?", "cluster": "?", "split_k": False}
        reasons = []
        if max(row["pair_ratios"]) >= 1.0:
            reasons.append("spread")
        if best_name and timed[best_name] * CHOICE_MARGIN < row["tilepipe_us"]:
            reasons.append(f"choice ({best_name})")
        if kernel.get("pow2") is False:
            reasons.append("tile")
        if bound == "dram":
            reasons.append("dram")
        if kernel["split_k"] and row["schedule"] not in ("splitk", "streamk"):
            reasons.append("split-K")
        out.append({"group": row["group"], "shape": row["shape"], "ratio": row["ratio"],
                    "pairs": row["pair_ratios"], "ours_us": row["tilepipe_us"], "baseline_us": row["baseline_us"],
                    "config": f"{row['config']} {row['schedule']}", "ceiling": round(row["baseline_us"] / best, 3),
                    "bound": bound, "floor_us": round(floor, 1), "baseline_kernel": kernel, "reasons": reasons})
    return out


def format_gaps(entries: list[dict]) -> str:
    """The markdown table of gaps()."""
    table = [("group", "shape", "ratio (pairs)", "ours / baseline us", "our kernel", "ceiling", "bound, floor us",
              "baseline tile, cluster, split-K", "reasons")]
    for e in entries:
        k = e["baseline_kernel"]
        baseline = f"{k['tile']}, {k['cluster']}, {'yes' if k['split_k'] else 'no'}"
        table.append((e["group"], e["shape"], f"{e['ratio']:.3f} ({min(e['pairs']):.2f}-{max(e['pairs']):.2f})",
                      f"{e['ours_us']:.1f} / {e['baseline_us']:.1f}", e["config"], f"{e['ceiling']:.3f}",
                      f"{e['bound']}, {e['floor_us']}", baseline, ", ".join(e["reasons"]) or "-"))
    return "\n".join("| " + " | ".join(row) + " |" for row in [table[0], ("---", ) * len(table[0]), *table[1:]])

if __name__ == "__main__":
    shapes, kernels = (json.loads(Path(path).read_text()) for path in sys.argv[1:3])
    print(format_gaps(gaps(shapes, kernels)))
