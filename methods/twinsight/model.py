"""The twins (official `model/SemiFed.py`): a supervised twin (encoder + linear classifier) and
an unsupervised twin (encoder + SimCLR projector), separate weights, same encoder architecture.
On CPU the encoder is a tiny CNN instead of the official ResNet-18 (README, Deviations)."""
from __future__ import annotations

import torch
from torch import nn

from common.ssl import Projector


class TinyCNN(nn.Module):
    """conv 5x5 (16) -> ReLU -> max-pool 2 -> conv 5x5 (32) -> ReLU -> max-pool 2 -> fc [-> ReLU]:
    (N, C, H, W) float images -> (N, feat_dim) features. `batchnorm` puts a BatchNorm after each
    conv (as the official ResNet-18 has); `final_relu=False` leaves the features signed (a ReLU
    head on [0, 1] inputs starts with nearly parallel features: README, Cold read)."""

    def __init__(self, in_chans: int = 1, img_size: int = 28, feat_dim: int = 64, final_relu: bool = True,
                 batchnorm: bool = False):
        super().__init__()
        if img_size < 12:
            raise ValueError(f"TinyCNN needs images of at least 12x12, got {img_size}")
        side = ((img_size - 4) // 2 - 4) // 2
        bn = (lambda c: nn.BatchNorm2d(c)) if batchnorm else (lambda c: nn.Identity())
        layers = [nn.Conv2d(in_chans, 16, 5), bn(16), nn.ReLU(), nn.MaxPool2d(2),
                  nn.Conv2d(16, 32, 5), bn(32), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(),
                  nn.Linear(32 * side * side, feat_dim)]
        if final_relu:
            layers.append(nn.ReLU())
        self.features = nn.Sequential(*layers)
        self.feat_dim = feat_dim

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.features(x)


class Supervised(nn.Module):
    """encoder + linear classifier: x -> (h, logits)."""

    def __init__(self, encoder: nn.Module, feat_dim: int, num_classes: int):
        super().__init__()
        self.encoder, self.head = encoder, nn.Linear(feat_dim, num_classes)

    def forward(self, x):
        h = self.encoder(x)
        return h, self.head(h)


class Unsupervised(nn.Module):
    """encoder + SimCLR projector (common.ssl.Projector): x -> (h, z)."""

    def __init__(self, encoder: nn.Module, feat_dim: int, proj_hidden: int, proj_dim: int):
        super().__init__()
        self.encoder, self.projector = encoder, Projector(feat_dim, proj_hidden, proj_dim)

    def forward(self, x):
        h = self.encoder(x)
        return h, self.projector(h)


class TwinModel(nn.Module):
    """The two twins of one client: `sup(x) -> (h, logits)`, `unsup(x) -> (h, z)`. FedAvg
    averages each twin on its own (the federated floor's models {"sup", "unsup"})."""

    def __init__(self, encoder_sup: nn.Module, encoder_unsup: nn.Module, feat_dim: int = 64, num_classes: int = 10,
                 proj_hidden: int = 128, proj_dim: int = 64):
        super().__init__()
        if encoder_sup is encoder_unsup:
            raise ValueError("the twins need two encoders (separate weights), got the same module twice")
        self.sup = Supervised(encoder_sup, feat_dim, num_classes)
        self.unsup = Unsupervised(encoder_unsup, feat_dim, proj_hidden, proj_dim)


def resnet_encoder(name: str = "resnet18_cifar", in_chans: int = 3, img_size: int = 32,
                   feat_dim: int | None = 512) -> nn.Module:
    """The paper tier's encoder (official ResNet-18 twins) from `common.nn.build_backbone`;
    `feat_dim`, when given, must be the backbone's width."""
    from common.nn.backbones import build_backbone

    module, dim = build_backbone(name, in_chans, img_size)
    if feat_dim is not None and feat_dim != dim:
        raise ValueError(f"{name} gives {dim}-dimensional features, not feat_dim={feat_dim}")
    return module
