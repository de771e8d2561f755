"""Iterative pruning rounds: IMP (rewind the weights to θ_rw) and LRR (keep the weights, restart
only the learning-rate schedule), with magnitude or random masks; and the sign experiment."""
from __future__ import annotations

from typing import Callable

import torch
from torch import nn

from methods.lrr.pruning import (apply_masks, global_magnitude_masks, keep_masked, measured_sparsity,
                                 prunable_weights, random_masks, sign_flip_fraction, sparsity_schedule)

METHODS = ("imp", "lrr")
MASK_FNS = ("magnitude", "random")


def check_rewind_state(model: nn.Module, rewind_state: dict | None) -> None:
    """IMP needs a detached copy of the unpruned model's full state_dict at the rewind step."""
    hint = ("pass rewind_state=copy.deepcopy(model.state_dict()) taken at the rewind step "
            "(train_sgd(..., snapshot_step=k)['snapshot'])")
    if rewind_state is None:
        raise ValueError(f"method='imp' rewinds the weights, so it needs rewind_state: {hint}")
    own = model.state_dict()
    missing, extra = sorted(set(own) - set(rewind_state)), sorted(set(rewind_state) - set(own))
    shapes = [k for k in set(own) & set(rewind_state) if own[k].shape != rewind_state[k].shape]
    if missing or extra or shapes:
        raise ValueError(f"rewind_state does not match the model (missing {missing}, unexpected {extra}, "
                         f"other shape {sorted(shapes)}); {hint}")
    shared = sorted(k for k in own if own[k].numel() and own[k].data_ptr() == rewind_state[k].data_ptr())
    if shared:
        raise ValueError(f"rewind_state shares memory with the model ({shared[:3]}...), so it holds the "
                         f"current weights, not the rewind point; {hint}")


def iterative_pruning(model: nn.Module, train_fn: Callable[[nn.Module, int], dict | None], num_rounds: int,
                      rate: float = 0.2, method: str = "lrr", rewind_state: dict | None = None,
                      mask_fn: str = "magnitude", generator: torch.Generator | None = None) -> list[dict]:
    """Rounds k = 1..R on an already trained `model` (round 0 is dense training).

    Each round: mask to s_k = 1 − (1 − rate)^k from the weights at the end of round k−1
    (global magnitude, or each layer at random; masks nest); IMP: θ ← θ_rw ⊙ m_k (every parameter
    and buffer from `rewind_state`), LRR: θ ← θ_{k−1} ⊙ m_k; then `train_fn(model, k)`, which
    builds its own optimizer and schedule (the learning-rate rewinding), runs inside
    `keep_masked` so pruned weights stay 0. Returns one record per round: round,
    target_sparsity, sparsity (measured zeros), sign_flips (kept weights whose sign differs
    between the round's first and last weights), masks, and whatever dict train_fn returned."""
    schedule = sparsity_schedule(num_rounds, rate)
    if method not in METHODS:
        raise ValueError(f"method must be one of {METHODS}, got '{method}'")
    if mask_fn not in MASK_FNS:
        raise ValueError(f"mask_fn must be one of {MASK_FNS}, got '{mask_fn}'")
    rewind = None
    if method == "imp":
        check_rewind_state(model, rewind_state)
        rewind = {k: v.detach().clone() for k, v in rewind_state.items()}
    weights = prunable_weights(model)
    masks, history = None, []
    for k, target in enumerate(schedule, start=1):
        if mask_fn == "magnitude":
            masks = global_magnitude_masks(weights, target, masks)
        else:
            masks = random_masks(weights, target, masks, generator)
        if rewind is not None:
            model.load_state_dict(rewind)        # copies in place: `weights` still point at the parameters
        apply_masks(weights, masks)
        start = {n: w.detach().clone() for n, w in weights.items()}
        with keep_masked(model, masks):
            metrics = train_fn(model, k) or {}
        record = {"round": k, "target_sparsity": target, "sparsity": measured_sparsity(weights),
                  "sign_flips": sign_flip_fraction(start, {n: w.detach() for n, w in weights.items()}, masks),
                  "masks": {n: m.clone() for n, m in masks.items()}}
        history.append({**metrics, **record})
    return history


@torch.no_grad()
def rewind_to(model: nn.Module, rewind_state: dict, masks: dict[str, torch.Tensor],
              signs: dict[str, torch.Tensor] | None = None) -> None:
    """θ ← θ_rw ⊙ m, or with `signs` (e.g. LRR's final weights): θ ← |θ_rw| ⊙ sign(signs) ⊙ m."""
    check_rewind_state(model, rewind_state)
    model.load_state_dict(rewind_state)
    weights = prunable_weights(model)
    if signs is not None:
        for n, w in weights.items():
            w.copy_(w.abs() * torch.sign(signs[n]).to(w))
    apply_masks(weights, masks)


def sign_experiment(model: nn.Module, train_fn: Callable[[nn.Module, int], dict | None], rewind_state: dict,
                    masks: dict[str, torch.Tensor], signs: dict[str, torch.Tensor], round_index: int) -> dict:
    """Train one round from (a) θ_rw ⊙ m and (b) |θ_rw| ⊙ sign(θ_signs) ⊙ m with the same
    `train_fn(model, round_index)`; returns {'a': metrics, 'b': metrics} (the model ends as (b))."""
    out = {}
    for key, s in (("a", None), ("b", signs)):
        rewind_to(model, rewind_state, masks, s)
        with keep_masked(model, masks):
            out[key] = train_fn(model, round_index) or {}
    return out
