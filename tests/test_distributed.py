"""tilepipe.distributed on the CPU: the flag-waiting GEMMs (the all-gather's, the reduce-scatter's ring;
16-bit and FP8 per-tensor) compile for sm_90a with the acquire and the proxy fence; the flag protocol's model passes
and catches seeded faults; bad input is refused naming the argument (a one-rank gloo group; fake CUDA tensors for the
checks that need a CUDA device); the overlap rule and the all-gather's tile.
The GPU side: tests/gpu/tp_cases.py under torchrun (scripts/gpu_tp.sh)."""

import pytest
import torch
import torch.distributed as dist
from torch._subclasses.fake_tensor import FakeTensorMode

from tilepipe.distributed.plan import for_operands, gather_config, medium, ring_config
from tilepipe.host.configs import LARGE_SUBTILED_16BIT
from tilepipe.host.gpus import gpu_model
from tilepipe.kernels.ag_matmul import ag_matmul_spec
from tilepipe.kernels.rs_matmul import rs_matmul_spec
from tilepipe.verify.compile import compile_kernels
from tilepipe.verify.tp_protocol import check_tp_protocol

SPECS = {"ag bf16 row-major": ag_matmul_spec(LARGE_SUBTILED_16BIT, "bf16", False, 2),
         "ag fp8 debug": ag_matmul_spec(for_operands(medium(), True), "fp8e4nv", True, 2, True, "bf16"),
         "rs bf16 row-major": rs_matmul_spec(ring_config(8192), "bf16", False, 2),  # the ring's tile, as it runs
         "rs fp8 debug": rs_matmul_spec(for_operands(ring_config(8192), True), "fp8e4nv", True, 4, True, "bf16")}
SMEM_LIMIT = 232448  # 227 KB per block on sm_90a


@pytest.fixture(scope="module")
def reports():
    return dict(zip(SPECS, compile_kernels(list(SPECS.values()))))


@pytest.mark.parametrize("name", list(SPECS))
def test_flag_waiting_gemm_compiles_with_acquire_and_proxy_fence(reports, name):
    report = reports[name]
    assert report.spill_stores == 0 and report.spill_loads == 0
    assert report.shared <= SMEM_LIMIT
    assert report.count("ld.acquire.sys.global.u32") == 1  # one wait site: the load (ag) or epilogue-load (rs) role's
    ring = name.startswith("rs")  # the ring's store role also flags each tile it sent: stores written, fence, release
    assert report.count("fence.proxy.async.global") == (2 if ring else 1)
    assert report.count("st.release.sys.global.u32") == report.count("cp.async.bulk.wait_group \t0") == int(ring)
    assert report.count("bar.warp.sync -1") >= 1  # the spinning lanes joined before the warp issues TMA copies
    assert report.count("cp.async.bulk.tensor") > 0
    assert (report.count("%globaltimer") > 0) == ("debug" in name)  # only debug mode times its wait
    fp8 = "fp8" in name
    assert report.count(".e4m3.e4m3" if fp8 else "k16.f32.bf16.bf16") > 0  # FP8 wgmmas through matmul's mma role
    assert report.count("ld.global.b32") == (3 if fp8 else 1)  # the epoch, and the two scales of the FP8 form


def test_all_gather_tile_is_128x128_where_its_waves_fill_better():
    """1024x28672x8192 on 2 ranks: 448 tiles of 128x256 (4 waves on 132 SMs, the last 39% full) against 896 of
    128x128 (7 waves); the issue's two larger shapes keep 128x256."""
    h200 = gpu_model("NVIDIA H200")
    assert gather_config(512, 14336, 2, h200) == medium()
    assert gather_config(2048, 4096, 2, h200) == LARGE_SUBTILED_16BIT
    assert gather_config(4096, 14336, 2, h200) == LARGE_SUBTILED_16BIT


OPS = ("all_gather", "reduce_scatter")  # the pushes of A's chunks; the ring of partial sums


@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("world, walks", [(2, 0), (3, 0), (4, 300), (8, 60)])
def test_flag_protocol_holds(world, walks, op):
    """Three calls of the ring: the third reuses the first's set of slots and flags, with no barrier between."""
    result = check_tp_protocol(world, calls=2 if op == "all_gather" else 3, walks=walks, op=op)
    assert result.ok, result.findings
    assert result.states > 50


@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("world, walks", [(2, 0), (3, 0), (8, 60)])
def test_checker_catches_a_stale_epoch(world, walks, op):
    """An epoch baked in (a host constant a CUDA graph replays) lets call 2 read call 1's chunks."""
    result = check_tp_protocol(world, calls=2, seed="baked_epoch", walks=walks, op=op)
    assert [f.kind for f in result.findings] == ["stale"], result.findings
    assert "call 2 read chunk" in result.findings[0].message


@pytest.mark.parametrize("op, fault, waits", [
    ("all_gather", "no_barrier", "role 'load' waits for chunk 1 from peer 1"),
    ("reduce_scatter", "one_set", "role 'epilogue_load' waits for chunk 0 from peer 1")])
def test_checker_catches_a_missing_guard_and_a_skipped_call(op, fault, waits):
    """Without the all-gather's closing barrier, or with the ring's calls all on one set of slots and flags, a fast
    rank overwrites a slot of the call before; a rank that skips a call leaves the other waiting, named."""
    for world in (2, 3):
        assert "stale" in {f.kind for f in check_tp_protocol(world, calls=3, seed=fault, op=op).findings}
    skipped = check_tp_protocol(2, seed="skip", op=op).findings
    assert [f.kind for f in skipped] == ["hang"]
    assert waits in skipped[0].message


@pytest.fixture(scope="module")
def group():
    if dist.is_initialized():
        yield dist.group.WORLD
        return
    dist.init_process_group("gloo", rank=0, world_size=1, store=dist.HashStore())
    yield dist.group.WORLD
    dist.destroy_process_group()


def test_bad_input_on_the_cpu_names_the_argument(group):
    from tilepipe.distributed import all_gather_matmul, matmul_reduce_scatter

    a, b = torch.randn(256, 64, dtype=torch.bfloat16), torch.randn(64, 128, dtype=torch.bfloat16)
    with pytest.raises(ValueError, match="a_shard must be on a CUDA device"):
        all_gather_matmul(a, b, group)
    with pytest.raises(ValueError, match="^a must be on a CUDA device"):
        matmul_reduce_scatter(a, b, group)
    with pytest.raises(TypeError, match="b must be a torch.Tensor"):
        all_gather_matmul(a, "b", group)
    with pytest.raises(TypeError, match="group must be"):
        matmul_reduce_scatter(a, b, 3)
    with pytest.raises(TypeError, match="scale_b must be a torch.Tensor"):
        all_gather_matmul(a, b, group, scale_a=torch.ones(1))


def fake(*shape, dtype=torch.bfloat16, strides=None):
    strides = strides or tuple(torch.empty(shape, device="meta").stride())
    return torch.empty_strided(shape, strides, dtype=dtype, device="cuda")


@pytest.mark.parametrize("make, error, message", [
    (lambda: (fake(256, 64), fake(64, 128, dtype=torch.float16)), TypeError, "a_shard and b must have the same dtype"),
    (lambda: (fake(256, 64), fake(32, 128)), ValueError, r"a_shard.shape\[1\] must equal b.shape\[0\]"),
    (lambda: (fake(256, 60), fake(60, 128)), ValueError, "rows of 16 bytes"),
    (lambda: (fake(256, 64), fake(64, 128, strides=(1, 128))), ValueError, "b must be row-major or a transposed"),
    (lambda: (fake(4, 64, 64), fake(64, 128)), ValueError, "a_shard must be 2-D"),
    (lambda: (fake(256, 64, dtype=torch.float32), fake(64, 128)), TypeError, "a_shard must be bfloat16 or float16"),
    (lambda: (*fp8_operands(), fake(1, dtype=torch.float32), fake(2, dtype=torch.float32)), ValueError,
     "scale_b must be a one-element float32 tensor"),
    (lambda: (*fp8_operands(b_strides=(128, 1)), *fp8_scales()), ValueError, "b must be a transposed"),
    (lambda: (fake(256, 64), fake(64, 128), *fp8_scales()), TypeError, "a_shard must be float8_e4m3fn"),
])
def test_fake_calls_check_their_arguments(group, make, error, message):
    import tilepipe.distributed  # noqa: F401  (registers the ops)

    with FakeTensorMode(), pytest.raises(error, match=message):
        torch.ops.tilepipe.all_gather_matmul(*make(), group_name=group.group_name)


def fp8_operands(b_strides=(1, 64)):
    return fake(256, 64, dtype=torch.float8_e4m3fn), fake(64, 128, dtype=torch.float8_e4m3fn, strides=b_strides)


def fp8_scales():
    return fake(1, dtype=torch.float32), fake(1, dtype=torch.float32)


@pytest.mark.parametrize("b_strides", [None, (1, 64)])
def test_fake_results_have_the_gathered_rows(group, b_strides):
    import tilepipe.distributed  # noqa: F401

    with FakeTensorMode():
        a, b = fake(256, 64), fake(64, 128, strides=b_strides)
        assert torch.ops.tilepipe.all_gather_matmul(a, b, group_name=group.group_name).shape == (256, 128)
        assert torch.ops.tilepipe.matmul_reduce_scatter(a, b, group_name=group.group_name).shape == (256, 128)
        d = torch.ops.tilepipe.all_gather_matmul(*fp8_operands(), *fp8_scales(), group_name=group.group_name,
                                                 out_dtype=torch.float16)
        assert d.shape == (256, 128) and d.dtype == torch.float16
        assert torch.ops.tilepipe.all_gather_matmul(a, b, group_name=group.group_name, overlap=True).shape == (256, 128)


def test_the_compiled_call_keeps_overlap(group, monkeypatch):
    """Under torch.compile the op is called with the caller's overlap (the 2xH200 run's compiled layer ran the NCCL
    sequence where the eager one overlapped: outputs 2.5e-3 apart)."""
    import tilepipe.distributed as td
    from tilepipe.distributed import all_gather

    seen = {}
    monkeypatch.setattr(torch.compiler, "is_compiling", lambda: True)
    monkeypatch.setattr(all_gather, "traced", lambda *args: seen.setdefault("args", args))

    with FakeTensorMode():
        td.all_gather_matmul(fake(256, 64), fake(64, 128), group, overlap=True)
    assert seen["args"][-1] is True


def test_ranks_that_disagree_are_named(group, monkeypatch):
    from tilepipe.distributed import checks

    a, b = torch.empty(256, 64), torch.empty(64, 128)

    def other_rank(seen, mine, group=None):
        seen[0] = ("all_gather_matmul", (128, 64), mine[2], mine[3], mine[4])

    monkeypatch.setattr(dist, "all_gather_object", other_rank)
    with pytest.raises(ValueError, match=r"a_shard differs across the group: \(256, 64\) on rank 0, \(128, 64\)"):
        checks.check_agreement(group, "all_gather_matmul", "a_shard", a, b, False)


@pytest.mark.parametrize("M, N, K, pays", [(8192, 14336, 8192, True), (4096, 4096, 8192, True),
                                           (1024, 14336, 8192, True), (256, 4096, 4096, False)])
def test_overlap_pays_on_the_issue_shapes_not_at_small_m(M, N, K, pays):
    from tilepipe.distributed.plan import overlap_pays

    assert overlap_pays(M, N, K, M // 2, K, 2, gpu_model("NVIDIA H200")) == pays
