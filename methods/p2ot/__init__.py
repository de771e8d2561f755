"""P²OT: progressive partial optimal transport for deep imbalanced clustering (ICLR 2024).
See README.md. A run has stages of its own, called in order from `run`: SimCLR pre-training of
the encoder (the shared Trainer, stage `encoder`), features of augmented views of a long-tailed
set, then k-means and one cluster head per pseudo-labelling rule on the same features."""
from __future__ import annotations

import json
import math

import torch
from hydra.utils import instantiate
from omegaconf import OmegaConf
from torch import nn

from common import data as datasets
from common.eval import cluster_metrics
from methods.p2ot.encoder import SupervisedNet, cache_key, cached_model, encoder_knn
from methods.p2ot.data import long_tailed_counts, long_tailed_indices
from methods.p2ot.loss import soft_cross_entropy, swapped_label_loss
from methods.p2ot.model import ClusterHead, CosineHead, LogitsMemory
from methods.p2ot.stages import (evaluate_clusters, kmeans_clusters, plain_features, predict_clusters,
                                 sorted_sizes, train_head, view_features)
from methods.p2ot.transport import (AugmentedSolution, p2ot_objective, pseudo_labels, rho_schedule,
                                    solve_augmented, solve_p2ot)


def build_encoder(cfg) -> nn.Module:
    """The SimCLR encoder model (backbone + projector) from the config, initialised from the global RNG."""
    encoder, feat_dim = instantiate(cfg.method.backbone, in_chans=cfg.dataset.in_chans, img_size=cfg.dataset.img_size)
    return instantiate(cfg.method.encoder, encoder=encoder, feat_dim=feat_dim)


def build_reference(cfg) -> SupervisedNet:
    """The supervised reference (the encoder's backbone + a linear classifier), initialised from the global RNG."""
    encoder, feat_dim = instantiate(cfg.method.backbone, in_chans=cfg.dataset.in_chans, img_size=cfg.dataset.img_size)
    return SupervisedNet(encoder, feat_dim, int(cfg.dataset.num_classes))


def build(cfg) -> nn.ModuleDict:
    """The models from the config alone: the SimCLR encoder model and one cluster head. (`run`
    builds its encoder inside `pretrain_encoder`, under the cache seed, and its heads per rule.)"""
    encoder, feat_dim = instantiate(cfg.method.backbone, in_chans=cfg.dataset.in_chans, img_size=cfg.dataset.img_size)
    return nn.ModuleDict({"encoder": instantiate(cfg.method.encoder, encoder=encoder, feat_dim=feat_dim),
                          "head": instantiate(cfg.method.head, in_dim=feat_dim, num_clusters=cfg.dataset.num_classes)})


def pretrain_encoder(cfg, ctx, images: torch.Tensor, knn_data: tuple) -> tuple[nn.Module, dict]:
    """SimCLR on the balanced train images (uint8), the run's `trainer` recipe, pre-trained once
    with `method.encoder_cache.seed` and cached (`encoder.cached_model`: the model is built AND
    trained under that seed, so the weights do not depend on the run that builds the cache); every
    run with the same encoder settings loads the same weights. Returns the model frozen and
    {knn_acc, steps, cached}."""
    c = cfg.method.encoder_cache
    key = cache_key(cfg.method.backbone, cfg.method.encoder, cfg.trainer, cfg.dataset.name, cfg.dataset.train_size,
                    c.seed, c.knn)
    sampler = ctx.sampler(len(images), seed=int(c.seed))
    return cached_model(ctx, lambda: build_encoder(cfg), key, c.dir, "encoder",
                        lambda step: images[sampler(step)].to(ctx.device), int(c.seed),
                        evaluate=lambda mdl: {"knn_acc": encoder_knn(mdl, *knn_data, **c.knn)})


def supervised_reference(cfg, ctx, images: torch.Tensor, labels: torch.Tensor,
                         knn_data: tuple) -> tuple[nn.Module, dict]:
    """A supervised SmallCNN (the encoder's architecture, cross-entropy on the same balanced train
    images and labels, `method.reference` steps), trained once and cached: what the SimCLR features
    are measured against, and the features clustered under `method.features: supervised`.
    Returns the model, frozen, and {knn_acc, steps, cached}."""
    c, r = cfg.method.encoder_cache, cfg.method.reference
    trainer_cfg = OmegaConf.merge(cfg.trainer, {"max_steps": r.steps, "ckpt_every": r.steps,
                                                "optimizer": OmegaConf.to_container(r.optimizer)})
    key = cache_key(cfg.method.backbone, trainer_cfg, cfg.dataset.name, cfg.dataset.train_size, c.seed, c.knn)
    sampler = ctx.sampler(len(images), seed=int(c.seed))
    batch_fn = lambda step: (images[sampler(step)].to(ctx.device), labels[sampler(step)].to(ctx.device))  # noqa: E731
    return cached_model(ctx, lambda: build_reference(cfg), key, c.dir, "supervised", batch_fn, int(c.seed), trainer_cfg,
                        evaluate=lambda mdl: {"knn_acc": encoder_knn(mdl, *knn_data, **c.knn)})


FEATURES = ("simclr", "supervised")


def check_features(features: str, reference_steps: int) -> None:
    """`method.features`: which cached model's frozen features are clustered."""
    if features not in FEATURES:
        raise ValueError(f"method.features must be one of {FEATURES}, got '{features}'")
    if features == "supervised" and reference_steps <= 0:
        raise ValueError("method.features=supervised clusters the supervised reference's features: "
                         f"method.reference.steps must be > 0, got {reference_steps}")


def clustered_pool(num_images: int, split: str, val_size: int) -> torch.LongTensor:
    """Indices of the train images the long-tailed set is drawn from: a fixed permutation (seed 0)
    of the train split, its first `val_size` images for split 'val' (tuning), the rest for 'train'.
    val_size 0: no tuning pool, 'train' is the whole split (the paper tier: CIFAR-100-LT needs all
    500 images of its head class)."""
    if split not in ("train", "val"):
        raise ValueError(f"method.cluster_split must be 'train' or 'val', got '{split}'")
    if val_size == 0 and split == "train":
        return torch.arange(num_images)
    if not 0 < val_size < num_images:
        raise ValueError(f"method.val_size must be in (0, {num_images}) (0: no tuning pool, split 'train' "
                         f"only), got {val_size} with split '{split}'")
    perm = torch.randperm(num_images, generator=torch.Generator().manual_seed(0))
    return (perm[:val_size] if split == "val" else perm[val_size:]).sort().values


def run(cfg, ctx) -> dict[str, float]:
    """Metrics `<row>/<metric>` for k-means, the untrained head (`untrained`: the seeded start of
    every rule, not trained; the unlearned control) and every rule of `method.rules` (sela, uot, pot,
    p2ot), all on the same frozen features (`method.features`: the cached SimCLR encoder's, or the
    cached supervised reference's): acc, macc, nmi, ari, f1 on the long-tailed set
    (drawn from the `method.cluster_split` part of the train split), the same with `test_` on the
    balanced test split; `encoder/knn_acc` and `supervised/knn_acc` (the cached encoders)."""
    m, k = cfg.method, int(cfg.dataset.num_classes)
    check_features(m.features, int(m.reference.steps))
    splits = datasets.image_splits(cfg.dataset)
    train_x, train_y = datasets.load(cfg.dataset.name, "train", cfg.dataset.root, cfg.dataset.download)
    test_x, test_y = splits["test"]
    pool = clustered_pool(len(train_y), m.cluster_split, m.val_size)
    lt = pool[long_tailed_indices(train_y[pool], m.imbalance_ratio, m.max_per_class, ctx.seed)]
    lt_x, lt_y = train_x[lt], train_y[lt]

    knn_data = (splits["eval_train"], splits["test"])
    encoder, enc_info = pretrain_encoder(cfg, ctx, splits["train"][0], knn_data)
    metrics = {"encoder/knn_acc": enc_info["knn_acc"]}
    if m.reference.steps > 0:
        reference, ref_info = supervised_reference(cfg, ctx, *splits["train"], knn_data)
        metrics["supervised/knn_acc"] = ref_info["knn_acc"]
        if m.features == "supervised":   # the stronger frozen features (README, Deviations)
            encoder = reference
    features = lambda x: encoder.features(x.to(ctx.device)).cpu()  # noqa: E731  uint8 -> (B, D)
    views = view_features(features, lt_x, m.views, instantiate(m.encoder.augment), ctx.seed, m.feature_batch_size)
    lt_feats = plain_features(features, lt_x, m.feature_batch_size)
    test_feats = plain_features(features, test_x, m.feature_batch_size)

    sizes, curves = {"classes": sorted_sizes(lt_y, k)}, {}
    km_train, km_test = kmeans_clusters(lt_feats, test_feats, k, ctx.seed, m.kmeans_n_init)
    metrics |= {f"kmeans/{n}": v for n, v in evaluate_clusters(km_train, lt_y, km_test, test_y, k).items()}
    sizes["kmeans"] = sorted_sizes(km_train, k)
    # the unlearned control (`untrained`): the head every rule starts from (the same seed), not trained;
    # clusters by the argmax of its initial logits. A rule that learned nothing scores like this row.
    torch.manual_seed(ctx.seed)
    head0 = instantiate(m.head, in_dim=views.shape[-1], num_clusters=k)
    pred0 = predict_clusters(head0, lt_feats)
    metrics |= {f"untrained/{n}": v for n, v in
                evaluate_clusters(pred0, lt_y, predict_clusters(head0, test_feats), test_y, k).items()}
    metrics["untrained/empty_clusters"] = float(sum(s == 0 for s in sorted_sizes(pred0, k)))
    sizes["untrained"] = sorted_sizes(pred0, k)
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
        metrics[f"{row}/stalled_solves"] = float(history["stalled"])
        metrics[f"{row}/empty_clusters"] = float(sum(s == 0 for s in sorted_sizes(pred, k)))
        sizes[row] = sorted_sizes(pred, k)
        curves[row] = {"loss": history["loss"], "rho": history["rho"], "memory_rows": history["memory_rows"]}
    if ctx.hw.is_main:   # the figure's data: predicted cluster sizes vs true class sizes, sorted; loss curves
        (ctx.run_dir / "cluster_sizes.json").write_text(json.dumps(sizes, indent=1) + "\n")
        (ctx.run_dir / "head_curves.json").write_text(json.dumps(curves) + "\n")
    return {name: float(v) for name, v in metrics.items() if math.isfinite(v)}


__all__ = ["AugmentedSolution", "ClusterHead", "CosineHead", "LogitsMemory", "FEATURES", "SupervisedNet", "build", "cached_model", "check_features", "cluster_metrics", "clustered_pool",
           "evaluate_clusters", "kmeans_clusters", "long_tailed_counts", "long_tailed_indices", "p2ot_objective",
           "plain_features", "predict_clusters", "pretrain_encoder", "pseudo_labels", "supervised_reference", "rho_schedule", "run",
           "soft_cross_entropy", "solve_augmented", "solve_p2ot", "sorted_sizes", "swapped_label_loss",
           "train_head", "view_features"]
