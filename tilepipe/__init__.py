"""tilepipe: warp-specialized GPU kernels as roles joined by producer-consumer tile pipelines (Gluon, triton 3.6.0)."""

__version__ = "0.1.0"

from tilepipe.fp8 import matmul_fp8  # noqa: E402
from tilepipe.ops import addmm, matmul  # noqa: E402  (the torch-facing API)

__all__ = ["addmm", "matmul", "matmul_fp8"]
