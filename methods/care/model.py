"""CARE = a contrastive model + λ · L_equi on extra views whose augmentation is shared
within a chunk of the batch."""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from common.data.transforms import to_float
from common.hardware import gather_with_grad
from common.ssl import Augment, AugParams, ContrastiveModel, apply, info_nce, sample_params
from methods.care.colour import rotate_hue
from methods.care.loss import care_loss, equivariance_loss, uniformity_loss

BASE_LOSSES = ("infonce", "uniformity")


@dataclass
class Views:
    """One augmentation per sample: the shared `common.ssl` parameters (crop, flip, brightness,
    contrast and, where set, saturation, hue, grayscale, blur) and CARE's own hue rotation angle in
    radians (N,), all zeros without it."""
    aug: AugParams
    hue: torch.Tensor

    def __len__(self) -> int:
        return len(self.aug)

    def repeat_interleave(self, n: int) -> "Views":
        """Each augmentation repeated n times: K chunk augmentations -> K*n samples."""
        return Views(self.aug.repeat_interleave(n), self.hue.repeat_interleave(n))


def sample_views(n: int, augment: Augment, hue: float = 0.0, device="cpu",
                 generator: torch.Generator | None = None) -> Views:
    """n augmentations: `common.ssl.sample_params`, then (hue > 0) a hue angle uniform in ±hue
    turns, applied with the jitter probability (drawn apart from brightness/contrast's)."""
    aug = sample_params(n, augment, device, generator)
    angle = torch.zeros(n, device=device)
    if hue > 0:
        on = torch.rand(n, device=device, generator=generator) < augment.jitter_prob
        turns = hue * (2 * torch.rand(n, device=device, generator=generator) - 1)
        angle = torch.where(on, 2 * math.pi * turns, angle)
    return Views(aug, angle)


def augment_images(x: torch.Tensor, views: Views) -> torch.Tensor:
    """Float images (N, C, H, W) in [0, 1] -> their views: the hue shift (when there is one;
    RGB only), then `common.ssl.apply`: crop, flip, brightness, contrast and the colour ops and blur
    that the `Augment` sets."""
    if bool(views.hue.any()):
        x = rotate_hue(x, views.hue)
    return apply(x, views.aug)


class CARE(ContrastiveModel):
    """Defaults: the paper's CIFAR-10 setting (τ = 0.5, projector 512 -> 128 as in the official
    code, λ = 0.01 on the official scale of L_equi, K = 16 chunks). `augment` defaults to
    `common.ssl.Augment()` (crop, flip, brightness, contrast); the official CIFAR recipe adds
    saturation, grayscale and blur, set in the paper configs (care_cifar10.yaml).

    base_loss: "infonce" (CARE) or "uniformity" (equivariance + a non-collapse term, no
    invariance: the official `loss_subtype=uniformity`). hue: colour-jitter hue range as a
    fraction of a turn (torchvision's ColorJitter(hue=0.1) is 0.1), for RGB input; 0 = none.
    """

    def __init__(self, encoder: nn.Module, feat_dim: int, temperature: float = 0.5, proj_hidden: int = 512,
                 proj_dim: int = 128, augment: Augment | None = None, equi_weight: float = 0.01,
                 chunks: int = 16, base_loss: str = "infonce", hue: float = 0.0):
        super().__init__(encoder, feat_dim, temperature, proj_hidden, proj_dim, augment)
        if equi_weight < 0:
            raise ValueError(f"equi_weight (λ) must be >= 0, got {equi_weight}")
        if chunks < 1:
            raise ValueError(f"chunks (K) must be >= 1, got {chunks}")
        if base_loss not in BASE_LOSSES:
            raise ValueError(f"base_loss must be one of {BASE_LOSSES}, got '{base_loss}'")
        if not 0.0 <= hue <= 0.5:
            raise ValueError(f"hue must be in [0, 0.5] (a fraction of a turn either way), got {hue}")
        if hue > 0 and self.augment.hue > 0:
            raise ValueError(f"hue is set twice: CARE's hue rotation (hue = {hue}) and augment.hue = "
                             f"{self.augment.hue}; set one of them to 0")
        self.equi_weight, self.chunks, self.base_loss, self.hue = equi_weight, chunks, base_loss, hue

    def sample_views(self, n: int, device="cpu", generator: torch.Generator | None = None) -> Views:
        return sample_views(n, self.augment, self.hue, device, generator)

    def contrastive_loss(self, x: torch.Tensor) -> torch.Tensor:
        """The base term on two independent views of every image: NT-Xent (CARE) or the
        uniformity term; both views in one forward, as `ContrastiveModel` (BN sees both)."""
        n = x.shape[0]
        v1 = augment_images(x, self.sample_views(n, x.device))
        v2 = augment_images(x, self.sample_views(n, x.device))
        z1, z2 = self.embed(torch.cat([v1, v2])).chunk(2)                     # (N, d) each
        z1, z2 = gather_with_grad(z1), gather_with_grad(z2)
        if self.base_loss == "uniformity":
            return uniformity_loss(z1, z2, self.temperature)
        return info_nce(z1, z2, self.temperature)

    def equivariance_term(self, x: torch.Tensor) -> torch.Tensor:
        """L_equi on K chunks of the batch (x: float images (N, C, H, W)); chunk k gets one pair
        (t1_k, t2_k) for all its n = N // K images. The t1 views and the t2 views go through
        two forward calls, as in the official code, so BatchNorm normalises each set of views
        with its own statistics (one call would mix t1 and t2 in them)."""
        k = self.chunks
        n = x.shape[0] // k
        x = x[: k * n]
        t1 = self.sample_views(k, x.device).repeat_interleave(n)
        t2 = self.sample_views(k, x.device).repeat_interleave(n)
        z1 = F.normalize(self.embed(augment_images(x, t1)), dim=1)      # (K n, d)
        z2 = F.normalize(self.embed(augment_images(x, t2)), dim=1)
        return equivariance_loss(z1.view(k, n, -1), z2.view(k, n, -1))

    def training_step(self, images: torch.Tensor):
        x = to_float(images)
        base = self.contrastive_loss(x)
        logs = {self.base_loss: base.detach()}
        if self.equi_weight == 0:  # the λ = 0 baselines: skip the extra forward passes
            return base, logs
        equi = self.equivariance_term(x)
        return care_loss(base, equi, self.equi_weight), {**logs, "equi": equi.detach()}
