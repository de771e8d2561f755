"""LeNet-300-100 (LeCun et al. 1998; the lottery-ticket MLP of Frankle & Carbin 2019)."""
from __future__ import annotations

import torch
import torch.nn.functional as F
from einops import rearrange
from torch import nn


class LeNet300100(nn.Module):
    """784 → 300 → 100 → classes with ReLU; every Linear weight is prunable."""

    def __init__(self, in_features: int = 784, hidden: tuple[int, int] = (300, 100), num_classes: int = 10):
        super().__init__()
        self.fc1 = nn.Linear(in_features, hidden[0])
        self.fc2 = nn.Linear(hidden[0], hidden[1])
        self.fc3 = nn.Linear(hidden[1], num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = rearrange(x, "b ... -> b (...)")           # (B, C, H, W) or (B, D) -> (B, D)
        x = torch.relu(self.fc1(x))
        x = torch.relu(self.fc2(x))
        return self.fc3(x)                              # (B, classes) logits

    def training_step(self, batch):
        """Cross-entropy on a minibatch (x (B, D) float, y (B,) int64): what the shared Trainer calls."""
        x, y = batch
        return F.cross_entropy(self(x), y), {}


class ResNetClassifier(nn.Module):
    """A CIFAR-stem timm ResNet (common.nn) and a linear head: the paper tier's networks."""

    def __init__(self, encoder: nn.Module, feat_dim: int, num_classes: int = 10):
        super().__init__()
        self.encoder, self.head = encoder, nn.Linear(feat_dim, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.encoder(x))               # (B, C, H, W) -> (B, D) -> (B, classes)

    def training_step(self, batch):
        x, y = batch
        return F.cross_entropy(self(x), y), {}
