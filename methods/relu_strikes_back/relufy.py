"""Relufication (§4) and the FFN that skips zero activations (the down-projection columns, and in a
gated FFN the up-projection rows, of neurons no token activates)."""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from common.nn.gpt import ffn_activation_modules
from methods.relu_strikes_back.sparsity import ShiftedReLU

# norms that feed attention (QKV) or the FFN: floor GPT / HF GPT-2, HF Llama (SmolLM2) and HF Falcon
# (falcon-7b: one `input_layernorm` feeds both the parallel attention and the FFN; the new decoder
# architecture of falcon-40b has `ln_attn` and `ln_mlp`)
STAGE2_NORMS = ("ln_1", "ln_2", "input_layernorm", "post_attention_layernorm", "ln_attn", "ln_mlp")


def _parent(model: nn.Module, name: str) -> tuple[nn.Module, str]:
    *path, leaf = name.split(".")
    parent = model
    for p in path:
        parent = getattr(parent, p)
    return parent, leaf


def relufy(model: nn.Module, stage: int = 1, shift: float = 0.0) -> nn.Module:
    """In place. Stage 1: every FFN activation (`ffn_activation_modules`: `mlp.act`, HF Llama
    `mlp.act_fn`) becomes `ShiftedReLU(shift)`. Stage 2 also: each norm that feeds attention or the
    FFN (`ln_1`/`ln_2`; Llama `input_layernorm`/`post_attention_layernorm`; Falcon `input_layernorm`, or
    `ln_attn`/`ln_mlp`) becomes
    `nn.Sequential(norm, ReLU())`, so QKV and FFN inputs are >= 0. The final norm is left alone."""
    if stage not in (1, 2):
        raise ValueError(f"stage must be 1 or 2, got {stage}")
    targets = set(map(id, ffn_activation_modules(model)))
    if not targets:
        raise ValueError("no FFN activation module (*.mlp.act or *.mlp.act_fn) to relufy")
    for name, module in list(model.named_modules()):
        if id(module) in targets:
            parent, leaf = _parent(model, name)
            setattr(parent, leaf, ShiftedReLU(shift))
    if stage == 2:
        for name, module in list(model.named_modules()):
            if name.split(".")[-1] in STAGE2_NORMS and not isinstance(module, nn.Sequential):
                parent, leaf = _parent(model, name)
                setattr(parent, leaf, nn.Sequential(module, nn.ReLU()))
    return model


def sparse_ffn(x: torch.Tensor, up: nn.Linear, act: nn.Module, down: nn.Linear,
               gate: nn.Linear | None = None) -> torch.Tensor:
    """down(act(up(x))), or gated down(act(gate(x)) ⊙ up(x)), computed with only the neurons that
    some row of x activates (their union, the aggregated pattern): the first projection is full,
    the rest uses those columns of `down` (and rows of `up` when gated). Equals the dense FFN."""
    first = gate if gate is not None else up
    h = act(first(x))
    idx = (h.reshape(-1, h.shape[-1]) != 0).any(dim=0).nonzero().squeeze(1)
    h = h.index_select(-1, idx)
    if gate is not None:
        h = h * F.linear(x, up.weight.index_select(0, idx), None if up.bias is None else up.bias.index_select(0, idx))
    return F.linear(h, down.weight.index_select(1, idx), down.bias)
