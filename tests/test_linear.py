"""CPU tests of the fused epilogues (kernels/epilogue_functions.py) and the ops on them (tilepipe.linear, gated_linear,
pack_gate_up): every fused catalogue variant compiles for sm_90a without spills and holds the instructions its function
needs; the default epilogue is matmul's own code; a user's epilogue outside tilepipe compiles by "module:name"; bad
arguments name themselves; the gate-up packing round-trips."""


from dataclasses import replace

import pytest
import torch
from torch._subclasses.fake_tensor import FakeTensorMode

import tilepipe
from tilepipe.host.gpus import H100
from tilepipe.api.linear import GATE_COLUMNS, pack_gate_up, unpack_gate_up
from tilepipe.host.checks import check_subtiles, check_swap_ab
from tilepipe.host.choose import activation_config, gated_config
from tilepipe.host.configs import (LARGE_16BIT, LARGE_SUBTILED_16BIT, MEDIUM, PIECED_WHOLE_16BIT, modelled_config,
                                   swap_config, variant_config, with_stages_that_fit)
from tilepipe.kernels.catalogue import EPILOGUES, MATMUL_GATED, shipped_variants
from tilepipe.kernels.epilogue_functions import columns_in, epilogue_function, gelu, swiglu
from tilepipe.kernels.matmul import matmul_spec
from tilepipe.verify.compile import KernelReport, compile_kernels

FUSED = [v for v in shipped_variants() if v.kernel == "matmul_kernel" and "epilogue" in v.options]
EXTRA = {  # an activation in the other tiles linear may run it in, over C, and a user's epilogue
    "silu swap-AB": matmul_spec(swap_config(32, torch.bfloat16), "bf16", "bf16", True, bias_dtype="bf16",
                                epilogue=f"{EPILOGUES}:silu"),
    "gelu pieced 192x128": matmul_spec(PIECED_WHOLE_16BIT, "bf16", "bf16", True, bias_dtype="bf16",
                                       epilogue=f"{EPILOGUES}:gelu"),
    "gelu 128x128": matmul_spec(MEDIUM, "bf16", "bf16", True, bias_dtype="bf16", epilogue=f"{EPILOGUES}:gelu"),
    "relu +C": matmul_spec(LARGE_SUBTILED_16BIT, "bf16", "bf16", True, has_c=True, epilogue=f"{EPILOGUES}:relu"),
    "user row_scaled_clamp": matmul_spec(MEDIUM, "bf16", "bf16", True, bias_dtype="bf16",
                                         epilogue="tests.kernels.user_epilogue:row_scaled_clamp"),
    "bias by name": matmul_spec(MEDIUM, "bf16", "bf16", True, bias_dtype="bf16", epilogue=f"{EPILOGUES}:bias"),
    "bias by default": matmul_spec(MEDIUM, "bf16", "bf16", True, bias_dtype="bf16"),
    "plain subtiled": matmul_spec(LARGE_SUBTILED_16BIT, "bf16", "bf16", True),
    "swiglu 128x128 fallback": matmul_spec(replace(with_stages_that_fit(MEDIUM, torch.bfloat16), epilogue_n=64),
                                           "bf16", "bf16", True, epilogue=f"{EPILOGUES}:swiglu"),  # plain_tile's
}


def fused_spec(variant):
    return matmul_spec(variant_config(variant.options, torch.bfloat16, LARGE_16BIT), b_kmajor=True, **variant.options)


@pytest.fixture(scope="module")
def reports() -> dict[str, KernelReport]:
    specs = {v.name: fused_spec(v) for v in FUSED} | EXTRA
    return dict(zip(specs, compile_kernels(list(specs.values()))))


def test_every_fused_variant_compiles_without_spills(reports):
    for name, report in reports.items():
        assert isinstance(report, KernelReport), f"{name}: {report}"
        assert report.spill_stores == report.spill_loads == 0, name
        assert report.shared <= 227 * 1024, name


def test_fused_epilogues_keep_the_wgmmas_in_flight(reports):
    """ptxas waits after every wgmma (C7514) where an instruction reads the accumulator inside a pipeline stage (the
    grouped GEMM's first epilogue did, 7-11% slower): no fused variant may make it do so."""
    for v in FUSED:
        log = reports[v.name].ptxas_log
        assert "C7514" not in log and "serialized" not in log, (v.name, log)


def test_activations_hold_their_instructions(reports):
    """relu is a max; silu and GELU's tanh form an exp2 and a reciprocal each, the MUFU's rcp.approx.ftz rather than
    div.full.f32's range fix-ups; GELU's erf (2^poly) an exp2 alone; the bias is read (ld.global) where the variant
    has one."""
    for v in FUSED:
        report, name = reports[v.name], v.options["epilogue"].split(":")[1]
        if name.startswith("quantize"):  # FP8 output: tests/test_epilogue_fp8.py
            continue
        if name in ("relu", "reglu"):
            assert report.count("max.f32") > 0 and report.count("ex2.approx") == 0, v.name
        else:
            assert report.count("ex2.approx") > 0 and report.count("div.full.f32") == 0, v.name
            assert (report.count("rcp.approx") == 0) == (name in ("gelu", "geglu")), v.name
        if v.options["schedule"] == "static":  # (stream-K and the dynamic scheduler read their workspace too)
            assert (report.count("ld.global") > 0) == ("bias_dtype" in v.options), v.name


def test_the_bias_is_read_before_the_main_loop(reports):
    """A tile's bias is read ahead of its wgmmas by one coalesced 16-bit load a thread per 64-column sub-tile
    (read_ahead.tile_bias: 4 at 128x256, 2 a turn in ping-pong's 128x128), not a load per accumulator column in each
    sub-tile's epilogue (64); the first MMA role's all precede the first wgmma."""
    for v in FUSED:
        if "bias_dtype" in v.options and "quantize" not in v.options["epilogue"]:
            sass = reports[v.name].sass.splitlines()
            loads = [i for i, line in enumerate(sass) if "LDG.E.U16" in line]
            first_mma = next(i for i, line in enumerate(sass) if "HGMMA" in line)
            assert len(loads) == 4 and sum(i < first_mma for i in loads) == (2 if v.options.get("pingpong") else 4), \
                v.name
    user = reports["user row_scaled_clamp"].sass  # a function not marked READS_BIAS still reads its own
    assert user.count("LDG.E.U16") == 128 // 8 * 2  # its 128-column parts: 2 columns of every 8 a thread


def test_a_gated_tile_stores_half_its_columns(reports):
    """A 128x256 accumulator of gate-up pairs writes 128 columns of D: two 128x64 TMA stores where the plain tile in
    sub-tiles makes four; the same wgmmas."""
    plain = reports["plain subtiled"]
    for name in (name for name, options in MATMUL_GATED.items() if not options.get("swap_ab")):
        gated = reports[f"{name} static"]
        assert gated.count("cp.async.bulk.tensor.2d.global.shared") * 2 == plain.count(
            "cp.async.bulk.tensor.2d.global.shared") == 4
        assert gated.count("wgmma.mma_async") == plain.count("wgmma.mma_async")


def test_a_gated_swap_ab_tile_stores_its_pair_once(reports):
    """Swap-AB's 128-row tile holds one gate-up pair of N in its two warpgroups: the transposed accumulator writes
    64 columns of D in one TMA store, exchanging its halves once through shared memory, with the swap-AB wgmmas."""
    gated = reports["matmul swiglu swap-AB static"]  # a 32 x 64 tile of D over 256 MMA threads: 8 values each
    assert gated.count("cp.async.bulk.tensor.2d.global.shared") == 1 and gated.count("wgmma.mma_async") == 128 // 16
    assert gated.count("ex2.approx") == gated.count("rcp.approx.ftz.f32") == 32 * 64 // 256


def test_the_default_epilogue_is_the_bias_function(reports):
    """EPILOGUE=None is kernels/epilogue_functions.py's bias (residual with C): the same PTX as naming it."""
    assert reports["bias by default"].ptx == reports["bias by name"].ptx


def test_a_users_epilogue_reads_its_rows(reports):
    report = reports["user row_scaled_clamp"]
    assert report.count("min.f32") > 0 and report.count("cvt.rn.f32.s32") + report.count("cvt.rn.f32.u32") > 0


def test_epilogue_function_resolves_names_and_functions():
    assert epilogue_function(f"{EPILOGUES}:gelu") is gelu and epilogue_function(gelu) is gelu
    assert epilogue_function(None).fn.__name__ == "bias" and epilogue_function(None, True).fn.__name__ == "residual"
    assert columns_in(f"{EPILOGUES}:swiglu") == columns_in(swiglu) == 2 and columns_in(None) == 1


def test_pack_gate_up_interleaves_blocks_and_round_trips():
    H, K = 3 * GATE_COLUMNS, 16
    gate, up = torch.randn(H, K), torch.randn(H, K)
    packed = pack_gate_up(torch.cat((gate, up)))
    assert torch.equal(packed, pack_gate_up(gate, up)) and packed.is_contiguous()
    for j in range(H // GATE_COLUMNS):
        block = slice(j * GATE_COLUMNS, (j + 1) * GATE_COLUMNS)
        assert torch.equal(packed[2 * j * GATE_COLUMNS:(2 * j + 1) * GATE_COLUMNS], gate[block])
        assert torch.equal(packed[(2 * j + 1) * GATE_COLUMNS:(2 * j + 2) * GATE_COLUMNS], up[block])
    assert torch.equal(unpack_gate_up(packed), torch.cat((gate, up)))


def test_pack_gate_up_takes_an_empty_k():
    """A K = 0 weight packs to [2H, 0] (the H200 run of tests/gpu/linear_cases.py failed there, in the reshape)."""
    packed = pack_gate_up(torch.empty(2 * GATE_COLUMNS, 0))
    assert packed.shape == (2 * GATE_COLUMNS, 0) and unpack_gate_up(packed).shape == (2 * GATE_COLUMNS, 0)


@pytest.mark.parametrize("args, error, message", [
    ((torch.randn(7, 16), ), ValueError, "even row count"),
    ((torch.randn(96, 16), ), ValueError, "multiple of 64"),
    (("w", ), TypeError, "w_gate_up must be a torch.Tensor"),
    ((torch.randn(64, 16), torch.randn(64, 8)), ValueError, "same shape"),
])
def test_pack_gate_up_rejects_bad_weights(args, error, message):
    with pytest.raises(error, match=message):
        pack_gate_up(*args)


@pytest.fixture
def fake():
    with FakeTensorMode(allow_non_fake_inputs=True) as mode:
        yield lambda *shape, dtype=torch.bfloat16: torch.empty(*shape, device="cuda", dtype=dtype)
    del mode


def test_fake_ops_give_linear_shapes(fake):
    x, w = fake(2, 5, 64), fake(256, 64)
    assert torch.ops.tilepipe.linear(x, w, fake(256), activation="gelu").shape == (2, 5, 256)
    assert torch.ops.tilepipe.linear(fake(64), w).shape == (256, )
    assert torch.ops.tilepipe.gated_linear(x, w, activation="gelu_tanh").shape == (2, 5, 128)
    assert torch.ops.tilepipe.linear_out(fake(2, 5, 256), x, w, None, activation="silu") is None


@pytest.mark.parametrize("call, error, message", [
    (lambda f: torch.ops.tilepipe.linear(f(4, 64), f(32, 64), activation="tanh"), ValueError,
     r"activation must be one of \['gelu', 'gelu_tanh', 'relu', 'silu', 'None'\], got 'tanh'"),
    (lambda f: torch.ops.tilepipe.gated_linear(f(4, 64), f(256, 64), activation="swish"), ValueError,
     "activation must be one of"),
    (lambda f: torch.ops.tilepipe.linear(f(4, 64), f(32, 48)), ValueError, r"w must be \[N, K\] with K = x.shape"),
    (lambda f: torch.ops.tilepipe.linear(f(4, 64), f(32, 64), f(31)), ValueError, r"bias must have shape \(32,\)"),
    (lambda f: torch.ops.tilepipe.linear(f(4, 64), f(32, 64), f(32, dtype=torch.float16)), TypeError,
     "bias must have x's dtype"),
    (lambda f: torch.ops.tilepipe.linear(f(4, 64, dtype=torch.float32), f(32, 64)), TypeError, "x must be bfloat16"),
    (lambda f: torch.ops.tilepipe.linear(f(4, 64), f(32, 64, dtype=torch.float16)), TypeError, "same dtype"),
    (lambda f: torch.ops.tilepipe.gated_linear(f(4, 64), f(192, 64)), ValueError,
     "w_gate_up must have a multiple of 128 rows"),
    (lambda f: torch.ops.tilepipe.linear_out(f(4, 31), f(4, 64), f(32, 64), None), ValueError, "out must be"),
])
def test_fake_ops_reject_bad_input(fake, call, error, message):
    with pytest.raises(error, match=message):
        call(fake)


def test_eager_ops_check_activation_and_tensors_first():
    x, w = torch.randn(4, 64).bfloat16(), torch.randn(32, 64).bfloat16()
    with pytest.raises(TypeError, match="activation must be a str"):
        tilepipe.linear(x, w, activation=1)
    with pytest.raises(ValueError, match="activation must be one of"):
        tilepipe.gated_linear(x, w, activation="swish")
    with pytest.raises(TypeError, match="activation must be a str"):
        tilepipe.gated_linear(x, w, activation=None)
    with pytest.raises(TypeError, match="x must be a torch.Tensor"):
        tilepipe.linear([1.0], w)
    with pytest.raises(ValueError, match="x must be on a CUDA device"):
        tilepipe.linear(x, w, activation="relu")


def test_compile_fullgraph_traces_linear_and_gated_linear(fake):
    from torch._dynamo.testing import CompileCounterWithBackend

    def mlp(x, w_gate_up, w_down, b):
        return tilepipe.linear(tilepipe.gated_linear(x, w_gate_up), w_down, b, activation="gelu_tanh")

    torch._dynamo.reset()
    counter = CompileCounterWithBackend("aot_eager")
    y = torch.compile(mlp, fullgraph=True, backend=counter)(fake(8, 64), fake(256, 64), fake(64, 128), fake(64))
    assert y.shape == (8, 64) and counter.frame_count == 1
    code = counter.graphs[0].code
    assert "tilepipe.gated_linear" in code and "tilepipe.linear" in code, code


@pytest.mark.parametrize("M, N, K", [(64, 28672, 4096), (512, 28672, 4096), (8192, 28672, 4096), (300, 384, 328),
                                     (16, 28672, 4096)])
def test_gated_config_is_a_power_of_two_tile_in_64_column_sub_tiles(M, N, K, monkeypatch):
    """Past M = 32 (or with B row-major) a power-of-two tile of 128 or 256 columns."""
    monkeypatch.setattr("tilepipe.host.choose.config_for", lambda M, N, K, dtype, *args: modelled_config(
        M, N, K, dtype, dtype, True, H100, False, "static"))
    cfg = gated_config(M, N, K, torch.bfloat16, 0, b_kmajor=M > 32)
    assert cfg.epilogue_n == GATE_COLUMNS and cfg.tile_n in (128, 256) and not (cfg.swap_ab or cfg.pieced)
    assert cfg.cluster.num_ctas == 1


@pytest.mark.parametrize("M", [1, 7, 16, 32])
def test_gated_config_at_decode_m_is_swap_ab_on_a_gate_up_pair(M):
    """M <= 32 with B K-major (the packed weight): swap-AB's 128-row tile, one gate-up pair a tile, into 64 columns
    of D; the checks accept it (and refuse its other sub-tile widths under swap-AB)."""
    cfg = gated_config(M, 28672, 4096, torch.bfloat16, 0)
    assert cfg == replace(swap_config(M, torch.bfloat16, 2 * GATE_COLUMNS), epilogue_n=GATE_COLUMNS)
    assert cfg.swap_ab and cfg.block_m == 2 * GATE_COLUMNS and cfg.num_warps == 8 and cfg.block_n >= M
    check_swap_ab(cfg, True, "sm_90a")
    check_subtiles(cfg, "sm_90a")
    for bad in (replace(cfg, epilogue_n=32), replace(swap_config(M, torch.bfloat16), epilogue_n=GATE_COLUMNS // 2)):
        with pytest.raises(ValueError, match="config.epilogue_n: under swap-AB"):
            check_subtiles(bad, "sm_90a")
    with pytest.raises(ValueError, match="config.epilogue_n must be .* divides block_m = 128"):
        check_subtiles(replace(cfg, epilogue_n=256), "sm_90a")


@pytest.mark.parametrize("scheduler", [None, "streamk"])
def test_activation_config_writes_at_most_96_values_a_thread(scheduler, monkeypatch):
    monkeypatch.setattr("tilepipe.host.choose.config_for", lambda M, N, K, dtype, *args: modelled_config(
        M, N, K, dtype, dtype, True, H100, False, scheduler))
    assert activation_config(4096, 4096, 4096, torch.bfloat16, 0, None) is None
    for M, N, K in ((16, 4096, 4096), (512, 14336, 4096), (4096, 4096, 4096), (3000, 5000, 3000)):
        cfg = activation_config(M, N, K, torch.bfloat16, 0, gelu)
        assert cfg.tile_m * cfg.epilogue_cols <= 96 * 32 * cfg.num_warps, cfg


def test_nn_modules_keep_a_models_weights():
    gate, up, down = (torch.nn.Linear(64, 128, bias=False), torch.nn.Linear(64, 128, bias=False),
                      torch.nn.Linear(128, 64))
    mlp = tilepipe.nn.GatedMLP.from_linears(gate, up, down)
    assert mlp.down.weight is down.weight and mlp.down.bias is down.bias
    assert torch.equal(unpack_gate_up(mlp.gate_up_weight.detach()), torch.cat((gate.weight, up.weight)).detach())
    mlp.load_gate_up(up.weight, gate.weight)
    assert torch.equal(unpack_gate_up(mlp.gate_up_weight.detach()), torch.cat((up.weight, gate.weight)).detach())
    assert tilepipe.nn.Linear.from_linear(down, "silu").weight is down.weight


def test_nn_modules_trace_under_compile(fake):
    from torch._dynamo.testing import CompileCounterWithBackend

    model = torch.nn.Sequential(tilepipe.nn.GatedMLP(64, 128), tilepipe.nn.Linear(64, 32, activation="relu"))
    for module in model.modules():  # fake bf16 CUDA parameters of the same shapes
        for name, p in list(module.named_parameters(recurse=False)):
            setattr(module, name, torch.nn.Parameter(fake(*p.shape), requires_grad=False))
    torch._dynamo.reset()
    counter = CompileCounterWithBackend("aot_eager")
    assert torch.compile(model, fullgraph=True, backend=counter)(fake(4, 7, 64)).shape == (4, 7, 32)
    code = counter.graphs[0].code
    assert code.count("tilepipe.linear") == 2 and "tilepipe.gated_linear" in code, code


def test_nn_modules_reject_bad_layers():
    with pytest.raises(ValueError, match="activation must be one of"):
        tilepipe.nn.Linear(8, 8, activation="tanh")
    with pytest.raises(TypeError, match="layer must be a torch.nn.Linear"):
        tilepipe.nn.Linear.from_linear(torch.nn.Conv1d(1, 1, 1))
    biased = torch.nn.Linear(64, 64)
    with pytest.raises(ValueError, match="gate_proj and up_proj must have no bias"):
        tilepipe.nn.GatedMLP.from_linears(biased, biased, biased)
    with pytest.raises(ValueError, match="multiple of 64"):
        tilepipe.nn.GatedMLP(64, 96)


class _MLP(torch.nn.Module):
    """A gated MLP as transformers' Llama writes it (gate_proj, up_proj, down_proj, act_fn)."""

    def __init__(self, hidden: int, inner: int, act_fn: torch.nn.Module) -> None:
        super().__init__()
        self.gate_proj, self.up_proj = (torch.nn.Linear(hidden, inner, bias=False) for _ in range(2))
        self.down_proj, self.act_fn = torch.nn.Linear(inner, hidden, bias=False), act_fn


class _Block(torch.nn.Module):
    def __init__(self, hidden: int, inner: int, act_fn: torch.nn.Module) -> None:
        super().__init__()
        self.q_proj, self.o_proj = torch.nn.Linear(hidden, hidden, bias=True), torch.nn.Linear(hidden, hidden)
        self.norm, self.mlp = torch.nn.LayerNorm(hidden), _MLP(hidden, inner, act_fn)


def test_swap_linears_swaps_gated_mlps_and_linears_of_a_module_tree():
    """Gated MLPs (SiLU, GELU tanh) become GatedMLPs with their weights packed, other bf16 Linears become Linears
    sharing their parameters (a tied lm_head stays tied); an MLP of H = 96 has its projections swapped one by one;
    norms, embeddings, convolutions and fp32 Linears are kept."""
    embed = torch.nn.Embedding(100, 64)
    head = torch.nn.Linear(64, 100, bias=False)
    head.weight = embed.weight
    model = torch.nn.Sequential(embed, _Block(64, 128, torch.nn.SiLU()), _Block(64, 192, torch.nn.GELU("tanh")),
                                _Block(64, 96, torch.nn.SiLU()), torch.nn.Conv1d(4, 4, 1), head).to(torch.bfloat16)
    model.append(torch.nn.Linear(8, 8))  # fp32: kept
    original = [block.mlp for block in model[1:4]]
    weights = {name: p for name, p in model.named_parameters(remove_duplicate=False)}
    assert tilepipe.nn.swap_linears(model) is model
    for block, mlp, activation in zip(model[1:3], original, ("silu", "gelu_tanh")):
        assert isinstance(block.mlp, tilepipe.nn.GatedMLP) and block.mlp.activation == activation
        assert torch.equal(block.mlp.gate_up_weight, pack_gate_up(mlp.gate_proj.weight, mlp.up_proj.weight))
        assert block.mlp.down.weight is mlp.down_proj.weight
    odd = model[3].mlp
    assert isinstance(odd, _MLP) and all(isinstance(getattr(odd, n), tilepipe.nn.Linear)
                                         for n in ("gate_proj", "up_proj", "down_proj"))
    for block in model[1:4]:
        assert isinstance(block.q_proj, tilepipe.nn.Linear) and isinstance(block.norm, torch.nn.LayerNorm)
    assert model[1].q_proj.weight is weights["1.q_proj.weight"] and model[1].q_proj.bias is weights["1.q_proj.bias"]
    assert isinstance(model[5], tilepipe.nn.Linear) and model[5].weight is model[0].weight  # tied
    assert isinstance(model[4], torch.nn.Conv1d) and type(model[6]) is torch.nn.Linear
    assert isinstance(tilepipe.nn.swap_linears(torch.nn.Linear(8, 8, dtype=torch.float16)), tilepipe.nn.Linear)



def fake_cuda_parameters(module: torch.nn.Module):
    """Inside a FakeTensorMode: replace `module`'s parameters by fake bf16 CUDA ones of the same shapes; returns the
    maker of such tensors (shape -> tensor) for the inputs."""
    fake = lambda *shape: torch.empty(*shape, device="cuda", dtype=torch.bfloat16)  # noqa: E731
    for part in module.modules():
        for name, p in list(part.named_parameters(recurse=False)):
            setattr(part, name, torch.nn.Parameter(fake(*p.shape), requires_grad=False))
    return fake


def test_swapped_modules_trace_under_compile():
    """A swapped block's gated MLP and projections run as tilepipe's custom ops under torch.compile(fullgraph)."""
    from torch._dynamo.testing import CompileCounterWithBackend

    block = tilepipe.nn.swap_linears(_Block(64, 128, torch.nn.SiLU()).to(torch.bfloat16))
    with FakeTensorMode(allow_non_fake_inputs=True):
        fake = fake_cuda_parameters(block)
        torch._dynamo.reset()
        counter = CompileCounterWithBackend("aot_eager")
        run = torch.compile(lambda x: block.mlp(block.o_proj(block.q_proj(x))), fullgraph=True, backend=counter)
        assert run(fake(3, 64)).shape == (3, 64) and counter.frame_count == 1
    code = counter.graphs[0].code
    assert code.count("tilepipe.linear") == 3 and "tilepipe.gated_linear" in code, code
