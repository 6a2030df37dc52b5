"""Thread-block clusters: which GEMM tiles a cluster's CTAs split and which they share (the seed's cluster shape).

A Gluon kernel launched with `num_ctas` > 1 is written once for the whole cluster: a tile's shape is the cluster's,
and its `cga_layout` says how the CTAs hold it. A zero basis replicates the tile (every CTA gets a full copy: a
shared operand, which TMA loads once and multicasts), a unit basis splits it (each CTA holds its own part). In an
`m` x `n` cluster the CTAs of one row work on the same M rows and share A; those of one column share B.
"""

from dataclasses import dataclass

from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language._core import builtin
from triton.language.core import _unwrap_if_constexpr

Bases = tuple[tuple[int, int], ...]

_SPLIT_ROWS, _SPLIT_COLS, _REPLICATED = ((1, 0), ), ((0, 1), ), ((0, 0), )


@dataclass(frozen=True)
class Cluster:
    """`m` x `n` CTAs per cluster: 1x1 (no cluster), 2x1 (B multicast) or 1x2 (A multicast). Gluon pairs the CTAs
    of a two-CTA barrier, so larger clusters are refused."""
    m: int = 1
    n: int = 1

    def __post_init__(self) -> None:
        if (self.m, self.n) not in ((1, 1), (2, 1), (1, 2)):
            raise ValueError(f"cluster shape must be 1x1, 2x1 or 1x2, got {self.m}x{self.n}")

    @property
    def num_ctas(self) -> int:
        return self.m * self.n

    @property
    def a(self) -> Bases:
        """A's [m * BM, BK] cluster tile: split along M over a 2x1 cluster, shared (multicast) by a 1x2 one."""
        return _SPLIT_ROWS if self.m > 1 else _REPLICATED if self.n > 1 else ()

    def b(self, kmajor: bool, mma_pair: bool = False) -> Bases:
        """B's cluster tile ([n * BN, BK] K-major, else [BK, n * BN]): split along N over a 1x2 cluster, shared
        (multicast) by a 2x1 one; split along N by a 2x1 `mma_pair` too (sm_100a's two-CTA MMA: each CTA of the
        pair holds half of the cluster tile's BN columns, and the MMA reads both halves)."""
        if self.n > 1 or mma_pair and self.m > 1:
            return _SPLIT_ROWS if kmajor else _SPLIT_COLS
        return _REPLICATED if self.m > 1 else ()

    @property
    def c(self) -> Bases:
        """D's and C's [m * BM, n * BN] cluster tile, and the accumulator: each CTA holds its own BM x BN."""
        return _SPLIT_ROWS if self.m > 1 else _SPLIT_COLS if self.n > 1 else ()


def cga_list(bases: Bases) -> list[list[int]]:
    """Bases as Gluon's layouts take them."""
    return [list(basis) for basis in bases]


def ctas_splitting(bases) -> int:
    """How many CTAs a tile of these bases is split over (a replicated tile: 1, every CTA holds all of it)."""
    return 2 ** sum(1 for basis in bases if any(basis))


@gluon.constexpr_function
def wgmma_accumulator(num_warps, block_n, bases=(), instr_k=16, rows=None):
    """The wgmma accumulator layout of a [BM, block_n] cluster tile split over the CTAs as `bases` say: each CTA's
    warps cover its own part, one instruction as wide as a CTA's columns (`instr_k`: 16 for 16-bit operands, 32 for
    FP8). A tile of fewer `rows` than the warps' 16-row slices cover (64 on 8 warps) splits its columns over two
    warpgroups instead, each an instruction half as wide."""
    bases = [list(basis) for basis in bases]
    cols_per_cta = block_n // 2 if any(basis[1] for basis in bases) else block_n
    warps = [num_warps, 1] if rows is None or rows >= 16 * num_warps else [num_warps // 2, 2]
    return gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=warps,
                                     instr_shape=[16, cols_per_cta // warps[1], instr_k], cga_layout=bases)


@gluon.constexpr_function
def row_bases(bases):
    """The bases of a [1, n] tile's row as its own [n] tile (a tile of one row split or shared along its columns)."""
    return [[basis[1]] for basis in bases]


@builtin
def column_runs(layout, shape, runs, _semantic=None):
    """`layout` of a [rows, cols] tensor as a layout of its [rows, runs, cols / runs] view: the same registers,
    lanes, warps and CTAs, the columns cut into `runs` equal runs. In a 1 x `runs` cluster's accumulator each run is
    one CTA's columns, so a value per run (per CTA) broadcasts along the third dimension in SliceLayout(2, ...)."""
    rows, cols = (_unwrap_if_constexpr(n) for n in _unwrap_if_constexpr(shape))
    runs = _unwrap_if_constexpr(runs)
    linear = _unwrap_if_constexpr(_semantic.to_linear_layout(_unwrap_if_constexpr(layout), [rows, cols]))
    width = cols // runs

    def split(bases):
        return [[row, col // width, col % width] for row, col in bases]

    return gl.constexpr(gl.DistributedLinearLayout(split(linear.reg_bases), split(linear.lane_bases),
                                                   split(linear.warp_bases), split(linear.block_bases),
                                                   [rows, runs, width]))
