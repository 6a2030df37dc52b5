"""Fit a GPU model's rate constants (host/gpus/<model>.json) on a `bench --shapes` results file run on that GPU.

    python -m tilepipe.tools.fit_gpu bench/results/archive/shapes-h200-v1.json --gpu h200 --predicted-with h100  # the fit
    ... --write                                                                            # stored in h200.json

What it fits, each from the rows whose predicted time that constant sets (the model file's other constants stay):
- dram_bytes_per_us and l2_dirty_bytes: the least-squares line through the static decode rows at the DRAM floor,
  their measured time less the prediction's other terms (launch, swap-AB's floor) against their bytes: the slope's
  inverse is the rate, the intercept the extra bytes (predicted_parts' "dram" term);
- sm_flops and fp8_sm_flops: the median of predicted over measured main-loop time (less the launch) of the static
  rows whose main loops the wgmma rate bounds, 16-bit and FP8 per-tensor apart, times the file's rate.
"""

import argparse
import json
import statistics
import sys
from pathlib import Path

from dataclasses import replace

from tilepipe.host.configs import dram_us
from tilepipe.host.gpus import DIRECTORY, FITTED_FIELDS, GpuModel, gpu_model, gpu_models

REPO = Path(__file__).resolve().parents[2]


def _shape(row: dict) -> tuple[int, int, int]:
    M, N, K = map(int, row["shape"].split("x"))
    return M, N, K


def fit_dram(rows: list[dict], gpu: GpuModel) -> tuple[float, float, list[str]]:
    """(bytes per us, extra bytes, the rows used) from the static 16-bit decode rows the model bounds by DRAM."""
    used = [r for r in rows if r["group"].startswith("decode") and r["bound"] == "dram" and r["schedule"] == "static"]
    if len(used) < 2:
        raise ValueError(f"fit_dram needs two static decode rows at the DRAM floor, the file has {len(used)}")
    moved, times = [], []
    for r in used:
        M, N, K = _shape(r)
        moved.append((M + N) * K * 2 + M * N * 2)
        times.append(r["tilepipe_us"] - (r["predicted_us"] - dram_us(M, N, K, gpu)))  # less launch, swap-AB's floor
    slope, intercept = statistics.linear_regression(moved, times)
    return 1.0 / slope, intercept / slope, [r["shape"] for r in used]


def fit_rate(rows: list[dict], gpu: GpuModel, group: str, rate: float) -> tuple[float, list[str]]:
    """`rate` scaled by the median predicted / measured main-loop time of `group`'s static rows bounded by the wgmma
    rate (cluster rows left out: their term is the cluster's, not one SM's)."""
    used = [r for r in rows if r["group"] == group and r["bound"] == "mma" and r["schedule"] == "static"
            and " 2x1" not in r["config"] and " 1x2" not in r["config"]]
    if not used:
        raise ValueError(f"fit_rate: no static rows of {group!r} bounded by the wgmma rate")
    scale = statistics.median((r["predicted_us"] - gpu.launch_us) / (r["tilepipe_us"] - gpu.launch_us) for r in used)
    return rate * scale, [r["shape"] for r in used]


def fit(results: Path, target: GpuModel, predicted_with: GpuModel | None = None) -> dict[str, dict]:
    """The fitted entries of `target`'s model file, as its "fitted" holds them, from a results file whose predictions
    used the constants it records (`cost_model`), or, in a file from before it recorded them, `predicted_with`'s."""
    record = json.loads(results.read_text())
    if gpu_model(record["gpu"]).key != target.key:
        raise ValueError(f"{results} ran on {record['gpu']!r}, not on a {target.name}")
    if "cost_model" in record:
        used = {k: v for k, v in record["cost_model"].items() if k in FITTED_FIELDS and not isinstance(v, dict)}
        gpu = replace(target, **used)
    elif predicted_with is not None:
        gpu = replace(predicted_with, sms=target.sms)
    else:
        raise ValueError(f"{results} does not record the constants its predictions used: name the model that made "
                         "them (--predicted-with)")
    rows = record["rows"]
    source = str(results.resolve().relative_to(REPO)) if results.resolve().is_relative_to(REPO) else str(results)
    dram, dirty, dram_rows = fit_dram(rows, gpu)
    bf16, bf16_rows = fit_rate(rows, gpu, "prefill bf16", gpu.sm_flops * gpu.sms)
    fp8, fp8_rows = fit_rate(rows, gpu, "FP8 per-tensor", gpu.fp8_sm_flops * gpu.sms)
    how = "tilepipe.tools.fit_gpu: "
    return {
        "sm_flops": {"value": round(bf16, -11), "per_sms": gpu.sms, "fitted_on": [source],
                     "note": how + f"median predicted/measured main loop of the static prefill rows {bf16_rows}"},
        "fp8_sm_flops": {"value": round(fp8, -11), "per_sms": gpu.sms, "fitted_on": [source],
                         "note": how + f"the same over the static FP8 per-tensor rows {fp8_rows}"},
        "dram_bytes_per_us": {"value": round(dram, -4), "fitted_on": [source],
                              "note": how + f"least-squares slope of the static decode rows at the DRAM floor {dram_rows}"},
        "l2_dirty_bytes": {"value": round(dirty, -5), "fitted_on": [source], "note": how + "the same fit's intercept"},
    }


def model_file_text(data: dict) -> str:
    """A model file as the others are laid out: the device's figures and each fitted entry on a line of its own."""
    def block(entries: dict) -> str:
        return ",\n".join(f"    {json.dumps(k)}: {json.dumps(v)}" for k, v in entries.items())
    head = ",\n".join(f"  {json.dumps(k)}: {json.dumps(v)}" for k, v in data.items() if k not in ("device", "fitted"))
    return (f"{{\n{head},\n  \"device\": {{\n{block(data['device'])}\n  }},\n"
            f"  \"fitted\": {{\n{block(data['fitted'])}\n  }}\n}}\n")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tilepipe.tools.fit_gpu", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("results", type=Path, help="a bench --shapes results file run on the GPU")
    parser.add_argument("--gpu", required=True, choices=sorted(gpu_models()), help="the model file to fit")
    parser.add_argument("--predicted-with", choices=sorted(gpu_models()),
                        help="the model whose constants made the file's predictions, where the file does not record them")
    parser.add_argument("--write", action="store_true", help="store the fitted entries in the model file")
    args = parser.parse_args(argv)
    gpu = gpu_models()[args.gpu]
    fitted = fit(args.results, gpu, args.predicted_with and gpu_models()[args.predicted_with])
    for name, entry in fitted.items():
        before = getattr(gpu, name) * (gpu.sms if "per_sms" in entry else 1)  # the file's value now
        print(f"{name:18s} {before:12.4g} -> {entry['value']:12.4g}   {entry['note']}")
    if args.write:
        path = DIRECTORY / f"{args.gpu}.json"
        data = json.loads(path.read_text())
        data["fitted"].update(fitted)
        path.write_text(model_file_text(data))
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
