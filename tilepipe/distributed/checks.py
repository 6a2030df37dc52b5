"""Argument checks of the tensor-parallel ops (16-bit and FP8 per-tensor forms): each error names the argument.
What every rank must agree on (shapes, dtypes, layouts) is compared across the group once per geometry
(`check_agreement`, a collective)."""

from typing import NamedTuple

import torch
import torch.distributed as dist

from tilepipe.host.checks import FP8_DTYPES, INPUT_DTYPES
from tilepipe.host.checks import check_operands as check_gemm_operands
from tilepipe.pipeline.flags import MAX_CHUNKS
from tilepipe.probes.debug import debug_requested


class Call(NamedTuple):
    """One call's problem on this rank: the rows of A here, K and N of the local GEMM, B's layout, the result's shape
    and dtype, and whether it is the FP8 per-tensor form."""
    rows: int
    K: int
    N: int
    b_kmajor: bool
    out_shape: tuple[int, int]
    out_dtype: torch.dtype
    fp8: bool


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


def check_call(op: str, a_name: str, a: torch.Tensor, b: torch.Tensor, group: dist.ProcessGroup,
               scale_a: torch.Tensor | None, scale_b: torch.Tensor | None, out: torch.Tensor | None,
               out_dtype: torch.dtype | None) -> Call:
    """Every check of a tensor-parallel op's arguments that needs neither memory nor the other ranks (fake tensors
    pass through it too). a (named `a_name`) [rows, K] and b [K, N] on one CUDA device: fp16 or bf16 of one dtype, b
    row-major or K-major (a transposed [N, K] tensor), D of a's dtype; or, with both scales (the FP8 per-tensor form),
    float8 (e4m3fn, or e5m2 for one), b K-major, the scales one-element float32 tensors, D bf16 (default) or fp16.
    Rows of 16 bytes; the group's size at most MAX_CHUNKS; `op` matmul_reduce_scatter: rows split evenly."""
    fp8 = scale_a is not None or scale_b is not None
    if fp8:
        _check_fp8(a_name, a, b, scale_a, scale_b)
    else:
        check_gemm_operands(a, b, (a_name, "b"))  # types, 2-D, 16-bit, CUDA, one dtype and device, K
    rows, K = a.shape
    N = b.shape[1]
    if a.stride(1) != 1 or a.stride(0) != K and rows > 1:
        raise ValueError(f"{a_name} must be contiguous, got strides {a.stride()}")
    b_kmajor = b.stride(0) == 1 and b.stride(1) == K and N > 1
    if not b_kmajor and (fp8 or b.stride(1) != 1 or b.stride(0) != N and K > 1):
        raise ValueError(f"b must be {'' if fp8 else 'row-major or '}a transposed (N, K) tensor (K-major"
                         f"{': fp8 wgmma reads B K-major' if fp8 else ''}), got strides {b.stride()}")
    if (N if not b_kmajor else K) * a.element_size() % 16 or K * a.element_size() % 16:
        raise ValueError(f"{a_name} and b need rows of 16 bytes, got K = {K}, N = {N} of {a.dtype}")
    world = group.size()
    if world > MAX_CHUNKS:
        raise ValueError(f"group: at most {MAX_CHUNKS} ranks, got {world}")
    if op == "matmul_reduce_scatter" and rows % world:
        raise ValueError(f"{a_name}: its {rows} rows must split evenly over the group's {world} ranks")
    out_dtype = _check_out_dtype(out_dtype, a.dtype, fp8)
    shape = (rows * world if op == "all_gather_matmul" else rows // world, N)
    if out is not None:
        if not isinstance(out, torch.Tensor):
            raise TypeError(f"out must be a torch.Tensor or None, got {type(out).__name__}")
        if out.device != a.device or out.dtype != out_dtype:
            raise ValueError(f"out must be a {out_dtype} tensor on {a.device}, got {out.dtype} on {out.device}")
        if tuple(out.shape) != shape or not out.is_contiguous():
            raise ValueError(f"out must be a contiguous {shape} tensor, got shape {tuple(out.shape)} strides "
                             f"{out.stride()}")
    return Call(rows, K, N, b_kmajor, shape, out_dtype, fp8)


def _check_fp8(a_name: str, a: torch.Tensor, b: torch.Tensor, scale_a: torch.Tensor | None,
               scale_b: torch.Tensor | None) -> None:
    """The FP8 form's operands and per-tensor scales (layouts are check_call's)."""
    tensors = ((a_name, a), ("b", b), ("scale_a", scale_a), ("scale_b", scale_b))
    for name, t in tensors:
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{name} must be a torch.Tensor (the FP8 form takes both scales), got {type(t).__name__}")
    for name, t in tensors:
        where = "a CUDA device" if t.device.type != "cuda" else f"{a_name}'s device {a.device}"
        if t.device.type != "cuda" or t.device != a.device:
            raise ValueError(f"{name} must be on {where}, got {t.device}")
    for name, t in ((a_name, a), ("b", b)):
        if t.dim() != 2:
            raise ValueError(f"{name} must be 2-D, got shape {tuple(t.shape)}")
        if t.dtype not in FP8_DTYPES:
            raise TypeError(f"{name} must be float8_e4m3fn or float8_e5m2 (scales given), got {t.dtype}")
    if a.dtype == b.dtype == torch.float8_e5m2:
        raise TypeError(f"{a_name} and b cannot both be float8_e5m2: make one of them e4m3fn")
    if a.shape[1] != b.shape[0]:
        raise ValueError(f"{a_name} is {tuple(a.shape)} and b is {tuple(b.shape)}: {a_name}.shape[1] must equal "
                         f"b.shape[0]")
    for name, t in (("scale_a", scale_a), ("scale_b", scale_b)):
        if t.dtype != torch.float32 or t.numel() != 1:
            raise ValueError(f"{name} must be a one-element float32 tensor (per-tensor scaling), got {t.dtype} "
                             f"{tuple(t.shape)}")


def _check_out_dtype(out_dtype: torch.dtype | None, a_dtype: torch.dtype, fp8: bool) -> torch.dtype:
    """D's dtype: a's for the 16-bit form, bf16 (default) or fp16 for the FP8 one."""
    if out_dtype is None:
        return torch.bfloat16 if fp8 else a_dtype
    allowed = INPUT_DTYPES if fp8 else (a_dtype, )
    if out_dtype not in allowed:
        raise TypeError(f"out_dtype must be one of {allowed} or None, got {out_dtype}")
    return out_dtype


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
