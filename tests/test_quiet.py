"""A process that imports and uses tilepipe exits quietly: nothing on stderr, in particular no nanobind report of
Gluon IR objects (GluonOpBuilder) still alive at exit (issue 38)."""

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent

IMPORT_AND_TRACE = """
import torch, tilepipe
from tilepipe.host.configs import SM100_CONFIGS
from tilepipe.kernels.sm100_matmul import sm100_matmul_spec
from tilepipe.verify.checker import trace_sessions
assert trace_sessions(sm100_matmul_spec(SM100_CONFIGS[0], "bf16", "bf16", b_kmajor=True))
"""
"""Import torch, then tilepipe, and trace the sm_100a GEMM (TMEM accumulators, tcgen05 MMAs) in this process."""


def test_import_and_trace_exit_with_empty_stderr() -> None:
    """Importing tilepipe after torch and tracing a shipped kernel in-process leaves stderr empty, exit code 0."""
    env = dict(os.environ, PYTHONPATH=str(REPO))
    done = subprocess.run([sys.executable, "-c", IMPORT_AND_TRACE], cwd=REPO, env=env, capture_output=True, text=True,
                          timeout=300)
    assert (done.returncode, done.stderr) == (0, ""), done.stderr[-4000:]
