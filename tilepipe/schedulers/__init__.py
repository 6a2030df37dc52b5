"""Tile schedulers: which output tiles each persistent program computes, and in which order (one file each). A GEMM
kernel takes its scheduler as a constexpr class (`scheduler_class(SCHEDULE)`) and builds it with `from_kernel`."""

from triton.experimental import gluon

from tilepipe.schedulers.clc import ClcTileScheduler
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
CLUSTER_SCHEDULES = ("static", "dynamic", "streamk", "splitk")
"""The sm_90a schedules that hand out cluster tiles (a program is a cluster; stream-K's units are k-ranges of a cluster
tile, both CTAs in lockstep; a dynamic tile id is drawn once per cluster and multicast to both CTAs)."""
SM100_SCHEDULER_CLASSES = {"static": StaticTileScheduler, "clc": ClcTileScheduler}
SM100_SCHEDULERS = tuple(SM100_SCHEDULER_CLASSES)
"""The names the sm_100a GEMM's SCHEDULE takes (cluster launch control exists on sm_100a only)."""


@gluon.constexpr_function
def scheduler_class(name):
    """The scheduler class a kernel's SCHEDULE names."""
    return SCHEDULER_CLASSES[name]


@gluon.constexpr_function
def sm100_scheduler_class(name):
    """The scheduler class the sm_100a GEMM's SCHEDULE names (the dynamic and stream-K ones are not built for it)."""
    if name not in SM100_SCHEDULER_CLASSES:
        raise ValueError(f"the sm_100a GEMM takes SCHEDULE in {SM100_SCHEDULERS}, got {name!r}")
    return SM100_SCHEDULER_CLASSES[name]
