"""CPU test of the wgmma rate probe (tilepipe/tools/wgmma_rate.py): each width compiles to one wgmma per piece and
k16 step, with the piece's own N, in a loop that keeps one k-step in flight."""

import re

from tilepipe.tools.wgmma_rate import WIDTHS, rate_spec
from tilepipe.verify.compile import CompileError, compile_kernels


def test_each_piece_is_its_own_wgmma_of_its_width():
    reports = compile_kernels([rate_spec(pieces) for pieces in WIDTHS])
    for pieces, report in zip(WIDTHS, reports):
        assert not isinstance(report, CompileError), report
        shapes = re.findall(r"wgmma\.mma_async\.sync\.aligned\.m64n(\d+)k16", report.ptx)
        assert sorted(map(int, shapes)) == sorted(n for n in pieces for _ in range(4)), (pieces, shapes)  # BK = 64
        assert report.count("wgmma.wait_group.sync.aligned") == 1 + len(pieces), pieces  # in the loop, then each
        assert report.spill_stores == report.spill_loads == 0, pieces
