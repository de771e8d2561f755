"""NCL: Non-negative Contrastive Learning (ICLR 2024), and its supervised analogue NCE. See README.md."""
from __future__ import annotations

from pathlib import Path

import torch

from common import data, runner
from common.nn import build_backbone
from common.ssl import extract, linear_probe, run_contrastive, to_float
from common.trainer import Trainer
from methods.ncl.loss import nonneg
from methods.ncl.metrics import class_consistency, effective_rank, orthogonality, sparsity, top_dimensions
from methods.ncl.model import NCL, NonNegClassifier
from methods.ncl.plots import top_activation_grid


def feature_metrics(z_test: torch.Tensor, y_test: torch.Tensor) -> dict[str, float]:
    return {"sparsity": sparsity(z_test), "class_consistency": class_consistency(z_test, y_test),
            "orthogonality": orthogonality(z_test), "effective_rank": effective_rank(z_test)}


@torch.no_grad()
def interpretability(model: NCL, splits, device, cfg) -> dict[str, float]:
    """Metrics on the (non-negative) projector output z of held-out images, feature-selection
    probes on the top-k dimensions, and the top-activation figure in the run dir."""
    def z_of(images):
        return extract(lambda x: model.project(model.encoder(model.normalize(to_float(x)))), images, device=device)

    z_tr, z_te = z_of(splits["eval_train"][0]), z_of(splits["test"][0])
    y_tr, y_te = splits["eval_train"][1], splits["test"][1]
    out = feature_metrics(z_te, y_te)
    for k in cfg.method.select_k:
        dims = top_dimensions(z_tr, k)
        out[f"top{k}_acc"] = linear_probe(z_tr[:, dims], y_tr, z_te[:, dims], y_te, seed=cfg.seed)
    top_activation_grid(z_te, splits["test"][0], y_te, Path(cfg.run_dir) / "top_activations.png",
                        top_dimensions(z_tr, 6), title=f"nonneg={cfg.method.nonneg}: top images per dimension")
    return out


def run_supervised(cfg) -> dict[str, float]:
    """CE vs NCE (method.nonneg != none): a classifier on the train split, test accuracy and
    the interpretability metrics of its penultimate features."""
    ctx = runner.start(cfg)
    splits = data.image_splits(cfg.dataset)
    encoder, feat_dim = build_backbone(cfg.method.backbone, cfg.dataset.in_chans, cfg.dataset.img_size)
    model = NonNegClassifier(encoder, feat_dim, cfg.method.proj_dim, cfg.dataset.num_classes,
                             nonneg_features=cfg.method.nonneg != "none")
    x, y = splits["train"]
    sampler = data.StepSampler(len(x), cfg.trainer.batch_size, cfg.seed, ctx.hw.rank, ctx.hw.world_size)
    trainer = Trainer(model, cfg.trainer, ctx.hw, ctx.run_dir, ctx.logger,
                      batch_fn=lambda s: (x[sampler(s)].to(ctx.hw.device), y[sampler(s)].to(ctx.hw.device)))
    trainer.fit(resume=cfg.resume)
    model.eval()
    te_x, te_y = splits["test"]
    with torch.no_grad():
        logits = extract(model, te_x, device=ctx.hw.device)
        feats = extract(model.features, te_x, device=ctx.hw.device)
    metrics = {"test_acc": float(100 * (logits.argmax(1) == te_y).float().mean()), **feature_metrics(feats, te_y)}
    ctx.logger.log(metrics, trainer.step)
    ctx.logger.close()
    return metrics


def run(cfg) -> dict[str, float]:
    if cfg.method.mode == "supervised":
        return run_supervised(cfg)
    return run_contrastive(cfg, NCL, lambda m, s, d: interpretability(m, s, d, cfg))


__all__ = ["NCL", "NonNegClassifier", "nonneg", "run", "sparsity", "class_consistency", "orthogonality",
           "effective_rank"]
