"""The mini-tier networks (CPU stand-ins for the paper's VGG11-BN and ResNet18) and `build_network`,
which also builds the paper tier's (networks.py)."""
from __future__ import annotations

import torch.nn.functional as F
from torch import nn

from common.nn.backbones import SmallCNN
from methods.intra_fusion.networks import VGG, VGG11, ResNet18


class _Classifier(nn.Sequential):
    def training_step(self, batch):
        """Cross-entropy on (x, y): what the shared Trainer calls."""
        x, y = batch
        return F.cross_entropy(self(x), y), {}


class MLP(_Classifier):
    """Flatten, then Linear → BatchNorm1d → ReLU per hidden width, then a Linear classifier.
    (N, C, H, W) or (N, D) -> (N, classes)."""

    def __init__(self, in_features: int = 784, hidden: tuple[int, ...] = (256, 256, 128), classes: int = 10):
        layers, width = [nn.Flatten()], in_features
        for h in hidden:
            layers += [nn.Linear(width, h), nn.BatchNorm1d(h), nn.ReLU()]
            width = h
        super().__init__(*layers, nn.Linear(width, classes))


class CNN(_Classifier):
    """`SmallCNN` (four 3x3 conv → BatchNorm2d → ReLU blocks, global average pooling) and a
    Linear classifier. (N, in_chans, H, W) -> (N, classes)."""

    def __init__(self, in_chans: int = 1, width: int = 16, classes: int = 10):
        backbone = SmallCNN(in_chans, width)
        super().__init__(backbone, nn.Linear(backbone.num_features, classes))


NETWORKS = ("mlp", "cnn", "vgg11_bn", "resnet18")


def build_network(name: str, in_chans: int, img_size: int, num_classes: int,
                  hidden: tuple[int, ...] | None = None, width: int | None = None) -> nn.Module:
    """The network by name: the mini tier's 'mlp' (reads `hidden`) and 'cnn' (reads `width`), the
    paper tier's CIFAR 'vgg11_bn' and 'resnet18' as the official code defines them (32x32 inputs,
    neither option). An option the network does not read must be None (never a silent no-op)."""
    if name not in NETWORKS:
        raise ValueError(f"network must be one of {NETWORKS}, got '{name}'")
    reads = {"mlp": {"hidden"}, "cnn": {"width"}}.get(name, set())
    for key, value in (("hidden", hidden), ("width", width)):
        if value is not None and key not in reads:
            raise ValueError(f"network '{name}' does not read {key}; set it to null")
    if name == "mlp":
        return MLP(in_chans * img_size ** 2, tuple(hidden), num_classes)
    if name == "cnn":
        return CNN(in_chans, width, num_classes)
    if img_size != 32:
        raise ValueError(f"network '{name}' is the CIFAR definition for 32x32 images, got img_size={img_size}")
    return VGG(VGG11, num_classes, in_chans) if name == "vgg11_bn" else ResNet18(num_classes, in_chans)
