"""Kernels that allocate whole storage plans: each storage type is allocated and kept live by at least one.

`plan(KIND, STAGES)` is the single source of truth: the tests call it on the host and the kernel calls it
while tracing. The kernel allocates every storage of the plan and keeps each buffer live, so the compiled
kernel's shared memory is exactly the plan's.
"""

from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language._core import builtin

from tilepipe.pipeline.storage import (BlockScaledTileStorage, BlockwiseFP8TileStorage, ClcPipelineStorage,
                                       EpiLoadPipelineStorage, InputPipelineStorage, LoadOrderBarrierStorage,
                                       OutputPipelineStorage, OutputTileStorage, RawBarrierStorage, SmemPipelineBundle,
                                       SmemPipelineBundleNoClc, SmemPlan, SourceTileStorage, StandardTileStorage,
                                       TmemAccumulatorStorage)

KINDS = ("matmul", "residual", "scheduled", "block_scaled", "blockwise_fp8", "tmem")
SM100_ONLY = ("block_scaled", "tmem")  # TMEM exists on sm_100a only: compiled, never run here


@gluon.constexpr_function
def plan(kind, stages, target="sm_90a"):
    """The storage plan of each test configuration (bf16 128x256x64 tiles unless said otherwise)."""
    tiles = StandardTileStorage("bf16", "bf16", (128, 64), (256, 64), stages)
    c_tiles = OutputTileStorage("bf16", (128, 256), 1)
    pipelines = SmemPipelineBundleNoClc(InputPipelineStorage(stages), OutputPipelineStorage(1))
    if kind == "matmul":
        return SmemPlan(target, tiles=tiles, c_tiles=c_tiles, pipelines=pipelines)
    if kind == "residual":
        return SmemPlan(target, tiles=tiles, c_tiles=c_tiles, source=SourceTileStorage("bf16", (128, 64), 2),
                           pipelines=SmemPipelineBundleNoClc(InputPipelineStorage(stages), OutputPipelineStorage(1),
                                                             epi_load=EpiLoadPipelineStorage(2)),
                           load_order=LoadOrderBarrierStorage())
    if kind == "scheduled":
        return SmemPlan(target, tiles=tiles, c_tiles=c_tiles,
                           pipelines=SmemPipelineBundle(InputPipelineStorage(stages, k_group_size=2),
                                                        OutputPipelineStorage(2),
                                                        ClcPipelineStorage(2, ("load", "mma", "epilogue"))),
                           raw=RawBarrierStorage(3))
    if kind == "block_scaled":  # MXFP8 128x256x128: e4m3 operands, packed e8m0 scales, TMEM scale buffers
        return SmemPlan("sm_100a", tiles=BlockScaledTileStorage("fp8e4nv", "fp8e4nv", (128, 128), (256, 128),
                                                                       stages, "uint8", 1), pipelines=pipelines)
    if kind == "blockwise_fp8":
        return SmemPlan(target, tiles=BlockwiseFP8TileStorage("fp8e4nv", "fp8e4nv", (128, 128), (128, 128), stages),
                           c_tiles=c_tiles, pipelines=pipelines)
    return SmemPlan("sm_100a", tiles=tiles, pipelines=pipelines, tmem=TmemAccumulatorStorage(2, 128, 256))


@builtin
def keep_alive(value, _semantic=None):
    """Keep every shared-memory buffer inside `value` (aggregates, tuples) allocated until here."""
    if isinstance(value, gl.shared_memory_descriptor):
        value._keep_alive(_semantic=_semantic)
    elif isinstance(value, (tuple, list, gl.tuple)):
        for item in value:
            keep_alive(item, _semantic=_semantic)
    elif hasattr(value, "type") and hasattr(value.type, "fields"):
        for name, _ in value.type.fields:
            keep_alive(getattr(value, name), _semantic=_semantic)


@gluon.jit
def storage_kernel(KIND: gl.constexpr, STAGES: gl.constexpr):
    """Allocate every storage of plan(KIND, STAGES) and keep it all live to the end."""
    PLAN: gl.constexpr = plan(KIND, STAGES)
    keep_alive(PLAN.allocate())
