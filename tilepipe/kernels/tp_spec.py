"""What the tensor-parallel GEMM kernels' KernelSpecs share (kernels/ag_matmul.py, kernels/rs_matmul.py): the flag,
epoch, debug-report and per-tensor scale pointers, and the configuration's constexprs."""

FP8_NAMES = ("fp8e4nv", "fp8e5")


def tp_pointers() -> dict[str, str]:
    """The pointer arguments after the descriptors, in the kernels' order."""
    return {"flags": "*i32", "epoch_ptr": "*i32", "report": "*i32", "scale_a": "*fp32", "scale_b": "*fp32"}


def tp_constexprs(cfg, b_kmajor: bool, debug: bool, dtype: str) -> dict:
    """The constexprs of configuration `cfg` (a single-CTA MatmulConfig), B's layout, DEBUG and SCALED (fp8 A, B)."""
    return {"STAGES": cfg.stages, "C_STAGES": cfg.c_stages, "GROUP_M": cfg.group_m, "B_KMAJOR": b_kmajor,
            "TILE": [cfg.block_m, cfg.block_n], "EPILOGUE_N": cfg.epilogue_n, "DEBUG": debug,
            "SCALED": dtype in FP8_NAMES}


def tp_variant_spec(kernel: str):
    """The catalogue's form of a tensor-parallel kernel (kernels/catalogue.py TENSOR_PARALLEL), as (config, spec):
    "ag_matmul_kernel" or "rs_matmul_kernel", bf16, 128x256 with D in 64-column sub-tiles, B row-major, 2 ranks."""
    from tilepipe.host.configs import LARGE_SUBTILED_16BIT as cfg
    from tilepipe.kernels.ag_matmul import ag_matmul_spec
    from tilepipe.kernels.rs_matmul import rs_matmul_spec

    if kernel == "ag_matmul_kernel":
        return cfg, ag_matmul_spec(cfg, "bf16", False, 2)
    return cfg, rs_matmul_spec(cfg, "bf16", False)
