"""CPU tests of tilepipe.grouped_mm: argument checks (on fake CUDA tensors, the path torch.compile traces), the tile
choice, the kernel compiled for sm_90a, and its protocol model-checked (and a seeded wrong count caught)."""

from dataclasses import replace

import pytest
import torch
from torch._subclasses.fake_tensor import FakeTensorMode

import tilepipe
from tests.test_checker import with_pipeline
from tilepipe.api.grouped import empty_k_result
from tilepipe.host.choose import GROUPED_GROUP_M, GROUPED_SMALL, SMALL_GROUP_ROWS, grouped_config
from tilepipe.host.configs import LARGE_SUBTILED_16BIT, LARGE_SUBTILED_FP32
from tilepipe.kernels.grouped_matmul import grouped_spec
from tilepipe.verify.checker import check
from tilepipe.verify.compile import compile_kernels
from tilepipe.verify.protocols import grouped_protocols


def empty(*shape, dtype=torch.bfloat16, device="cuda", strides=None) -> torch.Tensor:
    if strides is not None:
        return torch.empty_strided(shape, strides, dtype=dtype, device=device)
    return torch.empty(*shape, dtype=dtype, device=device)


def valid() -> dict:
    """A valid call's arguments: 100 rows of K = 64 over 4 experts of N = 32, B K-major (made in FakeTensorMode)."""
    return dict(a=empty(100, 64), b=empty(4, 32, 64).transpose(1, 2), offs=empty(4, dtype=torch.int32))


BAD = [  # (argument changes, error, message naming the argument)
    (lambda: dict(offs=empty(4, dtype=torch.int64)), TypeError, "^offs must be int32"),
    (lambda: dict(offs=empty(4, dtype=torch.int32, device="cpu")), ValueError, "^offs must be on a's device"),
    (lambda: dict(offs=empty(3, dtype=torch.int32)), ValueError, "^offs has 3 group ends but b has 4 groups"),
    (lambda: dict(offs=empty(4, 1, dtype=torch.int32)), ValueError, "^offs must be 1-D"),
    (lambda: dict(offs=empty(8, dtype=torch.int32, strides=(2, ))), ValueError, "^offs has 8 group ends"),
    (lambda: dict(b=empty(4, 64, 32, device="cpu")), ValueError, "^b must be on a's device"),
    (lambda: dict(b=empty(4, 32, 64, dtype=torch.float16).transpose(1, 2)), TypeError, "^b must have a's dtype"),
    (lambda: dict(b=empty(64, 32)), ValueError, "^b must be 3-D"),
    (lambda: dict(b=empty(4, 48, 32)), ValueError, r"^a is \(100, 64\) and b is \(4, 48, 32\): b.shape\[1\]"),
    (lambda: dict(b=empty(4, 64, 30)), ValueError, "^b must be a transposed"),  # rows of 60 bytes
    (lambda: dict(b=empty(4, 64, 32, strides=(64 * 40 + 8, 40, 1))), ValueError, "^b must be a transposed"),  # unpacked
    (lambda: dict(b=empty(4, 64, 32, strides=(1, 4, 256))), ValueError, "^b must be a transposed"),  # neither layout
    (lambda: dict(a=empty(100, 64, dtype=torch.float32)), TypeError, "^a must be bfloat16 or float16"),
    (lambda: dict(a=empty(100, 60), b=empty(4, 32, 60).transpose(1, 2)), ValueError, "^a must be row-major"),
    (lambda: dict(a=empty(64, 100).t()), ValueError, "^a must be row-major"),
    (lambda: dict(a=empty(100, 64, device="cpu"), b=empty(4, 64, 32, device="cpu"),
                  offs=empty(4, dtype=torch.int32, device="cpu")), ValueError, "^a must be on a CUDA device"),
    (lambda: dict(out=empty(100, 33)), ValueError, r"^out must have shape \(100, 32\)"),
    (lambda: dict(out=empty(32, 100).t()), ValueError, "^out must be row-major"),
    (lambda: dict(out=empty(100, 32, dtype=torch.int32)), TypeError, "^out must be bfloat16, float16 or float32"),
    (lambda: dict(out_dtype=torch.int8), TypeError, "^out_dtype must be"),
    (lambda: dict(b=empty(4, 520, 32), a=empty(100, 520)), ValueError, "^b: a row-major b needs K a multiple of 16"),
]


@pytest.mark.parametrize("changes, error, message", BAD, ids=[entry[2].strip("^")[:40] for entry in BAD])
def test_bad_input_names_the_argument(changes, error, message):
    """The fake implementation (what torch.compile traces) runs every check the eager op runs before its launch."""
    with FakeTensorMode():
        arguments = {**valid(), **changes()}
        a, b, offs = (arguments.pop(name) for name in ("a", "b", "offs"))
        with pytest.raises(error, match=message):
            if "out" in arguments:
                torch.ops.tilepipe.grouped_mm_out(arguments.pop("out"), a, b, offs, **arguments)
            else:
                torch.ops.tilepipe.grouped_mm(a, b, offs, **arguments)


def test_cpu_tensors_are_refused_before_anything_is_written():
    a, b, offs = torch.randn(8, 16).bfloat16(), torch.randn(2, 16, 8).bfloat16(), torch.tensor([3, 8], dtype=torch.int32)
    out = torch.full((8, 8), float("nan"), dtype=torch.bfloat16)
    with pytest.raises(ValueError, match="^a must be on a CUDA device"):
        tilepipe.grouped_mm(a, b, offs, out=out)
    assert torch.isnan(out).all()
    with pytest.raises(TypeError, match="^offs must be a torch.Tensor"):
        tilepipe.grouped_mm(a, b, [3, 8])


@pytest.mark.parametrize("kmajor", [True, False])
def test_fake_result_has_the_rows_of_a_and_the_columns_of_b(kmajor):
    with FakeTensorMode():
        a, b, offs = valid().values()
        b = b if kmajor else empty(4, 64, 32)
        assert torch.ops.tilepipe.grouped_mm(a, b, offs).shape == (100, 32)
        assert torch.ops.tilepipe.grouped_mm(a, b, offs, out_dtype=torch.float32).dtype == torch.float32


EPILOGUE_BAD = [  # (call on valid()'s tensors, error, message naming the argument)
    (lambda t: torch.ops.tilepipe.grouped_mm(*t, empty(4, 31)), ValueError, r"^bias must be a contiguous \(4, 32\)"),
    (lambda t: torch.ops.tilepipe.grouped_mm(*t, empty(4, 32, dtype=torch.float16)), TypeError, "^bias must have a's"),
    (lambda t: torch.ops.tilepipe.grouped_mm(*t, empty(4, 32, strides=(64, 2))), ValueError, "^bias must be"),
    (lambda t: torch.ops.tilepipe.grouped_mm(*t, activation="tanh"), ValueError, "^activation must be one of"),
    (lambda t: torch.ops.tilepipe.grouped_gated_mm(*t), ValueError, "^b_gate_up must have a multiple of 128 columns"),
    (lambda t: torch.ops.tilepipe.grouped_gated_mm(t[0], empty(4, 256, 64).transpose(1, 2), t[2], activation=None),
     RuntimeError, "activation"),  # the schema's str refuses None before the checks
    (lambda t: torch.ops.tilepipe.grouped_gated_mm_out(empty(100, 256), t[0], empty(4, 256, 64).transpose(1, 2), t[2]),
     ValueError, r"^out must have shape \(100, 128\)"),
]


@pytest.mark.parametrize("call, error, message", EPILOGUE_BAD, ids=[e[2].strip("^")[:40] for e in EPILOGUE_BAD])
def test_epilogue_arguments_are_checked(call, error, message):
    with FakeTensorMode():
        with pytest.raises(error, match=message):
            call(tuple(valid().values()))


@pytest.mark.parametrize("kmajor", [True, False])
def test_fake_epilogue_results(kmajor):
    """grouped_mm keeps b's columns with a bias and an activation; grouped_gated_mm writes half of them."""
    with FakeTensorMode():
        a, _, offs = valid().values()
        b = empty(4, 256, 64).transpose(1, 2) if kmajor else empty(4, 64, 256)
        assert torch.ops.tilepipe.grouped_mm(a, b, offs, empty(4, 256), activation="silu").shape == (100, 256)
        gated = torch.ops.tilepipe.grouped_gated_mm(a, b, offs, activation="gelu", out_dtype=torch.float32)
        assert gated.shape == (100, 128) and gated.dtype == torch.float32
        out = empty(100, 128, dtype=torch.float32)  # an fp32 out and no out_dtype: D is out's dtype
        assert torch.ops.tilepipe.grouped_gated_mm_out(out, a, b, offs, activation="relu") is None


def test_moe_mlp_traces_under_compile():
    """A MoE expert MLP, grouped_gated_mm (SwiGLU) then grouped_mm with a bias, is two custom ops in one graph."""
    from torch._dynamo.testing import CompileCounterWithBackend

    def experts(x, w_gate_up, w_down, b_down, offs):
        return tilepipe.grouped_mm(tilepipe.grouped_gated_mm(x, w_gate_up, offs), w_down, offs, bias=b_down)

    torch._dynamo.reset()
    counter = CompileCounterWithBackend("aot_eager")
    with FakeTensorMode():
        x, offs = empty(100, 64), empty(4, dtype=torch.int32)
        w_gate_up, w_down = empty(4, 256, 64).transpose(1, 2), empty(4, 64, 128).transpose(1, 2)
        y = torch.compile(experts, fullgraph=True, backend=counter)(x, w_gate_up, w_down, empty(4, 64), offs)
    assert y.shape == (100, 64) and counter.frame_count == 1
    code = counter.graphs[0].code
    assert "tilepipe.grouped_gated_mm" in code and "tilepipe.grouped_mm" in code, code


def valid_3d() -> dict:
    """A valid masked call's arguments: 4 experts of capacity 24 rows, K = 64, N = 32, B K-major (FakeTensorMode)."""
    return dict(a=empty(4, 24, 64), b=empty(4, 32, 64).transpose(1, 2), masked_m=empty(4, dtype=torch.int32))


BAD_3D = [  # (argument changes, error, message naming the argument)
    (lambda: dict(masked_m=empty(4, dtype=torch.int64)), TypeError, r"^masked_m must have dtype torch.int32, got"),
    (lambda: dict(masked_m=empty(3, dtype=torch.int32)), ValueError, r"^masked_m must be a contiguous \(4,\) tensor"),
    (lambda: dict(masked_m=empty(4, dtype=torch.int32, strides=(2, ))), ValueError, "^masked_m must be a contig"),
    (lambda: dict(masked_m=empty(4, dtype=torch.int32, device="cpu")), ValueError, "^masked_m must be on a's device"),
    (lambda: dict(a=empty(96, 64)), ValueError, r"^a must be 3-D \(G, rows, columns\)"),
    (lambda: dict(a=empty(5, 24, 64)), ValueError, r"^a has 5 groups \(a.shape\[0\]\) but b has 4"),
    (lambda: dict(a=empty(4, 24, 48)), ValueError, r"^a is \(4, 24, 48\) and b is \(4, 64, 32\): b.shape\[1\] must"),
    (lambda: dict(a=empty(24, 4, 64).transpose(0, 1)), ValueError, "^a must hold its groups' rows one after another"),
    (lambda: dict(a=empty(4, 24, 64, dtype=torch.float32)), TypeError, "^a must be bfloat16 or float16"),
    (lambda: dict(b=empty(4, 64, 30)), ValueError, "^b must be a transposed"),
    (lambda: dict(out=empty(4, 24, 33)), ValueError, r"^out must have shape \(4, 24, 32\)"),
    (lambda: dict(out=empty(24, 4, 32).transpose(0, 1)), ValueError, "^out must hold its groups' rows"),
    (lambda: dict(bias=empty(4, 31)), ValueError, r"^bias must be a contiguous \(4, 32\)"),
    (lambda: dict(activation="tanh"), ValueError, "^activation must be one of"),
    (lambda: dict(expected_m=-1), ValueError, "^expected_m must be >= 0"),
]


@pytest.mark.parametrize("batched", [False, True], ids=["masked", "batched"])
@pytest.mark.parametrize("changes, error, message", BAD_3D, ids=[entry[2].strip("^")[:40] for entry in BAD_3D])
def test_3d_forms_name_the_bad_argument(changes, error, message, batched):
    """grouped_mm_masked's and the 3D x 3D grouped_mm's fakes (what torch.compile traces) run the eager checks."""
    if batched and ("masked_m" in message or "expected_m" in message):
        pytest.skip("the batched form has no masked_m or expected_m")
    with FakeTensorMode():
        arguments = {**valid_3d(), **changes()}
        a, b, masked_m = (arguments.pop(name) for name in ("a", "b", "masked_m"))
        out, bias = arguments.pop("out", None), arguments.pop("bias", None)
        op = "grouped_mm_batched" if batched else "grouped_mm_masked"
        tensors = (a, b, bias) if batched else (a, b, masked_m, bias)
        with pytest.raises(error, match=message):
            if out is None:
                getattr(torch.ops.tilepipe, op)(*tensors, **arguments)
            else:
                getattr(torch.ops.tilepipe, f"{op}_out")(out, *tensors, **arguments)


def test_masked_form_needs_its_counts():
    """grouped_mm_masked without masked_m is refused (the batched form is grouped_mm's 3D x 3D), before any launch."""
    a, b = torch.randn(2, 8, 16).bfloat16(), torch.randn(2, 16, 8).bfloat16()
    with pytest.raises(TypeError, match="^masked_m must be a torch.Tensor, got NoneType"):
        tilepipe.grouped_mm_masked(a, b, None)


def test_3d_forms_return_g_by_capacity_by_n_and_route_by_rank():
    """The masked and batched results are (G, C, N); grouped_mm takes the batched form for 3-D a and b and refuses
    offs there; both trace as their own custom op under torch.compile."""
    from torch._dynamo.testing import CompileCounterWithBackend

    with FakeTensorMode():
        a, b, masked_m = valid_3d().values()
        assert torch.ops.tilepipe.grouped_mm_masked(a, b, masked_m).shape == (4, 24, 32)
        batched = torch.ops.tilepipe.grouped_mm_batched(a, b, empty(4, 32), out_dtype=torch.float32)
        assert batched.shape == (4, 24, 32) and batched.dtype == torch.float32
        with pytest.raises(ValueError, match="^offs must be None for grouped_mm's 3D x 3D"):
            tilepipe.grouped_mm(a, b, masked_m)
        torch._dynamo.reset()
        counter = CompileCounterWithBackend("aot_eager")
        both = torch.compile(lambda a, b, m: tilepipe.grouped_mm_masked(a, b, m, activation="silu")
                             + tilepipe.grouped_mm(a, b), fullgraph=True, backend=counter)(a, b, masked_m)
    assert both.shape == (4, 24, 32) and counter.frame_count == 1
    code = counter.graphs[0].code
    assert "tilepipe.grouped_mm_masked" in code and "tilepipe.grouped_mm_batched" in code, code


def test_cpu_3d_tensors_are_refused_before_anything_is_written():
    a, b, masked_m = torch.randn(2, 8, 16).bfloat16(), torch.randn(2, 16, 8).bfloat16(), torch.tensor([3, 8]).int()
    out = torch.full((2, 8, 8), float("nan"), dtype=torch.bfloat16)
    for call in (lambda: tilepipe.grouped_mm_masked(a, b, masked_m, out=out),
                 lambda: tilepipe.grouped_mm(a, b, out=out)):
        with pytest.raises(ValueError, match="^a must be on a CUDA device"):
            call()
    with pytest.raises(TypeError, match="^expected_m must be an int or None, got float"):
        tilepipe.grouped_mm_masked(a, b, masked_m, out=out, expected_m=1.5)
    assert torch.isnan(out).all()


@pytest.mark.parametrize("layout", ["masked", "batched"])
def test_empty_k_of_the_3d_forms_writes_their_groups_rows(layout):
    """K = 0: rows [g C, g C + count) of the masked layout (counts clamped to C) and every row of the batched one get
    activation(bias[g]); the masked layout's other rows keep their values."""
    G, C = 3, 4
    out = torch.full((G * C, 2), 7.0)
    counts = torch.tensor([0, 2, 9], dtype=torch.int32)  # 9 > C: the whole capacity
    bias = torch.tensor([[1.0, -1.0], [2.0, -2.0], [3.0, -3.0]])
    got = empty_k_result(out, counts, bias, "relu", layout=layout, G=G).view(G, C, 2)
    relu = bias.clamp(min=0)
    inside = [0, 2, 4] if layout == "masked" else [4, 4, 4]
    for g in range(G):
        assert torch.equal(got[g, :inside[g]], relu[g].expand(inside[g], 2)), (g, got[g])
        assert (got[g, inside[g]:] == 7.0).all(), (g, got[g])


def test_empty_k_writes_the_epilogue_of_zero_in_the_groups_rows():
    """K = 0 launches nothing: each group's rows get activation(bias[g]) (zero without a bias), rows past offs[-1]
    keep out's values."""
    out = torch.full((7, 3), float("nan"))
    offs = torch.tensor([2, 2, 5], dtype=torch.int32)
    bias = torch.tensor([[1.0, -2.0, 3.0], [9.0, 9.0, 9.0], [-1.0, 0.5, 2.0]])
    got = empty_k_result(out, offs, bias, "relu")
    assert torch.equal(got[:5], torch.tensor([[1.0, 0.0, 3.0]] * 2 + [[0.0, 0.5, 2.0]] * 3))
    assert torch.isnan(got[5:]).all()
    assert torch.equal(empty_k_result(out, offs, None, "silu")[:5], torch.zeros(5, 3))


GROUPED_16BIT = replace(LARGE_SUBTILED_16BIT, group_m=GROUPED_GROUP_M)
GROUPED_FP32 = replace(LARGE_SUBTILED_FP32, group_m=GROUPED_GROUP_M)
"""matmul's sub-tiled 128x256 tiles in the grouped GEMM's bands."""


def test_grouped_gated_config_pairs_fit_a_sub_tile():
    """A gated epilogue reads 128 accumulator columns (a gate-up pair) a sub-tile: an fp32 D's 32-column sub-tiles
    widen to 64 beside three operand stages."""
    assert grouped_config(4096, torch.bfloat16, True, gated=True) == GROUPED_16BIT
    assert grouped_config(4096, torch.float32, True, gated=True) == replace(GROUPED_FP32, epilogue_n=64,
                                                                           stages=3)


def test_groups_of_few_rows_take_the_64_row_tile():
    """Up to SMALL_GROUP_ROWS rows a group (the mean, or expected_m) the 64x128 tile, its gated and row-major forms
    too; above, the 128x256 one."""
    for dtype in (torch.bfloat16, torch.float32):
        assert grouped_config(7168, dtype, True, False, SMALL_GROUP_ROWS) == GROUPED_SMALL
        assert grouped_config(7168, dtype, True, True, 16) == GROUPED_SMALL
        assert grouped_config(7168, dtype, True, False, SMALL_GROUP_ROWS + 1).block_m == 128
    assert grouped_config(160, torch.bfloat16, False, False, 16) == replace(GROUPED_SMALL, block_k=32)


def test_config_keeps_a_row_major_k_step_inside_its_expert():
    """B's experts are stacked along K when row-major, so BK divides K there; K-major they are stacked along N."""
    assert grouped_config(7168, torch.bfloat16, True) == GROUPED_16BIT
    assert grouped_config(520, torch.bfloat16, True) == GROUPED_16BIT
    assert grouped_config(2048, torch.float32, False) == GROUPED_FP32
    assert grouped_config(160, torch.bfloat16, False).block_k == 32
    assert grouped_config(528, torch.float16, False).block_k == 16  # (K a multiple of 16: check_grouped's check)


EPILOGUES = "tilepipe.kernels.epilogue_functions"
SPECS = {"bf16 kmajor": grouped_spec(GROUPED_16BIT, "bf16", "bf16", True),
         "fp16 fp32 rowmajor BK=32": grouped_spec(replace(GROUPED_FP32, block_k=32), "fp16", "fp32", False),
         "bf16 kmajor bias gelu": grouped_spec(GROUPED_16BIT, "bf16", "bf16", True, bias=True,
                                               epilogue=f"{EPILOGUES}:gelu"),
         "bf16 kmajor swiglu": grouped_spec(GROUPED_16BIT, "bf16", "bf16", True, epilogue=f"{EPILOGUES}:swiglu"),
         "fp16 fp32 rowmajor swiglu": grouped_spec(grouped_config(4096, torch.float32, False, gated=True), "fp16",
                                                   "fp32", False, epilogue=f"{EPILOGUES}:swiglu"),
         "bf16 kmajor dynamic": grouped_spec(GROUPED_16BIT, "bf16", "bf16", True, "dynamic"),
         "bf16 kmajor masked": grouped_spec(GROUPED_16BIT, "bf16", "bf16", True, "masked"),
         "bf16 kmajor batched": grouped_spec(GROUPED_16BIT, "bf16", "bf16", True, "batched"),
         "bf16 kmajor few rows": grouped_spec(GROUPED_SMALL, "bf16", "bf16", True),
         "bf16 kmajor few rows swap-AB": grouped_spec(grouped_config(4096, torch.bfloat16, True, rows_per_group=16,
                                                                     plain=True), "bf16", "bf16", True),
         "fp16 fp32 rowmajor few rows swiglu": grouped_spec(GROUPED_SMALL, "fp16", "fp32", False,
                                                            epilogue=f"{EPILOGUES}:swiglu")}


@pytest.fixture(scope="module")
def reports():
    return dict(zip(SPECS, compile_kernels(list(SPECS.values()))))


@pytest.mark.parametrize("name", SPECS)
def test_kernel_compiles_for_sm90_without_spills(reports, name):
    """wgmma main loop, TMA loads and stores (none under swap-AB), the masked register store of a spilling tile, no
    spills, and shared memory as the plan counts it (within the 227 KB a block may take)."""
    report = reports[name]
    assert not isinstance(report, Exception), report
    assert report.target == "sm_90a" and report.spill_stores == report.spill_loads == 0
    assert report.count("wgmma.mma_async") >= 1 and report.count("cp.async.bulk.tensor") >= 2
    stores = report.count("cp.async.bulk.tensor.2d.global.shared")  # D's TMA store
    assert stores == 0 if SPECS[name].constexprs["SWAP_AB"] else stores >= 1
    assert report.count("st.global") >= 1  # a spilling tile's masked rows
    assert report.count("setmaxnreg") >= 2
    assert report.shared <= 227 * 1024


def test_swap_ab_tile_is_b_rows_by_the_groups_rows(reports):
    """Swap-AB for groups of few rows (no epilogue, B K-major): 128 of B's N by 32 of a group's rows, each wgmma 64 of
    them by 32 (m64n32), both operands K-major, in a raster whose consecutive tiles share B's tile; the tile is stored
    from registers, transposed."""
    cfg = grouped_config(4096, torch.bfloat16, True, rows_per_group=16, plain=True)
    assert cfg.swap_ab and (cfg.block_m, cfg.block_n, cfg.num_warps, cfg.group_m) == (128, 32, 8, 1)
    assert grouped_config(4096, torch.float32, True, rows_per_group=32, plain=True).swap_ab
    assert grouped_config(4096, torch.bfloat16, True, rows_per_group=16) == GROUPED_SMALL  # an epilogue: 64 rows
    assert grouped_config(4096, torch.bfloat16, False, rows_per_group=16, plain=True) == GROUPED_SMALL  # row-major B
    assert grouped_config(4096, torch.bfloat16, True, rows_per_group=48, plain=True) == GROUPED_SMALL
    wgmmas = [line for line in reports["bf16 kmajor few rows swap-AB"].ptx.splitlines() if "wgmma.mma_async" in line]
    assert wgmmas and all("m64n32k16" in line and line.rstrip(";").endswith("1, 1, 0, 0") for line in wgmmas)


def test_epilogues_read_the_bias_and_apply_their_function(reports):
    """The bias GELU kernel loads the group's bias row (more ld.global than the plain kernel's loads of offs); SwiGLU's
    silu is an exp2 and a division; the plain kernel has no exp2."""
    plain = reports["bf16 kmajor"]
    assert reports["bf16 kmajor bias gelu"].count("ld.global") > plain.count("ld.global")
    for name in ("bf16 kmajor swiglu", "fp16 fp32 rowmajor swiglu"):
        assert reports[name].count("ex2.approx") >= 1, name
    assert plain.count("ex2.approx") == 0


def test_only_the_dynamic_schedule_draws_tiles_from_its_counter(reports):
    """The dynamic kernel's scheduler role draws tickets with a global atomic add and sets the counter back to 0 with
    an exchange (the last ticket's drawer); the static kernel touches no atomics."""
    dynamic, static = reports["bf16 kmajor dynamic"], reports["bf16 kmajor"]
    assert dynamic.count("atom.global.gpu.acq_rel.add") >= 1 and dynamic.count("atom.global.gpu.acq_rel.exch") >= 1
    assert static.count("atom.global") == 0


def test_row_layouts_read_what_they_need(reports):
    """The masked layout loads each group's count (as the contiguous one loads its end); the batched one reads no
    memory but its operands' (every group's rows follow from M / G)."""
    assert reports["bf16 kmajor masked"].count("ld.global") >= 1
    assert reports["bf16 kmajor batched"].count("ld.global") == 0


@pytest.mark.parametrize("name", SPECS)
def test_wgmmas_stay_in_flight(reports, name):
    """ptxas keeps one wgmma in flight only where no other instruction reads the accumulator inside a pipeline stage;
    otherwise it waits after every wgmma (C7514), which cost the first grouped kernel 7-11% against the dense GEMM
    on one expert (bench/results/archive/grouped-one-group-h200.json). The bundled ptxas must not report it."""
    log = reports[name].ptxas_log
    assert "Compiling entry function 'grouped_matmul_kernel'" in log, log
    assert "C7514" not in log and "serialized" not in log, log


@pytest.fixture(scope="module")
def protocols():
    return grouped_protocols()


def test_protocol_passes_and_matches_the_traced_kernel(protocols):
    assert [p.config.split(" stages")[0] for p in protocols] == [
        "grouped_mm static", "grouped_mm dynamic", "grouped_mm fp32 static", "grouped_mm +bias gelu static",
        "grouped_mm swiglu static", "grouped_mm_masked masked", "grouped_mm 3D batched",
        "grouped_mm swap-AB static", "grouped_mm 64-row +bias gelu static"]
    for protocol in protocols:
        result = check(protocol, trace=True)
        assert result.ok and result.traced and result.cases >= 2 and result.states > 0, result


def test_seeded_wrong_arrive_count_deadlocks_the_load_role(protocols):
    """The input ring declared with two consumer arrivals (only the mma role releases): the checker finds the load
    role stuck on it."""
    result = check(replace(with_pipeline(protocols[0], "input", consumer_arrivals=2), trace=None))
    assert not result.ok
    assert any(f.kind == "deadlock" and (f.role, f.pipeline) == ("load", "input") for f in result.findings)


def test_capacity_layouts_launch_with_their_counts_or_none():
    """On a fake H200 (tests/launch_record.py): the masked form passes masked_m's address as the kernel's offs, the
    batched form None (a constexpr: no per-call tensor), each with its own SCHEDULE and binary key."""
    from tests.launch_record import fake_h200

    with fake_h200() as launches:
        a, w = torch.empty(4, 96, 64, dtype=torch.bfloat16), torch.empty(4, 32, 64, dtype=torch.bfloat16)
        masked_m = torch.tensor([0, 5, 96, 200], dtype=torch.int32)
        tilepipe.grouped_mm_masked(a, w.transpose(1, 2), masked_m)
        tilepipe.grouped_mm(a, w.transpose(1, 2))
    (masked_key, _, masked_args), (batched_key, _, batched_args) = (launch[1:] for launch in launches)
    assert masked_key[5] == masked_args[15] == "masked" and masked_args[4] == masked_m.data_ptr()
    assert batched_key[5] == batched_args[15] == "batched" and batched_args[4] is None


def test_dynamic_schedule_launches_with_the_streams_workspace():
    """On a fake H200: scheduler="dynamic" passes SCHEDULE "dynamic", its own binary key and the stream's scheduler
    workspace (the tile counter at word 0), the default passes the static schedule and D's address as the unread
    workspace; grouped_gated_mm takes the same argument."""
    from tests.launch_record import fake_h200
    from tilepipe.host.launch import scheduler_workspace

    with fake_h200() as launches:
        a, w = torch.randn(300, 64, dtype=torch.bfloat16), torch.randn(4, 128, 64, dtype=torch.bfloat16)
        offs = torch.tensor([10, 10, 200, 300], dtype=torch.int32)
        out = tilepipe.grouped_mm(a, w.transpose(1, 2), offs, scheduler="dynamic")
        static_out = tilepipe.grouped_mm(a, w.transpose(1, 2), offs)
        tilepipe.grouped_gated_mm(a, w.transpose(1, 2), offs, scheduler="dynamic")
        (key, _, args), (static_key, _, static_args), (gated_key, _, gated_args) = (launch[1:] for launch in launches)
        cfg = key[0]
        workspace = scheduler_workspace(0, 7, cfg)
    assert key[5] == args[15] == gated_key[5] == gated_args[15] == "dynamic" and static_key[5] == "static"
    assert args[5] == gated_args[5] == workspace.data_ptr() and static_args[5] == static_out.data_ptr()


def test_forms_without_a_dynamic_schedule_refuse_it():
    """grouped_mm's 2D x 2D (weight gradient) and 3D x 3D forms run the static schedule only: "dynamic" is refused,
    not ignored."""
    with FakeTensorMode():
        wgrad = (empty(64, 100), empty(100, 32), empty(4, dtype=torch.int32))
        batched = (empty(4, 25, 64), empty(4, 64, 32))
        for args in (wgrad, batched):
            with pytest.raises(ValueError, match="^scheduler: grouped_mm's 2D x 2D and 3D x 3D forms run the static"):
                tilepipe.grouped_mm(*args, scheduler="dynamic")


@pytest.mark.parametrize("op", [tilepipe.grouped_mm, torch.ops.tilepipe.grouped_mm])
def test_bad_scheduler_names_the_argument(op):
    """The eager function and the op torch.compile traces refuse a schedule they do not run; a non-str gets a
    TypeError naming the argument."""
    with FakeTensorMode(), pytest.raises(ValueError, match="^scheduler must be one of"):
        op(**valid(), scheduler="streamk")
    with FakeTensorMode(), pytest.raises(TypeError, match="^scheduler must be a str"):
        tilepipe.grouped_mm(**valid(), scheduler=1)
