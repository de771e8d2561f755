"""Flat-parameter students (MTT's ReparamModule, here via torch.func.functional_call), the unrolled
student SGD and the matching losses."""
from __future__ import annotations

from typing import Callable

import torch
import torch.nn.functional as F
from torch import nn
from torch.func import functional_call


def flatten_params(module: nn.Module) -> torch.Tensor:
    """(P,): the parameters in `module.parameters()` order, concatenated."""
    return torch.cat([p.detach().reshape(-1) for p in module.parameters()])


def unflatten_params(module: nn.Module, flat: torch.Tensor) -> dict[str, torch.Tensor]:
    """{name: view of `flat`} in `named_parameters()` order (differentiable in `flat`)."""
    named = list(module.named_parameters())
    total = sum(p.numel() for _, p in named)
    if flat.dim() != 1 or flat.numel() != total:
        raise ValueError(f"flat parameters of shape {tuple(flat.shape)} do not fit a network of {total} parameters")
    out, i = {}, 0
    for name, p in named:
        out[name] = flat[i:i + p.numel()].view_as(p)
        i += p.numel()
    return out


def functional_forward(module: nn.Module, flat: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """module(x) with the parameters taken from `flat` (buffers from the module)."""
    return functional_call(module, unflatten_params(module, flat), (x,))


def unrolled_sgd(module: nn.Module, start: torch.Tensor, x: torch.Tensor, targets: torch.Tensor,
                 lr: torch.Tensor | float, steps: int, batch_size: int, loss_fn: Callable,
                 generator: torch.Generator | None = None, augment: Callable | None = None) -> torch.Tensor:
    """theta_N of theta_{i+1} = theta_i - lr * grad loss_fn(f(theta_i; x_B), targets_B), with the graph
    kept (create_graph): differentiable in x, targets and lr (and start when it requires grad).
    Batches: consecutive chunks of torch.randperm(n, generator=generator), renewed when used up."""
    if steps < 0:
        raise ValueError(f"steps must be >= 0, got {steps}")
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    if len(x) != len(targets):
        raise ValueError(f"images and targets differ in length: {len(x)} vs {len(targets)}")
    if steps == 0:
        return start
    theta = start if start.requires_grad else start.detach().requires_grad_(True)
    chunks: list[torch.Tensor] = []
    with torch.enable_grad():
        for _ in range(steps):
            if not chunks:
                chunks = list(torch.randperm(len(x), generator=generator).split(batch_size))
            idx = chunks.pop(0)
            xb = x[idx] if augment is None else augment(x[idx])
            loss = loss_fn(functional_forward(module, theta, xb), targets[idx])
            grad = torch.autograd.grad(loss, theta, create_graph=True)[0]
            theta = theta - lr * grad
    return theta


def param_matching_loss(student_end: torch.Tensor, expert_start: torch.Tensor, expert_target: torch.Tensor) -> torch.Tensor:
    """MTT Eq. 2: ||theta_hat_N - theta*_{t+M}||^2 / ||theta*_t - theta*_{t+M}||^2."""
    if not (student_end.shape == expert_start.shape == expert_target.shape):
        raise ValueError(f"parameter shapes differ: {tuple(student_end.shape)}, {tuple(expert_start.shape)}, "
                         f"{tuple(expert_target.shape)}")
    num = (student_end - expert_target).pow(2).sum()
    den = (expert_start - expert_target).pow(2).sum()
    return num / den


def soft_cross_entropy(logits: torch.Tensor, target_logits: torch.Tensor) -> torch.Tensor:
    """DATM's SoftCrossEntropy: mean_i sum_c -softmax(target)_ic * log_softmax(logits)_ic."""
    if logits.shape != target_logits.shape:
        raise ValueError(f"logits {tuple(logits.shape)} and target logits {tuple(target_logits.shape)} differ")
    return -(F.softmax(target_logits, dim=1) * F.log_softmax(logits, dim=1)).sum(1).mean()


def target_loss(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Cross-entropy on int64 labels, soft cross-entropy on float (logit) targets."""
    return soft_cross_entropy(logits, targets) if targets.is_floating_point() else F.cross_entropy(logits, targets)
