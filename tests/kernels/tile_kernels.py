"""An InputTilePipeline with k-groups: one acquire covers K_GROUP k-steps (TMA loads, then wgmmas).

acc = A @ B^T for one 128 x 64 tile, K = k_tiles * 64; with OWN_PAYLOAD a kernel author's own three-operand payload
(A, B and a second B, E) gives acc = A @ (B + E)^T through the same pipeline. `python -m tests.kernels.tile_kernels
STAGES K_GROUP K_TILES [own]` runs it on a GPU.
"""

import json
import sys

from triton.experimental import gluon
from triton.experimental.gluon import aggregate
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import tma, warpgroup_mma, warpgroup_mma_wait

from tilepipe.pipeline.roles import warp_specialize
from tilepipe.pipeline.storage import InputPipelineStorage, SmemLayouts, SmemPlan, StandardTileStorage
from tilepipe.pipeline.tiles import InputTilePipeline


@gluon.constexpr_function
def kgroup_plan(stages, k_group, a_tile, b_tile, dtype):
    return SmemPlan("sm_90a", tiles=StandardTileStorage(dtype, dtype, tuple(a_tile), tuple(b_tile), stages),
                    inputs=InputPipelineStorage(stages, k_group_size=k_group))


@gluon.jit
def kgroup_loader(inputs: InputTilePipeline, a_desc, b_desc, e_desc, k_tiles, OWN_PAYLOAD: gl.constexpr):
    BK: gl.constexpr = a_desc.block_type.shape[1]
    K_GROUP: gl.constexpr = inputs.k_group_size
    producer = inputs.producer()
    for k in range(0, k_tiles, K_GROUP):
        with producer.produce() as tiles:
            if OWN_PAYLOAD:  # the payload's own third array, reached by its field name
                tiles.expect_loads(*((a_desc, b_desc, e_desc) * K_GROUP))
                for j in gl.static_range(K_GROUP):
                    tiles.load_a(a_desc, [0, (k + j) * BK], j)
                    tiles.load_b(b_desc, [0, (k + j) * BK], j)
                    tiles.load("e_tiles", e_desc, [0, (k + j) * BK], j)
            else:
                tiles.expect_bytes(K_GROUP * (a_desc.block_type.nbytes + b_desc.block_type.nbytes))
                for j in gl.static_range(K_GROUP):
                    a, b = tiles.get_tile(j)
                    tma.async_load(a_desc, [0, (k + j) * BK], tiles.mbar(), a)
                    tma.async_load(b_desc, [0, (k + j) * BK], tiles.mbar(), b)
    producer.drain()


@gluon.jit
def kgroup_mma(inputs: InputTilePipeline, out_ptr, k_tiles, BM: gl.constexpr, BN: gl.constexpr,
               OWN_PAYLOAD: gl.constexpr):
    K_GROUP: gl.constexpr = inputs.k_group_size
    acc_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[gl.num_warps(), 1],
                                                         instr_shape=[16, BN, 16])
    acc = gl.zeros([BM, BN], gl.float32, acc_layout)
    consumer = inputs.consumer()
    for k in range(0, k_tiles, K_GROUP):
        with consumer.consume() as tiles:
            for j in gl.static_range(K_GROUP):
                a, b = tiles.get_tile(j)
                acc = warpgroup_mma(a, b.permute((1, 0)), acc, is_async=True)
                if OWN_PAYLOAD:
                    acc = warpgroup_mma(a, tiles.tile("e_tiles", j).permute((1, 0)), acc, is_async=True)
            acc = warpgroup_mma_wait(num_outstanding=0, deps=(acc, ))
    rows = gl.arange(0, BM, gl.SliceLayout(1, acc_layout))
    cols = gl.arange(0, BN, gl.SliceLayout(0, acc_layout))
    gl.store(out_ptr + rows[:, None] * BN + cols[None, :], acc)


@aggregate
class OwnTiles:
    """A kernel author's own payload (the seed's open TilePayload trait): A, B and a third operand E, one tile each
    per k-step slot; the pipeline knows nothing of E but its field name."""
    a_tiles: gl.shared_memory_descriptor
    b_tiles: gl.shared_memory_descriptor
    e_tiles: gl.shared_memory_descriptor


@gluon.jit
def kgroup_kernel(a_desc, b_desc, e_desc, out_ptr, k_tiles, STAGES: gl.constexpr, K_GROUP: gl.constexpr,
                  OWN_PAYLOAD: gl.constexpr = False):
    """acc = A @ B^T, or with OWN_PAYLOAD A @ (B + E)^T (E read only then)."""
    BM: gl.constexpr = a_desc.block_type.shape[0]
    BN: gl.constexpr = b_desc.block_type.shape[0]
    PLAN: gl.constexpr = kgroup_plan(STAGES, K_GROUP, a_desc.block_type.shape, b_desc.block_type.shape, a_desc.dtype)
    tiles, pipeline = PLAN.allocate()
    if OWN_PAYLOAD:
        e_tiles = gl.allocate_shared_memory(e_desc.dtype, [STAGES] + e_desc.block_type.shape, e_desc.layout)
        tiles = OwnTiles(tiles.a_tiles, tiles.b_tiles, e_tiles)
    inputs = InputTilePipeline(pipeline, tiles, K_GROUP)
    warp_specialize([(kgroup_mma, (inputs, out_ptr, k_tiles, BM, BN, OWN_PAYLOAD)),
                     (kgroup_loader, (inputs, a_desc, b_desc, e_desc, k_tiles, OWN_PAYLOAD))], [1], [48])


LAYOUTS = SmemLayouts(128, 64, 64, "fp16", "fp32")


def spec(stages: int, k_group: int, own_payload: bool = False):
    from tilepipe.kernels.spec import KernelSpec, tdesc_signature

    return KernelSpec(f"{__name__}:kgroup_kernel",
                      {"a_desc": tdesc_signature("fp16", [128, 64], LAYOUTS.a),
                       "b_desc": tdesc_signature("fp16", [64, 64], LAYOUTS.b),
                       "e_desc": tdesc_signature("fp16", [64, 64], LAYOUTS.b), "out_ptr": "*fp32", "k_tiles": "i32",
                       "STAGES": "constexpr", "K_GROUP": "constexpr", "OWN_PAYLOAD": "constexpr"},
                      {"STAGES": stages, "K_GROUP": k_group, "OWN_PAYLOAD": own_payload})


def run(stages: int, k_group: int, k_tiles: int, own_payload: bool = False) -> dict:
    import torch
    from triton.experimental.gluon.nvidia.hopper import TensorDescriptor

    a = torch.randn(128, k_tiles * 64, device="cuda", dtype=torch.float16)
    b = torch.randn(64, k_tiles * 64, device="cuda", dtype=torch.float16)
    e = torch.randn(64, k_tiles * 64, device="cuda", dtype=torch.float16)
    out = torch.full((128, 64), float("nan"), device="cuda")
    kgroup_kernel[(1, )](TensorDescriptor.from_tensor(a, [128, 64], LAYOUTS.a),
                         TensorDescriptor.from_tensor(b, [64, 64], LAYOUTS.b),
                         TensorDescriptor.from_tensor(e, [64, 64], LAYOUTS.b), out, k_tiles, stages, k_group,
                         own_payload, num_warps=4)
    torch.cuda.synchronize()
    ref = a.double() @ (b.double() + e.double() if own_payload else b.double()).T
    err = float((out.double() - ref).norm() / ref.norm())
    return {"case": f"k-group {k_group} stages={stages} k_tiles={k_tiles}{' own 3-operand payload' if own_payload else ''}",
            "ok": err < 5e-4, "rel_err": err}


if __name__ == "__main__":
    result = run(*map(int, sys.argv[1:4]), own_payload=sys.argv[4:5] == ["own"])
    print(json.dumps(result))
    sys.exit(0 if result["ok"] else 1)
