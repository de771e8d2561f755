"""Twin-sight's client objectives (Zhang et al., ICLR 2024, Sec. 4; official
`trainers/normal_trainer.py`): the neighbourhood-preserving constraint between the twins, the
FixMatch consistency loss (the baseline and the optional pseudo-label term), and the per-client
objective of the labeled and the unlabeled clients. Pure functions of tensors."""
from __future__ import annotations

import torch
import torch.nn.functional as F

from common.ssl import info_nce

NORMALIZERS = ("square", "official")


def _check_nonneg(**weights) -> None:
    for name, v in weights.items():
        if not float(v) >= 0:
            raise ValueError(f"{name} must be >= 0, got {v!r}")


def _check_threshold(threshold: float) -> None:
    if not 0.0 <= float(threshold) <= 1.0:
        raise ValueError(f"threshold must be in [0, 1], got {threshold!r}")


def neighbourhood_loss(feat_u: torch.Tensor, feat_s: torch.Tensor, normalizer: str = "square") -> torch.Tensor:
    """The neighbourhood-preserving constraint (paper Sec. 4; official `gram_loss`): with
    u_i = h_u,i / |h_u,i| and s_i = h_s,i / |h_s,i| (rows of the two twins' features on one
    batch of size B), sum_ij (u_i.u_j - s_i.s_j)^2 / D where D = B^2 (`square`) or, as the
    official code writes `real_bs ^ 2`, the bitwise exclusive or B xor 2 (`official`: 66 for
    B = 64). The widths of the two features may differ; both twins get a gradient."""
    if normalizer not in NORMALIZERS:
        raise ValueError(f"normalizer must be one of {', '.join(NORMALIZERS)}, got {normalizer!r}")
    if feat_u.ndim != 2 or feat_s.ndim != 2:
        raise ValueError(f"features must be (B, d) matrices, got {tuple(feat_u.shape)} and {tuple(feat_s.shape)}")
    b = feat_u.shape[0]
    if feat_s.shape[0] != b:
        raise ValueError(f"the twins' batches differ: {b} vs {feat_s.shape[0]} rows")
    if b < 2:
        raise ValueError(f"neighbourhood_loss needs a batch of at least 2, got {b}")
    denom = b * b if normalizer == "square" else b ^ 2
    if denom == 0:
        raise ValueError("the official normaliser B xor 2 is 0 at B = 2 (an infinite loss); use normalizer='square'")
    u = feat_u / feat_u.norm(dim=1, keepdim=True)
    s = feat_s / feat_s.norm(dim=1, keepdim=True)
    return ((u @ u.T - s @ s.T) ** 2).sum() / denom


def fixmatch_loss(logits_weak: torch.Tensor, logits_strong: torch.Tensor,
                  threshold: float = 0.95) -> tuple[torch.Tensor, torch.Tensor]:
    """FixMatch with hard labels (Sohn et al. 2020; official `consistency_loss_fixmatch`):
    p = softmax(logits_weak) without gradient, mask_i = [max p_i >= threshold], loss =
    mean over the whole batch of mask_i CE(logits_strong_i, argmax p_i). Returns (loss, mask rate)."""
    _check_threshold(threshold)
    if logits_weak.shape != logits_strong.shape or logits_weak.ndim != 2:
        raise ValueError(f"logits must be two (B, C) matrices of one shape, got {tuple(logits_weak.shape)} "
                         f"and {tuple(logits_strong.shape)}")
    p = torch.softmax(logits_weak.detach(), dim=-1)
    conf, pseudo = p.max(dim=-1)
    mask = (conf >= threshold).to(logits_strong.dtype)
    loss = (F.cross_entropy(logits_strong, pseudo, reduction="none") * mask).mean()
    return loss, mask.mean()


def client_loss(sup_feat: torch.Tensor, sup_logits_weak: torch.Tensor, sup_logits_strong: torch.Tensor,
                unsup_feat: torch.Tensor, z_weak: torch.Tensor, z_strong: torch.Tensor,
                labels: torch.Tensor | None = None, insdis: float = 0.5, sim: float = 1.0, ulb_weight: float = 0.0,
                threshold: float = 0.95, temperature: float = 0.07,
                normalizer: str = "square") -> tuple[torch.Tensor, dict[str, float]]:
    """One client's Twin-sight objective on a batch (paper Sec. 4; official
    `train_semiFed_model_{labeled,unlabeled}_client_PC`). `sup_feat`, `unsup_feat`: the twins'
    encoder features of the weak views (B, d_s), (B, d_u); `z_*`: the unsupervised twin's
    projections of both views. Labeled client (`labels` given):
    CE(sup_logits_weak, y) + insdis NT-Xent(z_weak, z_strong; temperature) + sim L_np.
    Unlabeled client (`labels=None`): insdis NT-Xent + sim L_np (+ ulb_weight FixMatch on the
    supervised twin's logits when ulb_weight > 0: the official `PC_use_pesudo_label`)."""
    _check_nonneg(insdis=insdis, sim=sim, ulb_weight=ulb_weight)
    _check_threshold(threshold)
    if not temperature > 0:
        raise ValueError(f"temperature must be > 0, got {temperature!r}")
    if z_weak.shape != z_strong.shape:
        raise ValueError(f"the two views' projections differ in shape: {tuple(z_weak.shape)} vs {tuple(z_strong.shape)}")
    ins = info_nce(z_weak, z_strong, temperature)
    np_loss = neighbourhood_loss(unsup_feat, sup_feat, normalizer)
    loss = insdis * ins + sim * np_loss
    logs = {"insdis": float(ins.detach()), "np": float(np_loss.detach())}
    if labels is not None:
        if labels.shape[0] != sup_logits_weak.shape[0]:
            raise ValueError(f"{labels.shape[0]} labels for a batch of {sup_logits_weak.shape[0]}")
        ce = F.cross_entropy(sup_logits_weak, labels)
        loss = loss + ce
        logs["ce"] = float(ce.detach())
    elif ulb_weight > 0:
        fm, rate = fixmatch_loss(sup_logits_weak, sup_logits_strong, threshold)
        loss = loss + ulb_weight * fm
        logs.update(fixmatch=float(fm.detach()), mask_rate=float(rate))
    logs["loss"] = float(loss.detach())
    return loss, logs


def single_loss(logits_weak: torch.Tensor, z_weak: torch.Tensor, z_strong: torch.Tensor,
                labels: torch.Tensor | None = None, insdis: float = 0.5,
                temperature: float = 0.07) -> tuple[torch.Tensor, dict[str, float]]:
    """The single-model paradigm the paper argues against (the `single` ablation row): one
    encoder with a classifier and a projector; CE(logits_weak, y) + insdis NT-Xent on a labeled
    client, insdis NT-Xent alone on an unlabeled one."""
    _check_nonneg(insdis=insdis)
    if not temperature > 0:
        raise ValueError(f"temperature must be > 0, got {temperature!r}")
    ins = info_nce(z_weak, z_strong, temperature)
    loss = insdis * ins
    logs = {"insdis": float(ins.detach())}
    if labels is not None:
        ce = F.cross_entropy(logits_weak, labels)
        loss = loss + ce
        logs["ce"] = float(ce.detach())
    logs["loss"] = float(loss.detach())
    return loss, logs
