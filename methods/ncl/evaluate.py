"""What NCL measures after training, beside the shared probe/kNN of common.tasks.contrastive:
the interpretability metrics of z on held-out images, SEPIN@k, the official feature-selection
probes, and the top-activation figure. Knobs come from `method.metrics` and `eval:` (ssl)."""
from __future__ import annotations

from pathlib import Path

import torch
import torch.nn.functional as F

from common.data.transforms import to_float
from common.eval import extract, linear_probe
from common.ssl import apply, sample_params
from methods.ncl.loss import nonneg
from methods.ncl.metrics import (class_consistency, class_consistency_pos, effective_rank, orthogonality,
                                 orthogonality_corr, sepin_at_k, sparsity, top_dimensions)
from methods.ncl.model import NCL, NonNegClassifier
from methods.ncl.plots import top_activation_grid


def feature_metrics(z: torch.Tensor, labels: torch.Tensor, eps: float) -> dict[str, float]:
    """The official statistics on F.normalize(z) (what solo/methods/simclr.py logs), and ours beside."""
    zn = F.normalize(z, dim=1)
    return {"sparsity": sparsity(zn, eps), "class_consistency": class_consistency(zn, labels, eps),
            "class_consistency_pos": class_consistency_pos(zn, labels, eps),
            "orthogonality": orthogonality(zn), "orthogonality_corr": orthogonality_corr(z),
            "effective_rank": effective_rank(zn)}


def augmented_pair(model: NCL, images: torch.Tensor, seed: int, batch_size: int, device):
    """z of two augmentations of each image, drawn from the model's own `augment` ranges with a
    fixed generator, so every model is measured on the same views. Returns two (N, K) tensors."""
    g = torch.Generator().manual_seed(seed)
    x = to_float(images)
    views = [apply(x, sample_params(len(x), model.augment, generator=g)) for _ in range(2)]
    return tuple(extract(model.embed, v, batch_size, device) for v in views)


@torch.no_grad()
def interpretability(model: NCL, fit: tuple, score: tuple, eval_cfg, device, seed: int, run_dir: Path, *, eps: float,
                     select_k, sepin_k, sepin_images: int, views_seed: int, figure_dims: int) -> dict[str, float]:
    """Metrics of z on the `score` images (test, or validation), SEPIN@k on `sepin_images` of them,
    and `top{k}_acc`: the official selection probe (dimensions ranked on the `fit` images, a linear
    probe on the projector output *before* σ₊ restricted to them, as main_linear.py's selected_dims does)."""
    bs = eval_cfg.batch_size
    (x_tr, y_tr), (x_te, y_te) = fit, score
    p_tr = extract(model.projection, x_tr, bs, device)                        # (N_tr, K), before σ₊
    p_te = extract(model.projection, x_te, bs, device)
    z_te = nonneg(p_te, model.nonneg_kind)
    out = feature_metrics(z_te, y_te, eps)
    for k in select_k:
        dims = top_dimensions(p_tr, k)
        out[f"top{k}_acc"] = linear_probe(p_tr[:, dims], y_tr, p_te[:, dims], y_te, max_iter=eval_cfg.probe.max_iter,
                                          C=eval_cfg.probe.C, seed=seed)
    z1, z2 = augmented_pair(model, x_te[:sepin_images], views_seed, bs, device)
    out.update({f"sepin{k}": v for k, v in sepin_at_k(z1, z2, sepin_k, model.temperature).items()})
    top_activation_grid(z_te, x_te, y_te, run_dir / "top_activations.png", top_dimensions(z_te, figure_dims),
                        title=f"nonneg={model.nonneg_kind}: top images per dimension")
    return out


@torch.no_grad()
def supervised_metrics(model: NonNegClassifier, test: tuple, batch_size: int, device, eps: float) -> dict[str, float]:
    """The same statistics on the classifier's penultimate features σ₊(h) of the test images."""
    x, y = test
    return feature_metrics(extract(model.features, x, batch_size, device), y, eps)

