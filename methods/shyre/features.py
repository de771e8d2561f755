"""The count features of a candidate clique (SHyRe-count; the official DataLoader's nine
'count' features, in its column order), z-scored per graph over all candidates."""
from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from itertools import combinations

import networkx as nx
import numpy as np

FEATURES = ("nested", "size", "edges_all_shared", "edge_multiplicity_mean", "degree_mean",
            "neighbour_degree_mean", "cliques_per_vertex_mean", "clustering_mean", "parents")
EPSILON = 1e-8        # the official z-score's guard against a constant column


def candidate_features(graph: nx.Graph, max_cliques, candidates, standardize: bool = True) -> np.ndarray:
    """(m, 9) features of the m candidates, in their iteration order:

    nested           0 for a maximal clique, 1 for a sub-clique of one
    size             |c|
    edges_all_shared 1 when every edge of c lies in more than one maximal clique
    edge_multiplicity_mean, degree_mean, neighbour_degree_mean (each vertex's mean neighbour
                     degree), cliques_per_vertex_mean, clustering_mean: means over c's edges or
                     vertices of: maximal cliques holding the edge, graph degree, ..., the
                     vertex's clustering coefficient
    parents          sampled maximal cliques the candidate came from (0 when `candidates` is a
                     plain iterable)
    `standardize`: (x - mean) / (std + 1e-8) per column, over this graph's candidates.
    """
    maximal = {frozenset(c) for c in max_cliques}
    parents = candidates if isinstance(candidates, Mapping) else dict.fromkeys(candidates, 0)
    edge_count = Counter(frozenset(e) for c in maximal for e in combinations(c, 2))
    vertex_count = Counter(v for c in maximal for v in c)
    degree = dict(graph.degree)
    neighbour_degree = nx.average_neighbor_degree(graph)
    clustering = nx.clustering(graph)
    rows = []
    for cand, count in parents.items():
        cand = frozenset(cand)
        edges = [edge_count.get(frozenset(e), 0) for e in combinations(cand, 2)]
        size = len(cand)
        rows.append((float(cand not in maximal), size, float(bool(edges) and min(edges) > 1),
                     sum(edges) / max(len(edges), 1),
                     sum(degree[v] for v in cand) / size,
                     sum(neighbour_degree[v] for v in cand) / size,
                     sum(vertex_count[v] for v in cand) / size,
                     sum(clustering[v] for v in cand) / size,
                     count))
    x = np.asarray(rows, dtype=np.float64).reshape(len(rows), len(FEATURES))   # (m, 9)
    if standardize and len(x):
        x = (x - x.mean(axis=0, keepdims=True)) / (x.std(axis=0, keepdims=True) + EPSILON)
    return x
