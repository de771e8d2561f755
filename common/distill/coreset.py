"""Coreset baselines of equal size (DC-BENCH): k-means centres' nearest samples and herding."""
from __future__ import annotations

import numpy as np
import torch


def _groups(features, labels, per_class: int):
    f = np.asarray(torch.as_tensor(features).detach().cpu().double().numpy())
    if f.ndim != 2:
        raise ValueError(f"features must be 2-D (n, d), got shape {f.shape}")
    if per_class < 1:
        raise ValueError(f"per_class must be >= 1, got {per_class}")
    if labels is None:
        groups = [("all", np.arange(len(f)))]
    else:
        lab = np.asarray(torch.as_tensor(labels).cpu().numpy())
        if len(lab) != len(f):
            raise ValueError(f"features and labels differ in length: {len(f)} vs {len(lab)}")
        groups = [(c, np.flatnonzero(lab == c)) for c in np.unique(lab)]
    for c, members in groups:
        if len(members) < per_class:
            raise ValueError(f"class {c} has {len(members)} samples, fewer than per_class = {per_class}")
    return f, groups


def kmeans_coreset(features, labels, per_class: int, seed: int) -> torch.Tensor:
    """Per class (labels None: the whole set) sklearn KMeans(per_class, n_init=10, random_state=seed);
    per centroid, the nearest sample not yet taken. int64 indices, class c in rows c*k ..."""
    from sklearn.cluster import KMeans

    f, groups = _groups(features, labels, per_class)
    out = []
    for _, members in groups:
        km = KMeans(n_clusters=per_class, n_init=10, random_state=seed).fit(f[members])
        used: set[int] = set()
        for centre in km.cluster_centers_:
            dist = ((f[members] - centre) ** 2).sum(1)
            for j in np.argsort(dist, kind="stable"):
                if int(j) not in used:
                    used.add(int(j))
                    out.append(int(members[j]))
                    break
    return torch.tensor(out, dtype=torch.int64)


def herding_coreset(features, labels, per_class: int) -> torch.Tensor:
    """Per group, greedily the sample whose addition brings the chosen mean closest to the group mean."""
    f, groups = _groups(features, labels, per_class)
    out = []
    for _, members in groups:
        g = f[members]
        mu = g.mean(0)
        total = np.zeros_like(mu)
        free = np.ones(len(g), dtype=bool)
        for t in range(1, per_class + 1):
            dist = (((total + g) / t - mu) ** 2).sum(1)
            dist[~free] = np.inf
            j = int(np.argmin(dist))
            free[j] = False
            total += g[j]
            out.append(int(members[j]))
    return torch.tensor(out, dtype=torch.int64)
