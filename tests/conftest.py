"""Skip tests marked `gpu` when there is no CUDA GPU, so the same suite runs here and on the device machine."""

import pytest


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    gpu_items = [item for item in items if item.get_closest_marker("gpu") is not None]
    if not gpu_items:
        return
    import torch  # only when a GPU test was collected: importing torch costs a second or two

    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU (no torch.cuda device here)")
    for item in gpu_items:
        item.add_marker(skip)
