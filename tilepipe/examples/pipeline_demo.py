"""Pipeline self-check kernels: a stress ring in every API style, and a TMA -> async wgmma consumer.

Compiled on the CPU by tests/test_pipeline.py and `python -m tilepipe report`; run on a GPU (each case in
its own process, under a timeout) by tests/gpu/test_pipeline_gpu.py and `python -m tilepipe demo`:
`python -m tilepipe.examples.pipeline_demo stress STYLE STAGES CONSUMERS ITEMS` or `... wgmma STAGES TILES K_TILES`.
"""

import json
import sys

from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import mbarrier, tma, warpgroup_mma, warpgroup_mma_wait

from tilepipe.kernels.spec import BUILD_OPTIONS
from tilepipe.pipeline.ring import ProducerConsumerPipeline
from tilepipe.pipeline.roles import warp_specialize
from tilepipe.pipeline.storage import InputPipelineStorage, SmemLayouts, SmemPlan, StandardTileStorage

DIRECT = gl.constexpr(0)
HANDLES = gl.constexpr(1)
CONTEXTS = gl.constexpr(2)
MIXED = gl.constexpr(3)  # contexts and handles on the two sides of a runtime `if`: rebinding merges through scf.if
STYLES = {"direct": 0, "handles": 1, "contexts": 2, "mixed": 3}


@gluon.jit
def item_values(i, ROWS: gl.constexpr, COLS: gl.constexpr, layout: gl.constexpr):
    """Item i's payload, a ROWS x COLS tile holding i * ROWS * COLS + [0, ROWS * COLS): its sum identifies i."""
    r = gl.arange(0, ROWS, gl.SliceLayout(1, layout))
    c = gl.arange(0, COLS, gl.SliceLayout(0, layout))
    return i * (ROWS * COLS) + r[:, None] * COLS + c[None, :]


@gluon.constexpr_function
def tile_layout(cols, num_warps):
    return gl.BlockedLayout([1, cols // 32], [1, 32], [num_warps, 1], [1, 0])


@gluon.jit
def stress_producer(pipe: ProducerConsumerPipeline, bufs, n_items, STYLE: gl.constexpr):
    ROWS: gl.constexpr = bufs.shape[1]
    COLS: gl.constexpr = bufs.shape[2]
    layout: gl.constexpr = tile_layout(COLS, gl.num_warps())
    for i in range(n_items):
        if STYLE == DIRECT:  # the seed's try-then-wait idiom
            pipe.wait_consumer_if_needed(pipe.try_wait_consumer())
            bufs.index(pipe.producer_stage()).store(item_values(i, ROWS, COLS, layout))
            mbarrier.arrive(pipe.producer_mbar(pipe.producer_stage()))
            pipe = pipe.producer_step()
        elif STYLE == HANDLES:
            stage = pipe.acquire_producer(pipe.try_acquire_producer())
            bufs.index(stage.index()).store(item_values(i, ROWS, COLS, layout))
            stage.arrive()
            pipe = stage.release()
        elif STYLE == CONTEXTS:
            with pipe.produce() as stage:
                bufs.index(stage.index()).store(item_values(i, ROWS, COLS, layout))
                stage.arrive()
        else:
            if i % 3 == 0:
                with pipe.produce() as stage:
                    bufs.index(stage.index()).store(item_values(i, ROWS, COLS, layout))
                    stage.arrive()
            else:
                stage = pipe.acquire_producer()
                bufs.index(stage.index()).store(item_values(i, ROWS, COLS, layout))
                stage.arrive()
                pipe = stage.release()
    pipe.drain()


@gluon.jit
def stress_consumer(pipe: ProducerConsumerPipeline, bufs, out_ptr, n_items, CONSUMER: gl.constexpr,
                    STYLE: gl.constexpr):
    """Writes sum(item i) to out[CONSUMER * n_items + i] for every item it consumes."""
    COLS: gl.constexpr = bufs.shape[2]
    layout: gl.constexpr = tile_layout(COLS, gl.num_warps())
    out = out_ptr + CONSUMER * n_items
    for i in range(n_items):
        if STYLE == DIRECT:
            if CONSUMER == 0:
                pipe.wait_producer()
            else:
                pipe.wait_producer_if_needed(pipe.try_wait_producer())
            total = gl.sum(gl.sum(bufs.index(pipe.consumer_stage()).load(layout), 1), 0)
            mbarrier.arrive(pipe.consumer_mbar(pipe.consumer_stage()))
            pipe = pipe.consumer_step()
        elif STYLE == HANDLES:
            if CONSUMER == 0:
                stage = pipe.acquire_consumer()
            else:
                stage = pipe.acquire_consumer(pipe.try_acquire_consumer())
            total = gl.sum(gl.sum(bufs.index(stage.index()).load(layout), 1), 0)
            pipe = stage.release()
        elif STYLE == MIXED:
            if i % 2 == 1:
                stage = pipe.acquire_consumer()
                total = gl.sum(gl.sum(bufs.index(stage.index()).load(layout), 1), 0)
                pipe = stage.release()
            else:
                with pipe.consume() as stage:
                    total = gl.sum(gl.sum(bufs.index(stage.index()).load(layout), 1), 0)
        else:
            if CONSUMER == 0:
                with pipe.consume() as stage:
                    total = gl.sum(gl.sum(bufs.index(stage.index()).load(layout), 1), 0)
            else:
                with pipe.consume_explicit() as stage:
                    total = gl.sum(gl.sum(bufs.index(stage.index()).load(layout), 1), 0)
                    if i >= 0:
                        stage.arrive()
        gl.store(out + i, total)


@gluon.jit
def stress_default_one(pipe, bufs, out_ptr, n_items, STYLE: gl.constexpr):
    stress_consumer(pipe, bufs, out_ptr, n_items, 0, STYLE)


@gluon.jit
def stress_kernel(out_ptr, n_items, NUM_STAGES: gl.constexpr, NUM_CONSUMERS: gl.constexpr, STYLE: gl.constexpr,
                  ROWS: gl.constexpr, COLS: gl.constexpr):
    """One producer role (1 warp) -> NUM_CONSUMERS consumer roles through a NUM_STAGES ring of int32 tiles."""
    bufs = gl.allocate_shared_memory(gl.int32, [NUM_STAGES, ROWS, COLS], gl.NVMMASharedLayout.get_default_for([ROWS, COLS], gl.int32))
    pipe = ProducerConsumerPipeline.create(NUM_STAGES, producer_arrivals=1, consumer_arrivals=NUM_CONSUMERS,
                                           name="stress", producer_proxy="generic", consumer_proxy="generic")
    if NUM_CONSUMERS == 1:
        warp_specialize([(stress_default_one, (pipe, bufs, out_ptr, n_items, STYLE)),
                         (stress_producer, (pipe, bufs, n_items, STYLE))], [1], [48])
    else:
        warp_specialize([(stress_default_one, (pipe, bufs, out_ptr, n_items, STYLE)),
                         (stress_producer, (pipe, bufs, n_items, STYLE)),
                         (stress_consumer, (pipe, bufs, out_ptr, n_items, 1, STYLE))], [1, 4], [48, 64])


# ---- TMA producer -> async wgmma consumer, freeing each slot once its wgmma retired ------------


@gluon.jit
def wgmma_loader(pipe: ProducerConsumerPipeline, a_bufs, b_bufs, a_desc, b_desc, n_tiles, k_tiles):
    BM: gl.constexpr = a_desc.block_type.shape[0]
    BK: gl.constexpr = a_desc.block_type.shape[1]
    for t in range(n_tiles):
        for k in range(k_tiles):
            with pipe.produce() as stage:
                stage.expect_bytes(a_desc.block_type.nbytes + b_desc.block_type.nbytes)
                tma.async_load(a_desc, [t * BM, k * BK], stage.mbar(), a_bufs.index(stage.index()))
                tma.async_load(b_desc, [0, k * BK], stage.mbar(), b_bufs.index(stage.index()))
    pipe.drain()


@gluon.jit
def wgmma_consumer(pipe: ProducerConsumerPipeline, a_bufs, b_bufs, out_ptr, n_tiles, k_tiles):
    """acc(tile t) = A[t] @ B^T with one wgmma in flight; a slot is freed once the wgmma reading it retired."""
    BM: gl.constexpr = a_bufs.shape[1]
    BN: gl.constexpr = b_bufs.shape[1]
    acc_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[gl.num_warps(), 1],
                                                         instr_shape=[16, BN, 16])
    pipe = pipe.with_release_lag(1)
    rows = gl.arange(0, BM, gl.SliceLayout(1, acc_layout))
    cols = gl.arange(0, BN, gl.SliceLayout(0, acc_layout))
    for t in range(n_tiles):
        acc = gl.zeros([BM, BN], gl.float32, acc_layout)
        for k in range(k_tiles):
            stage = pipe.acquire_consumer()
            acc = warpgroup_mma(a_bufs.index(stage.index()), b_bufs.index(stage.index()).permute((1, 0)), acc,
                                is_async=True)
            acc = warpgroup_mma_wait(num_outstanding=1, deps=(acc, ))
            pipe = stage.release()
        acc = warpgroup_mma_wait(num_outstanding=0, deps=(acc, ))
        pipe = pipe.flush_releases()
        gl.store(out_ptr + (t * BM + rows)[:, None] * BN + cols[None, :], acc)


@gluon.constexpr_function
def wgmma_plan(stages, a_tile, b_tile, dtype):
    """Shared memory of wgmma_kernel: operand stages and the barriers that guard them, declared once."""
    return SmemPlan("sm_90a", tiles=StandardTileStorage(dtype, dtype, tuple(a_tile), tuple(b_tile), stages),
                    operands=InputPipelineStorage(stages, name="operands"))


@gluon.jit
def wgmma_kernel(a_desc, b_desc, out_ptr, n_tiles, k_tiles, NUM_STAGES: gl.constexpr):
    PLAN: gl.constexpr = wgmma_plan(NUM_STAGES, a_desc.block_type.shape, b_desc.block_type.shape, a_desc.dtype)
    tiles, pipe = PLAN.allocate()
    warp_specialize([(wgmma_consumer, (pipe, tiles.a_tiles, tiles.b_tiles, out_ptr, n_tiles, k_tiles)),
                     (wgmma_loader, (pipe, tiles.a_tiles, tiles.b_tiles, a_desc, b_desc, n_tiles, k_tiles))],
                    [1], [48])


# ---- host side ---------------------------------------------------------------------------------

ROWS, COLS = 4, 32
STRESS_SIGNATURE = {"out_ptr": "*i32", "n_items": "i32", "NUM_STAGES": "constexpr", "NUM_CONSUMERS": "constexpr",
                    "STYLE": "constexpr", "ROWS": "constexpr", "COLS": "constexpr"}


def stress_spec(style: str, stages: int, consumers: int, target: str = "sm_90a"):
    """The stress kernel as a tilepipe.verify.compile KernelSpec."""
    from tilepipe.kernels.spec import KernelSpec

    return KernelSpec(f"{__name__}:stress_kernel", STRESS_SIGNATURE,
                      {"NUM_STAGES": stages, "NUM_CONSUMERS": consumers, "STYLE": STYLES[style], "ROWS": ROWS,
                       "COLS": COLS}, target=target)


def wgmma_spec(stages: int):
    """The TMA -> wgmma kernel (sm_90a only: wgmma does not exist on sm_100a) as a KernelSpec."""
    from tilepipe.kernels.spec import KernelSpec, tdesc_signature

    layouts = SmemLayouts(128, 64, 64, "fp16", "fp32")
    return KernelSpec(f"{__name__}:wgmma_kernel",
                      {"a_desc": tdesc_signature("fp16", [128, 64], layouts.a),
                       "b_desc": tdesc_signature("fp16", [64, 64], layouts.b), "out_ptr": "*fp32", "n_tiles": "i32",
                       "k_tiles": "i32", "NUM_STAGES": "constexpr"}, {"NUM_STAGES": stages})


def run_stress(style: str, stages: int, consumers: int, n_items: int) -> dict:
    """Move n_items through the ring; every consumer must see every item exactly, in order."""
    import torch

    out = torch.full((consumers, n_items), -1, dtype=torch.int32, device="cuda")  # -1: no item sums to it
    stress_kernel[(1, )](out, n_items, stages, consumers, STYLES[style], ROWS, COLS, num_warps=4, **BUILD_OPTIONS)
    torch.cuda.synchronize()
    size = ROWS * COLS
    expected = torch.arange(n_items, device="cuda", dtype=torch.int64) * size * size + size * (size - 1) // 2
    wrong = int((out.to(torch.int64) != expected[None, :]).sum())
    return {"case": f"stress {style} stages={stages} consumers={consumers} items={n_items}", "ok": wrong == 0,
            "wrong_items": wrong}


def run_wgmma(stages: int, n_tiles: int, k_tiles: int) -> dict:
    """n_tiles x k_tiles ring items into an async wgmma consumer; compare with a float64 reference."""
    import torch
    from triton.experimental.gluon.nvidia.hopper import TensorDescriptor

    BM, BN, BK = 128, 64, 64
    a = torch.randn(n_tiles * BM, k_tiles * BK, device="cuda", dtype=torch.float16)
    b = torch.randn(BN, k_tiles * BK, device="cuda", dtype=torch.float16)
    out = torch.full((n_tiles * BM, BN), float("nan"), device="cuda")

    layouts = SmemLayouts(BM, BN, BK, "fp16", "fp32")  # the layouts the kernel's tile storage allocates
    a_desc = TensorDescriptor.from_tensor(a, [BM, BK], layouts.a)
    b_desc = TensorDescriptor.from_tensor(b, [BN, BK], layouts.b)
    wgmma_kernel[(1, )](a_desc, b_desc, out, n_tiles, k_tiles, stages, num_warps=4, **BUILD_OPTIONS)
    torch.cuda.synchronize()
    ref = a.double() @ b.double().T
    err = float((out.double() - ref).norm() / ref.norm())
    return {"case": f"wgmma lag=1 stages={stages} items={n_tiles * k_tiles}", "ok": err < 5e-4, "rel_err": err}


def main(argv: list[str]) -> int:
    kind, *args = argv
    result = run_stress(args[0], *map(int, args[1:])) if kind == "stress" else run_wgmma(*map(int, args))
    print(json.dumps(result))
    return 0 if result["ok"] else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
