"""The mini tier's tasks: a seeded training pool split among clients by the floor's
`dirichlet_partition`, and a fixed evaluation set (test images, or with `eval_split: val`
training images no client holds: the pilot's split).

  fashion_mnist  28x28 images, (x/255 - 0.1307) / 0.3081 (the official MNIST/FMNIST transform);
                 mnist, cifar10, cifar100 (the paper tier) with the official means and stds, no augmentation
  satellite      mlbench Satellite (Debian r-cran-mlbench): 36 features, 6 classes; a fixed
                 split (default_rng(0)) of 2,000 test rows; standardised by the pool's mean/std
  digits         sklearn digits (the fixed 80/20 split of common.data), pixels / 16, flattened
"""
from __future__ import annotations

import functools
from pathlib import Path

import numpy as np
import torch

from common import data
from common.federated import dirichlet_partition

# per-channel (mean, std) of the official transforms (src/utils.py get_dataset)
IMAGE_NORM = {"fashion_mnist": ((0.1307,), (0.3081,)), "mnist": ((0.1307,), (0.3081,)),
              "cifar10": ((0.4914, 0.4822, 0.4465), (0.2023, 0.1994, 0.2010)),
              "cifar100": ((0.507, 0.487, 0.441), (0.267, 0.256, 0.276))}
SOURCES = ("satellite", "digits") + tuple(IMAGE_NORM)
SAT_TEST = 2000


@functools.lru_cache(maxsize=None)
def satellite_table(root: str, download: bool) -> tuple[np.ndarray, np.ndarray]:
    """(x (6435, 36) float64, y int64 in 0..5 by the factor's level order)."""
    import rdata

    from common.data.tabular import mlbench_folder

    folder = mlbench_folder(Path(root), ["Satellite.rda"], download)
    (df,) = rdata.read_rda(folder / "Satellite.rda", default_encoding="ASCII").values()
    x = np.stack([df[c].to_numpy(dtype=np.float64) for c in df.columns if c != "classes"], axis=1)
    return x, df["classes"].cat.codes.to_numpy().astype(np.int64)


def _source(name: str, root: str, download: bool) -> tuple[tuple, tuple]:
    """((x_train, y_train), (x_test, y_test)) as float32 / int64 tensors before normalisation."""
    if name == "satellite":
        x, y = satellite_table(str(root), bool(download))
        order = np.random.default_rng(0).permutation(len(y))
        te, tr = order[:SAT_TEST], order[SAT_TEST:]
        t = lambda a: torch.from_numpy(np.ascontiguousarray(a))   # noqa: E731
        return (t(x[tr]).float(), t(y[tr])), (t(x[te]).float(), t(y[te]))
    if name == "mnist":
        import common.data.mnist_full  # noqa: F401  (registers `mnist`)
    if name in IMAGE_NORM or name == "digits":
        out = []
        for split in ("train", "test"):
            images, labels = data.load(name, split, root, download)
            x = images.to(torch.float32) / 255.0
            if name in IMAGE_NORM:
                mean, std = (torch.tensor(v).view(1, -1, 1, 1) for v in IMAGE_NORM[name])
                x = (x - mean) / std
            else:
                x = x.flatten(1)
            out.append((x, labels.long()))
        return out[0], out[1]
    raise ValueError(f"unknown task source {name!r}; one of {', '.join(SOURCES)}")


def resample_parts(parts: list[torch.Tensor], per_client: int, seed: int) -> list[torch.Tensor]:
    """Each non-empty client part redrawn to `per_client` indices with replacement
    (default_rng([seed, 42, k]).integers), sorted; an empty part stays empty. The official
    `dirichlet_sampler_idsize` gives every client 500 images drawn with replacement."""
    if per_client < 1:
        raise ValueError(f"per_client must be >= 1, got {per_client}")
    out = []
    for k, part in enumerate(parts):
        if len(part) == 0:
            out.append(part)
            continue
        pick = np.random.default_rng([seed, 42, k]).integers(0, len(part), per_client)
        out.append(part[torch.from_numpy(pick)].sort().values)
    return out


def make_task(source: str, alpha: float, pool: int, eval_size: int, num_clients: int, min_size: int, seed: int,
              root: str = "data", download: bool = False, eval_split: str = "test",
              per_client: int | None = None) -> dict:
    """{x, y (the pool), parts (one index tensor per client), x_eval, y_eval}. The pool: the first
    `pool` training rows of default_rng([seed, 41]).permutation; `val` evaluates on the next
    `eval_size` rows of that permutation, `test` on the first `eval_size` test rows of
    default_rng(1).permutation (the same for every seed). `per_client`: each client's part of the
    pool redrawn to that many images with replacement (`resample_parts`)."""
    if eval_split not in ("test", "val"):
        raise ValueError(f"eval_split must be test or val, got {eval_split!r}")
    (xtr, ytr), (xte, yte) = _source(source, root, download)
    order = torch.from_numpy(np.random.default_rng([seed, 41]).permutation(len(ytr)))
    if pool < num_clients or pool > len(ytr):
        raise ValueError(f"pool={pool} must be in [{num_clients}, {len(ytr)}] for {source}")
    idx = order[:pool]
    x, y = xtr[idx], ytr[idx]
    if eval_split == "val":
        ev = order[pool:pool + eval_size]
        x_eval, y_eval = xtr[ev], ytr[ev]
    else:
        ev = torch.from_numpy(np.random.default_rng(1).permutation(len(yte))[:eval_size])
        x_eval, y_eval = xte[ev], yte[ev]
    if len(y_eval) == 0:
        raise ValueError(f"{source}: no evaluation rows left for eval_split={eval_split} with pool={pool}")
    if source == "satellite":
        mean, std = x.mean(0), x.std(0).clamp_min(1e-8)
        x, x_eval = (x - mean) / std, (x_eval - mean) / std
    parts = dirichlet_partition(y, num_clients, alpha, seed, min_size=min_size)
    if per_client is not None:
        parts = resample_parts(parts, int(per_client), seed)
    return {"x": x, "y": y, "parts": parts, "x_eval": x_eval, "y_eval": y_eval,
            "num_classes": int(max(int(ytr.max()), int(yte.max())) + 1)}
