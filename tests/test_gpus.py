"""The per-GPU cost model files (tilepipe/host/gpus/): each loads with every figure and constant, torch's device names
find their model, an unknown GPU gets the documented default with a warning, and the H100's constants are the ones
the cost model was fitted with (so the choices of tests/test_choices.py stay the snapshot's)."""

import json
import warnings
from pathlib import Path

import pytest

from tilepipe.host import gpus
from tilepipe.host.gpus import DEFAULT_MODEL, FITTED_FIELDS, H100, device_model, gpu_model, gpu_models

REPO = Path(__file__).resolve().parent.parent

H100_CONSTANTS = {
    "sm_flops": 700e12 / 132, "fp8_sm_flops": 1300e12 / 132, "dram_bytes_per_us": 2.6e6, "l2_dirty_bytes": 20e6,
    "load_latency_us": 1.5, "sm_bytes_per_us": 110e3, "sm_dram_bytes_per_us": 84e3, "launch_us": 4.0,
    "mma_efficiency": {4: 0.83, 8: 1.0}, "streamk_fixup_us": 10.0, "partial_trip_us": 0.0, "streamk_few_rows_cost": 1.17,
    "unit_fill_us": 2.5, "restage_gain": 0.25, "copy_bytes_per_us": 2.5e6, "epilogue_steps": 1.64,
    "pingpong_step_cost": 1.072, "large_few_rows_rate": 0.86, "pieced_step_cost": {160: 1.03, 96: 1.15},
    "swap_floor_us": {8: -1.8, 16: -1.8, 32: -2.4, 64: -2.4, 128: 0.6}, "subtiled_first_max_m": 1280,
    "wide_fp32_min_k_with_c": 2560, "blockwise_streamk_max_m": 64, "blockwise_streamk_min_gain": 1.16}
"""The module constants host/configs.py predicted with before they moved to h100.json (commit 4bcbed2)."""


def test_the_h100_file_holds_the_constants_the_model_was_fitted_with():
    assert set(H100_CONSTANTS) == set(FITTED_FIELDS)
    assert {name: getattr(H100, name) for name in FITTED_FIELDS} == H100_CONSTANTS
    assert H100.refit is None and H100.sms == 132


@pytest.mark.parametrize("key, name, sms, capability", [
    ("h100", "NVIDIA H100 80GB HBM3", 132, (9, 0)),
    ("h200", "NVIDIA H200", 132, (9, 0)),
    ("b200", "NVIDIA B200", 148, (10, 0)),
])
def test_each_file_loads_and_torchs_name_finds_it(key, name, sms, capability):
    model = gpu_model(name)
    assert model is gpu_models()[key] and model.key == key
    assert (model.sms, model.compute_capability) == (sms, capability)
    assert model.dram_bytes_per_s > 0 and model.smem_per_block_bytes == 232448


def test_every_file_names_its_sources_and_what_is_not_refit():
    """Device figures cite their source; a file that borrows the H100's constants says so and which it fitted itself
    ("partial: ..."); each constant a file fits names the results files it was fitted on, and those files exist."""
    for path in sorted((REPO / "tilepipe" / "host" / "gpus").glob("*.json")):
        data = json.loads(path.read_text())
        assert data["device"]["source"], path.name
        fitted = data["fitted"]
        own = {name: entry for name, entry in fitted.items() if name not in ("same_as", "refit")}
        if "same_as" in fitted:
            assert fitted["same_as"] == "h100" and gpu_models()[path.stem].refit == fitted["refit"]
            assert fitted["refit"].startswith("partial: " if own else "pending: measured on H100 only")
            assert all(name in fitted["refit"] for name in own)
        for name, entry in own.items():
            assert "note" in entry and isinstance(entry["fitted_on"], list), name
            for results in entry["fitted_on"]:
                if results.startswith("bench/"):
                    assert (REPO / results).exists(), (name, results)


def test_borrowed_constants_are_the_h100s_and_the_h200_overrides_its_fitted_rates():
    """b200 borrows every constant; h200 its own rates (tools/fit_gpu.py on an H200 results file), the rest borrowed."""
    b200, h200 = gpu_models()["b200"], gpu_models()["h200"]
    assert all(getattr(b200, name) == getattr(H100, name) for name in FITTED_FIELDS)
    own = {"sm_flops", "fp8_sm_flops", "dram_bytes_per_us", "l2_dirty_bytes", "partial_trip_us"}
    assert all(getattr(h200, name) == getattr(H100, name) for name in FITTED_FIELDS if name not in own)
    assert h200.dram_bytes_per_us > H100.dram_bytes_per_us and h200.sm_flops > H100.sm_flops
    assert h200.partial_trip_us > H100.partial_trip_us == 0.0
    assert h200.dram_bytes_per_s > H100.dram_bytes_per_s


def test_fit_gpu_reproduces_the_h200_file():
    """The H200's fitted entries are what tools/fit_gpu.py fits on the results file each names."""
    from tilepipe.tools.fit_gpu import fit

    stored = json.loads((REPO / "tilepipe/host/gpus/h200.json").read_text())["fitted"]
    results = REPO / stored["dram_bytes_per_us"]["fitted_on"][0]  # shapes-h200-v1: predicted with the H100's constants
    for name, entry in fit(results, gpu_models()["h200"], predicted_with=gpu_models()["h100"]).items():
        assert stored[name]["value"] == entry["value"], name


def test_names_match_whole_words_only():
    """"GH200" is not an H200 (its own HBM3e figures); an H100 PCIe is an H100 (its SM count comes from the device)."""
    assert gpu_model("NVIDIA H100 PCIe").key == "h100"
    with pytest.warns(UserWarning, match="GH200"):
        assert gpu_model("NVIDIA GH200 480GB").key == DEFAULT_MODEL


def test_an_unknown_gpu_gets_the_default_model_and_one_warning():
    with pytest.warns(UserWarning, match="no cost model for 'NVIDIA A100-SXM4-80GB'.*H100"):
        assert gpu_model("NVIDIA A100-SXM4-80GB") is gpu_models()[DEFAULT_MODEL]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        gpu_model("NVIDIA A100-SXM4-80GB")  # once per name


def test_device_model_takes_the_devices_sm_count(monkeypatch):
    monkeypatch.setattr(gpus, "device_name", lambda index: "NVIDIA H100 PCIe")
    monkeypatch.setattr(gpus, "sm_count", lambda index: 114)
    model = device_model(0)
    assert model.sms == 114 and model.key == "h100" and model.sm_flops == H100.sm_flops
    assert device_model(0) is model  # one model per (GPU model, SM count)
    monkeypatch.setattr(gpus, "sm_count", lambda index: 132)
    assert device_model(0) is H100
