"""DATM's initialisation: real images an expert classifies correctly, and soft labels averaged over
the experts that classify each image correctly (official distill/DATM.py, `samples_predicted_correctly`);
or, for `pix_init: real` (official CIFAR-100 IPC 50), expert 0's logits on random real images."""
from __future__ import annotations

import torch
from torch import nn

from common.distill import functional_forward


def correct_logit_average(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """logits (E', n, K) of the experts' final epochs on the init images -> (n, K):
    Y_i = mean of logits[e, i] over the experts e whose argmax is labels[i]."""
    if logits.dim() != 3 or logits.shape[1] != len(labels):
        raise ValueError(f"logits must be (experts, n, classes) with n = {len(labels)}, got {tuple(logits.shape)}")
    correct = logits.argmax(-1) == labels.view(1, -1)                         # (E', n)
    count = correct.sum(0)                                                     # (n,)
    if bool((count == 0).any()):
        bad = torch.nonzero(count == 0).flatten().tolist()
        raise ValueError(f"no expert classifies images {bad} correctly: their soft label is undefined")
    return (logits * correct.unsqueeze(-1)).sum(0) / count.unsqueeze(-1)


def select_correct(logits: torch.Tensor, labels: torch.Tensor, per_class: int,
                   generator: torch.Generator | None = None) -> torch.Tensor:
    """int64 indices, class c (sorted) in rows c*k ... (c+1)*k - 1, drawn without replacement among
    the images whose logits (n, K) (expert 0's final epoch) give the right class."""
    if logits.dim() != 2 or len(logits) != len(labels):
        raise ValueError(f"logits must be (n, classes) with n = {len(labels)}, got {tuple(logits.shape)}")
    if per_class < 1:
        raise ValueError(f"per_class must be >= 1, got {per_class}")
    correct = logits.argmax(-1) == labels
    out = []
    for c in torch.unique(labels).tolist():
        members = torch.nonzero((labels == c) & correct).flatten()
        if len(members) < per_class:
            raise ValueError(f"IPC {per_class} is above class {c}'s {len(members)} correctly classified images")
        out.append(members[torch.randperm(len(members), generator=generator)[:per_class]])
    return torch.cat(out).long()


def expert_logits(module: nn.Module, buffer: torch.Tensor, images: torch.Tensor, expert: int = 0) -> torch.Tensor:
    """(n, K) soft-label logits Y = f(X; theta*_{expert, T}): the network at one expert's final
    snapshot on the images, every image kept whatever its argmax (official distill/DATM.py,
    `pix_init == "real"`: `Temp_params = buffer[0][-1]`, `label_syn = Temp_net(image_syn, ...)`).
    `buffer` (E, T + 1, P)."""
    num_params = sum(p.numel() for p in module.parameters())
    if buffer.dim() != 3 or buffer.shape[2] != num_params:
        raise ValueError(f"buffer must be (experts, epochs + 1, {num_params}), got {tuple(buffer.shape)}")
    if not 0 <= expert < len(buffer):
        raise ValueError(f"expert {expert} is not among the buffer's {len(buffer)} experts")
    return functional_forward(module, buffer[expert, -1], images)
