"""Argument checks of the tensor-parallel ops: each error names the argument. What every rank must agree on (shapes,
dtypes, layouts) is compared across the group once per geometry (`check_agreement`, a collective)."""

from typing import NamedTuple

import torch
import torch.distributed as dist

from tilepipe.host.checks import check_operands as check_gemm_operands
from tilepipe.pipeline.flags import MAX_CHUNKS
from tilepipe.probes.debug import debug_requested


class Geometry(NamedTuple):
    """One call's problem on this rank: `world` ranks, rows of A here (`rows`), K and N of the local GEMM, B's
    layout."""
    world: int
    rank: int
    rows: int
    K: int
    N: int
    b_kmajor: bool


def resolve_group(group: dist.ProcessGroup | str | None) -> dist.ProcessGroup:
    """`group` as a ProcessGroup: None is the default group, a string a group's name."""
    if not dist.is_available() or not dist.is_initialized():
        raise RuntimeError("group: torch.distributed is not initialized (call torch.distributed.init_process_group)")
    if group is None:
        return dist.group.WORLD
    if isinstance(group, str):
        return dist.distributed_c10d._resolve_process_group(group)
    if not isinstance(group, dist.ProcessGroup):
        raise TypeError(f"group must be a torch.distributed.ProcessGroup, its name or None, got "
                        f"{type(group).__name__}")
    return group


def check_operands(a_name: str, a: torch.Tensor, b: torch.Tensor, out: torch.Tensor | None,
                   group: dist.ProcessGroup) -> tuple[int, int, int, bool]:
    """a (named `a_name`) [rows, K] and b [K, N], both CUDA tensors of one device and dtype (fp16 or bf16), b row-major
    or K-major (a transposed [N, K] tensor), rows of 16 bytes; the group's size at most MAX_CHUNKS. Returns (rows, K,
    N, b K-major)."""
    check_gemm_operands(a, b, (a_name, "b"))  # types, 2-D, 16-bit, CUDA, one dtype and device, K
    rows, K = a.shape
    N = b.shape[1]
    if a.stride(1) != 1 or a.stride(0) != K and rows > 1:
        raise ValueError(f"{a_name} must be contiguous, got strides {a.stride()}")
    b_kmajor = b.stride(0) == 1 and b.stride(1) == K and N > 1
    if not b_kmajor and (b.stride(1) != 1 or b.stride(0) != N and K > 1):
        raise ValueError(f"b must be row-major or a transposed (N, K) tensor, got strides {b.stride()}")
    if (N if not b_kmajor else K) * a.element_size() % 16 or K * a.element_size() % 16:
        raise ValueError(f"{a_name} and b need rows of 16 bytes (K and N multiples of 8), got K = {K}, N = {N}")
    if group.size() > MAX_CHUNKS:
        raise ValueError(f"group: at most {MAX_CHUNKS} ranks, got {group.size()}")
    if out is not None:
        if not isinstance(out, torch.Tensor):
            raise TypeError(f"out must be a torch.Tensor or None, got {type(out).__name__}")
        if out.device != a.device or out.dtype != a.dtype:
            raise ValueError(f"out must be a {a.dtype} tensor on {a.device}, got {out.dtype} on {out.device}")
    return rows, K, N, b_kmajor


def check_out(out: torch.Tensor | None, shape: tuple[int, int]) -> None:
    """out, when given, is a contiguous tensor of the result's `shape`."""
    if out is not None and (tuple(out.shape) != shape or not out.is_contiguous()):
        raise ValueError(f"out must be a contiguous {shape} tensor, got shape {tuple(out.shape)} strides "
                         f"{out.stride()}")


def check_aligned(t: torch.Tensor | None, name: str = "out") -> None:
    """`t` (named `name`), when given, starts on 16 bytes (TMA reads or writes it); a real tensor's check (a fake one
    has no address)."""
    if t is not None and t.data_ptr() % 16:
        raise ValueError(f"{name} must start on 16 bytes (TMA reads or writes it), got address {t.data_ptr():#x}")


def check_switches(overlap: bool | None, debug: bool | None) -> bool:
    """`overlap` is a bool or None; `debug` as debug_requested takes it, and not while a CUDA graph is captured (the
    check reads the report on the host). Returns whether debug mode is on."""
    if overlap is not None and not isinstance(overlap, bool):
        raise TypeError(f"overlap must be a bool or None, got {type(overlap).__name__}")
    debug = debug_requested(debug)
    if debug and torch.cuda.is_available() and torch.cuda.is_current_stream_capturing():
        raise ValueError("debug: debug mode reads its report on the host, which a CUDA graph capture cannot")
    return debug


_AGREED: set[tuple] = set()


def check_agreement(group: dist.ProcessGroup, op: str, a_name: str, a: torch.Tensor, b: torch.Tensor,
                    b_kmajor: bool) -> None:
    """Every rank of `group` passes the same shapes, dtype and B layout to `op`: compared once per geometry with an
    all_gather_object (a collective every rank makes at its first call of this geometry)."""
    mine = (op, tuple(a.shape), tuple(b.shape), str(a.dtype), b_kmajor)
    key = (group.group_name, mine)
    if key in _AGREED:
        return
    seen: list = [None] * group.size()
    dist.all_gather_object(seen, mine, group=group)
    for rank, theirs in enumerate(seen):
        for index, name in ((1, a_name), (2, "b"), (3, f"{a_name}.dtype"), (4, "b's layout")):
            if theirs[index] != mine[index] or theirs[0] != op:
                raise ValueError(f"{name} differs across the group: {mine[index]} on rank {group.rank()}, "
                                 f"{theirs[index]} on rank {rank} (called {theirs[0]} there)")
    _AGREED.add(key)
