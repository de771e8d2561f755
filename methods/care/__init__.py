"""CARE: Contrastive Augmentation-induced Rotational Equivariance (ICLR 2024). See README.md."""
from __future__ import annotations

import torch
import torch.nn.functional as F

from common.ssl import AugParams, apply, run_contrastive, sample_params, to_float
from methods.care.loss import care_loss, equivariance_loss
from methods.care.metrics import relative_equivariance, sensitivity_r2, wahba_error
from methods.care.model import CARE, chunk_params


@torch.no_grad()
def equivariance_metrics(model: CARE, splits, device, cfg) -> dict[str, float]:
    """W_f and γ_f over `cfg.num_augs` fixed augmentations of held-out images, and the R² of
    predicting the brightness factor from the embedding (all on the unit-sphere embedding)."""
    def embed(x):
        return torch.cat([F.normalize(model.embed(x[i:i + 512].to(device)), dim=1).cpu()
                          for i in range(0, len(x), 512)]).double()

    x = to_float(splits["test"][0][: cfg.num_images])
    gen = torch.Generator().manual_seed(cfg.seed)
    augs = sample_params(cfg.num_augs, model.cfg.augment, generator=gen)
    F0 = embed(x)
    F_augs = torch.stack([embed(apply(x, augs[a].repeat_interleave(len(x)))) for a in range(cfg.num_augs)])

    def brightness_set(images, offset):
        xb = to_float(images)
        p = AugParams.identity(len(xb))
        g = torch.Generator().manual_seed(cfg.seed + offset)
        p.brightness = 1 + model.cfg.augment.brightness * (2 * torch.rand(len(xb), generator=g) - 1)
        return embed(apply(xb, p)).float(), p.brightness

    tr_z, tr_t = brightness_set(splits["eval_train"][0][: cfg.sensitivity_train], 1)
    te_z, te_t = brightness_set(splits["test"][0][: cfg.sensitivity_test], 2)
    return {"wahba_error": sum(wahba_error(F0, Fa) for Fa in F_augs) / cfg.num_augs,
            "rel_equivariance": relative_equivariance(F0, F_augs),
            "sensitivity_r2": sensitivity_r2(tr_z, tr_t, te_z, te_t)}


def run(cfg) -> dict[str, float]:
    """SimCLR pre-training plus λ·L_equi, then probe/kNN accuracy and the equivariance metrics."""
    return run_contrastive(cfg, CARE, lambda m, s, d: equivariance_metrics(m, s, d, cfg.method.eval))


__all__ = ["CARE", "care_loss", "chunk_params", "equivariance_loss", "equivariance_metrics",
           "relative_equivariance", "run", "sensitivity_r2", "wahba_error"]
