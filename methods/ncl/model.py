"""NCL = SimCLR with a non-negative map on the projector output; NCE = its supervised analogue."""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from common.ssl import ContrastiveModel, to_float
from methods.ncl.loss import nonneg


class NCL(ContrastiveModel):
    """NT-Xent on normalize(nonneg(g(f(x)))); `method.nonneg: none` is the CL baseline."""

    def project(self, h: torch.Tensor) -> torch.Tensor:
        return nonneg(self.projector(h), self.cfg.nonneg)


class NonNegClassifier(nn.Module):
    """Encoder → Linear → features → classifier, trained with cross-entropy.

    nonneg=False: ordinary CE (features and weights of any sign, with bias).
    nonneg=True (NCE): ReLU features and non-negative classifier weights relu(W), no bias,
    so each class logit is a non-negative combination of non-negative features.
    """

    def __init__(self, encoder: nn.Module, feat_dim: int, hidden: int, num_classes: int, nonneg_features: bool):
        super().__init__()
        self.encoder, self.nonneg_features = encoder, nonneg_features
        self.proj = nn.Linear(feat_dim, hidden)
        self.weight = nn.Parameter(torch.empty(num_classes, hidden))
        nn.init.kaiming_uniform_(self.weight, a=5 ** 0.5)
        if nonneg_features:  # start from non-negative weights so relu(W) is not half dead
            with torch.no_grad():
                self.weight.abs_()
        self.bias = None if nonneg_features else nn.Parameter(torch.zeros(num_classes))

    def features(self, images: torch.Tensor) -> torch.Tensor:
        h = self.proj(self.encoder(to_float(images) * 2 - 1))
        return F.relu(h) if self.nonneg_features else h

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        w = F.relu(self.weight) if self.nonneg_features else self.weight
        return F.linear(self.features(images), w, self.bias)

    def training_step(self, batch):
        images, labels = batch
        logits = self(images)
        loss = F.cross_entropy(logits, labels)
        return loss, {"acc": (logits.argmax(1) == labels).float().mean()}
