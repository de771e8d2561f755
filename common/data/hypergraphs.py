"""Hypergraph datasets (HyperGCN's layout) and a class-structured synthetic generator.

A hypergraph is returned as a `Hypergraph`: features X (|V| × d, float), labels y (|V|,),
and `edges`, a list of vertex-id lists. Search order: <data root>/hypergraphs/<name>, then
the shared offline copy (../shared/data/hypergraphs beside the project), then the canonical
download (HyperGCN's repository at a fixed commit), each file checked against its sha256.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from common.config import UserError
from common.data import safe_pickle
from common.data.download import find_or_fetch

NAMES = {"cocitation_cora": "cocitation/cora", "cocitation_citeseer": "cocitation/citeseer",
         "coauthorship_cora": "coauthorship/cora"}
URL = "https://raw.githubusercontent.com/malllabiisc/HyperGCN/de049387d8d8c9fe6ebab83cb4b49cacfd4ed534/data/"
SHARED = Path(__file__).resolve().parents[2].parent / "shared" / "data" / "hypergraphs"
FILES = ("features.pickle", "labels.pickle", "hypergraph.pickle")
SHA256 = {
    "cocitation/cora": ("a20ab3c4903d6cf97d277f5ce8d26735e31d08c888cdd11e3f0a5bb78d7c0602",
                        "0e6edd0d971dde22c1116fa662362262163a7a6d557eafd60ac6857de4569527",
                        "49abc7fff72a07de24e50d9d740d5cc63a32a40b2508995c16816fcb2729de80"),
    "cocitation/citeseer": ("a1b1d07241c818e1551b1b4871bbf2116fe870773373372f9dbc5582c78236f4",
                            "c3368a596786df4208f2777e1c8017b7a2a20307aee8c7ed4f2571d9f529611d",
                            "b8deecbecef20618d4e23af5b81b1936b36810fc4565ca476353e8a6d7f5884d"),
    "coauthorship/cora": ("a20ab3c4903d6cf97d277f5ce8d26735e31d08c888cdd11e3f0a5bb78d7c0602",
                          "0e6edd0d971dde22c1116fa662362262163a7a6d557eafd60ac6857de4569527",
                          "777d661210bdd122a4ce25284e07c6368e875a28122e75dca912c631db0935f6"),
}


@dataclass
class Hypergraph:
    features: torch.Tensor      # (V, d) float32
    labels: torch.Tensor        # (V,) int64
    edges: list[list[int]]      # hyperedges as vertex-id lists

    @property
    def num_vertices(self) -> int:
        return len(self.labels)

    @property
    def num_classes(self) -> int:
        return int(self.labels.max()) + 1


def load_hypergraph(name: str, root: str | Path = "data", download: bool = False, verify: bool = True) -> Hypergraph:
    if name not in NAMES:
        raise UserError(f"unknown hypergraph '{name}'. Available: {', '.join(sorted(NAMES))}, synthetic.", exit_code=2)
    rel = NAMES[name]
    folder = find_or_fetch(name, [Path(root) / "hypergraphs" / rel, SHARED / rel], dict(zip(FILES, SHA256[rel])),
                           f"{URL}{rel}/", download,
                           f"python scripts/train.py ... dataset.download=true (fetches {URL}{rel}/)", verify)
    features = safe_pickle.load(folder / "features.pickle")
    labels = safe_pickle.load(folder / "labels.pickle")
    hyperedges = safe_pickle.load(folder / "hypergraph.pickle")
    x = torch.from_numpy(np.asarray(features.todense(), dtype=np.float32))
    edges = [sorted(int(v) for v in members) for members in hyperedges.values()]
    return Hypergraph(x, torch.as_tensor([int(v) for v in labels]), edges)


def synthetic_hypergraph(num_vertices: int, num_classes: int = 5, feature_dim: int = 64,
                         edges_per_vertex: float = 0.5, intra_class: float = 0.85,
                         feature_noise: float = 1.0, seed: int = 0) -> Hypergraph:
    """Hyperedges of 3-8 vertices, a share `intra_class` drawn within one class and the rest
    at random; features = class mean + Gaussian noise (so an MLP can learn something and the
    hypergraph helps)."""
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, num_classes, num_vertices)
    by_class = [np.flatnonzero(labels == c) for c in range(num_classes)]
    means = rng.normal(0, 1, (num_classes, feature_dim)) / np.sqrt(feature_dim) * 4
    x = means[labels] + rng.normal(0, feature_noise, (num_vertices, feature_dim))
    num_edges = int(edges_per_vertex * num_vertices)
    sizes = rng.integers(3, 9, num_edges)
    within = rng.random(num_edges) < intra_class
    classes = rng.integers(0, num_classes, num_edges)
    edges = []
    for size, inside, c in zip(sizes, within, classes):
        pool = by_class[c] if inside and len(by_class[c]) >= size else np.arange(num_vertices)
        edges.append(sorted(int(v) for v in rng.choice(pool, size, replace=False)))
    return Hypergraph(torch.from_numpy(x.astype(np.float32)), torch.from_numpy(labels.astype(np.int64)), edges)


def random_split(labels: torch.Tensor, train_per_class: int, val_per_class: int, seed: int) -> dict[str, torch.Tensor]:
    """`train_per_class` and `val_per_class` vertices of every class, the rest for test."""
    gen = torch.Generator().manual_seed(seed)
    train, val = [], []
    for c in range(int(labels.max()) + 1):
        idx = torch.nonzero(labels == c).flatten()
        idx = idx[torch.randperm(len(idx), generator=gen)]
        train.append(idx[:train_per_class])
        val.append(idx[train_per_class:train_per_class + val_per_class])
    train, val = torch.cat(train), torch.cat(val)
    mask = torch.ones(len(labels), dtype=torch.bool)
    mask[train], mask[val] = False, False
    return {"train": train, "val": val, "test": torch.nonzero(mask).flatten()}
