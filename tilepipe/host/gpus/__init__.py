"""The cost model's figures per GPU model: one JSON file each beside this module (h100.json, h200.json, b200.json) with
the device's public figures (SMs, clock, DRAM bandwidth, shared memory, the names torch gives it) and the fitted
constants host/configs.py predicts with, each with the results files it was fitted on. A file whose constants were not
all fitted on its own GPU says `"same_as"` the model it borrows the others from and why (`"refit"`); its own entries
override the borrowed ones (tilepipe.tools.fit_gpu fits them on a results file of that GPU). What each constant means
and how it was measured: the `# gpu.<name>:` comments of host/configs.py, beside the candidates, handicaps and terms
that use it."""

import json
import re
import warnings
from collections.abc import Mapping
from dataclasses import dataclass, fields, replace
from functools import cache
from pathlib import Path
from types import MappingProxyType

import torch

from tilepipe.host.device import sm_count

DIRECTORY = Path(__file__).resolve().parent
DEFAULT_MODEL = "h100"
"""The model of a GPU no file names (a Hopper variant such as H800 or GH200): the one the constants were fitted on."""


@dataclass(frozen=True)
class GpuModel:
    """One GPU model's figures and fitted constants (the JSON file's "device" and "fitted"; rates per microsecond,
    flops per SM). `sms` is the device's own count where it came from a device (device_model), else the file's."""
    key: str
    name: str
    name_patterns: tuple[str, ...]
    sms: int
    boost_clock_mhz: int | None
    dram_bytes_per_s: float
    smem_per_block_bytes: int
    compute_capability: tuple[int, int]
    refit: str | None
    """Why the constants are another model's (its file's "fitted.refit"), None where fitted on this one."""
    sm_flops: float
    fp8_sm_flops: float
    dram_bytes_per_us: float
    l2_dirty_bytes: float
    load_latency_us: float
    sm_bytes_per_us: float
    sm_dram_bytes_per_us: float
    launch_us: float
    mma_efficiency: Mapping[int, float]
    streamk_fixup_us: float
    partial_trip_us: float
    streamk_few_rows_cost: float
    unit_fill_us: float
    restage_gain: float
    copy_bytes_per_us: float
    epilogue_steps: float
    pingpong_step_cost: float
    large_few_rows_rate: float
    pieced_step_cost: Mapping[int, float]
    swap_floor_us: Mapping[int, float]
    subtiled_first_max_m: int
    wide_fp32_min_k_with_c: int
    blockwise_streamk_max_m: int
    blockwise_streamk_min_gain: float

    def __hash__(self) -> int:  # the mappings are not hashable; the choice functions cache on the model
        return hash((self.key, self.sms))

    def flops_per_sm(self, in_bytes: int) -> float:
        """One SM's sustained rate for operands of `in_bytes` bytes: fp8 (1) or 16-bit."""
        return self.fp8_sm_flops if in_bytes == 1 else self.sm_flops


DEVICE_FIELDS = ("name", "name_patterns", "sms", "boost_clock_mhz", "dram_bytes_per_s", "smem_per_block_bytes",
                 "compute_capability")
FITTED_FIELDS = tuple(f.name for f in fields(GpuModel) if f.name not in ("key", "refit", *DEVICE_FIELDS))
"""The constants a file's "fitted" holds: GpuModel's fields past the device figures."""


def _fitted_value(entry: dict) -> float | int | Mapping[int, float]:
    """A "fitted" entry's value: per SM where it gives `per_sms`, a read-only {int: float} where it is a table."""
    value = entry["value"]
    if isinstance(value, dict):
        return MappingProxyType({int(k): v for k, v in value.items()})
    return value / entry["per_sms"] if "per_sms" in entry else value


@cache
def gpu_models() -> dict[str, GpuModel]:
    """Every model file under tilepipe/host/gpus/, by its name's stem ("h100")."""
    raw = {path.stem: json.loads(path.read_text()) for path in sorted(DIRECTORY.glob("*.json"))}
    return {key: _model(key, raw) for key in raw}


def _model(key: str, raw: dict[str, dict]) -> GpuModel:
    data = raw[key]
    device, fitted = data["device"], data["fitted"]
    borrowed = raw[fitted["same_as"]]["fitted"] if "same_as" in fitted else {}
    source = {**borrowed, **{name: entry for name, entry in fitted.items() if name in FITTED_FIELDS}}
    if set(source) != set(FITTED_FIELDS):
        raise ValueError(f"tilepipe/host/gpus/{key}.json: fitted constants {sorted(set(FITTED_FIELDS) ^ set(source))} "
                         "missing or unknown")
    return GpuModel(key=key, name=data["name"], name_patterns=tuple(data["name_patterns"]), sms=device["sms"],
                    boost_clock_mhz=device["boost_clock_mhz"], dram_bytes_per_s=device["dram_bytes_per_s"],
                    smem_per_block_bytes=device["smem_per_block_bytes"],
                    compute_capability=tuple(device["compute_capability"]), refit=fitted.get("refit"),
                    **{name: _fitted_value(source[name]) for name in FITTED_FIELDS})


@cache
def gpu_model(device_name: str) -> GpuModel:
    """The model whose name patterns match `device_name` (as torch.cuda.get_device_name gives it, e.g. "NVIDIA H100
    80GB HBM3"), once per name; a name no file matches gets DEFAULT_MODEL's, with a warning naming both."""
    found = next((m for m in gpu_models().values() if any(re.search(p, device_name) for p in m.name_patterns)), None)
    if found is None:
        found = gpu_models()[DEFAULT_MODEL]
        warnings.warn(f"tilepipe: no cost model for {device_name!r} (tilepipe/host/gpus/); choosing tiles with the "
                      f"{found.name}'s figures", stacklevel=2)
    return found


@cache
def device_name(device_index: int) -> str:
    return torch.cuda.get_device_name(device_index)


def device_model(device_index: int) -> GpuModel:
    """The model of CUDA device `device_index` (gpu_model of its name) with the device's own SM count (a PCIe H100 has
    114, a MIG slice fewer; host.device.sm_count, looked up per call so verify/sanitize.py's few_sms reaches it)."""
    return _with_sms(gpu_model(device_name(device_index)), sm_count(device_index))


@cache
def _with_sms(model: GpuModel, sms: int) -> GpuModel:
    return model if model.sms == sms else replace(model, sms=sms)


H100 = gpu_models()["h100"]
"""The H100 SXM5's model: what the cost model's tests and the grid snapshot (tools/choices.py) choose for."""
