"""CPU test of the held-SM benchmark's kernels (tilepipe/tools/busy_sms.py): a holder takes more than half an SM's
shared memory, counts itself in and spins on %globaltimer; the gate spins on that count."""

from tilepipe.tools.busy_sms import HOLD_BYTES, holder_specs
from tilepipe.verify.compile import CompileError, compile_kernels


def test_holder_fills_an_sm_and_the_gate_waits_for_the_count():
    hold, gate = compile_kernels(holder_specs())
    assert not isinstance(hold, CompileError) and not isinstance(gate, CompileError), (hold, gate)
    assert hold.shared >= HOLD_BYTES > 228 * 1024 // 2
    assert hold.count("atom.global.gpu.acq_rel.add") == 1 and hold.count("%globaltimer") >= 2
    assert gate.count("atom.global.gpu.acq_rel.add") == 1 and gate.shared == 0
