"""The tasks' models: the official `CNNMnist` (src/cnn.py) without its two dropouts (Δ-SGD
evaluates two gradients per step on the same batch; dropout would draw a different mask for
each) and with logits out (its log_softmax under cross-entropy gives the same loss), and a
one-hidden-layer MLP for the tabular tasks."""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn


class CNNMnist(nn.Module):
    def __init__(self, in_chans: int = 1, num_classes: int = 10):
        super().__init__()
        self.conv1 = nn.Conv2d(in_chans, 10, kernel_size=5)
        self.conv2 = nn.Conv2d(10, 20, kernel_size=5)
        self.fc1 = nn.Linear(320, 50)
        self.fc2 = nn.Linear(50, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:   # (b, 1, 28, 28) -> (b, classes) logits
        x = F.relu(F.max_pool2d(self.conv1(x), 2))
        x = F.relu(F.max_pool2d(self.conv2(x), 2))
        return self.fc2(F.relu(self.fc1(x.flatten(1))))


class MLP(nn.Module):
    def __init__(self, in_dim: int = 36, hidden: int = 64, num_classes: int = 6):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(in_dim, hidden), nn.ReLU(), nn.Linear(hidden, num_classes))

    def forward(self, x: torch.Tensor) -> torch.Tensor:   # (b, in_dim) -> (b, classes) logits
        return self.net(x.flatten(1))


class ResNetClassifier(nn.Module):
    """The paper tier's ResNet-18 / -50: timm's ResNet with the CIFAR stem
    (common.nn.backbones.cifar_resnet) and a linear head."""

    def __init__(self, name: str = "resnet18", in_chans: int = 3, num_classes: int = 10):
        super().__init__()
        from common.nn.backbones import cifar_resnet

        self.backbone = cifar_resnet(name, in_chans)
        self.head = nn.Linear(self.backbone.num_features, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.backbone(x))
