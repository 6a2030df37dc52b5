"""GPU: a transformers Llama with tilepipe.nn.swap_linears against the stock model, for one case; prints JSON (run by
tests/gpu/test_llama_gpu.py; transformers is on the GPU image, not on the CPU machine).

`python -m tests.gpu.llama_cases logits eager` (or `compile`): a small random-weight LlamaForCausalLM (2 layers,
hidden 512, intermediate 1408, grouped-query attention) in bf16; the swapped copy's logits (its MLPs GatedMLPs, its
projections and lm_head Linears) within bf16 tolerance of the stock bf16 model's, and no farther from the fp32 stock
model than the stock bf16 model is (plus bf16 slack). `compile`: the swapped model under torch.compile, fullgraph
where transformers' forward allows it (the JSON says which).
"""

import copy
import json
import sys

import torch

import tilepipe

TOLERANCE = 3e-2  # relative Frobenius distance of two bf16 forward passes over two layers (each GEMM rounds to bf16)


def rel(x: torch.Tensor, ref: torch.Tensor) -> float:
    return float((x.double() - ref.double()).norm() / ref.double().norm())


def logits(model: torch.nn.Module, ids: torch.Tensor, mode: str) -> tuple[torch.Tensor, bool | str | None]:
    """`model`'s logits for `ids` eager, or under torch.compile (fullgraph=True, else the graph break's text and the
    model compiled with breaks: a break in transformers' code, not in tilepipe's ops); and which it was."""
    if mode != "compile":
        return model(ids, use_cache=False).logits, None
    torch._dynamo.reset()
    try:
        return torch.compile(model, fullgraph=True)(ids, use_cache=False).logits, True
    except Exception as error:  # a graph break in transformers' code, not in tilepipe's ops
        torch._dynamo.reset()
        return torch.compile(model)(ids, use_cache=False).logits, f"{type(error).__name__}: {str(error)[:300]}"


def run_logits(mode: str) -> dict:
    try:
        from transformers import LlamaConfig, LlamaForCausalLM
    except ImportError as error:
        return {"case": f"llama {mode}", "ok": True, "skipped": f"transformers is not installed: {error}"}
    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=1024, hidden_size=512, intermediate_size=1408, num_hidden_layers=2,
                         num_attention_heads=8, num_key_value_heads=4, max_position_embeddings=256,
                         attn_implementation="sdpa")
    stock32 = LlamaForCausalLM(config).cuda().eval()
    stock = copy.deepcopy(stock32).to(torch.bfloat16)
    swapped = tilepipe.nn.swap_linears(copy.deepcopy(stock))
    kinds = sorted({type(m).__name__ for m in swapped.modules() if type(m).__module__ == "tilepipe.nn"})
    mlps = sum(isinstance(m, tilepipe.nn.GatedMLP) for m in swapped.modules())
    ids = torch.randint(0, config.vocab_size, (2, 77), device="cuda")
    with torch.no_grad():
        ref32 = stock32(ids, use_cache=False).logits
        ref = stock(ids, use_cache=False).logits
        got, fullgraph = logits(swapped, ids, mode)
    torch.cuda.synchronize()
    to_stock, to_fp32, stock_to_fp32 = rel(got, ref), rel(got, ref32), rel(ref, ref32)
    ok = (bool(torch.isfinite(got).all()) and to_stock < TOLERANCE and to_fp32 < 2 * stock_to_fp32 + 5e-3
          and mlps == config.num_hidden_layers and kinds == ["GatedMLP", "Linear"])
    return {"case": f"llama {mode}", "ok": ok, "rel_err_to_stock_bf16": to_stock, "rel_err_to_fp32": to_fp32,
            "stock_bf16_rel_err_to_fp32": stock_to_fp32, "gated_mlps": mlps, "modules": kinds,
            "fullgraph": fullgraph}


if __name__ == "__main__":
    kind, *args = sys.argv[1:]
    result = {"logits": run_logits}[kind](*args)
    print(json.dumps(result))
    sys.exit(0 if result["ok"] else 1)
