"""tilepipe: warp-specialized GPU kernels as roles joined by producer-consumer tile pipelines (Gluon, triton 3.9)."""

from tilepipe._version import __version__  # noqa: F401

from tilepipe.api import library  # noqa: E402,F401  (registers the custom ops tilepipe::*)
from tilepipe.api.fp8 import matmul_block_scaled, matmul_fp8  # noqa: E402
from tilepipe.api.grouped import grouped_gated_mm, grouped_mm, grouped_mm_masked  # noqa: E402
from tilepipe.api.grouped_fp8 import grouped_mm_fp8  # noqa: E402
from tilepipe.api.grouped_wgrad import grouped_mm_wgrad  # noqa: E402
from tilepipe import nn  # noqa: E402,F401  (tilepipe.nn.Linear, tilepipe.nn.GatedMLP)
from tilepipe.api.linear import gated_linear, linear, pack_gate_up  # noqa: E402
from tilepipe.api.linear_fp8 import linear_fp8  # noqa: E402
from tilepipe.api.matmul import addmm, matmul  # noqa: E402  (the torch-facing API)
from tilepipe.host.configs import MatmulConfig
from tilepipe.tools.autotune import autotune  # noqa: E402

__all__ = ["MatmulConfig", "addmm", "autotune", "gated_linear", "grouped_gated_mm", "grouped_mm", "grouped_mm_fp8",
           "grouped_mm_masked", "grouped_mm_wgrad", "linear", "linear_fp8", "matmul", "matmul_block_scaled",
           "matmul_fp8", "pack_gate_up"]
