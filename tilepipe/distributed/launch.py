"""Launching the tensor-parallel ops' GEMMs: their persistent kernels (kernels/ag_matmul.py, kernels/rs_matmul.py),
one program per SM or per tile, the first launch of a configuration through Triton's JIT, later ones through its
cached FastLauncher (host/launch.py); and tilepipe's own GEMM where a step needs no flag (`local_matmul`)."""

from importlib import import_module

import torch

from tilepipe.api.fp8 import matmul_fp8
from tilepipe.api.matmul import matmul
from tilepipe.distributed.workspace import Workspace
from tilepipe.host.configs import MatmulConfig
from tilepipe.host.device import sm_count
from tilepipe.host.launch import LauncherCache, TmaOperand, tensor_descriptor
from tilepipe.kernels.spec import BUILD_OPTIONS


def launch_gemm(cache: LauncherCache, key: tuple, kernel: str, operands: tuple[tuple[torch.Tensor, str], ...],
                pointers: tuple[torch.Tensor, ...], scalars: tuple, cfg: MatmulConfig, b_kmajor: bool, tiles: int,
                device: int) -> None:
    """Launch `kernel` ("module:name") on the current stream over `tiles` tiles: TMA descriptors of `operands`
    (tensor, "a", "b" or "c": its block of `cfg` as kernels/matmul.py operand_blocks gives it, which only the first
    launch of `key` needs), then `pointers`' addresses and `scalars` (constexprs included, in the kernel's order).
    `key`: everything the binary is specialized on."""
    grid = (min(sm_count(device), tiles), 1, 1)
    stream = torch._C._cuda_getCurrentRawStream(device)
    args = (*(TmaOperand.of(t) for t, _ in operands), *(p.data_ptr() for p in pointers), *scalars)
    if cache.launch(key, grid, stream, args) is not None:
        return
    from tilepipe.kernels.matmul import operand_blocks

    blocks = operand_blocks(cfg, b_kmajor)
    module, name = kernel.split(":")
    jit = getattr(import_module(module), name)
    compiled = jit[grid](*(tensor_descriptor(t, *blocks[block]) for t, block in operands), *pointers, *scalars,
                         num_warps=cfg.num_warps, **BUILD_OPTIONS)
    cache.remember(key, compiled)


def local_matmul(a: torch.Tensor, b: torch.Tensor, scale_a: torch.Tensor | None, scale_b: torch.Tensor | None,
                 out_dtype: torch.dtype, out: torch.Tensor | None) -> torch.Tensor:
    """a @ b by tilepipe.matmul, or by matmul_fp8 for the FP8 per-tensor form (scales given), into `out`."""
    if scale_a is None:
        return matmul(a, b, out=out)
    return matmul_fp8(a, b, scale_a, scale_b, out_dtype=out_dtype, out=out)


def scales(ws: Workspace, scale_a: torch.Tensor | None, scale_b: torch.Tensor | None
           ) -> tuple[torch.Tensor, torch.Tensor]:
    """The scale pointers a kernel takes: the FP8 form's, else the workspace's fp32 one (unread by 16-bit kernels)."""
    return (scale_a, scale_b) if scale_a is not None else (ws.unit, ws.unit)
