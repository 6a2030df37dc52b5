"""TMA descriptors built on the device: a kernel argument's descriptor re-cut to bounds known only on the GPU (a
k-grouped GEMM's group ends), so TMA fills zeros past them. Gluon 3.9's `tma.make_tensor_descriptor` writes the
128-byte tensor map to the kernel's global scratch and fences it for the TMA proxy (`fence.proxy.tensormap`)."""

from triton.experimental import gluon
from triton.experimental.gluon.language.nvidia.hopper import tma


@gluon.jit
def bounded_like(desc, base, rows, cols, row_stride):
    """A descriptor with `desc`'s block and shared layout over the row-major (rows, cols) tensor at `base` (row stride
    `row_stride` elements): loads past `rows` or `cols` land zeros."""
    return tma.make_tensor_descriptor(base, [rows, cols], [row_stride, 1], desc.block_type.shape, desc.layout)
