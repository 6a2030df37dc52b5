"""Split multicast: each CTA of a two-CTA cluster issues its half of a tile both CTAs hold, to both (as cuBLAS and
CUTLASS do), where Gluon 3.9's `tma.async_load(..., multicast=True)` issues the whole tile from the first CTA.

Gluon's lowering ANDs the issue predicate with "first CTA of the broadcast group", so the split is written in inline
PTX (../shared/reference/gluon39_examples/split_multicast/, run exact on an H200). A shared [R, C] stage tile is moved
by a descriptor whose box is its [R / 2, C] half: CTA r elects one thread, which issues

    cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes.multicast::cluster
        [tile + r * half_bytes], [desc, {col, row + r * R / 2}], [full barrier], 0b11

so each half lands in both CTAs and completes both CTAs' full barriers, which therefore expect the whole tile's bytes
(the storage's count: tiles.py). Both producers then write both CTAs' slots, so a slot is free only when the
consumers of both CTAs released it: each consumer also arrives on the peer CTA's empty barrier (`remote_arrive`, with
no memory fence: see there), whose count doubles (ring.py, storage.py).

**The descriptor's address.** `gl.inline_asm` takes no descriptor operand, so the PTX names the kernel parameter
that holds the CUtensorMap (`<kernel>_param_<i>`, a grid-constant parameter, as Triton's own TMA lowering reads
it). `descriptor_param` derives that name while tracing, from the kernel's own signature: the kernel argument whose
type is the descriptor's (exactly one, else ProtocolError), numbered by Triton's flattening of the argument types
into parameters (a descriptor is its CUtensorMap, then shape and strides; constexprs none). Renaming the kernel,
reordering its arguments or a Triton that flattens differently moves the name with them; a descriptor that is not a
kernel argument is refused. The other way, a global 64-byte-aligned copy of the CUtensorMap, would cost every call a
host-side encode and a copy (and a CUDA graph a stale copy); this costs nothing at run time.

Both the 0b11 mask and the half offsets assume two CTAs: other cluster sizes are refused.
"""

import sys

from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language._core import builtin
from triton.experimental.gluon.language.nvidia.hopper import cluster
from triton.language.core import _unwrap_if_constexpr

from tilepipe.pipeline import _trace

CTAS = 2
"""The cluster size split multicast is written for (mask 0b11, halves)."""
SWIZZLE_SPAN = 128
"""Bytes of a tile row the primitive moves in one TMA message: the 128-byte swizzle's span (a K-major tile's row)."""
SWIZZLE_ROWS = 8
"""Rows of one 128-byte swizzle pattern: a half must start on one, so it lands swizzled as the whole tile's rows."""


def split_block(block: tuple[int, int]) -> tuple[int, int]:
    """The TMA box of one CTA's half of a shared `block` (rows outer): half its rows. ValueError unless each half is
    whole swizzle patterns (a row must also be one 128-byte span: checked where the kernel loads it)."""
    rows, cols = block
    if rows % (CTAS * SWIZZLE_ROWS):
        raise ValueError(f"split multicast halves a tile's rows into whole {SWIZZLE_ROWS}-row swizzle patterns; "
                         f"{rows} rows do not")
    return rows // CTAS, cols


def split_operand(blocks: dict, cfg, b_kmajor: bool) -> dict:
    """A GEMM's TMA blocks ({"a"/"b"/"c": (block, cga bases)}, kernels/matmul.py operand_blocks) for configuration
    `cfg`: with cfg.split_multicast in a cluster the shared operand's block halved (split_block), A's in a 1x2
    cluster, B's in a 2x1 one, which must be K-major (ValueError otherwise); else as they are."""
    cluster = cfg.cluster
    if not cfg.split_multicast or cluster.num_ctas == 1:
        return blocks
    if cluster.m > 1 and not b_kmajor:
        raise ValueError("split multicast moves K-major tiles: B row-major in a 2x1 cluster takes "
                         "split_multicast=False")
    shared = "b" if cluster.m > 1 else "a"
    block, cga = blocks[shared]
    return {**blocks, shared: (split_block(block), cga)}


def is_split_load(tile_shape, desc) -> bool:
    """Whether `desc` moves half of a stage tile of `tile_shape` (its box is the tile's rows / 2, the columns whole):
    a split multicast load of a tile every CTA holds."""
    box = [_unwrap_if_constexpr(n) for n in desc.block_type.shape]
    shape = [_unwrap_if_constexpr(n) for n in tile_shape]
    return len(box) == 2 and len(shape) == 2 and box[0] * CTAS == shape[0] and box[1] == shape[1]


def _check_two_ctas(what: str, semantic) -> None:
    ctas = _unwrap_if_constexpr(gl.num_ctas(_semantic=semantic))
    if ctas != CTAS:
        raise _trace.ProtocolError(f"{what} is written for a two-CTA cluster (mask 0b11, halves); the kernel has "
                                   f"{ctas} CTAs")


def _generators() -> list:
    """The code generators on the stack, innermost first: the function being traced, ..., the kernel."""
    frame, found = sys._getframe(1), []
    while frame is not None:
        owner = frame.f_locals.get("self")
        if type(owner).__name__ == "CodeGenerator" and owner not in found:
            found.append(owner)
        frame = frame.f_back
    if not found or not found[-1].is_kernel:
        raise _trace.ProtocolError("split multicast: no kernel is being traced")
    return found


def _partition_threads(semantic) -> int:
    """Threads of the warp-specialize partition being traced (gl.num_warps of the innermost generator)."""
    return 32 * _unwrap_if_constexpr(semantic.num_warps(_generators()[0]))


def descriptor_param(desc, semantic) -> str:
    """The PTX name of the kernel parameter holding `desc`'s CUtensorMap, from the traced kernel's signature: the one
    argument of the descriptor's type, counted in parameters as Triton flattens the argument types."""
    generator = _generators()[-1]
    index, found = 0, []
    for name, ty in zip(generator.jit_fn.arg_names, generator.prototype.arg_types):
        if ty == desc.type:
            found.append((name, index))
        flat: list = []
        ty._flatten_ir_types(semantic.builder, flat)
        index += len(flat)
    if len(found) != 1:
        named = ", ".join(name for name, _ in found) or "none"
        raise _trace.ProtocolError(f"split multicast: the descriptor must be exactly one argument of kernel "
                                   f"'{generator.function_name}' (arguments of its type: {named}), so its "
                                   "CUtensorMap parameter can be named")
    return f"{generator.function_name}_param_{found[0][1]}"


def _leader(threads: int) -> str:
    """PTX setting predicate `p` in the first thread of the partition of `threads` (Gluon's own election for one
    arrive per partition: partitions are aligned to their size)."""
    return f" mov.u32 t, %tid.x; and.b32 t, t, {threads - 1}; setp.eq.u32 p, t, 0;\n"


@builtin
def split_multicast_load(desc, coords, bar, tile, _semantic=None):
    """This CTA's half of stage tile `tile` ([R, C], held whole by both CTAs) from `desc` (box [R / 2, C]) at the tile's
    `coords` (its origin), into both CTAs' `tile`, completing both CTAs' `bar` by its bytes."""
    _check_two_ctas("split multicast", _semantic)
    if not is_split_load(tile.type.shape, desc):
        raise _trace.ProtocolError(f"split multicast: descriptor box {list(desc.block_type.shape)} is not half of "
                                   f"the stage tile {list(tile.type.shape)} along its rows")
    row_bytes = _unwrap_if_constexpr(desc.block_type.shape[1]) * desc.dtype.primitive_bitwidth // 8
    if row_bytes != SWIZZLE_SPAN:
        raise _trace.ProtocolError(f"split multicast moves tiles whose rows are {SWIZZLE_SPAN} bytes (K-major "
                                   f"operands), one TMA message a half; this tile's rows are {row_bytes} bytes")
    half_rows = _unwrap_if_constexpr(desc.block_type.shape[0])
    half_bytes = _unwrap_if_constexpr(desc.block_type.nbytes)
    threads = _partition_threads(_semantic)
    param = descriptor_param(desc, _semantic)
    row, col = coords
    asm = ("{\n .reg .pred p; .reg .b32 t, rank, dst, row, pa; .reg .b64 d; .reg .b16 mask;\n" + _leader(threads) +
           " mov.u32 rank, %cluster_ctarank;\n"
           f" mad.lo.u32 dst, rank, {half_bytes}, $0;\n"
           f" mad.lo.u32 row, rank, {half_rows}, $2;\n"
           f" mov.b32 pa, {param}; cvt.u64.u32 d, pa; cvta.param.u64 d, d;\n"
           f" mov.b16 mask, {(1 << CTAS) - 1};\n"
           " @p cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes.multicast::cluster"
           " [dst], [d, {$3, row}], [$1], mask;\n}")
    gl.inline_asm(asm, "r,r,r,r", [tile, bar, row, col], is_pure=False, _semantic=_semantic)


@builtin
def remote_arrive(barrier, pred=True, _semantic=None):
    """One arrival on the peer CTA's copy of `barrier` (this CTA's shared-memory barrier) from the first thread of the
    partition, where `pred` holds. Placed after this partition's own arrive on `barrier`, whose partition-wide
    bar.sync orders every warp's work before it. The arrive keeps PTX's default semantics (release, CTA scope), as
    Gluon's own cross-CTA arrive and CUTLASS's ClusterBarrier do: what it releases is the stage's reads, finished
    (wgmma waited) before the bar.sync. A `.release.cluster` arrive compiles to MEMBAR.ALL.CTA, MEMBAR.ALL.GPU,
    ERRBAR and CGAERRBAR before every release of the ring: the split form then ran 0.43-0.80x the leader-issued one
    (bench/results/archive/split-h200.json; perf-log rows 106, 110)."""
    _check_two_ctas("a remote arrive", _semantic)
    threads = _partition_threads(_semantic)
    pred = _unwrap_if_constexpr(pred)
    guard = "" if pred is True else " setp.ne.u32 q, $1, 0; and.pred p, p, q;\n"
    args = [barrier] if pred is True else [barrier, _semantic.to_tensor(pred).to(gl.int32, _semantic=_semantic)]
    asm = ("{\n .reg .pred p, q; .reg .b32 t, peer, remote;\n" + _leader(threads) + guard +
           " mov.u32 peer, %cluster_ctarank; xor.b32 peer, peer, 1;\n"
           " mapa.shared::cluster.u32 remote, $0, peer;\n"
           " @p mbarrier.arrive.shared::cluster.b64 _, [remote];\n}")
    gl.inline_asm(asm, ",".join("r" * len(args)), args, is_pure=False, _semantic=_semantic)


@builtin
def cluster_init_barrier(_semantic=None):
    """Make this CTA's barrier initialisations visible to the cluster (fence.mbarrier_init) and wait until every CTA
    of the cluster has made its own: after it the peer may signal this CTA's barriers."""
    _check_two_ctas("a split ring's initialisation", _semantic)
    gl.inline_asm("fence.mbarrier_init.release.cluster;", "", [], is_pure=False, _semantic=_semantic)
    cluster.barrier(_semantic=_semantic)


@gluon.constexpr_function
def split_shared(a_desc, b_desc, block_m, block_n, cluster_m, cluster_n):
    """Whether the host asked a GEMM for split multicast: the shared operand's descriptor (A's in a 1x2 cluster, B's,
    K-major, in a 2x1 one) has a box of half the cluster tile's rows (split_block)."""
    if cluster_n > 1:
        return a_desc.block_type.shape[0] * CTAS == block_m
    return cluster_m > 1 and b_desc.block_type.shape[0] * CTAS == block_n
