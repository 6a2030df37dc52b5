"""Device facts the host side needs: a tensor's device index, the SM count, Gluon's dtype names, and the NVMMA
layout rule the kernels' storage gives a tile (host descriptors must agree with it)."""

from functools import cache

import torch

from tilepipe.kernels.spec import tile_layout

GL_DTYPES = {torch.bfloat16: "bf16", torch.float16: "fp16", torch.float32: "fp32", torch.float8_e4m3fn: "fp8e4nv",
              torch.float8_e5m2: "fp8e5"}
"""Gluon's names of the dtypes the kernels read and write."""


@cache
def nvmma_layout(block: tuple[int, int], dtype: str, cga: tuple = ()):
    """The NVMMA shared layout of a tile, by the kernels' rule (kernels/spec.py: tile_layout), once per tile."""
    return tile_layout(dtype, block, cga)


def device_index(t: torch.Tensor) -> int:
    return t.device.index if t.device.index is not None else torch.cuda.current_device()


@cache
def sm_count(device_index: int) -> int:
    return torch.cuda.get_device_properties(device_index).multi_processor_count
