"""The classifier each cluster trains by FedAvg at the mini tier (the official code's MLP is
512-256-64 with a softmax output; here one hidden layer, logits)."""
from __future__ import annotations

import torch
from torch import nn


class MLP(nn.Module):
    def __init__(self, in_dim: int = 196, hidden: int = 64, num_classes: int = 10):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(in_dim, hidden), nn.ReLU(), nn.Linear(hidden, num_classes))

    def forward(self, x: torch.Tensor) -> torch.Tensor:   # (b, in_dim) -> (b, num_classes) logits
        return self.net(x)
