"""NCL = SimCLR with a non-negative map on the projector output; NCE = its supervised analogue."""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from common.data.transforms import to_float
from common.hardware import gather_with_grad
from common.ssl import Augment, ContrastiveModel, info_nce, two_views
from methods.ncl.loss import KINDS, nce_logits, nonneg


def _check_kind(kind: str) -> str:
    if kind not in KINDS:
        raise ValueError(f"nonneg must be one of {KINDS}, got '{kind}'")
    return kind


class NCL(ContrastiveModel):
    """NT-Xent on normalize(σ₊(g(f(x)))); `nonneg='none'` is the CL baseline.

    Defaults are the official CIFAR setting (scripts/pretrain/cifar/ncl.yaml): τ = 0.2, projector
    512 -> 2048 -> 256, rep_relu. The official projector is Linear -> ReLU -> Linear (biases, no
    BatchNorm); `proj_batchnorm=True` gives common.ssl's SimCLR projector (Linear, BN, ReLU, Linear).
    """

    def __init__(self, encoder: nn.Module, feat_dim: int, nonneg: str = "rep_relu", temperature: float = 0.2,
                 proj_hidden: int = 2048, proj_dim: int = 256, proj_batchnorm: bool = False,
                 augment: Augment | None = None):
        super().__init__(encoder, feat_dim, temperature=temperature, proj_hidden=proj_hidden, proj_dim=proj_dim,
                         augment=augment)
        self.nonneg_kind = _check_kind(nonneg)
        if not proj_batchnorm:
            self.projector = nn.Sequential(nn.Linear(feat_dim, proj_hidden), nn.ReLU(inplace=True),
                                           nn.Linear(proj_hidden, proj_dim))

    def project(self, h: torch.Tensor) -> torch.Tensor:
        """Encoder features (N, D) -> σ₊(g(h)) (N, proj_dim), before L2-normalisation."""
        return nonneg(self.projector(h), self.nonneg_kind)

    def training_step(self, images: torch.Tensor):
        """NT-Xent of two random views (as ContrastiveModel), plus the batch statistics the official
        code logs to watch NCL train: the share of entries of z that are off (<= 0: zero after σ₊),
        of dimensions off on the whole batch (dead), and of samples whose z is all off (for NCL a
        zero vector, which normalisation cannot give a direction)."""
        v1, v2 = two_views(to_float(images), self.augment)
        z = self.embed(torch.cat([v1, v2]))                          # (2N, proj_dim), one forward
        z1, z2 = z.chunk(2)
        loss = info_nce(gather_with_grad(z1), gather_with_grad(z2), self.temperature)
        with torch.no_grad():
            off = z <= 0
            stats = {"z_off": off.float().mean(), "dead_dims": off.all(0).float().mean(),
                     "off_rows": off.all(1).float().mean()}
        return loss, stats

    def projection(self, images: torch.Tensor) -> torch.Tensor:
        """uint8 images -> g(f(x)) (N, proj_dim) *before* the non-negative map: what the official
        feature-selection probe (main_linear.py, selected_dims) is trained on."""
        return self.projector(self.features(images))

    def embedding(self, images: torch.Tensor) -> torch.Tensor:
        """uint8 images -> z = σ₊(g(f(x))) (N, proj_dim): the features the interpretability metrics read."""
        return self.embed(to_float(images))


class NonNegClassifier(nn.Module):
    """Encoder -> Linear(feat_dim -> hidden) -> features h -> logits, trained with cross-entropy.

    nonneg='none': ordinary CE (features and weights of any sign, with a bias).
    nonneg='relu' (NCE): logits σ₊(h) · relu(W)ᵀ with no bias (`loss.nce_logits`); W starts
    non-negative so relu(W) is not half dead at initialisation.
    """

    def __init__(self, encoder: nn.Module, feat_dim: int, num_classes: int, hidden: int = 512,
                 nonneg: str = "relu"):
        super().__init__()
        self.encoder, self.nonneg_kind = encoder, _check_kind(nonneg)
        self.proj = nn.Linear(feat_dim, hidden)
        self.weight = nn.Parameter(torch.empty(num_classes, hidden))
        nn.init.kaiming_uniform_(self.weight, a=5 ** 0.5)
        if nonneg != "none":
            with torch.no_grad():
                self.weight.abs_()
        self.bias = None if nonneg != "none" else nn.Parameter(torch.zeros(num_classes))

    def pre_features(self, images: torch.Tensor) -> torch.Tensor:
        """uint8 images (N, C, H, W) -> h (N, hidden), before the non-negative map."""
        return self.proj(self.encoder(to_float(images) * 2 - 1))

    def features(self, images: torch.Tensor) -> torch.Tensor:
        """σ₊(h): the penultimate features the interpretability metrics read."""
        return nonneg(self.pre_features(images), self.nonneg_kind)

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        logits = nce_logits(self.pre_features(images), self.weight, self.nonneg_kind)
        return logits if self.bias is None else logits + self.bias

    def training_step(self, batch):
        images, labels = batch
        logits = self(images)
        return F.cross_entropy(logits, labels), {"acc": (logits.argmax(1) == labels).float().mean()}
