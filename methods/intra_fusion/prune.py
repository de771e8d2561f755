"""Structured pruning of whole groups with Torch-Pruning, plain or with Intra-Fusion.

Torch-Pruning's dependency graph finds each group of coupled layers (a conv, its BatchNorm,
the next conv's input channels; everything tied by a residual sum), computes the group
importance and removes channels. Intra-Fusion adds one step before the removal: the kept
channels' weights are overwritten with the OT-fused weights of all n channels (transport.py).
"""
from __future__ import annotations

import torch
import torch.fx
import torch.nn.functional as F
import torch_pruning as tp
from torch import nn
from torch.nn.utils.fusion import fuse_conv_bn_weights, fuse_linear_bn_weights
from torch_pruning.pruner import function

from methods.intra_fusion.transport import (MASSES, NORMALIZATIONS, check_sparsity, keep_indices, masses,
                                            merge_incoming, merge_outgoing, neuron_cost, transport_plan)

IMPORTANCES = ("l1", "l2", "taylor", "random")
COSTS = ("weights", "random")
_INCOMING = (function.prune_conv_out_channels, function.prune_linear_out_channels)
_OUTGOING = (function.prune_conv_in_channels, function.prune_linear_in_channels)
_WEIGHTED = [nn.modules.conv._ConvNd, nn.Linear]   # the official importance reads conv/linear weights only


@torch.no_grad()
def fold_batchnorm(model: nn.Module) -> nn.Module:
    """Fold every BatchNorm into the conv/linear whose output only it reads (paper eq. 1):
    W ← W·γ/σ, b ← (b − mean)·γ/σ + β, σ = √(var + eps); the BatchNorm becomes the identity
    (γ = 1, β = 0, mean 0, var 1 − eps). In place; eval-mode outputs are unchanged.
    A Linear followed by BatchNorm1d is taken to act on (N, C) inputs."""
    try:
        graph = torch.fx.symbolic_trace(model).graph
    except Exception as err:  # fx cannot trace data-dependent control flow
        raise ValueError(f"fold_batchnorm cannot trace {type(model).__name__} with torch.fx: {err}") from err
    modules = dict(model.named_modules())
    for node in graph.nodes:
        bn = modules.get(node.target) if node.op == "call_module" else None
        if not isinstance(bn, nn.modules.batchnorm._BatchNorm) or not bn.track_running_stats:
            continue
        prev = node.args[0]
        layer = modules.get(prev.target) if isinstance(prev, torch.fx.Node) and prev.op == "call_module" else None
        if not isinstance(layer, (nn.Conv1d, nn.Conv2d, nn.Conv3d, nn.Linear)) or len(prev.users) != 1:
            continue
        gamma = bn.weight if bn.affine else torch.ones_like(bn.running_var)
        beta = bn.bias if bn.affine else torch.zeros_like(bn.running_mean)
        fold = fuse_linear_bn_weights if isinstance(layer, nn.Linear) else fuse_conv_bn_weights
        layer.weight, layer.bias = fold(layer.weight, layer.bias, bn.running_mean, bn.running_var, bn.eps, gamma, beta)
        layer.bias.requires_grad_(layer.weight.requires_grad)
        bn.running_mean.zero_()
        bn.running_var.fill_(1 - bn.eps)
        if bn.affine:
            bn.weight.fill_(1.0)
            bn.bias.zero_()
    return model


def output_layer(model: nn.Module) -> nn.Module:
    """The classifier, never pruned: the last nn.Linear (the official code skips the Linear
    whose out_features is the number of classes)."""
    linears = [m for m in model.modules() if isinstance(m, nn.Linear)]
    if not linears:
        raise ValueError(f"{type(model).__name__} has no nn.Linear classifier; pass ignored_layers")
    return linears[-1]


def ordered_groups(graph: tp.DependencyGraph, model: nn.Module, ignored: list[nn.Module]) -> list[nn.Module]:
    """Root layer of every prunable group, output side first (the official
    `get_all_groups_in_order`: reversed `named_modules`, a layer already in a group skipped)."""
    roots, seen = [], set()
    for _, m in reversed(list(model.named_modules())):
        if not isinstance(m, (nn.modules.conv._ConvNd, nn.Linear)) or m in ignored or m in seen \
                or m not in graph.module2node:
            continue
        group = graph.get_pruning_group(m, graph.get_pruner_of_module(m).prune_out_channels,
                                        list(range(graph.get_out_channels(m))))
        producers = [dep.target.module for dep, _ in group if graph.is_out_channel_pruning_fn(dep.handler)]
        seen.update(producers)
        if not any(p in ignored for p in producers):
            roots.append(m)
    return roots


def group_importance(group, kind: str, model: nn.Module, calibration=None) -> torch.Tensor:
    """Importance s (n,) of the group's channels: 'l1'/'l2' the group magnitude Σ|w|^p averaged
    over its conv/linear layers, 'taylor' Σ|w·∂L/∂w| after a backward of the cross-entropy on
    `calibration` ((x, y) batches, eval mode), 'random' U[0, 1) from torch's global generator."""
    if kind in ("l1", "l2"):
        return tp.importance.GroupMagnitudeImportance(p=int(kind[1]), target_types=_WEIGHTED)(group).cpu()
    if kind == "random":
        return torch.rand(len(group[0].idxs))
    model.eval()
    model.zero_grad(set_to_none=True)
    with torch.enable_grad():
        for x, y in calibration:
            F.cross_entropy(model(x), y).backward()
    scores = tp.importance.GroupTaylorImportance(target_types=_WEIGHTED)(group).cpu()
    model.zero_grad(set_to_none=True)
    return scores


def _by_root(item, n: int) -> torch.Tensor:
    """Layer indices of each root channel: (n, s), s = 1, or h·w behind a Flatten."""
    rows = [[] for _ in range(n)]
    for idx, root in zip(item.idxs, item.root_idxs):
        rows[root].append(idx)
    if len({len(r) for r in rows}) != 1:
        raise ValueError(f"{item.dep.target.name}: channels map to unequal index sets; cannot fuse")
    return torch.tensor([sorted(r) for r in rows], dtype=torch.long)


def _pieces(group, n: int):
    """(module, param name, dim, index matrix (n, s), 'in' | 'out') for every weight the group touches."""
    pieces = []
    for item in group:
        dep, layer = item.dep, item.dep.target.module
        if dep.handler in _INCOMING + _OUTGOING and getattr(layer, "groups", 1) != 1:
            raise ValueError(f"{dep.target.name}: grouped convolutions are not supported by fusion")
        if dep.handler in _INCOMING:
            idx = _by_root(item, n)
            pieces.append((layer, "weight", 0, idx, "in"))
            if layer.bias is not None:
                pieces.append((layer, "bias", 0, idx, "in"))
        elif dep.handler in _OUTGOING:
            pieces.append((layer, "weight", 1, _by_root(item, n), "out"))
        elif isinstance(layer, nn.modules.batchnorm._BatchNorm):
            identity = (layer.running_mean == 0).all() and torch.allclose(layer.running_var + layer.eps,
                                                                          torch.ones_like(layer.running_var))
            if layer.affine:
                identity = identity and (layer.weight == 1).all() and (layer.bias == 0).all()
            if not identity:
                raise ValueError(f"{dep.target.name}: BatchNorm was not folded (fold_batchnorm found no "
                                 "conv/linear before it); cannot fuse")
        elif isinstance(layer, (nn.LayerNorm, nn.GroupNorm, nn.PReLU, nn.Embedding, nn.MultiheadAttention)):
            raise ValueError(f"{dep.target.name}: {type(layer).__name__} is not supported by fusion")
    return pieces


def _gathered(layer, name, dim, idx):
    """The weights of each root channel: (n, s, rest…) with the channel axis moved first."""
    w = getattr(layer, name).data.movedim(dim, 0)
    return w[idx.flatten()].reshape(*idx.shape, *w.shape[1:])


def _random_merge_plan(mu: torch.Tensor, nu: torch.Tensor, keep: torch.Tensor) -> torch.Tensor:
    """The random-neuron merge control's plan (n, k): every kept channel keeps all its mass
    (P[keep[e], e] = μ_keep(e)); the dropped channels' masses fill the kept channels' remaining
    capacities ν_e − μ_keep(e) by the OT plan of a random cost C ~ U[0, 1) (torch's global
    generator), so the marginals are μ and ν as for Intra-Fusion. Needs ν_e ≥ μ_keep(e) (true for
    uniform and importance masses)."""
    n, k = len(mu), len(keep)
    plan = torch.zeros(n, k, dtype=torch.float64)
    plan[keep, torch.arange(k)] = mu[keep]
    dropped = torch.tensor(sorted(set(range(n)) - set(keep.tolist())), dtype=torch.long)
    room = nu - mu[keep]
    if len(dropped) == 0:
        return plan
    if (room < -1e-12).any():
        raise ValueError("random merge needs target masses at least the kept channels' own source masses")
    rest = mu[dropped].sum()
    sub = transport_plan(torch.rand(len(dropped), k, dtype=torch.float64), mu[dropped], room.clamp_min(0))
    plan[dropped] = sub * rest
    return plan


@torch.no_grad()
def fuse_group(group, importance: torch.Tensor, keep: torch.Tensor, source_mass: str = "uniform",
               target_mass: str = "uniform", p: float = 1.0, normalization: str = "mean",
               reg: float | None = None, cost: str = "weights") -> torch.Tensor:
    """Write the OT-fused weights of all n channels into the k kept ones (every layer of the
    group); the caller then removes the others. Returns the plan (n, k).

    cost 'weights' is the paper's (`transport.neuron_cost`); 'random' is the random-neuron merge
    control (`_random_merge_plan`): the same masses and merge, but the dropped channels go to kept
    channels chosen without regard to their weights."""
    if cost not in COSTS:
        raise ValueError(f"cost must be one of {COSTS}, got '{cost}'")
    n = len(importance)
    pieces = _pieces(group, n)
    mu, nu = masses(source_mass, importance), masses(target_mass, importance, keep)
    if cost == "weights":
        feats = [_gathered(*piece[:4]).reshape(n, -1) for piece in pieces if piece[1] == "weight"]
        plan = transport_plan(neuron_cost(torch.cat(feats, 1), keep, p), mu, nu, reg)
    else:
        plan = _random_merge_plan(mu, nu, keep)
    for layer, name, dim, idx, side in pieces:
        x = _gathered(layer, name, dim, idx)                      # (n, s, rest…)
        if side == "in":
            fused = merge_incoming(plan, x, normalization)          # (k, s, rest…)
        else:
            fused = merge_outgoing(plan, x.movedim(0, 1)).movedim(1, 0)
        target = getattr(layer, name).data.movedim(dim, 0)        # a view: writes land in the layer
        target[idx[keep].flatten()] = fused.reshape(-1, *fused.shape[2:])
    return plan


def prune(model: nn.Module, example_inputs: torch.Tensor, sparsity: float, importance: str = "l1",
          fuse: bool = True, groups=None, calibration=None, source_mass: str = "uniform",
          target_mass: str = "uniform", p: float = 1.0, normalization: str = "mean",
          ignored_layers=None, reg: float | None = None, cost: str = "weights") -> nn.Module:
    """Prune `model` in place: fold BatchNorms, then for each selected group (indices into the
    output-first order of `ordered_groups`; None = all) keep the k = round(n(1−sparsity)) most
    important channels — fused with the others by OT when `fuse`, plainly selected otherwise.
    Groups are pruned one after another, each scored on the current weights. `cost='random'` is
    the random-neuron merge control (`fuse_group`)."""
    check_sparsity(sparsity)
    if importance not in IMPORTANCES:
        raise ValueError(f"importance must be one of {IMPORTANCES}, got '{importance}'")
    if importance == "taylor" and not calibration:
        raise ValueError("importance 'taylor' needs calibration batches (x, y)")
    for name, kind in (("source_mass", source_mass), ("target_mass", target_mass)):
        if kind not in MASSES:
            raise ValueError(f"{name} must be one of {MASSES}, got '{kind}'")
    if normalization not in NORMALIZATIONS:
        raise ValueError(f"normalization must be one of {NORMALIZATIONS}, got '{normalization}'")
    if cost not in COSTS:
        raise ValueError(f"cost must be one of {COSTS}, got '{cost}'")
    model.eval()
    fold_batchnorm(model)
    ignored = list(ignored_layers) if ignored_layers is not None else [output_layer(model)]
    graph = tp.DependencyGraph().build_dependency(model, example_inputs=example_inputs)
    roots = ordered_groups(graph, model, ignored)
    chosen = range(len(roots)) if groups is None else groups
    for g in chosen:
        if not 0 <= g < len(roots):
            raise ValueError(f"group {g} out of range: {type(model).__name__} has groups 0..{len(roots) - 1}")
    for g in chosen:
        root = roots[g]
        prune_out = graph.get_pruner_of_module(root).prune_out_channels
        n = graph.get_out_channels(root)
        full = graph.get_pruning_group(root, prune_out, list(range(n)))
        scores = group_importance(full, importance, model, calibration)
        keep = keep_indices(scores, sparsity)
        if fuse:
            fuse_group(full, scores, keep, source_mass, target_mass, p, normalization, reg, cost)
        dropped = sorted(set(range(n)) - set(keep.tolist()))
        if dropped:
            graph.get_pruning_group(root, prune_out, dropped).prune()
    return model
