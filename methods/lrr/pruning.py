"""Masks: the sparsity schedule, global magnitude and layer-wise random masks, sign flips, and
keeping pruned weights at exactly zero while an arbitrary training function runs.

A mask is a dict name -> BoolTensor shaped like the weight (True = kept). Masks nest: a
weight pruned in round k stays pruned in every later round.
"""
from __future__ import annotations

import contextlib
from typing import Iterator

import torch
from torch import nn


def _check_rate(rate: float) -> None:
    if not 0.0 < rate < 1.0:
        raise ValueError(f"rate must lie in (0, 1) (the share of remaining weights pruned per round), got {rate}")


def sparsity_schedule(num_rounds: int, rate: float = 0.2) -> list[float]:
    """Target sparsity of rounds 1..R: s_k = 1 − (1 − q)^k (each round prunes the share q of
    the weights that are still there)."""
    if int(num_rounds) != num_rounds or num_rounds < 1:
        raise ValueError(f"num_rounds must be an integer >= 1, got {num_rounds}")
    _check_rate(rate)
    return [1.0 - (1.0 - rate) ** k for k in range(1, int(num_rounds) + 1)]


def prunable_weights(model: nn.Module) -> dict[str, nn.Parameter]:
    """The weight of every Linear/Conv layer, keyed by module name; biases and norm layers stay dense."""
    convs = (nn.Linear, nn.Conv1d, nn.Conv2d, nn.Conv3d)
    return {name: m.weight for name, m in model.named_modules() if isinstance(m, convs)}


def _full_masks(weights: dict[str, torch.Tensor], masks) -> dict[str, torch.Tensor]:
    if masks is None:
        return {n: torch.ones_like(w, dtype=torch.bool) for n, w in weights.items()}
    if set(masks) != set(weights):
        raise ValueError(f"masks cover {sorted(masks)} but the weights are {sorted(weights)}; "
                         f"pass the masks of the previous round for the same weights")
    return {n: masks[n].to(torch.bool) for n in weights}


def _check_sparsity(sparsity: float) -> None:
    if not 0.0 <= sparsity < 1.0:
        raise ValueError(f"sparsity must lie in [0, 1), got {sparsity}")


def global_magnitude_masks(weights: dict[str, torch.Tensor], sparsity: float,
                           masks: dict[str, torch.Tensor] | None = None) -> dict[str, torch.Tensor]:
    """Prune exactly round(sparsity·N) of all N weights (pooled over layers): the already pruned
    ones plus the smallest |θ| among those still kept (ties go to the lower flat index)."""
    _check_sparsity(sparsity)
    old = _full_masks(weights, masks)
    names = list(weights)
    scores = torch.cat([weights[n].detach().abs().flatten().float() for n in names])   # (N,)
    kept = torch.cat([old[n].flatten() for n in names])                               # (N,)
    total = scores.numel()
    n_prune = round(sparsity * total)
    n_keep = total - n_prune
    if n_keep > int(kept.sum()):
        raise ValueError(f"sparsity {sparsity} prunes {n_prune} weights but {total - int(kept.sum())} are "
                         f"already pruned; masks nest, so pass a sparsity at least the current one")
    # already pruned weights sort first; a stable sort keeps flat order among equal |θ|
    order = torch.sort(torch.where(kept, scores, torch.full_like(scores, -1.0)), stable=True).indices
    new = torch.zeros(total, dtype=torch.bool, device=scores.device)
    new[order[n_prune:]] = True
    out, start = {}, 0
    for n in names:
        size = weights[n].numel()
        out[n] = new[start:start + size].view(weights[n].shape).to(weights[n].device)
        start += size
    return out


def random_masks(weights: dict[str, torch.Tensor], sparsity: float, masks: dict[str, torch.Tensor] | None = None,
                 generator: torch.Generator | None = None) -> dict[str, torch.Tensor]:
    """Each layer pruned at random to round(sparsity·n_layer) zeros, drawn among its kept weights."""
    _check_sparsity(sparsity)
    old = _full_masks(weights, masks)
    out = {}
    for n, w in weights.items():
        kept = old[n].flatten().cpu()
        n_prune = round(sparsity * kept.numel()) - int((~kept).sum())
        if n_prune < 0:
            raise ValueError(f"layer '{n}' already has {int((~kept).sum())} pruned weights, more than "
                             f"sparsity {sparsity} allows; masks nest, so pass a sparsity at least the current one")
        alive = kept.nonzero().squeeze(1)
        drop = alive[torch.randperm(alive.numel(), generator=generator)[:n_prune]]
        new = kept.clone()
        new[drop] = False
        out[n] = new.view(w.shape).to(w.device)
    return out


def sign_flip_fraction(before: dict[str, torch.Tensor], after: dict[str, torch.Tensor],
                       masks: dict[str, torch.Tensor]) -> float:
    """Share of kept weights whose sign changed: Σ m·[θ_start·θ_end < 0] / Σ m."""
    flips = sum(int(((before[n] * after[n] < 0) & masks[n]).sum()) for n in masks)
    kept = sum(int(masks[n].sum()) for n in masks)
    return flips / max(kept, 1)


def measured_sparsity(weights: dict[str, torch.Tensor]) -> float:
    """Share of exact zeros among all prunable weights (what the model really holds)."""
    zeros = sum(int((w == 0).sum()) for w in weights.values())
    return zeros / sum(w.numel() for w in weights.values())


@torch.no_grad()
def apply_masks(weights: dict[str, torch.Tensor], masks: dict[str, torch.Tensor]) -> None:
    """θ ← θ ⊙ m in place."""
    for n, w in weights.items():
        w.mul_(masks[n].to(device=w.device, dtype=w.dtype))


@contextlib.contextmanager
def keep_masked(model: nn.Module, masks: dict[str, torch.Tensor]) -> Iterator[None]:
    """While open, pruned weights get zero gradients and are zeroed again before every forward,
    so no optimizer state (momentum carried over, weight decay, Adam's moments) can bring them
    back into a forward pass; on exit they are zeroed once more. Works with any training loop."""
    modules = dict(model.named_modules())
    weights = prunable_weights(model)
    if set(masks) != set(weights):
        raise ValueError(f"masks cover {sorted(masks)} but the model's prunable weights are {sorted(weights)}")
    handles = []
    for name, w in weights.items():
        kept = masks[name].to(device=w.device, dtype=w.dtype)            # multipliers, made once
        pruned = (1.0 - kept).flatten()
        handles.append(w.register_hook(lambda g, kept=kept: g * kept))

        def zero_pruned(module, args, kept=kept, pruned=pruned):
            # write only when a pruned weight is non-zero: an in-place write bumps the version
            # counter and would break a graph from an earlier forward still awaiting backward
            with torch.no_grad():
                if float(module.weight.abs().flatten() @ pruned) > 0:
                    module.weight.mul_(kept)
        handles.append(modules[name].register_forward_pre_hook(zero_pruned))
    apply_masks(weights, masks)
    try:
        yield
    finally:
        for h in handles:
            h.remove()
        apply_masks(weights, masks)
