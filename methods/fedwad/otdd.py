"""Federated OTDD (official `augment_data`, `use_diag=True`) and client clustering (official
`cluster_client`). OTDD (Alvarez-Melis & Fusi 2020) compares labeled datasets with the ground
cost |x - x'|^2 + W_2^2(P_y, P_y'), the label term between Gaussian fits of the classes. Each
client appends to every sample its class mean and the square-root diagonal of its class
covariance, locally; the squared Euclidean distance between augmented vectors is that cost
(with the Bures term of diagonal covariances), so OTDD = W_2^2 of the augmented samples, which
FedWaD computes without sharing them."""
from __future__ import annotations

import warnings

import numpy as np
from sklearn.cluster import SpectralClustering

from methods.fedwad.transport import check_samples


def augment_with_labels(x, y, eps: float = 1e-6) -> np.ndarray:
    """(n, 3d): [x_i, m_{y_i}, s_{y_i}] with m_y the class mean and s_y = diag((C_y + eps I)^1/2),
    C_y the unbiased class covariance (np.cov). A class with one sample has no covariance."""
    x = check_samples(x, "x")
    y = np.asarray(y)
    if y.shape != (len(x),):
        raise ValueError(f"y must have one label per sample ({len(x)}), got shape {y.shape}")
    if not eps > 0:
        raise ValueError(f"eps must be > 0, got {eps!r}")
    classes, counts = np.unique(y, return_counts=True)
    if (counts < 2).any():
        raise ValueError(f"classes {classes[counts < 2].tolist()} have a single sample: no covariance; "
                         f"drop them before augment_with_labels")
    out = np.zeros((len(x), 3 * x.shape[1]))
    out[:, :x.shape[1]] = x
    for c in classes:
        rows = y == c
        xc = x[rows]
        cov = np.atleast_2d(np.cov(xc, rowvar=False))
        vals, vecs = np.linalg.eigh((cov + cov.T) / 2)
        # diag(V diag(sqrt(lambda + eps)) V^T) = sum_j V_ij^2 sqrt(lambda_j + eps)
        diag_root = (vecs ** 2) @ np.sqrt(np.clip(vals, 0.0, None) + eps)
        out[rows, x.shape[1]:2 * x.shape[1]] = xc.mean(0)
        out[rows, 2 * x.shape[1]:] = diag_root
    return out


def cluster_clients(distance, n_clusters: int, n_neighbors: int = 3, seed: int = 0) -> np.ndarray:
    """Spectral clustering of clients from a (K, K) distance matrix: sklearn SpectralClustering
    on the symmetrised k-nearest-neighbour graph of the distances (official `cluster_client`)."""
    d = np.asarray(distance, dtype=np.float64)
    if d.ndim != 2 or d.shape[0] != d.shape[1]:
        raise ValueError(f"distance must be a square matrix, got shape {d.shape}")
    if not np.isfinite(d).all() or (d < 0).any():
        raise ValueError("distance must be finite and non-negative")
    if not 1 <= n_clusters <= len(d):
        raise ValueError(f"n_clusters must be in [1, {len(d)}], got {n_clusters}")
    if not 1 <= n_neighbors <= len(d):
        raise ValueError(f"n_neighbors must be in [1, {len(d)}], got {n_neighbors}")
    model = SpectralClustering(n_clusters=n_clusters, affinity="precomputed_nearest_neighbors",
                               n_neighbors=n_neighbors, assign_labels="kmeans", n_init=10, random_state=seed)
    with warnings.catch_warnings():
        # well-separated groups give a disconnected kNN graph by design; sklearn warns about it
        warnings.filterwarnings("ignore", message="Graph is not fully connected")
        return model.fit_predict(d)
