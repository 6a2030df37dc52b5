"""GPU (2 GPUs): tilepipe.distributed under torchrun, each group of cases in its own torchrun under a timeout
(tests/gpu/tp_cases.py): both ops against float64 on ragged M, fp16 and bf16, both B layouts, and the FP8 per-tensor
forms, overlapped and as the NCCL sequence; CUDA-graph replays bitwise equal to eager calls; bad arguments across
ranks; a skipped call named by debug mode. scripts/gpu_tp.sh runs the same torchrun commands, then the benchmark."""

import sys

import pytest
import torch

from tests.gpu.guarded import assert_ok
from tilepipe.probes.debug import run_guarded

FORMS = ("bf16-rowmajor", "bf16-kmajor", "fp16-rowmajor", "fp16-kmajor", "fp8-kmajor")
GROUPS = {"tests-ag": [f"ag-{form}" for form in FORMS] + ["badargs", "compile"],
          "tests-rs": [f"rs-{form}" for form in FORMS] + ["graph"], "hang-ag": ["hang-ag"],
          "hang-rs": ["hang-rs"]}
"""As scripts/gpu_tp.sh runs them: each op's cases in their own torchrun (a lost CUDA context stays in one)."""
TIMEOUT_S = {"tests-ag": 300, "tests-rs": 300, "hang-ag": 120, "hang-rs": 120}


def torchrun(cases: list[str]) -> list[str]:
    """The arguments (after python) that run `cases` on 2 GPUs."""
    return ["-m", "torch.distributed.run", "--nproc-per-node", "2", "-m", "tests.gpu.tp_cases", *cases]


@pytest.mark.gpu
@pytest.mark.parametrize("group", list(GROUPS))
def test_tp_cases(group):
    if not torch.cuda.is_available() or torch.cuda.device_count() < 2:
        pytest.skip("tensor-parallel cases need 2 GPUs")
    assert_ok(run_guarded(torchrun(GROUPS[group]), TIMEOUT_S[group]))


if __name__ == "__main__":  # print the torchrun commands for scripts/gpu_tp.sh
    for name, cases in GROUPS.items():
        print(name, TIMEOUT_S[name], " ".join(cases), file=sys.stdout)
