"""The step between checking a call and staging its operands: which GEMM runs a checked problem (the device's target),
in which configuration and schedule (host/configs.py's choice, or the caller's), checked against the problem."""

from typing import NamedTuple

from tilepipe.host.checks import (MatmulProblem, check_cluster, check_pieced, check_pingpong, check_schedule,
                                  check_subtiles, check_swap_ab)
from tilepipe.host.configs import MatmulConfig, config_for, schedule_for, sm100_config
from tilepipe.host.device import device_target, sm_count
from tilepipe.host.gpus import device_model
from tilepipe.host.staging import reads_b_kmajor


class GemmChoice(NamedTuple):
    """The GEMM a problem runs: its target (sm_90a or sm_100a), configuration, schedule, and whether it reads B
    K-major (B's layout, or the configuration's need)."""
    arch: str
    cfg: MatmulConfig
    schedule: str
    b_kmajor: bool


def choose_matmul(problem: MatmulProblem) -> GemmChoice:
    """The GEMM for a 16-bit problem with work (M, N, K > 0): the caller's config and scheduler where given, else
    config_for's and schedule_for's (sm100_config and the static schedule on sm_100a). ValueError names a config or
    scheduler that is not built for this problem on this device."""
    M, N, K, device, epilogue = problem.M, problem.N, problem.K, problem.device, problem.epilogue
    has_c = problem.c is not None
    own_c = has_c and problem.c.dtype != problem.out_dtype  # an fp32 C under a 16-bit D
    arch = device_target(device)
    check_schedule(problem.scheduler, arch)
    if arch == "sm_100a" and epilogue is not None:
        raise ValueError("fused epilogues (activations, gated linears) are built for sm_90a (Hopper) only")
    if arch == "sm_100a":
        schedule = problem.scheduler or "static"
        c_dtype = problem.c.dtype if has_c else None
        cfg = problem.config or sm100_config(M, N, problem.a.dtype, problem.out_dtype, sm_count(device), c_dtype,
                                             schedule)
    else:
        cfg = problem.config or config_for(M, N, K, problem.a.dtype, problem.out_dtype, problem.b_kmajor, device,
                                           own_c, problem.scheduler, has_c)
        schedule = problem.scheduler or schedule_for(M, N, K, cfg, device_model(device))
    check_cluster(cfg, schedule, arch, has_c)
    b_kmajor = problem.b_kmajor or reads_b_kmajor(problem.b, cfg)
    check_swap_ab(cfg, b_kmajor, arch)
    check_pieced(cfg, schedule, arch, own_c, problem.out_dtype)
    check_subtiles(cfg, arch)
    check_pingpong(cfg, schedule, arch, has_c)
    return GemmChoice(arch, cfg, schedule, b_kmajor)
