"""CPU tests of tilepipe.nn.GroupedExperts and swap_experts: the swap finds every experts module (transformers'
Mixtral where installed, else skipped; a hand-made one for the rule's refusals), the gate-up weight packed by index,
the routing bookkeeping (sort, offs, gather, scale, scatter) against the stock experts with float64 stand-ins for the
two grouped GEMMs (here only: the library has no fallback), grouped_gated_mm's error on CPU tensors, and a fullgraph
torch.compile trace on fake CUDA tensors. GPU: tests/gpu/test_mixtral_gpu.py."""

import copy

import pytest
import torch
from torch._subclasses.fake_tensor import FakeTensorMode

import tilepipe
from tests.test_linear import fake_cuda_parameters
from tilepipe.api.linear import GATE_COLUMNS

E, HIDDEN, INTER, TOP_K = 8, 128, 192, 2  # I = 192: three 64-row gate-up blocks per expert


def mixtral_config(**changes):
    """A small MixtralConfig (2 layers, 8 experts, top-2), its experts in transformers' eager per-expert loop."""
    transformers = pytest.importorskip("transformers")
    options = dict(vocab_size=128, hidden_size=HIDDEN, intermediate_size=INTER, num_hidden_layers=2,
                   num_attention_heads=2, num_key_value_heads=1, num_local_experts=E, num_experts_per_tok=TOP_K,
                   max_position_embeddings=64, experts_implementation="eager") | changes
    return transformers.MixtralConfig(**options)


@pytest.fixture(scope="module")
def mixtral():
    """A random-weight bf16 MixtralForCausalLM on the CPU."""
    config = mixtral_config()  # skips where transformers is missing
    from transformers import MixtralForCausalLM

    torch.manual_seed(0)
    return MixtralForCausalLM(config).to(torch.bfloat16).eval()


def test_swap_experts_replaces_every_experts_module(mixtral):
    """Every layer's experts become a GroupedExperts sharing down_proj, its gate-up weight packed (row r of the packed
    expert: gate row 64 * (r // 128) + r % 128 where r % 128 < 64, else the up row 64 below it); routers, attention and
    norms are kept, and swap_linears afterwards swaps the Linears around them."""
    model = copy.deepcopy(mixtral)
    stock = [layer.mlp.experts for layer in model.model.layers]
    assert tilepipe.nn.swap_experts(model) is model
    moe = [layer.mlp for layer in model.model.layers]
    assert sum(isinstance(m, tilepipe.nn.GroupedExperts) for m in model.modules()) == len(stock) == 2
    assert not any(type(m).__name__ == "MixtralExperts" for m in model.modules())
    r = torch.arange(2 * INTER)
    pair, within = r // (2 * GATE_COLUMNS), r % (2 * GATE_COLUMNS)
    source = torch.where(within < GATE_COLUMNS, pair * GATE_COLUMNS + within, INTER + pair * GATE_COLUMNS + within
                         - GATE_COLUMNS)  # the stock [Wg; Wu] row each packed row holds
    assert sorted(source.tolist()) == list(range(2 * INTER))
    for block, experts in zip(moe, stock):
        swapped = block.experts
        assert swapped.activation == "silu" and swapped.down_proj is experts.down_proj
        assert swapped.gate_up_weight.shape == (E, 2 * INTER, HIDDEN)
        assert torch.equal(swapped.gate_up_weight.detach(), experts.gate_up_proj.detach()[:, source])
        assert type(block.gate).__name__ == "MixtralTopKRouter"
    tilepipe.nn.swap_linears(model)
    attention = model.model.layers[0].self_attn
    assert isinstance(attention.q_proj, tilepipe.nn.Linear) and isinstance(model.lm_head, tilepipe.nn.Linear)
    assert all(isinstance(block.experts, tilepipe.nn.GroupedExperts) for block in moe)
    assert type(moe[0].gate).__name__ == "MixtralTopKRouter"


class _Experts(torch.nn.Module):
    """Experts held as transformers' MoE models hold them (gate_up_proj (E, 2I, H), down_proj (E, H, I), act_fn)."""

    def __init__(self, inner: int = 128, hidden: int = 64, dtype: torch.dtype = torch.bfloat16, **layout) -> None:
        super().__init__()
        self.gate_up_proj = torch.nn.Parameter(torch.randn(4, 2 * inner, hidden, dtype=dtype))
        self.down_proj = torch.nn.Parameter(torch.randn(4, hidden, inner, dtype=dtype))
        self.act_fn = torch.nn.SiLU()
        self.__dict__.update(layout)


class _ClampedExperts(_Experts):
    def _apply_gate(self, gate_up: torch.Tensor) -> torch.Tensor:  # gpt-oss's kind: not act(gate) * up
        return gate_up


@pytest.mark.parametrize("experts", [
    lambda: _Experts(dtype=torch.float32), lambda: _Experts(inner=96), lambda: _Experts(hidden=60),
    lambda: _Experts(has_bias=True), lambda: _Experts(is_transposed=True), lambda: _Experts(is_concatenated=False),
    lambda: _Experts(has_gate=False), lambda: _ClampedExperts()], ids=[
    "fp32", "I=96", "H=60", "bias", "transposed", "interleaved", "no gate", "own _apply_gate"])
def test_swap_experts_keeps_experts_it_cannot_run(experts):
    module = experts()
    assert tilepipe.nn.swap_experts(torch.nn.Sequential(module))[0] is module


def test_swap_experts_takes_gelu_experts():
    module = _Experts()
    module.act_fn = torch.nn.GELU("tanh")
    swapped = tilepipe.nn.swap_experts(module)
    assert isinstance(swapped, tilepipe.nn.GroupedExperts) and swapped.activation == "gelu_tanh"


def _gated_stand_in(a, b, offs, activation, scheduler=None):
    """grouped_gated_mm in float64 over b's packed gate-up columns (blocks of 64: gate, up), per group."""
    assert offs.dtype == torch.int32 and activation == "silu" and b.shape[1] == a.shape[1] and scheduler is None
    blocks = b.shape[2] // (2 * GATE_COLUMNS)
    out = torch.full((a.shape[0], blocks * GATE_COLUMNS), float("nan"), dtype=torch.float64)
    start = 0
    for g, end in enumerate(offs.tolist()):
        z = (a[start:end].double() @ b[g].double()).view(end - start, blocks, 2, GATE_COLUMNS)
        out[start:end] = (torch.nn.functional.silu(z[:, :, 0]) * z[:, :, 1]).flatten(1)
        start = end
    return out


def _mm_stand_in(a, b, offs, scheduler=None):
    """grouped_mm in float64, per group."""
    assert offs.dtype == torch.int32 and b.shape[1] == a.shape[1] and scheduler is None
    out = torch.full((a.shape[0], b.shape[2]), float("nan"), dtype=torch.float64)
    start = 0
    for g, end in enumerate(offs.tolist()):
        out[start:end] = a[start:end].double() @ b[g].double()
        start = end
    return out


def _routing(block, hidden: torch.Tensor, avoid: int | None) -> tuple[torch.Tensor, torch.Tensor]:
    """The stock router's (top_k_index, top_k_weights) for `hidden`, or with `avoid` a random routing of distinct
    experts per token that never picks expert `avoid` (an empty group) and weights of the router's dtype."""
    if avoid is None:
        _, weights, index = block.gate(hidden)
        return index, weights
    choices = torch.tensor([e for e in range(E) if e != avoid])
    index = torch.stack([choices[torch.randperm(E - 1)[:TOP_K]] for _ in range(hidden.shape[0])])
    return index, torch.rand(hidden.shape[0], TOP_K).softmax(-1)


@pytest.mark.parametrize("tokens, avoid", [(1, None), (37, None), (64, 3)], ids=["1 token", "37", "64 no expert 3"])
def test_bookkeeping_matches_the_stock_experts(mixtral, monkeypatch, tokens, avoid):
    """With float64 stand-ins for the two grouped GEMMs, GroupedExperts gives the stock experts' output (float64 weights
    and inputs): the pairs sorted by expert, offs, the gathered rows, the weights and the scatter-add are right."""
    torch.manual_seed(tokens)
    block = mixtral.model.layers[1].mlp
    hidden = torch.randn(tokens, HIDDEN, dtype=torch.bfloat16)
    with torch.no_grad():
        index, weights = _routing(block, hidden, avoid)
        reference = copy.deepcopy(block.experts).double()(hidden.double(), index, weights)
        swapped = tilepipe.nn.swap_experts(copy.deepcopy(block.experts))
        monkeypatch.setattr(tilepipe.nn, "grouped_gated_mm", _gated_stand_in)
        monkeypatch.setattr(tilepipe.nn, "grouped_mm", _mm_stand_in)
        got = swapped(hidden.double(), index, weights)
    assert got.dtype == torch.float64 and got.shape == (tokens, HIDDEN)
    assert float((got - reference).norm() / reference.norm()) < 1e-12


def test_swapped_experts_pass_their_scheduler_to_both_grouped_gemms(monkeypatch):
    """swap_experts(..., scheduler="dynamic") makes GroupedExperts that call both grouped GEMMs with it (for a layer
    beside an all-to-all); a schedule the grouped GEMMs do not run is refused when swapping."""
    seen = []
    monkeypatch.setattr(tilepipe.nn, "grouped_gated_mm", lambda *args, scheduler: seen.append(scheduler) or
                        _gated_stand_in(*args))
    monkeypatch.setattr(tilepipe.nn, "grouped_mm", lambda *args, scheduler: seen.append(scheduler) or
                        _mm_stand_in(*args))
    experts = tilepipe.nn.swap_experts(_Experts(), scheduler="dynamic")
    assert "scheduler=dynamic" in repr(experts)
    experts(torch.randn(5, 64).double(), torch.tensor([[0, 1]] * 5), torch.ones(5, 2).double())
    assert seen == ["dynamic", "dynamic"]
    with pytest.raises(ValueError, match="^scheduler must be one of"):
        tilepipe.nn.swap_experts(_Experts(), scheduler="streamk")


def test_grouped_experts_needs_a_gpu():
    """On CPU tensors GroupedExperts raises grouped_gated_mm's error for them (no fallback)."""
    experts = tilepipe.nn.swap_experts(_Experts())
    hidden = torch.randn(5, 64, dtype=torch.bfloat16)
    with pytest.raises(ValueError, match="^a must be on a CUDA device, got cpu") as direct:
        tilepipe.grouped_gated_mm(hidden, experts.gate_up_weight.detach().transpose(1, 2),
                                  torch.tensor([1, 2, 3, 5], dtype=torch.int32))
    with pytest.raises(ValueError) as swapped:
        experts(hidden, torch.tensor([[0, 1]] * 5), torch.ones(5, 2))
    assert str(swapped.value) == str(direct.value)


@pytest.mark.parametrize("args, error, message", [
    (lambda w: (w.gate_up_proj, w.down_proj, "tanh"), ValueError, "activation must be one of"),
    (lambda w: (w.gate_up_proj.numpy(force=True), w.down_proj), TypeError, "^gate_up_proj must be a torch.Tensor"),
    (lambda w: (w.gate_up_proj[0], w.down_proj), ValueError, r"^gate_up_proj must be \(E, 2I, H\)"),
    (lambda w: (w.gate_up_proj, w.down_proj[:, :, :64]), ValueError, r"^down_proj must be \(E, H, I\)"),
    (lambda w: (w.gate_up_proj[:, :192], w.down_proj[:, :, :96]), ValueError, "multiple of 64"),
])
def test_grouped_experts_rejects_bad_weights(args, error, message):
    with pytest.raises(error, match=message):
        tilepipe.nn.GroupedExperts(*args(_Experts(dtype=torch.float32)))


def test_swapped_block_traces_under_compile(mixtral):
    """A swapped Mixtral sparse-MoE block (the model's router, then the experts' sort, two grouped GEMMs and the
    scatter) is one fullgraph graph with tilepipe's two custom ops."""
    from torch._dynamo.testing import CompileCounterWithBackend

    block = tilepipe.nn.swap_experts(copy.deepcopy(mixtral.model.layers[0].mlp))
    with FakeTensorMode(allow_non_fake_inputs=True):
        fake = fake_cuda_parameters(block)
        torch._dynamo.reset()
        counter = CompileCounterWithBackend("aot_eager")
        assert torch.compile(block, fullgraph=True, backend=counter)(fake(2, 7, HIDDEN)).shape == (2, 7, HIDDEN)
    assert counter.frame_count == 1
    code = counter.graphs[0].code
    assert "tilepipe.grouped_gated_mm" in code and "tilepipe.grouped_mm" in code, code
