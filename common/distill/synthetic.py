"""The synthetic set (images, targets, learnt lr) and class-balanced draws."""
from __future__ import annotations

import torch
from torch import nn


def class_balanced_indices(labels: torch.Tensor, per_class: int, generator: torch.Generator | None = None) -> torch.Tensor:
    """int64 indices: for each class c (sorted), `per_class` draws without replacement among its
    samples, in rows c*k ... (c+1)*k - 1."""
    labels = torch.as_tensor(labels)
    if per_class < 1:
        raise ValueError(f"per_class must be >= 1, got {per_class}")
    out = []
    for c in torch.unique(labels).tolist():
        members = torch.nonzero(labels == c).flatten()
        if len(members) < per_class:
            raise ValueError(f"class {c} has {len(members)} samples, fewer than per_class = {per_class}")
        out.append(members[torch.randperm(len(members), generator=generator)[:per_class]])
    return torch.cat(out).long()


class SyntheticSet(nn.Module):
    """`images` a Parameter; `targets` a Parameter when learnt, else a buffer (int64 labels, or float
    logits / representations); `lr` a 0-d Parameter when learnt, a 0-d buffer when given, else None."""

    def __init__(self, images: torch.Tensor, targets: torch.Tensor, lr: float | torch.Tensor | None = None,
                 learn_targets: bool = False, learn_lr: bool = False):
        super().__init__()
        images, targets = torch.as_tensor(images), torch.as_tensor(targets)
        if len(images) != len(targets):
            raise ValueError(f"images and targets differ in length: {len(images)} vs {len(targets)}")
        if learn_targets and not targets.is_floating_point():
            raise ValueError(f"learnt targets must be float (logits or representations), got {targets.dtype}")
        self.images = nn.Parameter(images.detach().clone().float())
        t = targets.detach().clone()
        if learn_targets:
            self.targets = nn.Parameter(t)
        else:
            self.register_buffer("targets", t)
        if lr is None:
            if learn_lr:
                raise ValueError("learn_lr needs an initial lr")
            self.lr = None
        else:
            lr = torch.as_tensor(lr, dtype=torch.float32).detach().clone().reshape(())
            if learn_lr and not float(lr) > 0:
                raise ValueError(f"a learnt lr must start > 0, got {float(lr)}")
            if learn_lr:
                self.lr = nn.Parameter(lr)
            else:
                self.register_buffer("lr", lr)

    def __len__(self) -> int:
        return len(self.images)
