"""The stages of a P²OT run as plain functions: features of augmented views from a frozen
encoder, training the cluster head with one pseudo-labelling rule, the k-means baseline,
and the metrics of both on the clustered set and on the test split."""
from __future__ import annotations

import math
import warnings
from functools import partial
from typing import Callable

import torch
import torch.nn.functional as F

import numpy as np

from common.data.transforms import to_float
from common.eval import cluster_metrics
from common.ssl import apply, sample_params
from methods.p2ot.loss import swapped_label_loss
from methods.p2ot.model import ClusterHead, LogitsMemory
from methods.p2ot.transport import logit_cost, rho_schedule, solve_augmented


@torch.no_grad()
def view_features(features_fn: Callable, images: torch.Tensor, views: int, augment, seed: int,
                  batch_size: int = 1024) -> torch.Tensor:
    """(V, N, D) features of `views` augmented copies of uint8 `images` (N, C, H, W).

    features_fn maps float images in [0, 1] (B, C, H, W) to (B, D); `augment` is a
    `common.ssl.Augment` (the ranges `common.ssl.sample_params` draws from). The parameters are
    drawn from a generator seeded with `seed`."""
    gen = torch.Generator().manual_seed(seed)
    out = []
    for _ in range(views):
        chunks = []
        for i in range(0, len(images), batch_size):
            x = to_float(images[i:i + batch_size])
            chunks.append(features_fn(apply(x, sample_params(len(x), augment, generator=gen))).float().cpu())
        out.append(torch.cat(chunks))
    return torch.stack(out)


@torch.no_grad()
def plain_features(features_fn: Callable, images: torch.Tensor, batch_size: int = 1024) -> torch.Tensor:
    """(N, D) features of the un-augmented uint8 images (what evaluation sees)."""
    return torch.cat([features_fn(to_float(images[i:i + batch_size])).float().cpu()
                      for i in range(0, len(images), batch_size)])


def cosine_lr(base_lr: float, epoch: int, epochs: int, decay: float = 0.1) -> float:
    """The official per-epoch cosine schedule, from base_lr down to base_lr · decay³."""
    floor = base_lr * decay ** 3
    return floor + (base_lr - floor) * (1 + math.cos(math.pi * epoch / epochs)) / 2


def train_head(view_feats: torch.Tensor, head: ClusterHead, *, epochs: int = 50, batch_size: int = 512,
               optimizer: Callable[..., torch.optim.Optimizer] | None = None, epsilon: float = 0.1, kl_weight: float = 1.0, rho_start: float = 0.1,
               rho_end: float = 1.0, rho_kind: str = "sigmoid", memory_batches: int = 10, seed: int = 0,
               max_iter: int = 1000, tol: float = 1e-6, warm_start: bool = True) -> tuple[ClusterHead, dict]:
    """Train a fresh ClusterHead (in_dim = D) on cached features (V, N, D) with one pseudo-labelling rule.

    Each step takes a batch of images and two different random views of each, solves the
    transport over the memory of recent logits (from the second epoch on; the first epoch
    solves over the batch alone, as the official code does), and minimises the swapped
    cross-entropy. ρ follows `rho_schedule` per step. Rules of the paper's table:
    SeLa ρ₀ = ρ₁ = 1, λ = ∞; UOT ρ₀ = ρ₁ = 1, λ = 1; POT progressive ρ, λ = ∞; P²OT progressive ρ, λ = 1.
    warm_start: each solve starts from the previous solve's column scaling (as the official
    code does); the stopping rule (row marginals within tol) is the same either way.
    The memory holds min(memory_batches, N // batch_size) batches (never more rows than images).
    Returns the head after the last epoch and a history (per step: loss, rho, label mass,
    mean solver iterations; memory_rows, stalled solves and the worst row error).
    """
    num_views, n, dim = view_feats.shape
    if num_views < 2:
        raise ValueError(f"need at least 2 augmented views per image, got {num_views}")
    steps_per_epoch = n // batch_size
    if steps_per_epoch < 1:
        raise ValueError(f"batch_size {batch_size} is larger than the {n} images")
    total = epochs * steps_per_epoch
    num_clusters = head.head.prototypes.shape[0]
    gen = torch.Generator().manual_seed(seed)
    # the official optimiser (Adam, lr 5e-4, no weight decay) unless the config names another; its lr is
    # the base of the per-epoch cosine schedule
    opt = (optimizer or partial(torch.optim.Adam, lr=5e-4, weight_decay=0.0))(head.parameters())
    lr = opt.defaults["lr"]
    # the memory holds at most the images one epoch visits (whole batches, <= N rows): a larger one
    # would hold some images twice (the official code asserts memory <= data set size)
    memory_rows = min(memory_batches, steps_per_epoch) * batch_size
    memory = LogitsMemory(num_clusters, memory_rows) if memory_batches > 0 else None
    history = {"loss": [], "rho": [], "label_mass": [], "iterations": [], "memory_rows": memory_rows if memory else 0}
    solve = dict(epsilon=epsilon, kl_weight=kl_weight, max_iter=max_iter, tol=tol, warn=False)
    stalled, worst, scaling = 0, 0.0, None
    for epoch in range(epochs):
        for group in opt.param_groups:
            group["lr"] = cosine_lr(lr, epoch, epochs)
        if epoch == 1 and memory is not None:
            fill_memory(head, view_feats[0], memory, batch_size, gen)
        order = torch.randperm(n, generator=gen)
        for i in range(steps_per_epoch):
            step = epoch * steps_per_epoch + i
            rho = rho_schedule(step, total, rho_start, rho_end, rho_kind)
            idx = order[i * batch_size:(i + 1) * batch_size]
            v1 = torch.randint(num_views, (len(idx),), generator=gen)
            v2 = (v1 + torch.randint(1, num_views, (len(idx),), generator=gen)) % num_views
            head.train()
            logits = [head(view_feats[v1, idx]), head(view_feats[v2, idx])]     # 2 x (B, K)
            labels, errors, iterations, scaling = batch_labels(logits, memory if epoch >= 1 else None, rho, solve,
                                                               scaling if warm_start else None, warm_start)
            stalled += sum(e >= tol for e in errors)
            worst = max([worst, *errors])
            loss = swapped_label_loss(logits, labels)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            history["loss"].append(float(loss.detach()))
            history["rho"].append(rho)
            history["label_mass"].append(float(labels[0].sum(1).mean()))
            history["iterations"].append(sum(iterations) / len(iterations))
    history["stalled"], history["worst_row_error"] = stalled, worst
    if stalled:
        warnings.warn(f"{stalled} of {2 * total} P2OT solves stopped at max_iter={max_iter}; worst row "
                      f"error {worst:.3g}", RuntimeWarning, stacklevel=2)
    head.eval()
    return head, history


def batch_labels(logits: list[torch.Tensor], memory: LogitsMemory | None, rho: float, solve: dict,
                 scaling: torch.Tensor | None = None, warm_start: bool = False):
    """Pseudo-labels Y = N·Q (B, K) for each view's logits, solved over the batch alone or over
    the memory after writing the view's logits into it (the second view overwrites the first's
    rows); also each solve's row error and iterations, and the last column scaling. With
    warm_start, each solve starts from the previous one's scaling (the first from `scaling`)."""
    labels, errors, iterations, rows = [], [], [], None
    for lg in logits:
        if memory is None:
            bank = lg
        else:
            if rows is None:
                rows = memory.push(lg)
            else:
                memory.overwrite(rows, lg)
            bank = memory.contents()
        sol = solve_augmented(logit_cost(bank), rho, **solve, init_scaling=scaling)
        scaling = sol.scaling if warm_start else None
        y = (len(bank) * sol.plan[:, :-1]).to(lg.dtype)
        labels.append(y if memory is None else y[rows])
        errors.append(sol.row_error)
        iterations.append(sol.iterations)
    return labels, errors, iterations, sol.scaling


@torch.no_grad()
def fill_memory(head: ClusterHead, feats: torch.Tensor, memory: LogitsMemory, batch_size: int,
                gen: torch.Generator) -> None:
    """Initialise the memory with the current head's logits of random images (eval mode)."""
    head.eval()
    size = memory.logits.shape[0]
    idx = torch.randperm(len(feats), generator=gen)[:size]
    for i in range(0, len(idx), batch_size):
        memory.push(head(feats[idx[i:i + batch_size]]))


@torch.no_grad()
def predict_clusters(head: ClusterHead, feats: torch.Tensor, batch_size: int = 4096) -> torch.Tensor:
    """argmax cluster (N,) of the head's logits on features (N, D)."""
    head.eval()
    return torch.cat([head(feats[i:i + batch_size]).argmax(1) for i in range(0, len(feats), batch_size)])


def kmeans_clusters(train_feats: torch.Tensor, test_feats: torch.Tensor, num_clusters: int, seed: int,
                    n_init: int = 10) -> tuple[torch.Tensor, torch.Tensor]:
    """The baseline: scikit-learn KMeans on L2-normalised features; (train, test) cluster ids."""
    from sklearn.cluster import KMeans

    km = KMeans(num_clusters, n_init=n_init, random_state=seed)
    train = km.fit_predict(F.normalize(train_feats, dim=1).double().numpy())
    test = km.predict(F.normalize(test_feats, dim=1).double().numpy())
    return torch.from_numpy(train).long(), torch.from_numpy(test).long()


def evaluate_clusters(train_pred, train_y, test_pred, test_y, num_classes: int) -> dict[str, float]:
    """acc, macc, nmi, ari, f1 (common.eval.cluster_metrics) on the clustered (long-tailed) set and
    the same with `test_` on the test split; cluster ids and classes must lie in [0, num_classes)."""
    for name, x in (("train_pred", train_pred), ("train_y", train_y), ("test_pred", test_pred), ("test_y", test_y)):
        x = torch.as_tensor(x)
        if x.dim() != 1 or (x.numel() and (int(x.min()) < 0 or int(x.max()) >= num_classes)):
            raise ValueError(f"{name} must be 1-D with values in [0, {num_classes}), got shape {tuple(x.shape)}"
                             + (f" and values in [{int(x.min())}, {int(x.max())}]" if x.numel() else ""))
    metrics = cluster_metrics(train_pred, train_y, num_classes)
    metrics.update({f"test_{k}": v for k, v in cluster_metrics(test_pred, test_y, num_classes).items()})
    return metrics


def sorted_sizes(labels, num_classes: int) -> list[int]:
    """Cluster (or class) sizes, largest first: the figure of predicted vs true sizes."""
    counts = np.bincount(torch.as_tensor(labels).long().numpy(), minlength=num_classes)
    return [int(c) for c in np.sort(counts)[::-1]]
