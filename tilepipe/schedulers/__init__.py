"""Tile schedulers: which output tiles each persistent program computes, and in which order (one file each). A GEMM
kernel takes its scheduler as a constexpr class (`scheduler_class(SCHEDULE)`) and builds it with `from_kernel`."""

from triton.experimental import gluon

from tilepipe.schedulers.dynamic import DynamicTileScheduler
from tilepipe.schedulers.static import StaticTileScheduler
from tilepipe.schedulers.streamk import StreamKTileScheduler

SCHEDULER_CLASSES = {"static": StaticTileScheduler, "dynamic": DynamicTileScheduler, "streamk": StreamKTileScheduler}
SCHEDULERS = tuple(SCHEDULER_CLASSES)
"""The names a GEMM's SCHEDULE takes."""
KERNEL_SCHEDULE = {"splitk": "streamk"}
"""Host schedules that run another's kernel on their own grid: split-K is the stream-K scheduler on tiles x splits
programs, so every tile's k-steps split evenly over `splits` of them (host/configs.py: schedule_programs)."""
SCHEDULES = SCHEDULERS + tuple(KERNEL_SCHEDULE)
"""The names matmul's `scheduler=` takes."""


@gluon.constexpr_function
def scheduler_class(name):
    """The scheduler class a kernel's SCHEDULE names."""
    return SCHEDULER_CLASSES[name]
