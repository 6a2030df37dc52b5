"""Tile schedulers: which output tiles each persistent program computes, and in which order."""

from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.language.core import _aggregate as aggregate


@aggregate
class StaticTileScheduler:
    """Persistent grid over the output tiles: program p takes tiles p, p + P, p + 2P, ... in grouped order.

    Grouped raster: GROUP_M rows of tiles are walked column by column, so consecutive tiles reuse the same
    B columns and A rows from L2.
    """
    num_pid_m: gl.tensor
    num_pid_n: gl.tensor
    num_tiles: gl.tensor
    GROUP_M: gl.constexpr

    @gluon.constexpr_function
    def __init__(self, num_pid_m, num_pid_n, num_tiles, GROUP_M):
        self.num_pid_m = num_pid_m
        self.num_pid_n = num_pid_n
        self.num_tiles = num_tiles
        self.GROUP_M = gl.constexpr(GROUP_M)

    @gluon.jit
    def create(M, N, BM: gl.constexpr, BN: gl.constexpr, GROUP_M: gl.constexpr):
        num_pid_m = gl.cdiv(M, BM)
        num_pid_n = gl.cdiv(N, BN)
        return StaticTileScheduler(num_pid_m, num_pid_n, num_pid_m * num_pid_n, GROUP_M)

    @gluon.jit
    def coords(self, tile_id):
        """(pid_m, pid_n) of a tile id in grouped order."""
        per_group = self.GROUP_M * self.num_pid_n
        first_m = (tile_id // per_group) * self.GROUP_M
        group_rows = gl.minimum(self.num_pid_m - first_m, self.GROUP_M)
        pid_m = first_m + (tile_id % per_group) % group_rows
        pid_n = (tile_id % per_group) // group_rows
        return pid_m, pid_n
