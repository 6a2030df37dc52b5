"""What the tensor-parallel GEMM kernels' KernelSpecs share (kernels/ag_matmul.py, kernels/rs_matmul.py): the flag,
epoch, debug-report and per-tensor scale pointers, and the configuration's constexprs."""

FP8_NAMES = ("fp8e4nv", "fp8e5")


def tp_pointers(ring: bool = False) -> dict[str, str]:
    """The pointer arguments after the descriptors, in the kernels' order (the ring's with the previous rank's
    flags)."""
    peer = {"peer_flags": "*i32"} if ring else {}
    return {"flags": "*i32", **peer, "epoch_ptr": "*i32", "report": "*i32", "scale_a": "*fp32", "scale_b": "*fp32"}


def tp_constexprs(cfg, b_kmajor: bool, debug: bool, dtype: str) -> dict:
    """The constexprs of configuration `cfg` (a single-CTA MatmulConfig), B's layout, DEBUG and SCALED (fp8 A, B)."""
    return {"STAGES": cfg.stages, "C_STAGES": cfg.c_stages, "GROUP_M": cfg.group_m, "B_KMAJOR": b_kmajor,
            "TILE": [cfg.block_m, cfg.block_n], "EPILOGUE_N": cfg.epilogue_n, "DEBUG": debug,
            "SCALED": dtype in FP8_NAMES}

