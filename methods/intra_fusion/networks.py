"""The paper tier's CIFAR networks, as the official code defines them (github.com/alexandertheus/
Intra-Fusion, `model_architectures/vgg.py` and `resnet.py`, both taken from kuangliu/pytorch-cifar).
Module names follow the official ones, so the official checkpoints' state dicts load as they are."""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

# The official cfg["VGG11"]: conv widths, "M" = 2x2 max-pool.
VGG11 = (64, "M", 128, "M", 256, 256, "M", 512, 512, "M", 512, 512, "M")


class _TrainStep:
    def training_step(self, batch):
        """Cross-entropy on (x, y): what the shared Trainer calls."""
        x, y = batch
        return F.cross_entropy(self(x), y), {}


class VGG(_TrainStep, nn.Module):
    """VGG with BatchNorm for 32x32 inputs: per width a 3x3 conv (bias) → BatchNorm2d → ReLU,
    "M" a 2x2 max-pool, then the official no-op AvgPool2d(1, 1) and one Linear classifier.
    (N, in_chans, 32, 32) -> (N, classes); five pools leave a 1x1 map of `widths[-2]` channels."""

    def __init__(self, widths=VGG11, classes: int = 10, in_chans: int = 3):
        super().__init__()
        layers, c_in = [], in_chans
        for w in widths:
            if w == "M":
                layers.append(nn.MaxPool2d(2, 2))
            else:
                layers += [nn.Conv2d(c_in, w, 3, padding=1), nn.BatchNorm2d(w), nn.ReLU(inplace=True)]
                c_in = w
        self.features = nn.Sequential(*layers, nn.AvgPool2d(1, 1))
        self.classifier = nn.Linear(c_in, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.classifier(self.features(x).flatten(1))    # (N, C, 1, 1) -> (N, C) -> (N, classes)


class BasicBlock(nn.Module):
    """Two 3x3 convs (with bias, as the official code) with BatchNorm; a 1x1 conv + BatchNorm
    shortcut where the shape changes, else the identity (an empty Sequential)."""

    def __init__(self, c_in: int, c_out: int, stride: int = 1):
        super().__init__()
        self.conv1 = nn.Conv2d(c_in, c_out, 3, stride, 1)
        self.bn1 = nn.BatchNorm2d(c_out)
        self.conv2 = nn.Conv2d(c_out, c_out, 3, 1, 1)
        self.bn2 = nn.BatchNorm2d(c_out)
        self.shortcut = nn.Sequential()
        if stride != 1 or c_in != c_out:
            self.shortcut = nn.Sequential(nn.Conv2d(c_in, c_out, 1, stride), nn.BatchNorm2d(c_out))

    def forward(self, x):
        out = F.relu(self.bn1(self.conv1(x)))
        return F.relu(self.bn2(self.conv2(out)) + self.shortcut(x))


class ResNet18(_TrainStep, nn.Module):
    """The official CIFAR ResNet18: 3x3 stride-1 stem (no max-pool), four stages of two
    BasicBlocks (width w, 2w, 4w, 8w; stride 1, 2, 2, 2), 4x4 average pool, Linear.
    (N, in_chans, 32, 32) -> (N, classes)."""

    def __init__(self, classes: int = 10, in_chans: int = 3, width: int = 64):
        super().__init__()
        self.conv1 = nn.Conv2d(in_chans, width, 3, 1, 1)
        self.bn1 = nn.BatchNorm2d(width)
        c_in, stages = width, []
        for i, stride in enumerate((1, 2, 2, 2)):
            c_out = width * 2 ** i
            stages.append(nn.Sequential(BasicBlock(c_in, c_out, stride), BasicBlock(c_out, c_out, 1)))
            c_in = c_out
        self.layer1, self.layer2, self.layer3, self.layer4 = stages
        self.linear = nn.Linear(c_in, classes)

    def forward(self, x):
        out = F.relu(self.bn1(self.conv1(x)))
        out = self.layer4(self.layer3(self.layer2(self.layer1(out))))      # (N, 8w, 4, 4)
        return self.linear(F.avg_pool2d(out, 4).flatten(1))
