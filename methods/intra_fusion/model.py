"""The mini-tier networks (CPU stand-ins for the paper's VGG11-BN and ResNet18)."""
from __future__ import annotations

from torch import nn

from common.nn.backbones import SmallCNN


class MLP(nn.Sequential):
    """Flatten, then Linear → BatchNorm1d → ReLU per hidden width, then a Linear classifier.
    (N, C, H, W) or (N, D) -> (N, classes)."""

    def __init__(self, in_features: int = 784, hidden: tuple[int, ...] = (256, 256, 128), classes: int = 10):
        layers, width = [nn.Flatten()], in_features
        for h in hidden:
            layers += [nn.Linear(width, h), nn.BatchNorm1d(h), nn.ReLU()]
            width = h
        super().__init__(*layers, nn.Linear(width, classes))


class CNN(nn.Sequential):
    """`SmallCNN` (four 3x3 conv → BatchNorm2d → ReLU blocks, global average pooling) and a
    Linear classifier. (N, in_chans, H, W) -> (N, classes)."""

    def __init__(self, in_chans: int = 1, width: int = 16, classes: int = 10):
        backbone = SmallCNN(in_chans, width)
        super().__init__(backbone, nn.Linear(backbone.num_features, classes))
