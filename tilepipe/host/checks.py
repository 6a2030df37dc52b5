"""Argument checks of the torch-facing ops: a TypeError or ValueError that names the argument, before any launch.
None needs a memory address except the overlap checks, so fake tensors (torch.compile) pass through the rest."""

import math
from typing import NamedTuple

import torch

from tilepipe.host.configs import NARROW_PIECED_16BIT, SCALE_BLOCK, MatmulConfig
from tilepipe.host.device import device_index
from tilepipe.host.launch import check_tma_starts
from tilepipe.kernels.epilogue_functions import GATE_COLUMNS
from tilepipe.kernels.quantize_epilogues import SCALE_GROUP
from tilepipe.pipeline.pieces import PIECES, is_power_of_two, row_side_ok, side_pieces
from tilepipe.schedulers import CLUSTER_SCHEDULES, SCHEDULES, SM100_SCHEDULERS

INPUT_DTYPES = (torch.bfloat16, torch.float16)
OUTPUT_DTYPES = (torch.bfloat16, torch.float16, torch.float32)


def check_operands(a: torch.Tensor, b: torch.Tensor, names: tuple[str, str] = ("a", "b")) -> None:
    """The 16-bit GEMM's operands, under the caller's names for them (addmm's are mat1 and mat2)."""
    operands = tuple(zip(names, (a, b)))
    first, second = names
    for name, t in operands:
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
    for name, t in operands:
        if t.dim() != 2:
            raise ValueError(f"{name} must be 2-D, got shape {tuple(t.shape)}")
    for name, t in operands:
        if t.dtype not in INPUT_DTYPES:
            raise TypeError(f"{name} must be bfloat16 or float16, got {t.dtype}")
    for name, t in operands:
        if t.device.type != "cuda":
            raise ValueError(f"{name} must be on a CUDA device, got {t.device}")
    if a.dtype != b.dtype:
        raise TypeError(f"{first} and {second} must have the same dtype, got {a.dtype} and {b.dtype}")
    if a.device != b.device:
        raise ValueError(f"{first} and {second} must be on the same device, got {a.device} and {b.device}")
    if a.shape[1] != b.shape[0]:
        raise ValueError(f"{first} is {tuple(a.shape)} and {second} is {tuple(b.shape)}: {first}.shape[1] must equal "
                         f"{second}.shape[0]")


def check_out_dtype(out_dtype: torch.dtype | None, out: torch.Tensor | None, default: torch.dtype) -> torch.dtype:
    if out is not None:
        if not isinstance(out, torch.Tensor):
            raise TypeError(f"out must be a torch.Tensor, got {type(out).__name__}")
        if out.dtype not in OUTPUT_DTYPES:
            raise TypeError(f"out must be bfloat16, float16 or float32, got {out.dtype}")
        if out_dtype is not None and out.dtype != out_dtype:
            raise TypeError(f"out has dtype {out.dtype} but out_dtype is {out_dtype}")
        out_dtype = out.dtype
    out_dtype = out_dtype or default
    if out_dtype not in OUTPUT_DTYPES:
        raise TypeError(f"out_dtype must be bfloat16, float16 or float32, got {out_dtype}")
    return out_dtype


def check_scalar(value: float, name: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{name} must be a real number, got {type(value).__name__}")
    return float(value)


def check_residual(c: torch.Tensor, shape: tuple[int, int], dtype: torch.dtype, device: torch.device) -> None:
    if not isinstance(c, torch.Tensor):
        raise TypeError(f"c must be a torch.Tensor, got {type(c).__name__}")
    check_result_shaped(c, "c", shape, device)
    if c.dtype != dtype and not (c.dtype == torch.float32 and dtype.itemsize == 2):
        raise TypeError(f"c must have the output dtype {dtype} or float32, got {c.dtype}")


def is_column_bias(c: torch.Tensor) -> bool:
    """One row broadcast to every row (stride 0 along M) and contiguous along N: a per-column bias."""
    return c.stride(0) == 0 and (c.stride(1) == 1 or c.shape[1] == 1)


def check_result_shaped(t: torch.Tensor, name: str, shape: tuple[int, int], device: torch.device) -> None:
    """`out` and `c` are M x N tensors on the operands' device."""
    if tuple(t.shape) != shape:
        raise ValueError(f"{name} must have shape {shape}, got {tuple(t.shape)}")
    if t.device != device:
        raise ValueError(f"{name} must be on {device}, got {t.device}")


def check_out(out: torch.Tensor, shape: tuple[int, int], device: torch.device) -> None:
    """`out` is an M x N tensor on the operands' device whose elements are distinct memory: the kernel writes each
    once, and elements sharing an address (a broadcast view) would race."""
    check_result_shaped(out, "out", shape, device)
    if self_overlapping(out):
        raise ValueError(f"out must not have elements that share memory, got strides {out.stride()} for shape "
                         f"{tuple(out.shape)}; pass a tensor that owns its elements")


def self_overlapping(t: torch.Tensor) -> bool:
    """Whether two elements of a 2-D tensor share an address: a zero stride along a dimension longer than 1, or
    i * stride(0) = j * stride(1) for some 0 < i < rows, 0 < j < columns (the smallest such pair is stride(1) / g,
    stride(0) / g, with g their gcd)."""
    (rows, cols), (s0, s1) = t.shape, t.stride()
    if rows > 1 and s0 == 0 or cols > 1 and s1 == 0:
        return True
    if rows <= 1 or cols <= 1:
        return False
    g = math.gcd(s0, s1)
    return s1 // g < rows and s0 // g < cols


def overlaps(x: torch.Tensor, y: torch.Tensor) -> bool:
    """Whether the address spans of two tensors (of any rank) intersect."""
    if x.numel() == 0 or y.numel() == 0:
        return False
    x0, y0 = x.data_ptr(), y.data_ptr()
    x1 = x0 + (sum((n - 1) * s for n, s in zip(x.shape, x.stride())) + 1) * x.element_size()
    y1 = y0 + (sum((n - 1) * s for n, s in zip(y.shape, y.stride())) + 1) * y.element_size()
    return x0 < y1 and y0 < x1


def check_no_overlap(out: torch.Tensor, a: torch.Tensor, b: torch.Tensor, c: torch.Tensor | None,
                     **others: torch.Tensor | None) -> None:
    """ValueError naming the first of a, b, c (but c that is out itself: D in place) and the named `others` (None: not
    given) that shares memory with out."""
    named = {"a": a, "b": b, "c": None if c is out else c} | others
    for name, t in named.items():
        if t is not None and overlaps(out, t):
            raise ValueError(f"out must not share memory with {name}" + (" (except by being c itself)"
                                                                         if name == "c" else ""))


class MatmulProblem(NamedTuple):
    """A checked 16-bit GEMM call, D = alpha * a @ b + beta * c (+ a bias row), the input of choosing, staging and
    planning its launch: `c` is a separate C tile source or None (None too when beta is 0, or when the call's c is a
    bias row: then `bias` holds its N values); `out` is the caller's or None; `b_kmajor` is B's layout as given."""
    a: torch.Tensor
    b: torch.Tensor
    out: torch.Tensor | None
    c: torch.Tensor | None
    bias: torch.Tensor | None
    M: int
    N: int
    K: int
    out_dtype: torch.dtype
    alpha: float
    beta: float
    b_kmajor: bool
    device: int
    config: MatmulConfig | None
    scheduler: str | None
    epilogue: object


def validate_matmul(a: torch.Tensor, b: torch.Tensor, out: torch.Tensor | None, out_dtype: torch.dtype | None,
                    c: torch.Tensor | None, alpha: float, beta: float, config: MatmulConfig | None,
                    scheduler: str | None, epilogue: object = None) -> MatmulProblem:
    """Every check of matmul's arguments that needs no configuration (overlap of `out` with the inputs included): the
    problem, with a C that is one row broadcast down the columns read as a bias row."""
    if scheduler is not None and scheduler not in (*SCHEDULES, *SM100_SCHEDULERS):
        raise ValueError(f"scheduler must be one of {SCHEDULES} (sm_100: {SM100_SCHEDULERS}) or None, got "
                         f"{scheduler!r}")
    M, N, K, out_dtype, c, alpha, beta = check_matmul(a, b, out, out_dtype, c, alpha, beta, config)
    if out is not None:
        check_no_overlap(out, a, b, c)
    bias = None
    if c is not None and c is not out and is_column_bias(c):
        bias, c = c[0], None
    b_kmajor = b.stride(0) == 1 and b.stride(1) != 1
    return MatmulProblem(a, b, out, c, bias, M, N, K, out_dtype, alpha, beta, b_kmajor, device_index(a), config,
                         scheduler, epilogue)


def check_matmul(a: torch.Tensor, b: torch.Tensor, out: torch.Tensor | None, out_dtype: torch.dtype | None,
                 c: torch.Tensor | None, alpha: float, beta: float, config: MatmulConfig | None = None
                 ) -> tuple[int, int, int, torch.dtype, torch.Tensor | None, float, float]:
    """Every check of matmul's arguments that needs no memory address (so fake tensors pass through it too):
    (M, N, K, out dtype, c or None when beta is 0, alpha, beta)."""
    check_operands(a, b)
    out_dtype = check_out_dtype(out_dtype, out, a.dtype)
    M, K = a.shape
    N = b.shape[1]
    alpha, beta = check_scalar(alpha, "alpha"), check_scalar(beta, "beta")
    if beta != 0.0 and c is None:
        raise ValueError("beta is nonzero but c is None: pass c, or leave beta at 0")
    c = c if beta != 0.0 else None
    if c is not None:
        check_residual(c, (M, N), out_dtype, a.device)
    if out is not None:
        check_out(out, (M, N), a.device)
    check_config(config)
    return M, N, K, out_dtype, c, alpha, beta

def check_cluster(cfg: MatmulConfig, schedule: str, arch: str, has_c: bool = False,
                  pair: bool = True) -> None:
    """Clusters on sm_90a: 2x1 and 1x2 (the shared operand multicast) under the static, dynamic, stream-K and split-K
    schedules (a stream-K unit is a k-range of a cluster tile; a dynamic tile id reaches both CTAs by multicast); on
    sm_100a the 2x1 pair of the two-CTA GEMM (`pair`: the calling GEMM has that form; without C, `has_c`, which is
    not model-checked with a pair), static only. Anything else raises ValueError."""
    if cfg.cluster.num_ctas == 1:
        return
    if arch == "sm_100a" and not pair:
        raise ValueError(f"a {cfg.cluster_m}x{cfg.cluster_n} cluster is built for this GEMM on sm_90a (Hopper) only; "
                         "on sm_100a it takes configs with cluster_m = cluster_n = 1")
    if arch == "sm_100a" and cfg.cluster_n != 1:
        raise ValueError(f"cluster_n = {cfg.cluster_n}: sm_100a's clustered GEMM is the 2x1 pair of its two-CTA MMA "
                         "(cluster_m = 2, cluster_n = 1); a 1x2 cluster is built for sm_90a (Hopper) only")
    if arch == "sm_100a" and has_c:
        raise ValueError("c: the two-CTA sm_100a GEMM (cluster_m = 2) is built without a C epilogue; pass a config "
                         "with cluster_m = 1, or no c")
    built = CLUSTER_SCHEDULES if arch == "sm_90a" else ("static", )
    if schedule not in built:
        raise ValueError(f"scheduler {schedule!r} does not hand out cluster tiles yet; on {arch} a config with a "
                         f"{cfg.cluster_m}x{cfg.cluster_n} cluster runs under scheduler in {built}")

def check_swap_ab(cfg: MatmulConfig, b_kmajor: bool, arch: str) -> None:
    """Swap-AB is built for the sm_90a GEMM, without clusters, with B K-major (the problem's B^T, an (N, K) tensor
    with unit inner stride, is the kernel's A operand): anything else raises ValueError."""
    if not cfg.swap_ab:
        return
    if arch != "sm_90a":
        raise ValueError(f"swap-AB is built for sm_90a (Hopper) only; {arch}'s GEMM takes configs with swap_ab=False")
    if cfg.cluster.num_ctas > 1:
        raise ValueError("a config cannot have both swap_ab=True and a cluster")
    if not b_kmajor:
        raise ValueError("a config with swap_ab=True needs b K-major (a transposed (N, K) tensor such as w.t()); "
                         "this b is row-major (K, N)")

def check_pieced(cfg: MatmulConfig, schedule: str, arch: str, own_source: bool, out_dtype: torch.dtype) -> None:
    """A tile with a side held as power-of-two pieces (pipeline/pieces.py: 192 rows or columns, 96 or 160 columns of
    128 rows, and 96 or 192 columns of 64 rows) is built for the sm_90a GEMM's 8 MMA warps (4 for 64 rows) with a
    16-bit D (and C, if any, of D's dtype: `own_source` is an fp32 C), under the static or dynamic schedule, without
    a cluster or swap-AB; any other side that is not a power of two, or any other use, raises ValueError."""
    if not row_side_ok(cfg.block_m):
        raise ValueError(f"config.block_m must be a power of two or one of "
                         f"{[side for side in sorted(PIECES) if row_side_ok(side)]}, got {cfg.block_m}")
    if not (is_power_of_two(cfg.block_n) or cfg.block_n in PIECES):
        raise ValueError(f"config.block_n must be a power of two or one of {sorted(PIECES)}, got {cfg.block_n}")
    narrow = NARROW_PIECED_16BIT  # a pieced form on one warpgroup
    rows_built = (narrow.block_m, 128) if cfg.block_n == narrow.block_n else (128, )
    if cfg.block_n in PIECES and not row_side_ok(cfg.block_n) and cfg.block_m not in rows_built:
        raise ValueError(f"config.block_m must be {' or '.join(map(str, rows_built))} with block_n = {cfg.block_n} "
                         f"(the forms built and tested), got {cfg.block_m}")
    if not cfg.pieced:
        return
    tile = f"a {cfg.block_m}x{cfg.block_n} tile"
    if arch != "sm_90a":
        raise ValueError(f"{tile} (held as power-of-two pieces) is built for sm_90a (Hopper) only")
    warps = narrow.num_warps if cfg.block_m == narrow.block_m else 8
    if cfg.swap_ab or cfg.cluster.num_ctas > 1 or cfg.num_warps != warps:
        raise ValueError(f"{tile} is built with num_warps={warps}, without swap-AB or a cluster")
    if schedule not in ("static", "dynamic"):
        raise ValueError(f"scheduler {schedule!r}: {tile} runs under the static or dynamic scheduler")
    if out_dtype == torch.float32:
        raise ValueError(f"out_dtype: {tile} is built for a 16-bit D")
    if own_source:
        raise ValueError(f"c: {tile} takes a C of D's dtype only (an fp32 C needs stages of its own); pass a "
                         "power-of-two config")

def check_subtiles(cfg: MatmulConfig, arch: str) -> None:
    """D in sub-tiles (`epilogue_n`) is built for the sm_90a GEMM's tiles of power-of-two rows (columns in pieces
    too: each piece a whole number of sub-tiles) without a cluster, in a power-of-two width of at least 16 columns
    that divides every column piece; under swap-AB (D's columns are block_m) only as the 128-row tile's halves, the
    64 columns of D a gated epilogue writes of a gate-up pair (GATE_COLUMNS). Anything else raises ValueError."""
    if cfg.epilogue_n is None:
        return
    side, name = (cfg.block_m, "block_m") if cfg.swap_ab else (cfg.block_n, "block_n")  # D's columns
    width, piece = cfg.epilogue_n, min(side_pieces(side))  # the side checked by check_pieced
    if not isinstance(width, int) or width < 16 or not is_power_of_two(width) or piece % width:
        raise ValueError(f"config.epilogue_n must be a power of two of at least 16 that divides {name} = {side}" +
                         (f" and its {piece}-column piece" if piece != side else "") + f", got {width!r}")
    if arch != "sm_90a":
        raise ValueError(f"config.epilogue_n: D in sub-tiles is built for sm_90a (Hopper) only; {arch}'s GEMM "
                         "takes configs with epilogue_n=None (its epilogue sub-tiles are its own)")
    if cfg.block_m in PIECES or cfg.cluster.num_ctas > 1:
        raise ValueError("config.epilogue_n: D in sub-tiles is built without rows in pieces or a cluster")
    if cfg.swap_ab and (cfg.block_m, width) != (2 * GATE_COLUMNS.value, GATE_COLUMNS.value):
        raise ValueError(f"config.epilogue_n: under swap-AB D in sub-tiles is built as a gated epilogue writes it, "
                         f"block_m = {2 * GATE_COLUMNS.value} and epilogue_n = {GATE_COLUMNS.value}; got block_m = "
                         f"{cfg.block_m}, epilogue_n = {width}")

def check_pingpong(cfg: MatmulConfig, schedule: str, arch: str, has_c: bool) -> None:
    """Two MMA warpgroups taking turns (`pingpong`, kernels/matmul_pingpong.py) are built for the sm_90a GEMM's
    power-of-two tiles, one warpgroup each (num_warps=4), under the static schedule, without C (a bias row is
    fine), a cluster or swap-AB; anything else raises ValueError."""
    if not cfg.pingpong:
        return
    if arch != "sm_90a":
        raise ValueError(f"config.pingpong: two MMA warpgroups taking turns are built for sm_90a (Hopper) only, not "
                         f"{arch}")
    if cfg.num_warps != 4 or cfg.pieced or cfg.swap_ab or cfg.cluster.num_ctas > 1:
        raise ValueError("config.pingpong is built with num_warps=4 (a warpgroup a turn), power-of-two sides, without "
                         "swap-AB or a cluster")
    if schedule != "static":
        raise ValueError(f"scheduler {schedule!r}: config.pingpong runs under the static scheduler")
    if has_c:
        raise ValueError("c: config.pingpong takes no C tile (a bias row, c=bias.expand(M, N), is fine); pass a "
                         "config without pingpong")

def check_schedule(scheduler: str | None, arch: str) -> None:
    """The schedulers each GEMM has: sm_90a the SCHEDULES (split-K included), sm_100a the SM100_SCHEDULERS (cluster
    launch control exists on sm_100 only; dynamic, stream-K and split-K are not built for it yet)."""
    offered = SM100_SCHEDULERS if arch == "sm_100a" else SCHEDULES
    if scheduler is not None and scheduler not in offered:
        raise ValueError(f"scheduler {scheduler!r} is not built for {arch}; this GPU's GEMM takes one of {offered}")

FP8_DTYPES = (torch.float8_e4m3fn, torch.float8_e5m2)


def check_fp8_operands(a: torch.Tensor, b: torch.Tensor) -> None:
    """Types, shapes and the K-major layouts fp8 wgmma needs (devices are checked with the scales)."""
    for name, t in (("a", a), ("b", b)):
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
        if t.dim() != 2:
            raise ValueError(f"{name} must be 2-D, got shape {tuple(t.shape)}")
        if t.dtype not in FP8_DTYPES:
            raise TypeError(f"{name} must be float8_e4m3fn or float8_e5m2, got {t.dtype}")
    if a.dtype == b.dtype == torch.float8_e5m2:
        raise TypeError("a and b cannot both be float8_e5m2 (as in torch._scaled_mm): make one of them e4m3fn")
    check_k_major(a, b, "fp8 wgmma")


def check_k_major(a: torch.Tensor, b: torch.Tensor, reader: str) -> None:
    """a (M, K) and b (K, N) of matching K, a row-major and b column-major: `reader` reads both K-major."""
    if a.shape[1] != b.shape[0]:
        raise ValueError(f"a is {tuple(a.shape)} and b is {tuple(b.shape)}: a.shape[1] must equal b.shape[0]")
    if a.stride(1) != 1 and a.shape[1] > 1:
        raise ValueError(f"a must be row-major (K-major: {reader} reads A K-major), got strides {a.stride()}; "
                         "pass a.contiguous() to copy it")
    if b.stride(0) != 1 and b.shape[0] > 1:
        raise ValueError(f"b must be column-major (K-major, b = w.t() of a row-major (N, K) w: {reader} reads B "
                         f"K-major), got strides {b.stride()}; pass b.t().contiguous().t() to copy it")


BLOCK_SCALED = {"mxfp8": (FP8_DTYPES, torch.float8_e8m0fnu, 32),
                "mxfp4": ((torch.float4_e2m1fn_x2, ), torch.float8_e8m0fnu, 32),
                "nvfp4": ((torch.float4_e2m1fn_x2, ), torch.float8_e4m3fn, 16)}
"""Block-scaled formats as torch._scaled_mm takes them: data dtypes, scale dtype, K elements per scale."""


def elements_per_byte(dtype: torch.dtype) -> int:
    """Elements of K one stored element of `dtype` holds: 2 for float4_e2m1fn_x2 (MXFP4, NVFP4), else 1."""
    return 2 if dtype == torch.float4_e2m1fn_x2 else 1


def check_block_scaled(a: torch.Tensor, b: torch.Tensor, scale_a: torch.Tensor, scale_b: torch.Tensor, fmt: str
                       ) -> tuple[int, int, int]:
    """matmul_block_scaled's operands and scales for format `fmt`, as torch._scaled_mm's MX/NV path takes them: a
    (M, K) row-major and b (K, N) column-major (float4_e2m1fn_x2: K/2 bytes of two elements), on one CUDA device;
    each scale contiguous, of the format's dtype, with one element per 128-row block (rows padded to 128) and 4-scale
    group along K (scales padded to 4) in the packed-block order. (M, N, K) with K in elements."""
    if not isinstance(fmt, str):
        raise TypeError(f"format must be a str (one of {sorted(BLOCK_SCALED)}), got {type(fmt).__name__}")
    if fmt not in BLOCK_SCALED:
        raise ValueError(f"format must be one of {sorted(BLOCK_SCALED)}, got {fmt!r}")
    data, scale_dtype, vec = BLOCK_SCALED[fmt]
    for name, t in (("a", a), ("b", b), ("scale_a", scale_a), ("scale_b", scale_b)):
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
    for name, t in (("a", a), ("b", b)):
        if t.dim() != 2:
            raise ValueError(f"{name} must be 2-D, got shape {tuple(t.shape)}")
        if t.dtype not in data:
            raise TypeError(f"{name} must be {' or '.join(map(str, data))} for format {fmt!r}, got {t.dtype}")
    check_k_major(a, b, "tcgen05")
    M, K, N = a.shape[0], a.shape[1] * elements_per_byte(a.dtype), b.shape[1]
    k_groups = -(-K // (4 * vec)) * 4
    for name, s, rows in (("scale_a", scale_a, M), ("scale_b", scale_b, N)):
        if s.dtype != scale_dtype:
            raise TypeError(f"{name} must be {scale_dtype} for format {fmt!r}, got {s.dtype}")
        expected = -(-rows // 128) * 128 * k_groups
        if s.numel() != expected:
            raise ValueError(f"{name} must have {expected} elements for format {fmt!r} at M={M}, N={N}, K={K}: "
                             f"{-(-rows // 128) * 128} rows (padded to 128) by {k_groups} scales (one per {vec} of K, "
                             f"padded to 4) in the packed 32x4x4 block order; got {s.numel()}")
        if not s.is_contiguous():
            raise ValueError(f"{name} must be contiguous (the packed block order), got strides {s.stride()}")
    for name, t in (("a", a), ("b", b), ("scale_a", scale_a), ("scale_b", scale_b)):
        if t.device.type != "cuda":
            raise ValueError(f"{name} must be on a CUDA device, got {t.device}")
        if t.device != a.device:
            raise ValueError(f"{name} must be on a's device {a.device}, got {t.device}")
    return M, N, K


def scaling_of(scale_a: torch.Tensor, scale_b: torch.Tensor, M: int, N: int, K: int) -> str:
    """"tensor", "row" or "blockwise", from the scale shapes as torch._scaled_mm reads them; else ValueError."""
    for name, s in (("scale_a", scale_a), ("scale_b", scale_b)):
        if not isinstance(s, torch.Tensor):
            raise TypeError(f"{name} must be a torch.Tensor, got {type(s).__name__}")
        if s.dtype != torch.float32:
            raise TypeError(f"{name} must be float32, got {s.dtype}")
    if scale_a.numel() == 1 and scale_b.numel() == 1:
        return "tensor"
    sa, sb = tuple(scale_a.shape), tuple(scale_b.shape)
    k_blocks = -(-K // SCALE_BLOCK)
    if sa == (M, 1) and sb == (1, N):
        return "row"
    if sa == (M, k_blocks) and sb == (k_blocks, -(-N // SCALE_BLOCK)):
        return "blockwise"
    raise ValueError(f"scale_a {sa} and scale_b {sb} match no scaling for M={M}, N={N}, K={K}: per-tensor takes one "
                     f"element each, per-row ({M}, 1) and (1, {N}), blockwise ({M}, {k_blocks}) and "
                     f"({k_blocks}, {-(-N // SCALE_BLOCK)})")


FP8_SCHEDULES = ("static", "streamk", "splitk")
"""The schedules matmul_fp8's `scheduler` takes on sm_90a (fp8_schedule_for's candidates)."""


class Fp8Problem(NamedTuple):
    """A checked matmul_fp8 call, D = (a * scale_a) @ (b * scale_b): b is (K, N) column-major, `mode` the scaling
    ("tensor", "row" or "blockwise"), the input of choosing, staging and planning its launch."""
    a: torch.Tensor
    b: torch.Tensor
    scale_a: torch.Tensor
    scale_b: torch.Tensor
    M: int
    N: int
    K: int
    mode: str
    out_dtype: torch.dtype
    device: int
    config: MatmulConfig | None
    scheduler: str | None


def validate_matmul_fp8(a: torch.Tensor, b: torch.Tensor, scale_a: torch.Tensor, scale_b: torch.Tensor,
                        out_dtype: torch.dtype, out: torch.Tensor | None, config: MatmulConfig | None,
                        scheduler: str | None) -> Fp8Problem:
    """Every check of matmul_fp8's arguments that needs no configuration (overlap of `out` with a and b included)."""
    if scheduler is not None and scheduler not in FP8_SCHEDULES:
        raise ValueError(f"scheduler must be one of {FP8_SCHEDULES} or None, got {scheduler!r}")
    M, N, K, mode, out_dtype = check_matmul_fp8(a, b, scale_a, scale_b, out_dtype, out)
    check_config(config)
    if out is not None:
        check_no_overlap(out, a, b, None)
    return Fp8Problem(a, b, scale_a, scale_b, M, N, K, mode, out_dtype, device_index(a), config, scheduler)


def check_config(config: object) -> None:
    """A caller's `config`: a MatmulConfig, or None for the model's choice (TypeError otherwise)."""
    if config is not None and not isinstance(config, MatmulConfig):
        raise TypeError(f"config must be a MatmulConfig, got {type(config).__name__}")


def check_matmul_fp8(a: torch.Tensor, b: torch.Tensor, scale_a: torch.Tensor, scale_b: torch.Tensor,
                     out_dtype: torch.dtype, out: torch.Tensor | None) -> tuple[int, int, int, str, torch.dtype]:
    """Every check of matmul_fp8's arguments that needs no memory address (fake tensors pass through it too):
    (M, N, K, scaling mode, out dtype)."""
    check_fp8_operands(a, b)
    M, K = a.shape
    N = b.shape[1]
    mode = scaling_of(scale_a, scale_b, M, N, K)
    out_dtype = check_out_dtype(out_dtype if out is None else None, out, out_dtype)
    for name, t in (("a", a), ("b", b), ("scale_a", scale_a), ("scale_b", scale_b)):
        if t.device.type != "cuda":
            raise ValueError(f"{name} must be on a CUDA device, got {t.device}")
        if t.device != a.device:
            raise ValueError(f"{name} must be on a's device {a.device}, got {t.device}")
    if out is not None:
        check_out(out, (M, N), a.device)
    return M, N, K, mode, out_dtype


def check_activation(activation: str | None, table: dict, optional: bool) -> None:
    """`activation` must name one of `table`'s (or be None where `optional`): TypeError / ValueError naming it."""
    if activation is None and optional:
        return
    names = sorted(table) + (["None"] if optional else [])
    if not isinstance(activation, str):
        raise TypeError(f"activation must be a str (one of {names}), got {type(activation).__name__}")
    if activation not in table:
        raise ValueError(f"activation must be one of {names}, got {activation!r}")


def check_linear(x: torch.Tensor, w: torch.Tensor, bias: torch.Tensor | None, activation: str | None,
                 out: torch.Tensor | None, rows_per_column: int = 1) -> tuple[int, int, int, tuple[int, ...]]:
    """Every check of linear's (rows_per_column = 2: gated_linear's) arguments that needs no memory address: (M, N of
    the GEMM, K, the output's shape). x is [..., K], w [N, K] (F.linear's), bias [N] of x's dtype."""
    w_name = "w_gate_up" if rows_per_column == 2 else "w"
    for name, t in (("x", x), (w_name, w)):
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
    if x.dim() == 0:
        raise ValueError("x must have at least one dimension (its last is K), got a 0-d tensor")
    if w.dim() != 2 or w.shape[1] != x.shape[-1]:
        raise ValueError(f"{w_name} must be [N, K] with K = x.shape[-1] = {x.shape[-1]}, got {tuple(w.shape)}")
    check_operands(x.reshape(math.prod(x.shape[:-1]), x.shape[-1]), w.t(), ("x", w_name))
    N, K = w.shape
    pair = GATE_COLUMNS.value
    if rows_per_column == 2 and N % (2 * pair):
        raise ValueError(f"w_gate_up must have a multiple of {2 * pair} rows (gate and up rows interleaved in "
                         f"blocks of {pair}: pack it with tilepipe.pack_gate_up), got {N}")
    if bias is not None:
        if not isinstance(bias, torch.Tensor):
            raise TypeError(f"bias must be a torch.Tensor or None, got {type(bias).__name__}")
        if bias.shape != (N, ):
            raise ValueError(f"bias must have shape ({N},) (w's rows), got {tuple(bias.shape)}")
        if bias.dtype != x.dtype:
            raise TypeError(f"bias must have x's dtype {x.dtype}, got {bias.dtype}")
        if bias.device != x.device:
            raise ValueError(f"bias must be on x's device {x.device}, got {bias.device}")
    shape = (*x.shape[:-1], N // rows_per_column)
    if out is not None:
        if not isinstance(out, torch.Tensor):
            raise TypeError(f"out must be a torch.Tensor, got {type(out).__name__}")
        if out.shape != shape or out.dtype != x.dtype or out.device != x.device or not out.is_contiguous():
            raise ValueError(f"out must be a contiguous {x.dtype} tensor of shape {shape} on {x.device}, got "
                             f"{out.dtype} {tuple(out.shape)} on {out.device}")
    return math.prod(x.shape[:-1]), N, K, shape


def check_linear_fp8(x: torch.Tensor, w: torch.Tensor, scale: torch.Tensor | None
                     ) -> tuple[int, int, int, tuple[int, ...]]:
    """Every check of linear_fp8's arguments that needs no memory address: linear's on x and w, N a multiple of 128
    (1x128 scales) or 16 (`scale`: D's rows on 16 bytes), and `scale` one fp32 element on x's device. (M, N, K, D's
    shape)."""
    M, N, K, shape = check_linear(x, w, None, None, None)
    group = SCALE_GROUP.value
    if scale is None and N % group:
        raise ValueError(f"w must have a multiple of {group} rows for 1x128 scales (N = {N}: D's columns, one "
                         f"scale per {group}); pass scale= for a per-tensor scale")
    if scale is not None:
        if not isinstance(scale, torch.Tensor):
            raise TypeError(f"scale must be a torch.Tensor or None, got {type(scale).__name__}")
        if scale.numel() != 1 or scale.dtype != torch.float32:
            raise ValueError(f"scale must be a one-element float32 tensor (a per-tensor scale), got {scale.dtype} "
                             f"of shape {tuple(scale.shape)}")
        if scale.device != x.device:
            raise ValueError(f"scale must be on x's device {x.device}, got {scale.device}")
        if N % 16:
            raise ValueError(f"w must have a multiple of 16 rows (N = {N}: D's rows of e4m3 bytes, which TMA writes)")
    return M, N, K, shape


def check_grouped_operands(a: torch.Tensor, b: torch.Tensor, offs: torch.Tensor | None, b_dims: int,
                           ends: str | None) -> None:
    """A grouped GEMM's operand checks shared by its forms: tensors of the right ranks (a 2-D, b `b_dims`-D, offs
    1-D), a bf16 or fp16 with b alike, offs int32 (cumulative `ends` ends: "row" or "K"; None: a form whose groups'
    rows the caller checked, offs not read here), all on a's CUDA device."""
    named = (("a", a, 2), ("b", b, b_dims)) + ((("offs", offs, 1), ) if ends else ())
    for name, t, _ in named:
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
    for name, t, dims in named:
        if t.dim() != dims:
            raise ValueError(f"{name} must be {dims}-D, got shape {tuple(t.shape)}")
    if a.dtype not in INPUT_DTYPES:
        raise TypeError(f"a must be bfloat16 or float16, got {a.dtype}")
    if b.dtype != a.dtype:
        raise TypeError(f"b must have a's dtype {a.dtype}, got {b.dtype}")
    if ends and offs.dtype != torch.int32:
        raise TypeError(f"offs must be int32 (cumulative {ends} ends), got {offs.dtype}")
    if a.device.type != "cuda":
        raise ValueError(f"a must be on a CUDA device, got {a.device}")
    for name, t, _ in named[1:]:
        if t.device != a.device:
            raise ValueError(f"{name} must be on a's device {a.device}, got {t.device}")


def check_grouped_3d(a: torch.Tensor, b: torch.Tensor, counts: torch.Tensor | None, out: torch.Tensor | None,
                     columns: int, masked: bool) -> None:
    """The 3-D operands of the masked form (`masked`; `counts`: masked_m, each group's valid rows) and the batched
    3D x 3D form (no counts): a (G, C, K) whose groups' rows follow each other (a (G * C, K) view: the kernel reads them as the
    contiguous form's rows), b with G experts, masked_m G int32 on a's device, out (G, C, `columns`) alike. The
    rest is check_grouped_mm's, on those views."""
    for name, t in (("a", a), ("b", b)) + ((("out", out), ) if out is not None else ()):
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
    for name, t in (("a", a), ("b", b)):
        if t.dim() != 3:
            raise ValueError(f"{name} must be 3-D (G, rows, columns), got shape {tuple(t.shape)}")
    G, C, K = a.shape
    if b.shape[0] != G:
        raise ValueError(f"a has {G} groups (a.shape[0]) but b has {b.shape[0]} (b.shape[0])")
    if b.shape[1] != K:
        raise ValueError(f"a is {tuple(a.shape)} and b is {tuple(b.shape)}: b.shape[1] must equal a.shape[2] (K)")
    if masked:
        check_per_group(counts, "masked_m", (G, ), "each group's valid rows", torch.int32, "dtype", a.device)
    if out is not None and out.shape != (G, C, columns):
        raise ValueError(f"out must have shape {(G, C, columns)}, got {tuple(out.shape)}")
    for name, t in (("a", a), ("out", out)):
        if t is not None and t.stride(0) != C * t.stride(1) and G > 1 and C > 0:
            raise ValueError(f"{name} must hold its groups' rows one after another ({name}.stride(0) == "
                             f"{name}.shape[1] * {name}.stride(1)), got strides {t.stride()}")


def check_per_group(t: object, name: str, shape: tuple[int, ...], holds: str, dtype: torch.dtype, dtype_is: str,
                    device: torch.device) -> None:
    """A grouped GEMM's tensor of one entry per group (an expert's bias row, a group's row count): a contiguous
    `shape` tensor (`holds`: what an entry is) of `dtype` (`dtype_is`: whose, in the message) on a's `device`."""
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
    if tuple(t.shape) != shape or not t.is_contiguous():
        raise ValueError(f"{name} must be a contiguous {shape} tensor ({holds}), got shape {tuple(t.shape)} strides "
                         f"{t.stride()}")
    if t.dtype != dtype:
        raise TypeError(f"{name} must have {dtype_is} {dtype}, got {t.dtype}")
    if t.device != device:
        raise ValueError(f"{name} must be on a's device {device}, got {t.device}")


def check_grouped_mm(a: torch.Tensor, b: torch.Tensor, offs: torch.Tensor | None, out: torch.Tensor | None,
                     out_dtype: torch.dtype | None, ends: str | None = "row"
                     ) -> tuple[int, int, int, int, torch.dtype, bool]:
    """grouped_mm's 2D x 3D arguments, every check that needs no memory address: a (M, K) with unit inner stride, b
    (G, K, N) K-major (a transposed (G, N, K) tensor) or row-major, its experts packed (each one's rows follow the
    last's: a 2-D TMA view of all of them), offs G int32 on a's device (`ends` None: the masked and batched forms'
    rows, checked by check_grouped_3d, no offs); every row stride a multiple of 16 bytes.
    (G, M, N, K, out dtype, b K-major)."""
    check_grouped_operands(a, b, offs, 3, ends)
    out_dtype = check_out_dtype(out_dtype, out, a.dtype)
    (M, K), (G, KB, N) = a.shape, b.shape
    if KB != K:
        raise ValueError(f"a is {tuple(a.shape)} and b is {tuple(b.shape)}: b.shape[1] must equal a.shape[1] (K)")
    if ends and offs.shape[0] != G:
        raise ValueError(f"offs has {offs.shape[0]} group ends but b has {G} groups (b.shape[0])")
    if ends and offs.stride(0) != 1 and G > 1:
        raise ValueError(f"offs must be contiguous, got stride {offs.stride(0)}")
    size = a.element_size()
    if a.stride(1) != 1 and K > 1 or a.stride(0) * size % 16 and M > 1:
        raise ValueError(f"a must be row-major with rows on 16 bytes (K a multiple of {16 // size}; TMA reads it), "
                         f"got strides {a.stride()} for K = {K}")
    kmajor = b.stride(1) == 1 and (b.stride(2) != 1 or N == 1)
    inner, rows = (b.stride(2), N) if kmajor else (b.stride(1), K)  # B's row stride, and its rows per expert
    if not kmajor and b.stride(2) != 1 and N > 1 or inner * size % 16 or G > 1 and b.stride(0) != rows * inner:
        raise ValueError(f"b must be a transposed (G, N, K) tensor or a row-major (G, K, N) one with its experts "
                         f"packed and rows on 16 bytes (K and N multiples of {16 // size}), got strides {b.stride()} "
                         f"for shape {tuple(b.shape)}")
    check_grouped_out(out, M, N, out_dtype, a.device)
    return G, M, N, K, out_dtype, kmajor


def check_grouped_out(out: torch.Tensor | None, M: int, N: int, out_dtype: torch.dtype, device: torch.device) -> None:
    """A grouped GEMM's D (M, N), which TMA writes: `out` when given (shape, device, row-major with rows on 16
    bytes), else rows of N `out_dtype` elements on 16 bytes."""
    if out is not None:
        check_out(out, (M, N), device)
        if out.stride(1) != 1 and N > 1 or out.stride(0) * out.element_size() % 16 and M > 1:
            raise ValueError(f"out must be row-major with rows on 16 bytes (TMA writes it), got strides "
                             f"{out.stride()}")
    elif N * out_dtype.itemsize % 16:
        raise ValueError(f"N = {N}: D's rows must be a multiple of 16 bytes (TMA writes them), {N} {out_dtype} "
                         "elements are not")


CONTIGUOUS, MASKED, BATCHED = "static", "masked", "batched"
"""The layouts of a grouped GEMM's rows, each the SCHEDULE of its grouped scheduler (schedulers/grouped.py): rows between
cumulative ends (offs), the first masked_m[g] rows of each group's capacity, every row of every capacity."""


class GroupedProblem(NamedTuple):
    """A checked grouped_mm call (grouped_gated_mm's where `columns_in` is 2: D has half the GEMM's N columns) in one
    of the rows' `layout`s, the input of choosing and planning its launch: `a` and `out` (the caller's, or None) as
    the kernel reads and writes them, (M, K) and (M, D's columns) (group_rows); `offs` the layout's ends or counts
    (None: batched); `b_kmajor` b's layout as given; `device` a's index; `scheduler` the caller's (None: the
    layout's static schedule)."""
    a: torch.Tensor
    b: torch.Tensor
    offs: torch.Tensor | None
    bias: torch.Tensor | None
    out: torch.Tensor | None
    G: int
    M: int
    N: int
    K: int
    out_dtype: torch.dtype
    b_kmajor: bool
    layout: str
    columns_in: int
    device: int
    scheduler: str | None


def validate_grouped(a: torch.Tensor, b: torch.Tensor, offs: torch.Tensor | None, bias: torch.Tensor | None,
                     out: torch.Tensor | None, out_dtype: torch.dtype | None, columns_in: int, layout: str,
                     scheduler: str | None = None) -> GroupedProblem:
    """Every check of grouped_mm's arguments (grouped_gated_mm's, the masked and batched forms': `layout`, offs their
    counts; `scheduler` the contiguous layout's) that needs no configuration, the overlap of `out` with the inputs and
    TMA's start addresses included."""
    check_grouped_scheduler(scheduler)
    rows, out_rows = group_rows(a, b, offs, out, columns_in, layout)
    G, M, N, K, out_dtype, b_kmajor = check_grouped(rows, b, offs, bias, out_rows, out_dtype, columns_in, layout)
    check_grouped_addresses(a, b, out, bias=bias)
    return GroupedProblem(rows, b, offs, bias, out_rows, G, M, N, K, out_dtype, b_kmajor, layout, columns_in,
                          device_index(a), scheduler)


GROUPED_SCHEDULERS = ("static", "dynamic")
"""The schedules grouped_mm, grouped_gated_mm and grouped_mm_fp8 take (schedulers/grouped.py): each program's static
share of the tiles, or tiles drawn at run time, for GEMMs whose CTAs may start late beside other kernels."""


def check_grouped_scheduler(scheduler: str | None) -> None:
    """grouped_mm's `scheduler`: None or one of GROUPED_SCHEDULERS (TypeError / ValueError naming it)."""
    if scheduler is not None and not isinstance(scheduler, str):
        raise TypeError(f"scheduler must be a str or None, got {type(scheduler).__name__}")
    if scheduler is not None and scheduler not in GROUPED_SCHEDULERS:
        raise ValueError(f"scheduler must be one of {GROUPED_SCHEDULERS} or None, got {scheduler!r}")


def group_rows(a: torch.Tensor, b: torch.Tensor, counts: torch.Tensor | None, out: torch.Tensor | None,
               columns_in: int, layout: str) -> tuple[torch.Tensor, torch.Tensor | None]:
    """a and out as the kernel reads and writes them, (rows, K) and (rows, D's columns): themselves in the contiguous
    layout; the masked and batched layouts' (G, C, ...) tensors as their G * C rows, after check_grouped_3d."""
    if layout == CONTIGUOUS:
        return a, out
    check_grouped_3d(a, b, counts, out, b.shape[-1] // columns_in if isinstance(b, torch.Tensor) else 0,
                     layout == MASKED)
    G, C, K = a.shape
    return a.view(G * C, K), None if out is None else out.view(G * C, out.shape[2])


def check_grouped(a: torch.Tensor, b: torch.Tensor, offs: torch.Tensor | None, bias: torch.Tensor | None,
                  out: torch.Tensor | None, out_dtype: torch.dtype | None, columns_in: int, layout: str = CONTIGUOUS
                  ) -> tuple[int, int, int, int, torch.dtype, bool]:
    """grouped_mm's (columns_in = 2: grouped_gated_mm's, whose b is named b_gate_up and whose D has half b's
    columns) checks that need no memory address, of a and out as group_rows gives them (offs: the contiguous
    layout's; the others' counts are group_rows'): (G, M, N of the GEMM, K, out dtype, b K-major)."""
    gated, requested, block = columns_in == 2, out_dtype, GATE_COLUMNS.value  # block: pack_gate_up's
    ends = "row" if layout == CONTIGUOUS else None
    G, M, N, K, out_dtype, b_kmajor = check_grouped_mm(a, b, offs, None if gated else out,
                                                       None if gated and out is not None else out_dtype, ends)
    if gated and N % (2 * block):
        raise ValueError(f"b_gate_up must have a multiple of {2 * block} columns per expert (gate and up "
                         f"interleaved in blocks of {block}: pack it with tilepipe.pack_gate_up), got {N}")
    if gated and out is not None:  # D has H = N / 2 columns
        out_dtype = check_out_dtype(requested, out, a.dtype)  # out's dtype where none was asked for
        check_grouped_out(out, M, N // 2, out_dtype, a.device)
    if bias is not None:
        check_per_group(bias, "bias", (G, N), "an expert's row of N", a.dtype, "a's dtype", a.device)
    if not b_kmajor and K % 16:  # a k-step must not reach into the next expert's rows (choose.py grouped_config)
        raise ValueError(f"b: a row-major b needs K a multiple of 16, got K = {K}; pass b as a transposed (G, N, K) "
                         "tensor")
    return G, M, N, K, out_dtype, b_kmajor


def check_expected_m(expected_m: int | None) -> None:
    """grouped_mm_masked's tile hint: None or a non-negative int (TypeError / ValueError naming it)."""
    if expected_m is not None and (not isinstance(expected_m, int) or isinstance(expected_m, bool)):
        raise TypeError(f"expected_m must be an int or None, got {type(expected_m).__name__}")
    if expected_m is not None and expected_m < 0:
        raise ValueError(f"expected_m must be >= 0, got {expected_m}")


def validate_grouped_fp8(a: torch.Tensor, b: torch.Tensor, scale_a: torch.Tensor, scale_b: torch.Tensor,
                         offs: torch.Tensor, out: torch.Tensor | None, out_dtype: torch.dtype | None,
                         scheduler: str | None = None) -> tuple[int, int, int, int, bool, torch.dtype]:
    """Every check of grouped_mm_fp8's arguments (check_grouped_mm_fp8's and the scheduler's), the overlap of `out`
    with the inputs and TMA's start addresses included: (G, M, N, K, blockwise, out dtype)."""
    check_grouped_scheduler(scheduler)
    problem = check_grouped_mm_fp8(a, b, scale_a, scale_b, offs, out, out_dtype)
    check_grouped_addresses(a, b, out, scale_a=scale_a, scale_b=scale_b)
    return problem


def check_grouped_mm_fp8(a: torch.Tensor, b: torch.Tensor, scale_a: torch.Tensor, scale_b: torch.Tensor,
                         offs: torch.Tensor, out: torch.Tensor | None, out_dtype: torch.dtype | None
                         ) -> tuple[int, int, int, int, bool, torch.dtype]:
    """Every check of grouped_mm_fp8's arguments that needs no memory address (fake tensors pass through it too):
    (G, M, N, K, blockwise, out dtype)."""
    names = (("a", a), ("b", b), ("scale_a", scale_a), ("scale_b", scale_b), ("offs", offs))
    for name, t in names:
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
    for name, t, dims in (("a", a, 2), ("b", b, 3), ("offs", offs, 1)):
        if t.dim() != dims:
            raise ValueError(f"{name} must be {dims}-D, got shape {tuple(t.shape)}")
    for name, t, dtype in (("a", a, torch.float8_e4m3fn), ("b", b, torch.float8_e4m3fn), ("scale_a", scale_a,
                           torch.float32), ("scale_b", scale_b, torch.float32), ("offs", offs, torch.int32)):
        if t.dtype != dtype:
            raise TypeError(f"{name} must be {str(dtype).removeprefix('torch.')}"
                            f"{' (cumulative row ends)' if name == 'offs' else ''}, got {t.dtype}")
    if a.device.type != "cuda":
        raise ValueError(f"a must be on a CUDA device, got {a.device}")
    for name, t in names[1:]:
        if t.device != a.device:
            raise ValueError(f"{name} must be on a's device {a.device}, got {t.device}")
    out_dtype = check_out_dtype(out_dtype if out is None else None, out, out_dtype)  # as matmul_fp8: out's wins
    (M, K), (G, KB, N) = a.shape, b.shape
    if KB != K:
        raise ValueError(f"a is {tuple(a.shape)} and b is {tuple(b.shape)}: b.shape[1] must equal a.shape[1] (K)")
    if offs.shape[0] != G:
        raise ValueError(f"offs has {offs.shape[0]} group ends but b has {G} groups (b.shape[0])")
    if offs.stride(0) != 1 and G > 1:
        raise ValueError(f"offs must be contiguous, got stride {offs.stride(0)}")
    if a.stride(1) != 1 and K > 1 or a.stride(0) % 16 and M > 1:
        raise ValueError(f"a must be row-major with rows on 16 bytes (K a multiple of 16; TMA reads it), got strides "
                         f"{a.stride()} for K = {K}")
    if b.stride(1) != 1 and K > 1 or b.stride(2) % 16 and N > 1 or G > 1 and b.stride(0) != N * b.stride(2):
        raise ValueError(f"b must be a transposed (G, N, K) tensor (K-major: fp8 wgmma reads B K-major) with its "
                         f"experts packed and rows on 16 bytes (K a multiple of 16), got strides {b.stride()} for "
                         f"shape {tuple(b.shape)}; pass b.transpose(1, 2).contiguous().transpose(1, 2) to copy it")
    blockwise = scale_b.dim() == 3
    check_scales(scale_a, scale_b, G, M, N, K, blockwise)
    check_grouped_out(out, M, N, out_dtype, a.device)
    return G, M, N, K, blockwise, out_dtype


def check_scales(scale_a: torch.Tensor, scale_b: torch.Tensor, G: int, M: int, N: int, K: int,
                 blockwise: bool) -> None:
    """The scales' shapes for the kind scale_b's rank names (the module's table), and blockwise's K and N multiples
    of 128."""
    if scale_b.shape[0] != G:
        raise ValueError(f"scale_b has {scale_b.shape[0]} experts (scale_b.shape[0]) but b has {G} groups "
                         "(b.shape[0])")
    if not blockwise:
        if tuple(scale_a.shape) not in ((M, ), (M, 1)) or tuple(scale_b.shape) != (G, N):
            raise ValueError(f"scale_a {tuple(scale_a.shape)} and scale_b {tuple(scale_b.shape)} match no scaling for "
                             f"G={G}, M={M}, N={N}, K={K}: per-row takes ({M},) or ({M}, 1) and ({G}, {N}), blockwise "
                             f"({M}, K/128) and a 3-D ({G}, K/128, N/128)")
        return
    for name, size in (("K", K), ("N", N)):
        if size % SCALE_BLOCK:
            raise ValueError(f"b: blockwise scales need {name} a multiple of {SCALE_BLOCK}, got {name} = {size}")
    kb, nb = K // SCALE_BLOCK, N // SCALE_BLOCK
    if tuple(scale_a.shape) != (M, kb) or tuple(scale_b.shape) != (G, kb, nb):
        raise ValueError(f"blockwise scale_a must be ({M}, {kb}) and scale_b ({G}, {kb}, {nb}) (1x128 and 128x128 "
                         f"blocks per expert), got {tuple(scale_a.shape)} and {tuple(scale_b.shape)}")


def validate_grouped_wgrad(a: torch.Tensor, b: torch.Tensor, offs: torch.Tensor, out: torch.Tensor | None,
                           out_dtype: torch.dtype | None) -> tuple[int, int, int, int, torch.dtype, bool, bool]:
    """Every check of the weight-gradient form's arguments (check_grouped_wgrad's) and, where D has elements, the
    overlap of `out` with the inputs and TMA's start addresses: (G, M, N, K, out dtype, a K-major, b K-major)."""
    problem = check_grouped_wgrad(a, b, offs, out, out_dtype)
    G, M, N = problem[:3]
    if G and M and N:
        check_grouped_addresses(a, b, out)
    return problem


def check_grouped_addresses(a: torch.Tensor, b: torch.Tensor, out: torch.Tensor | None,
                            **others: torch.Tensor | None) -> None:
    """The grouped GEMMs' checks of memory addresses: `out` (None: a new D) shares none with a, b or the named
    `others` (bias, the scales; None: not given), and TMA may start reading a, b and out (check_tma_starts)."""
    if out is not None:
        check_no_overlap(out, a, b, None, **others)
    check_tma_starts({"a": a, "b": b} | ({} if out is None else {"out": out}))


def check_grouped_wgrad(a: torch.Tensor, b: torch.Tensor, offs: torch.Tensor, out: torch.Tensor | None,
                        out_dtype: torch.dtype | None) -> tuple[int, int, int, int, torch.dtype, bool, bool]:
    """The weight-gradient form's checks that need no memory address: (G, M, N, K, out dtype, a K-major, b
    K-major)."""
    check_grouped_operands(a, b, offs, 2, "K")
    out_dtype = check_out_dtype(out_dtype, out, a.dtype)
    (M, K), (KB, N), G = a.shape, b.shape, offs.shape[0]
    if KB != K:
        raise ValueError(f"a is {tuple(a.shape)} and b is {tuple(b.shape)}: b.shape[0] must equal a.shape[1] (K, "
                         "which offs splits)")
    if offs.stride(0) != 1 and G > 1:
        raise ValueError(f"offs must be contiguous, got stride {offs.stride(0)}")
    a_rowmajor, b_rowmajor = row_major(a), row_major(b)
    step = 16 // a.element_size()
    if a_rowmajor is None or a_rowmajor is False and M % step:
        raise ValueError(f"a must be row-major (K-major) or a transposed (K, M) tensor (M-major, M a multiple of "
                         f"{step}) with rows on 16 bytes (TMA reads it), got strides {a.stride()} for shape "
                         f"{tuple(a.shape)}")
    if b_rowmajor is None:
        raise ValueError(f"b must be row-major (N-major) or a transposed (N, K) tensor (K-major) with rows on 16 bytes "
                         f"(TMA reads it), got strides {b.stride()} for shape {tuple(b.shape)}")
    if out is not None:
        if tuple(out.shape) != (G, M, N):
            raise ValueError(f"out must have shape {(G, M, N)}, got {tuple(out.shape)}")
        if out.device != a.device:
            raise ValueError(f"out must be on {a.device}, got {out.device}")
        rows = out.stride(1)
        if (out.stride(2) != 1 and N > 1 or rows < N or rows * out.element_size() % 16 and G * M > 1
                or G > 1 and out.stride(0) != M * rows):
            raise ValueError(f"out must be row-major with rows on 16 bytes and its groups packed (TMA writes it as "
                             f"({G} * {M}, {N})), got strides {out.stride()}")
    else:
        check_grouped_out(None, M, N, out_dtype, a.device)
    return G, M, N, K, out_dtype, bool(a_rowmajor), not b_rowmajor


def row_major(t: torch.Tensor) -> bool | None:
    """Whether 2-D `t` is held row-major (True), column-major (False) or neither (None), its outer stride on 16 bytes
    (TMA's rule for every stride but the innermost)."""
    rows, cols = t.shape
    size = t.element_size()
    if t.stride(1) == 1 and t.stride(0) >= max(1, cols) and (t.stride(0) * size % 16 == 0 or rows == 1):
        return True
    if t.stride(0) == 1 and t.stride(1) >= max(1, rows) and (t.stride(1) * size % 16 == 0 or cols == 1):
        return False
    return None
