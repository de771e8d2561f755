"""The three settings of the mini tier: two Gaussian clouds, Fashion-MNIST clients from a
Dirichlet split, and the official "class_clustered" clients (two per pair of classes)."""
from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F

import common.data.mnist_full  # noqa: F401  (registers `mnist` for the paper tier)
from common import data
from common.federated import dirichlet_partition


def gaussian_pair(n_s: int, n_t: int, dim: int, shift: float, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """X_s ~ N(0, I) (n_s, d) and X_t ~ N(shift / sqrt(d) 1, I) (n_t, d): the population W_2 is
    `shift` in every dimension (the official speed experiment's pair)."""
    rng = np.random.default_rng([seed, dim])
    xs = rng.standard_normal((n_s, dim))
    xt = rng.standard_normal((n_t, dim)) + shift / np.sqrt(dim)
    return xs, xt


def pooled_images(ds_cfg, split: str, pool: int) -> tuple[np.ndarray, np.ndarray]:
    """Images / 255, average-pooled by `pool` (28x28 -> 14x14 for pool 2), flattened, float64."""
    images, labels = data.load(ds_cfg.name, split, ds_cfg.root, ds_cfg.download)
    x = images.to(torch.float32) / 255.0
    if pool > 1:
        x = F.avg_pool2d(x, pool)
    return x.flatten(1).double().numpy(), labels.numpy()


def drop_small_classes(x: np.ndarray, y: np.ndarray, min_count: int) -> tuple[np.ndarray, np.ndarray]:
    """A client's samples of the classes it holds at least `min_count` times (a class covariance
    needs two)."""
    classes, counts = np.unique(y, return_counts=True)
    keep = np.isin(y, classes[counts >= min_count])
    return x[keep], y[keep]


def dirichlet_clients(x: np.ndarray, y: np.ndarray, num_images: int, num_clients: int, alpha: float,
                      min_size: int, min_class: int, seed: int) -> list[tuple[np.ndarray, np.ndarray]]:
    """`num_images` images drawn with the seed, split by `dirichlet_partition`, each client's
    tiny classes dropped."""
    pick = np.random.default_rng([seed, 1]).permutation(len(y))[:num_images]
    xs, ys = x[pick], y[pick]
    parts = dirichlet_partition(ys, num_clients, alpha, seed, min_size=min_size)
    return [drop_small_classes(xs[p.numpy()], ys[p.numpy()], min_class) for p in parts]


def class_pair_clients(train: tuple[np.ndarray, np.ndarray], test: tuple[np.ndarray, np.ndarray],
                       pairs: list[list[int]], clients_per_pair: int, n_train: int, n_test: int,
                       seed: int, eval_split: str = "test") -> tuple[list[dict], np.ndarray]:
    """Per pair of classes, `clients_per_pair` clients, each with `n_train` training and `n_test`
    evaluation images of that pair (disjoint, drawn with the seed): from the test split, or with
    `eval_split="val"` from training images no client trains on (the pilot's split). Returns the
    clients ({x, y, x_test, y_test}) and their true cluster (the pair's index)."""
    if eval_split not in ("test", "val"):
        raise ValueError(f"eval_split must be test or val, got {eval_split!r}")
    if eval_split == "val":
        test = train
    rng = np.random.default_rng([seed, 2])
    clients, truth = [], []
    for p, classes in enumerate(pairs):
        tr = rng.permutation(np.flatnonzero(np.isin(train[1], classes)))
        te = rng.permutation(np.flatnonzero(np.isin(test[1], classes)))
        if eval_split == "val":   # the images after the clients' training images
            te = tr[clients_per_pair * n_train:]
        if len(tr) < clients_per_pair * n_train or len(te) < clients_per_pair * n_test:
            raise ValueError(f"classes {classes} have {len(tr)} training / {len(te)} test images, fewer than "
                             f"{clients_per_pair} clients x ({n_train}, {n_test})")
        for k in range(clients_per_pair):
            i = tr[k * n_train:(k + 1) * n_train]
            j = te[k * n_test:(k + 1) * n_test]
            clients.append({"x": train[0][i], "y": train[1][i], "x_test": test[0][j], "y_test": test[1][j]})
            truth.append(p)
    return clients, np.asarray(truth)
