"""MTT's ConvNet (`utils.get_network('ConvNet')`, networks.py of MTT and DATM): blocks of conv 3x3,
norm, ReLU, average pooling 2; a linear classifier on the flattened features."""
from __future__ import annotations

from typing import Literal

import torch
from torch import nn

NORMS = ("instancenorm", "batchnorm", "none")


def _norm(kind: str, channels: int) -> nn.Module:
    if kind == "instancenorm":          # MTT: nn.GroupNorm(c, c, affine=True)
        return nn.GroupNorm(channels, channels, affine=True)
    if kind == "batchnorm":
        return nn.BatchNorm2d(channels, affine=True)
    if kind == "none":
        return nn.Identity()
    raise ValueError(f"unknown norm '{kind}': choose one of {', '.join(NORMS)}")


class ConvNet(nn.Module):
    """ConvNet-D with D = len(channels). The first conv pads 3 when in_chans = 1 and img_size = 28
    (MNIST: 28 -> 32, as the official code), else 1; every block halves the side."""

    def __init__(self, in_chans: int, num_classes: int, channels: tuple[int, ...] = (128, 128, 128),
                 norm: Literal["instancenorm", "batchnorm", "none"] = "instancenorm", img_size: int = 32):
        super().__init__()
        if norm not in NORMS:
            raise ValueError(f"unknown norm '{norm}': choose one of {', '.join(NORMS)}")
        channels = tuple(int(c) for c in channels)
        if not channels or min(channels) < 1:
            raise ValueError(f"channels must be a non-empty list of positive widths, got {channels}")
        side = img_size + 4 if (in_chans == 1 and img_size == 28) else img_size
        if side >> len(channels) < 1:
            raise ValueError(f"{len(channels)} pooling blocks need img_size >= {2 ** len(channels)}, got {img_size}")
        layers, prev = [], in_chans
        for d, width in enumerate(channels):
            pad = 3 if (d == 0 and in_chans == 1 and img_size == 28) else 1
            layers += [nn.Conv2d(prev, width, kernel_size=3, padding=pad), _norm(norm, width), nn.ReLU(inplace=True),
                       nn.AvgPool2d(kernel_size=2, stride=2)]
            prev, side = width, side // 2
        self.features = nn.Sequential(*layers)
        self.feature_dim = prev * side * side
        self.fc = nn.Linear(self.feature_dim, num_classes)

    def embed(self, x: torch.Tensor) -> torch.Tensor:
        """(B, C, H, W) -> (B, feature_dim)."""
        return self.features(x).flatten(1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(self.embed(x))
