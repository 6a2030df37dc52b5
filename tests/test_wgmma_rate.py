"""CPU test of the wgmma rate probe (tilepipe/tools/wgmma_rate.py): each shape compiles to one wgmma per piece and
k16 step, with the piece's own N (half of it for a 192-row shape's tail), in a loop that keeps one k-step in flight."""

import re

from tilepipe.tools.wgmma_rate import SHAPES, rate_spec
from tilepipe.verify.compile import CompileError, compile_kernels


def test_each_piece_is_its_own_wgmma_of_its_width():
    reports = compile_kernels([rate_spec(rows, pieces) for rows, pieces in SHAPES])
    for (rows, pieces), report in zip(SHAPES, reports):
        assert not isinstance(report, CompileError), report
        shapes = re.findall(r"wgmma\.mma_async\.sync\.aligned\.m64n(\d+)k16", report.ptx)
        tails = [n // 2 for n in pieces] if rows > 128 else []
        assert sorted(map(int, shapes)) == sorted(n for n in pieces + tuple(tails) for _ in range(4)), (rows, pieces)
        accumulators = len(pieces) + len(tails)
        assert report.count("wgmma.wait_group.sync.aligned") == 1 + accumulators, pieces  # in the loop, then each
        assert report.spill_stores == report.spill_loads == 0, pieces
