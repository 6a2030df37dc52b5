"""Device facts the host side needs: a tensor's device index, the SM count, which kernel family a GPU runs, Gluon's
dtype names, and the NVMMA layout rule the kernels' storage gives a tile (host descriptors must agree with it)."""

from functools import cache

import torch

from tilepipe.kernels.spec import tile_layout

GL_DTYPES = {torch.bfloat16: "bf16", torch.float16: "fp16", torch.float32: "fp32", torch.float8_e4m3fn: "fp8e4nv",
              torch.float8_e5m2: "fp8e5", torch.uint8: "uint8", torch.int32: "int32"}
"""Gluon's names of the dtypes the kernels read and write (uint8: packed FP4 data and e8m0 scales travel as bytes;
int32: the dynamic scheduler's ticket rows)."""


@cache
def nvmma_layout(block: tuple[int, ...], dtype: str, cga: tuple = (), kind: str = "tile"):
    """The NVMMA shared layout of a tile (or, `kind` "scales", a block-scale box), by the kernels' rule
    (kernels/spec.py: tile_layout), once per tile."""
    return tile_layout(dtype, block, cga, kind)


def device_index(t: torch.Tensor) -> int:
    return t.device.index if t.device.index is not None else torch.cuda.current_device()


@cache
def sm_count(device_index: int) -> int:
    return torch.cuda.get_device_properties(device_index).multi_processor_count


GEMM_TARGETS = {(9, 0): "sm_90a", (10, 0): "sm_100a", (10, 3): "sm_100a"}
"""The GEMM kernels by compute capability: wgmma on Hopper (sm_90), tcgen05 and TMEM on datacenter Blackwell (sm_100,
B200/GB200, and sm_103, B300/GB300). Consumer Blackwell (sm_120) has neither wgmma nor TMEM."""


def gemm_target(capability: tuple[int, int], device_name: str = "this GPU") -> str:
    """The kernel family for a device of `capability` ("sm_90a" or "sm_100a"); any other raises, naming the device."""
    major, minor = capability
    target = GEMM_TARGETS.get((major, minor))
    if target is None:
        why = " (consumer Blackwell: no tcgen05 tensor memory)" if major == 12 else ""
        raise RuntimeError(f"tilepipe's GEMMs run on sm_90 (Hopper) and sm_100/sm_103 (datacenter Blackwell) GPUs; "
                           f"{device_name} is sm_{major}{minor}{why}")
    return target


def block_scaled_target(capability: tuple[int, int], device_name: str = "this GPU") -> str:
    """gemm_target for the block-scaled GEMM, which only sm_100a has: on Hopper (no block-scaled MMA) and on any
    other device, RuntimeError naming the device."""
    target = gemm_target(capability, device_name)
    if target != "sm_100a":
        major, minor = capability
        raise RuntimeError(f"block-scaled MMA (MXFP8, MXFP4, NVFP4) needs a datacenter Blackwell GPU (sm_100/sm_103: "
                           f"B200, B300; tcgen05 block_scale); {device_name} is sm_{major}{minor} (Hopper), whose "
                           "wgmma has no block scales")
    return target


@cache
def device_target(device_index: int) -> str:
    """gemm_target of a CUDA device, once per device."""
    return gemm_target(torch.cuda.get_device_capability(device_index), torch.cuda.get_device_name(device_index))
