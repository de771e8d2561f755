"""The evaluation of one LM on fixed validation windows: perplexity, FFN sparsity, aggregated
sparsity and its controls at one prefix length, FFN FLOP ratio, zeros entering attention."""
from __future__ import annotations

import contextlib

import torch
from torch import nn

from common.eval.language import perplexity
from common.nn.gpt import record_ffn
from methods.relu_strikes_back.sparsity import (activation_sparsity, aggregated_sparsity, ffn_flops,
                                                shuffled_aggregated_sparsity, uniform_aggregated_sparsity)


@contextlib.contextmanager
def record_attention_inputs(model: nn.Module):
    """One list per attention block; each forward appends the detached input of its QKV projection
    (`attn.c_attn`; HF Llama `self_attn.q_proj`)."""
    mods = [m for n, m in model.named_modules() if n.endswith((".attn.c_attn", ".self_attn.q_proj"))]
    recs = [[] for _ in mods]
    handles = [m.register_forward_pre_hook(lambda _m, args, r=r: r.append(args[0].detach())) for m, r in zip(mods, recs)]
    try:
        yield recs
    finally:
        for h in handles:
            h.remove()


@torch.no_grad()
def lm_metrics(model: nn.Module, windows: torch.Tensor, *, d_model: int, agg_t: int = 32, shuffle_seed: int = 0,
               batch_size: int = 16, gated: bool = False) -> dict[str, float]:
    """Metrics on `windows` (n, t): val_ppl (common.eval.perplexity), ffn_sparsity (exact zeros,
    layer mean), agg_sparsity / _shuffled / _uniform at prefix length `agg_t` (layer mean),
    ffn_flops_ratio (sparse / dense FFN FLOPs summed over layers), qkv_input_sparsity."""
    if not 1 <= agg_t <= windows.shape[1]:
        raise ValueError(f"agg_t must be in [1, {windows.shape[1]}], got {agg_t}")
    was = model.training
    model.eval()
    ppl = perplexity(model, windows, batch_size=batch_size)
    with record_ffn(model) as ffn, record_attention_inputs(model) as attn:
        for i in range(0, len(windows), batch_size):
            model(windows[i:i + batch_size], use_cache=False)
    model.train(was)
    acts = [torch.cat(r) for r in ffn]
    mean = lambda xs: float(sum(xs) / len(xs))   # noqa: E731
    flops = [ffn_flops(a, d_model, gated=gated) for a in acts]
    return {"val_ppl": ppl,
            "ffn_sparsity": mean([activation_sparsity(a) for a in acts]),
            "agg_sparsity": mean([float(aggregated_sparsity(a)[agg_t - 1]) for a in acts]),
            "agg_sparsity_shuffled": mean([float(shuffled_aggregated_sparsity(a, shuffle_seed)[agg_t - 1]) for a in acts]),
            "agg_sparsity_uniform": mean([float(uniform_aggregated_sparsity(a)[agg_t - 1]) for a in acts]),
            "ffn_flops_ratio": sum(f["sparse"] for f in flops) / sum(f["dense"] for f in flops),
            "qkv_input_sparsity": mean([activation_sparsity(torch.cat(r)) for r in attn]) if attn else 0.0}
