"""Skip tests marked `gpu` when there is no CUDA GPU, so the same suite runs here and on the device machine; share
compiled kernels and explored protocols across the session's tests and the commands they start (one compile per
kernel spec, one exploration per protocol model)."""

import os
import shutil
import tempfile
from collections import Counter

import pytest

_SESSION_CACHE: list[str] = []


SESSION_CACHES = {"TILEPIPE_COMPILE_CACHE": "compile", "TILEPIPE_CHECK_CACHE": "check"}
"""The session's caches (tilepipe.verify.compile's reports, tilepipe.verify.checker's explorations), by variable."""


LONGEST_FIRST = ("test_cli.py", "test_checker.py", "test_matmul.py", "test_subtiles.py", "test_linear.py",
                 "test_cluster.py", "test_sm100.py")
"""The files that take longest (whole-catalogue reports and checks, the largest compile fixtures: --durations of the
README's command), run first, so that under pytest -n the other workers' shorter files fill the end of the run rather
than one long file running alone; the rest follow in pytest-xdist's order (most tests first)."""


def pytest_configure(config: pytest.Config) -> None:
    """Caches for the session: tests, and the `python -m tilepipe` commands tests run, compile a spec and explore a
    protocol once. A cache directory the caller set is kept as it is. Under pytest-xdist, files are handed out in the
    order pytest_collection_modifyitems leaves them (LONGEST_FIRST), not re-sorted by their number of tests."""
    if getattr(config.option, "loadscopereorder", False):
        config.option.loadscopereorder = False
    unset = [name for name in SESSION_CACHES if not os.environ.get(name)]
    if unset:
        _SESSION_CACHE.append(tempfile.mkdtemp(prefix="tilepipe-test-cache-"))
    for name in unset:
        os.environ[name] = os.path.join(_SESSION_CACHE[0], SESSION_CACHES[name])


def pytest_unconfigure(config: pytest.Config) -> None:
    for directory in _SESSION_CACHE:
        shutil.rmtree(directory, ignore_errors=True)
        for name, sub in SESSION_CACHES.items():
            if os.environ.get(name) == os.path.join(directory, sub):
                del os.environ[name]


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    tests_in = Counter(item.path for item in items)
    rank = {name: i for i, name in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: (rank.get(item.path.name, len(rank)), -tests_in[item.path], str(item.path)))
    gpu_items = [item for item in items if item.get_closest_marker("gpu") is not None]
    if not gpu_items:
        return
    import torch  # only when a GPU test was collected: importing torch costs a second or two

    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU (no torch.cuda device here)")
    for item in gpu_items:
        item.add_marker(skip)
