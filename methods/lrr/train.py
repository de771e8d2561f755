"""One training round (fresh SGD, cosine schedule over the round) and test accuracy: the plain
`train_fn` that `iterative_pruning` calls. The masks are not its business: `keep_masked`
(pruning.py) holds the pruned weights at zero around whatever loop runs."""
from __future__ import annotations

import copy

import torch
import torch.nn.functional as F
from torch import nn

from common.trainer import lr_factor

FASHION_MEAN, FASHION_STD = 0.2860, 0.3530   # Fashion-MNIST training-set pixel statistics


def to_inputs(images: torch.Tensor, mean: float = FASHION_MEAN, std: float = FASHION_STD) -> torch.Tensor:
    """uint8 images (N, C, H, W) -> standardised float features (N, C·H·W)."""
    x = images.float().div(255.0).sub(mean).div(std)
    return x.flatten(1)


def train_sgd(model: nn.Module, inputs: torch.Tensor, labels: torch.Tensor, epochs: int = 1, lr: float = 0.1,
              momentum: float = 0.9, weight_decay: float = 1e-4, batch_size: int = 128, seed: int = 0,
              snapshot_step: int | None = None) -> dict:
    """Train `epochs` passes of cross-entropy with a new SGD optimizer whose learning rate follows
    a cosine from `lr` to 0 over this call's steps (LRR restarts it every round).

    inputs (N, D) float, labels (N,) int64; the batch order is a function of `seed` only.
    Returns {'loss': mean loss of the last epoch} and, when `snapshot_step` is given, a copy of
    the model's state_dict after that many steps under 'snapshot' (0 = before the first step:
    IMP's rewind point θ_rw)."""
    if epochs < 1 or batch_size < 1:
        raise ValueError(f"epochs and batch_size must be >= 1, got {epochs} and {batch_size}")
    device = next(model.parameters()).device
    opt = torch.optim.SGD(model.parameters(), lr=lr, momentum=momentum, weight_decay=weight_decay)
    gen = torch.Generator().manual_seed(seed)
    n = len(labels)
    per_epoch = (n + batch_size - 1) // batch_size
    total = epochs * per_epoch
    out, step = {}, 0
    model.train()
    for _ in range(epochs):
        order = torch.randperm(n, generator=gen)
        loss_sum = 0.0
        for i in range(per_epoch):
            if step == snapshot_step:
                out["snapshot"] = copy.deepcopy(model.state_dict())
            idx = order[i * batch_size:(i + 1) * batch_size]
            x, y = inputs[idx].to(device), labels[idx].to(device)
            for group in opt.param_groups:
                group["lr"] = lr * lr_factor(step, total, "cosine", 0)
            loss = F.cross_entropy(model(x), y)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            loss_sum += float(loss.detach()) * len(idx)
            step += 1
        out["loss"] = loss_sum / n
    if snapshot_step is not None and "snapshot" not in out:
        raise ValueError(f"snapshot_step {snapshot_step} is not a step of this run (0..{total - 1})")
    return out


@torch.no_grad()
def accuracy(model: nn.Module, inputs: torch.Tensor, labels: torch.Tensor, batch_size: int = 2000) -> float:
    """Top-1 accuracy in percent."""
    device = next(model.parameters()).device
    model.eval()
    correct = 0
    for i in range(0, len(labels), batch_size):
        logits = model(inputs[i:i + batch_size].to(device))          # (b, classes)
        correct += int((logits.argmax(1).cpu() == labels[i:i + batch_size]).sum())
    model.train()
    return 100.0 * correct / len(labels)
