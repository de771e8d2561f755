"""What a run may train on. Transductive: the whole hypergraph. Production (the official
`prod_train.py`): a share of the test vertices is held out; training sees only the observed
vertices, their features and the sub-hypergraph among them (re-indexed, as the official
`sub_hypergraph`), so no held-out feature, teacher output or BatchNorm statistic reaches it."""
from __future__ import annotations

from dataclasses import dataclass, replace

import torch
import torch.nn.functional as F

from common.config import UserError
from common.data.hypergraphs import Hypergraph, load_hypergraph, synthetic_hypergraph
from methods.lighthgnn.model import with_self_loops


def load(ds) -> Hypergraph:
    """The dataset config's hypergraph; its feature and class counts must be the config's."""
    if ds.name == "synthetic":
        hg = synthetic_hypergraph(ds.num_vertices, ds.num_classes, ds.feature_dim, seed=ds.generator_seed)
    else:
        hg = load_hypergraph(ds.name, ds.root, ds.download)
    found = (hg.features.shape[1], hg.num_classes)
    if found != (ds.feature_dim, ds.num_classes):
        raise UserError(f"dataset {ds.name} has {found[0]} features and {found[1]} classes, its config says "
                        f"dataset.feature_dim={ds.feature_dim}, dataset.num_classes={ds.num_classes}", exit_code=2)
    return hg


def l1_normalise(features: torch.Tensor) -> torch.Tensor:
    """Each row divided by its L1 norm, all-zero rows left at zero: DHG's `norm_ft(X, ord=1)`, the
    preprocessing of the official data (`CocitationCora`, `CocitationCiteseer`, `CoauthorshipCora`)."""
    return F.normalize(features, p=1, dim=1)   # divides by max(‖row‖₁, 1e-12): an all-zero row stays zero


def normalise_features(hg: Hypergraph, norm: str) -> Hypergraph:
    """`norm`: "l1" (the official data's) or "none" (HyperGCN's raw 0/1 bag-of-words rows)."""
    if norm not in ("l1", "none"):
        raise UserError(f"method.feature_norm must be 'l1' or 'none', got '{norm}'", exit_code=2)
    return hg if norm == "none" else replace(hg, features=l1_normalise(hg.features))


def unique_hyperedges(edges: list[list[int]]) -> list[list[int]]:
    """Each vertex set once, in order of first appearance, vertices sorted: DHG's `Hypergraph`
    merges repeated hyperedges into one of weight 1 (merge_op="mean"); the HyperGCN files repeat
    96 of CC-Cora's 1579 hyperedges, 75 of CC-Citeseer's 1079, 102 of CA-Cora's 1072."""
    return [list(e) for e in dict.fromkeys(tuple(sorted(e)) for e in edges)]


def incidence_pairs(edges: list[list[int]]) -> tuple[torch.Tensor, torch.Tensor]:
    """(members, edge_of): the flattened (vertex, hyperedge) pairs of the incidence, (pairs,) each."""
    members = torch.tensor([v for e in edges for v in e])
    edge_of = torch.tensor([j for j, e in enumerate(edges) for _ in e])
    return members, edge_of


@dataclass
class Observed:
    """The vertices training sees, re-indexed 0 .. V_o - 1 (all of them when nothing is held out)."""
    vertices: torch.Tensor      # (V_o,) ids in the full hypergraph
    x: torch.Tensor             # (V_o, d) dense features
    labels: torch.Tensor        # (V_o,)
    train: torch.Tensor         # indices into the observed vertices
    val: torch.Tensor
    test: torch.Tensor          # the test vertices that stay observed (transductive test)
    edges: list[list[int]]      # sub-hypergraph, plus a self-loop for an observed vertex in none

    @property
    def num_vertices(self) -> int:
        return len(self.vertices)


def observe(hg: Hypergraph, split: dict[str, torch.Tensor], holdout_fraction: float,
            seed: int) -> tuple[Observed, torch.Tensor]:
    """(the observed problem, the held-out vertex ids): `holdout_fraction` of the test vertices
    (0 = transductive) leave the hypergraph, hyperedges included; a hyperedge keeps its
    observed vertices (the official `sub_hypergraph` keeps every one with at least one).
    Repeated hyperedges count once, before and after the cut, as in DHG."""
    if not 0.0 <= holdout_fraction < 1.0:
        raise ValueError(f"holdout_fraction must be in [0, 1), got {holdout_fraction}")
    test = split["test"]
    gen = torch.Generator().manual_seed(seed + 1)
    cut = int(holdout_fraction * len(test))                     # the official product_split rounds down
    held = test[torch.randperm(len(test), generator=gen)[:cut]].sort().values
    new_id = torch.arange(hg.num_vertices)
    is_held = torch.zeros(hg.num_vertices, dtype=torch.bool)
    is_held[held] = True
    vertices = torch.nonzero(~is_held).flatten()
    new_id[vertices] = torch.arange(len(vertices))
    new_id[held] = -1
    edges = [kept for e in unique_hyperedges(hg.edges) if (kept := [int(new_id[v]) for v in e if not is_held[v]])]
    observed = Observed(vertices, hg.features[vertices], hg.labels[vertices], new_id[split["train"]],
                        new_id[split["val"]], new_id[test[~is_held[test]]],
                        with_self_loops(unique_hyperedges(edges), len(vertices)))
    return observed, held
