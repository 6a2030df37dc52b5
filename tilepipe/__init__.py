"""tilepipe: warp-specialized GPU kernels as roles joined by producer-consumer tile pipelines (Gluon, triton 3.9)."""

__version__ = "0.1.0"

from tilepipe.ops import MatmulConfig, addmm, matmul  # noqa: E402  (the torch-facing API)
from tilepipe.fp8 import matmul_fp8  # noqa: E402
from tilepipe import library  # noqa: E402,F401  (registers the custom ops tilepipe::*)
from tilepipe.tuning import autotune  # noqa: E402

__all__ = ["MatmulConfig", "addmm", "autotune", "matmul", "matmul_fp8"]
