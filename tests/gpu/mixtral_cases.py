"""GPU: transformers' Mixtral with its experts swapped for tilepipe.nn.GroupedExperts (grouped_gated_mm + grouped_mm)
against the stock model, for one case; prints JSON (run by tests/gpu/test_mixtral_gpu.py; transformers is on the GPU
image, not a dependency).

A small random-weight MixtralForCausalLM (hidden 256, intermediate 512, 8 experts, top-2, 2 layers) in bf16, its
experts in transformers' eager per-expert loop (the stock reference); the fp32 reference is the same bf16 weights
upcast, so that the bf16 stock model's distance to it sizes the tolerance.
- `block eager|compile`: layer 1's sparse-MoE block alone (the model's router, then GroupedExperts) on 1, 154 and 999
  tokens (2 routed rows with 6 empty experts, ~38 rows an expert: the 64-row tile, ~250: the 128x256 tile), eager or
  under torch.compile(fullgraph=True), against the stock block (bf16) and its experts in fp32 on the same routing.
- `block eager dynamic`: the same with swap_experts(..., scheduler="dynamic") (both grouped GEMMs ring-fed).
- `block graph`: the swapped block captured in a CUDA graph once (no host sync: the routing's sort and offs stay on the
  GPU) and replayed on new tokens, so new routing and new offs, each replay against the stock block.
- `logits eager|compile`: the whole model swapped (swap_experts, then swap_linears for attention and lm_head). A bf16
  rounding can move a near-tie token to another expert in the next layer, a large change to that token unrelated to
  the GEMMs, so every model compared takes each layer's routing recorded from the stock bf16 model (`Replayed`, the
  model's own router's output); the swapped model on its own routing is reported beside it (eager), not checked.
"""

import copy
import json
import sys

import torch

import tilepipe
from tests.gpu.guarded import warmed_graph
from tests.gpu.llama_cases import logits, rel

BLOCK_TOLERANCE = 2e-2  # relative Frobenius distance of two bf16 passes through one MoE block (a few bf16 roundings)
LOGITS_TOLERANCE = 3e-2  # two layers, as tests/gpu/llama_cases.py
SHAPES = [(1, 1), (2, 77), (3, 333)]  # (batch, sequence) of the block cases


def stock_model():
    """The stock bf16 MixtralForCausalLM (seed 0) and its config, or None where transformers is missing."""
    try:
        from transformers import MixtralConfig, MixtralForCausalLM
    except ImportError:
        return None, None
    config = MixtralConfig(vocab_size=1024, hidden_size=256, intermediate_size=512, num_hidden_layers=2,
                           num_attention_heads=4, num_key_value_heads=2, num_local_experts=8, num_experts_per_tok=2,
                           max_position_embeddings=512, attn_implementation="sdpa", experts_implementation="eager")
    torch.manual_seed(0)
    return MixtralForCausalLM(config).to(device="cuda", dtype=torch.bfloat16).eval(), config


def skipped(case: str) -> dict:
    return {"case": case, "ok": True, "skipped": "transformers is not installed"}


def run_block(mode: str, scheduler: str = "static") -> dict:
    stock, config = stock_model()
    if stock is None:
        return skipped(f"mixtral block {mode}")
    block = stock.model.layers[1].mlp
    experts32 = copy.deepcopy(block.experts).float()
    swapped = tilepipe.nn.swap_experts(copy.deepcopy(block), scheduler=scheduler)
    ok = isinstance(swapped.experts, tilepipe.nn.GroupedExperts) and swapped.experts.scheduler == scheduler
    if mode == "graph":
        result = run_block_graph(block, swapped, config.hidden_size)
        return result | {"ok": ok and result["ok"]}
    run = swapped
    if mode == "compile":
        torch._dynamo.reset()
        run = torch.compile(swapped, fullgraph=True, dynamic=False)
    results = []
    with torch.no_grad():
        for batch, sequence in SHAPES:
            hidden = torch.randn(batch, sequence, config.hidden_size, device="cuda", dtype=torch.bfloat16)
            flat = hidden.view(-1, config.hidden_size)
            _, weights, index = block.gate(flat)  # the routing both blocks take (the same router, the same input)
            ref = block(hidden)
            ref32 = experts32(flat.float(), index, weights).view_as(hidden)
            got = run(hidden)
            torch.cuda.synchronize()
            result = {"tokens": batch * sequence, "rel_err_to_stock_bf16": rel(got, ref),
                      "rel_err_to_fp32": rel(got, ref32), "stock_bf16_rel_err_to_fp32": rel(ref, ref32),
                      "experts_used": int(index.unique().numel())}
            result["ok"] = (bool(torch.isfinite(got).all()) and got.shape == hidden.shape
                            and got.dtype == torch.bfloat16 and result["rel_err_to_stock_bf16"] < BLOCK_TOLERANCE
                            and result["rel_err_to_fp32"] < 2 * result["stock_bf16_rel_err_to_fp32"] + 2e-3)
            results.append(result)
    return {"case": f"mixtral block {mode} {scheduler}", "ok": ok and all(r["ok"] for r in results), "shapes": results}


def run_block_graph(block: torch.nn.Module, swapped: torch.nn.Module, hidden_size: int) -> dict:
    """The swapped block captured once on 999 tokens, replayed on new ones against the stock block."""
    hidden = torch.randn(3, 333, hidden_size, device="cuda", dtype=torch.bfloat16)
    outputs = {}

    def call() -> None:
        outputs["out"] = swapped(hidden)

    results = []
    with torch.no_grad():
        graph = warmed_graph(call)
        for seed in range(3):
            torch.manual_seed(100 + seed)
            hidden.copy_(torch.randn_like(hidden))
            outputs["out"].fill_(float("nan"))
            graph.replay()
            ref = block(hidden)
            torch.cuda.synchronize()
            err = rel(outputs["out"], ref)
            results.append({"replay": seed, "rel_err_to_stock_bf16": err,
                            "ok": bool(torch.isfinite(outputs["out"]).all()) and err < BLOCK_TOLERANCE})
    return {"case": "mixtral block graph", "replays": results, "ok": all(r["ok"] for r in results)}


class Replayed(torch.nn.Module):
    """A router returning one recorded output (router logits, top-k weights, top-k experts) of the stock model's
    router for the same layer and tokens."""

    def __init__(self, routing: tuple[torch.Tensor, torch.Tensor, torch.Tensor]) -> None:
        super().__init__()
        for name, tensor in zip(("logits", "weights", "index"), routing):
            self.register_buffer(name, tensor.detach().clone())

    def forward(self, hidden_states: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        return self.logits, self.weights, self.index


def routed(model: torch.nn.Module, ids: torch.Tensor) -> tuple[torch.Tensor, list[tuple]]:
    """model's logits for ids and each layer's router output (recorded by forward hooks)."""
    routings = []
    hooks = [layer.mlp.gate.register_forward_hook(lambda module, args, out: routings.append(out))
             for layer in model.model.layers]
    logits = model(ids, use_cache=False).logits
    for hook in hooks:
        hook.remove()
    return logits, routings


def replay_routing(model: torch.nn.Module, routings: list[tuple]) -> torch.nn.Module:
    for layer, routing in zip(model.model.layers, routings):
        layer.mlp.gate = Replayed(routing)
    return model


def run_logits(mode: str) -> dict:
    stock, config = stock_model()
    if stock is None:
        return skipped(f"mixtral logits {mode}")
    swapped = tilepipe.nn.swap_linears(tilepipe.nn.swap_experts(copy.deepcopy(stock)))
    kinds = sorted({type(m).__name__ for m in swapped.modules() if type(m).__module__ == "tilepipe.nn"})
    experts = sum(isinstance(m, tilepipe.nn.GroupedExperts) for m in swapped.modules())
    ids = torch.randint(0, config.vocab_size, (2, 77), device="cuda")
    own = {}
    with torch.no_grad():
        ref, routings = routed(stock, ids)
        ref32 = replay_routing(copy.deepcopy(stock).float(), routings)(ids, use_cache=False).logits
        if mode == "eager":  # the swapped model on its own routing: reported, not checked
            own_logits, own_routings = routed(swapped, ids)
            moved = sum(int((a[2].sort(-1).values != b[2].sort(-1).values).any(-1).sum())
                        for a, b in zip(own_routings, routings))
            own = {"own_routing_rel_err_to_stock_bf16": rel(own_logits, ref), "own_routing_tokens_moved": moved}
        replay_routing(swapped, routings)
        got, fullgraph = logits(swapped, ids, mode)
    torch.cuda.synchronize()
    to_stock, to_fp32, stock_to_fp32 = rel(got, ref), rel(got, ref32), rel(ref, ref32)
    ok = (bool(torch.isfinite(got).all()) and to_stock < LOGITS_TOLERANCE and to_fp32 < 2 * stock_to_fp32 + 5e-3
          and experts == config.num_hidden_layers and kinds == ["GroupedExperts", "Linear"])
    return {"case": f"mixtral logits {mode}", "ok": ok, "rel_err_to_stock_bf16": to_stock, "rel_err_to_fp32": to_fp32,
            "stock_bf16_rel_err_to_fp32": stock_to_fp32, "grouped_experts": experts, "modules": kinds,
            "fullgraph": fullgraph, **own}


if __name__ == "__main__":
    kind, *args = sys.argv[1:]
    result = {"block": run_block, "logits": run_logits}[kind](*args)
    print(json.dumps(result))
    sys.exit(0 if result["ok"] else 1)
