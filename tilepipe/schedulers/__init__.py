"""Tile schedulers: which output tiles each persistent program computes, and in which order (one file each). A GEMM
kernel takes its scheduler as a constexpr class (`scheduler_class(SCHEDULE)`) and builds it with `from_kernel`."""

from triton.experimental import gluon

from tilepipe.schedulers.dynamic import DynamicTileScheduler
from tilepipe.schedulers.static import StaticTileScheduler
from tilepipe.schedulers.streamk import StreamKTileScheduler

SCHEDULER_CLASSES = {"static": StaticTileScheduler, "dynamic": DynamicTileScheduler, "streamk": StreamKTileScheduler}
SCHEDULERS = tuple(SCHEDULER_CLASSES)
"""The names a GEMM's SCHEDULE (and matmul's `scheduler=`) takes."""


@gluon.constexpr_function
def scheduler_class(name):
    """The scheduler class a kernel's SCHEDULE names."""
    return SCHEDULER_CLASSES[name]
