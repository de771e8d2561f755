"""P²OT: progressive partial optimal transport for deep imbalanced clustering (ICLR 2024).
See README.md. A run has stages of its own, called in order from `run`: SimCLR pre-training of
the encoder (the shared Trainer, stage `encoder`), features of augmented views of a long-tailed
set, then k-means and one cluster head per pseudo-labelling rule on the same features."""
from __future__ import annotations

import json
import math

import torch
from hydra.utils import instantiate
from torch import nn

from common import data as datasets
from common.eval import cluster_metrics
from methods.p2ot.data import long_tailed_counts, long_tailed_indices
from methods.p2ot.loss import soft_cross_entropy, swapped_label_loss
from methods.p2ot.model import ClusterHead, CosineHead, LogitsMemory
from methods.p2ot.stages import (evaluate_clusters, kmeans_clusters, plain_features, predict_clusters,
                                 sorted_sizes, train_head, view_features)
from methods.p2ot.transport import (AugmentedSolution, p2ot_objective, pseudo_labels, rho_schedule,
                                    solve_augmented, solve_p2ot)


def build(cfg) -> nn.ModuleDict:
    """The models from the config alone: the SimCLR encoder model and one cluster head."""
    encoder, feat_dim = instantiate(cfg.method.backbone, in_chans=cfg.dataset.in_chans, img_size=cfg.dataset.img_size)
    return nn.ModuleDict({"encoder": instantiate(cfg.method.encoder, encoder=encoder, feat_dim=feat_dim),
                          "head": instantiate(cfg.method.head, in_dim=feat_dim, num_clusters=cfg.dataset.num_classes)})


def pretrain_encoder(ctx, model: nn.Module, images: torch.Tensor) -> nn.Module:
    """SimCLR on the balanced train images (uint8), the run's `trainer` recipe, stage `encoder`
    (its own checkpoint: resume=true skips a finished pre-training). Returns the model frozen."""
    model.to(ctx.device)
    sampler = ctx.sampler(len(images))
    trainer = ctx.trainer(model, lambda step: images[sampler(step)].to(ctx.device), stage="encoder")
    trainer.fit(resume=ctx.resume)
    ctx.last_step = max(ctx.last_step, trainer.step)
    model.eval().requires_grad_(False)
    return model


def run(cfg, ctx) -> dict[str, float]:
    """Metrics `<row>/<metric>` for k-means and every rule of `method.rules` (sela, uot, pot,
    p2ot), all on the same frozen features: acc, macc, nmi, ari, f1 on the long-tailed train set,
    the same with `test_` on the balanced test split."""
    m, k = cfg.method, int(cfg.dataset.num_classes)
    splits = datasets.image_splits(cfg.dataset)
    train_x, train_y = datasets.load(cfg.dataset.name, "train", cfg.dataset.root, cfg.dataset.download)
    test_x, test_y = splits["test"]
    lt = long_tailed_indices(train_y, m.imbalance_ratio, m.max_per_class, ctx.seed)
    lt_x, lt_y = train_x[lt], train_y[lt]

    models = build(cfg)
    torch.manual_seed(ctx.seed)
    encoder = pretrain_encoder(ctx, models["encoder"], splits["train"][0])
    features = lambda x: encoder.features(x.to(ctx.device)).cpu()  # noqa: E731  float [0, 1] -> (B, D)
    views = view_features(features, lt_x, m.views, instantiate(m.encoder.augment), ctx.seed, m.feature_batch_size)
    lt_feats = plain_features(features, lt_x, m.feature_batch_size)
    test_feats = plain_features(features, test_x, m.feature_batch_size)

    metrics, sizes = {}, {"classes": sorted_sizes(lt_y, k)}
    km_train, km_test = kmeans_clusters(lt_feats, test_feats, k, ctx.seed, m.kmeans_n_init)
    metrics |= {f"kmeans/{n}": v for n, v in evaluate_clusters(km_train, lt_y, km_test, test_y, k).items()}
    sizes["kmeans"] = sorted_sizes(km_train, k)
    for row, rule in m.rules.items():
        torch.manual_seed(ctx.seed)   # every rule starts from the same head
        head = instantiate(m.head, in_dim=views.shape[-1], num_clusters=k)
        loop = {k: v for k, v in m.clustering.items() if k != "optimizer"}
        head, history = train_head(views, head, **loop, optimizer=instantiate(m.clustering.optimizer),
                                   rho_start=rule.rho_start, rho_end=rule.rho_end, kl_weight=float(rule.kl_weight),
                                   seed=ctx.seed)
        pred = predict_clusters(head, lt_feats)
        metrics |= {f"{row}/{n}": v for n, v in
                    evaluate_clusters(pred, lt_y, predict_clusters(head, test_feats), test_y, k).items()}
        metrics[f"{row}/solver_iterations"] = sum(history["iterations"]) / len(history["iterations"])
        sizes[row] = sorted_sizes(pred, k)
    if ctx.hw.is_main:   # the figure's data: predicted cluster sizes vs true class sizes, sorted
        (ctx.run_dir / "cluster_sizes.json").write_text(json.dumps(sizes, indent=1) + "\n")
    return {name: float(v) for name, v in metrics.items() if math.isfinite(v)}


__all__ = ["AugmentedSolution", "ClusterHead", "CosineHead", "LogitsMemory", "build", "cluster_metrics",
           "evaluate_clusters", "kmeans_clusters", "long_tailed_counts", "long_tailed_indices", "p2ot_objective",
           "plain_features", "predict_clusters", "pretrain_encoder", "pseudo_labels", "rho_schedule", "run",
           "soft_cross_entropy", "solve_augmented", "solve_p2ot", "sorted_sizes", "swapped_label_loss",
           "train_head", "view_features"]
