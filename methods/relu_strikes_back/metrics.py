"""The evaluation of one LM on fixed validation windows: perplexity, FFN sparsity, aggregated
sparsity and its controls at one prefix length, FFN FLOP ratio, zeros entering attention."""
from __future__ import annotations

import contextlib

import torch
from torch import nn

from common.eval.language import perplexity
from common.nn.gpt import record_ffn
from methods.relu_strikes_back.sparsity import (activation_sparsity, aggregated_sparsity, dead_fraction, ffn_flops,
                                                live_sparsity, matched_shuffled_aggregated_sparsity,
                                                shuffled_aggregated_sparsity, uniform_aggregated_sparsity)


@contextlib.contextmanager
def record_attention_inputs(model: nn.Module):
    """One list per attention block; each forward appends the detached input of its QKV projection
    (`attn.c_attn`; HF Llama `self_attn.q_proj`; HF Falcon `self_attention.query_key_value`)."""
    mods = [m for n, m in model.named_modules()
            if n.endswith((".attn.c_attn", ".self_attn.q_proj", ".self_attention.query_key_value"))]
    recs = [[] for _ in mods]
    handles = [m.register_forward_pre_hook(lambda _m, args, r=r: r.append(args[0].detach())) for m, r in zip(mods, recs)]
    try:
        yield recs
    finally:
        for h in handles:
            h.remove()


def token_position_keys(windows: torch.Tensor) -> torch.Tensor:
    """(n, t) keys, one per token row: input id and position together (the matched shuffle's groups)."""
    return windows.cpu() * windows.shape[1] + torch.arange(windows.shape[1])


@torch.no_grad()
def lm_metrics(model: nn.Module, windows: torch.Tensor, *, d_model: int, agg_t: int = 32, shuffle_seed: int = 0,
               batch_size: int = 16, gated: bool = False) -> dict[str, float]:
    """Metrics on `windows` (n, t): val_ppl (common.eval.perplexity; its forward passes are the ones
    recorded), ffn_sparsity (exact zeros, layer mean), dead_fraction (neurons zero on every token),
    ffn_sparsity_live (zeros among live neurons only), agg_sparsity / _shuffled / _matched (rows
    permuted among the same input id at the same position) / _uniform at prefix length `agg_t`
    (layer mean), ffn_flops_ratio (sparse / dense FFN FLOPs summed over layers), qkv_input_sparsity."""
    if not 1 <= agg_t <= windows.shape[1]:
        raise ValueError(f"agg_t must be in [1, {windows.shape[1]}], got {agg_t}")
    with record_ffn(model) as ffn, record_attention_inputs(model) as attn:
        ppl = perplexity(model, windows, batch_size=batch_size)
    acts = [torch.cat(r).cpu() for r in ffn]
    keys = token_position_keys(windows)
    mean = lambda xs: float(sum(xs) / len(xs))   # noqa: E731
    flops = [ffn_flops(a, d_model, gated=gated) for a in acts]
    at = agg_t - 1
    return {"val_ppl": ppl,
            "ffn_sparsity": mean([activation_sparsity(a) for a in acts]),
            "dead_fraction": mean([dead_fraction(a) for a in acts]),
            "ffn_sparsity_live": mean([live_sparsity(a) for a in acts]),
            "agg_sparsity": mean([float(aggregated_sparsity(a)[at]) for a in acts]),
            "agg_sparsity_shuffled": mean([float(shuffled_aggregated_sparsity(a, shuffle_seed)[at]) for a in acts]),
            "agg_sparsity_matched": mean([float(matched_shuffled_aggregated_sparsity(a, keys, shuffle_seed)[at])
                                          for a in acts]),
            "agg_sparsity_uniform": mean([float(uniform_aggregated_sparsity(a)[at]) for a in acts]),
            "ffn_flops_ratio": sum(f["sparse"] for f in flops) / sum(f["dense"] for f in flops),
            "qkv_input_sparsity": mean([activation_sparsity(torch.cat(r)) for r in attn]) if attn else 0.0}
