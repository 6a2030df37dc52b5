"""Skip tests marked `gpu` when there is no CUDA GPU, so the same suite runs here and on the device machine; share
compiled kernels across the session's tests and the commands they start (one compile per kernel spec)."""

import os
import shutil
import tempfile

import pytest

_SESSION_CACHE: list[str] = []


def pytest_configure(config: pytest.Config) -> None:
    """A report cache for the session (tilepipe.verify.compile): tests, and `python -m tilepipe` commands run by
    tests, compile a spec once. A cache directory the caller set is kept as it is."""
    if not os.environ.get("TILEPIPE_COMPILE_CACHE"):
        _SESSION_CACHE.append(tempfile.mkdtemp(prefix="tilepipe-compile-cache-"))
        os.environ["TILEPIPE_COMPILE_CACHE"] = _SESSION_CACHE[0]


def pytest_unconfigure(config: pytest.Config) -> None:
    for directory in _SESSION_CACHE:
        shutil.rmtree(directory, ignore_errors=True)
        os.environ.pop("TILEPIPE_COMPILE_CACHE", None)


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
