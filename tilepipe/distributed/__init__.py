"""Tensor-parallel GEMMs across the GPUs of a torch.distributed group, their communication overlapped with the GEMM on
torch's symmetric memory: all_gather_matmul (column-parallel: all-gather A, then A @ B) and matmul_reduce_scatter
(row-parallel: A @ B, then reduce-scatter the sums). Importing this package registers them as the torch.library ops
tilepipe::all_gather_matmul and tilepipe::matmul_reduce_scatter. docs/tp.md: the design."""

from tilepipe.distributed import library  # noqa: F401  (registers the custom ops)
from tilepipe.distributed.all_gather import all_gather_matmul
from tilepipe.distributed.reduce_scatter import matmul_reduce_scatter

__all__ = ["all_gather_matmul", "matmul_reduce_scatter"]
