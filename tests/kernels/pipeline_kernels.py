"""Kernels that exercise tilepipe.pipeline: a stress ring in every API style, a TMA -> wgmma consumer.

Compiled on the CPU by tests/test_pipeline.py; run on a GPU by tests/gpu/pipeline_cases.py.
"""

from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import mbarrier, tma, warpgroup_mma, warpgroup_mma_wait

from tilepipe.pipeline import ProducerConsumerPipeline
from tilepipe.roles import warp_specialize

DIRECT = gl.constexpr(0)
HANDLES = gl.constexpr(1)
CONTEXTS = gl.constexpr(2)
STYLES = {"direct": 0, "handles": 1, "contexts": 2}


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
        if STYLE == DIRECT:
            pipe.wait_consumer()
            bufs.index(pipe.producer_stage()).store(item_values(i, ROWS, COLS, layout))
            mbarrier.arrive(pipe.producer_mbar(pipe.producer_stage()))
            pipe = pipe.producer_step()
        elif STYLE == HANDLES:
            stage = pipe.acquire_producer()
            bufs.index(stage.index()).store(item_values(i, ROWS, COLS, layout))
            stage.arrive()
            pipe = stage.release()
        else:
            with pipe.produce() as stage:
                bufs.index(stage.index()).store(item_values(i, ROWS, COLS, layout))
                stage.arrive()
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
            pipe.wait_producer()
            total = gl.sum(gl.sum(bufs.index(pipe.consumer_stage()).load(layout), 1), 0)
            mbarrier.arrive(pipe.consumer_mbar(pipe.consumer_stage()))
            pipe = pipe.consumer_step()
        elif STYLE == HANDLES:
            if CONSUMER == 0:
                stage = pipe.acquire_consumer()
            else:
                stage = pipe.try_acquire_consumer()
            total = gl.sum(gl.sum(bufs.index(stage.index()).load(layout), 1), 0)
            pipe = stage.release()
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
                tma.async_copy_global_to_shared(a_desc, [t * BM, k * BK], stage.mbar(), a_bufs.index(stage.index()))
                tma.async_copy_global_to_shared(b_desc, [0, k * BK], stage.mbar(), b_bufs.index(stage.index()))
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


@gluon.jit
def wgmma_kernel(a_desc, b_desc, out_ptr, n_tiles, k_tiles, NUM_STAGES: gl.constexpr):
    a_bufs = gl.allocate_shared_memory(a_desc.dtype, [NUM_STAGES] + a_desc.block_type.shape, a_desc.layout)
    b_bufs = gl.allocate_shared_memory(b_desc.dtype, [NUM_STAGES] + b_desc.block_type.shape, b_desc.layout)
    pipe = ProducerConsumerPipeline.create(NUM_STAGES, name="operands")
    warp_specialize([(wgmma_consumer, (pipe, a_bufs, b_bufs, out_ptr, n_tiles, k_tiles)),
                     (wgmma_loader, (pipe, a_bufs, b_bufs, a_desc, b_desc, n_tiles, k_tiles))], [1], [48])
