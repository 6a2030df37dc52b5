"""CPU tests of the tile schedulers beyond the GEMM's compile tests (tests/test_matmul.py compiles both for sm_90a)."""

import re

from tilepipe.compile import CompileError, KernelSpec, compile_kernels
from tests.kernels.clc_probe import offset_of, probe_plan


def test_clc_try_cancel_compiles_for_sm_100a_at_the_planned_offsets():
    """sm_100a CLC through inline PTX: ptxas accepts try_cancel and the decode, and the addresses the asm computes
    from the storage plan are where Triton put the ring's full barrier and response slot."""
    report = compile_kernels([KernelSpec("tests.kernels.clc_probe:clc_try_cancel_probe", {"out_ptr": "*i32"},
                                         target="sm_100a")])[0]
    assert not isinstance(report, CompileError), report
    assert report.count("clusterlaunchcontrol.try_cancel.async.shared::cta.mbarrier::complete_tx::bytes.b128") == 1
    assert report.count("clusterlaunchcontrol.query_cancel.get_first_ctaid::x") == 1
    plan = probe_plan.fn()
    base = re.search(r"mov\.b32\s+(%r\d+), global_smem;", report.ptx).group(1)
    first_init = re.search(r"mbarrier\.init\.shared::cta\.b64 \[(%r\d+)\]", report.ptx).group(1)
    assert offset_of.fn(plan, "barriers") == 0 and first_init == base  # slot 0's full barrier at global_smem + 0
    read = re.search(r"ld\.shared\.v4\.b32\s+\{[^}]*\}, \[global_smem\+?(\d*)\]", report.ptx).group(1)
    assert int(read or 0) == offset_of.fn(plan, "response")
