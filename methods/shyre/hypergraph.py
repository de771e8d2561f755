"""A hypergraph, its projection and the split into training and query hypergraphs.

A hypergraph is any iterable of vertex iterables; inside the package it is a set of frozensets.
Size-1 hyperedges leave no trace in the projection beyond an isolated vertex and are no
reconstruction targets (the official code keeps them as targets: README, Deviations)."""
from __future__ import annotations

from itertools import combinations

import networkx as nx
import numpy as np


def as_hyperedges(hyperedges, min_size: int = 2) -> set[frozenset]:
    """The unique hyperedges of at least `min_size` vertices (duplicates collapse)."""
    return {e for e in map(frozenset, hyperedges) if len(e) >= min_size}


def canonical(sets) -> list[frozenset]:
    """A fixed order of a set of vertex sets (by size, then sorted members), so that seeded
    choices do not depend on Python's set iteration order."""
    return sorted(sets, key=lambda s: (len(s), sorted(s)))


def project(hyperedges) -> nx.Graph:
    """Clique expansion: u ~ v iff some hyperedge holds both; every vertex is a node."""
    graph = nx.Graph()
    for e in map(frozenset, hyperedges):
        graph.add_nodes_from(e)
        graph.add_edges_from(combinations(e, 2))
    return graph


def training_pair(hyperedges, fitter: str) -> tuple[set[frozenset], nx.Graph]:
    """(targets, projection) of a training hypergraph, read once (a generator is welcome); a
    ValueError naming `fitter` when no hyperedge has size >= 2."""
    hyperedges = list(hyperedges)
    truth = as_hyperedges(hyperedges)
    if not truth:
        raise ValueError(f"{fitter} needs a training hypergraph with at least one hyperedge of size >= 2")
    return truth, project(hyperedges)


def maximal_cliques(graph: nx.Graph) -> set[frozenset]:
    """Maximal cliques with at least 2 vertices (isolated vertices are no candidates)."""
    return {frozenset(c) for c in nx.find_cliques(graph) if len(c) >= 2}


def split_hyperedges(hyperedges, train_fraction: float = 0.5, seed: int = 0) -> tuple[set[frozenset], set[frozenset]]:
    """Unique hyperedges of size >= 2, shuffled with `seed` and cut at round(train_fraction * m):
    (training hypergraph, query hypergraph), each to be projected on its own."""
    if not 0 < train_fraction < 1:
        raise ValueError(f"train_fraction must lie in (0, 1), got {train_fraction}")
    edges = canonical(as_hyperedges(hyperedges))
    if not edges:
        raise ValueError("the hypergraph has no hyperedge of size >= 2: nothing to split or reconstruct")
    order = np.random.default_rng(seed).permutation(len(edges))
    cut = int(round(train_fraction * len(edges)))
    return {edges[i] for i in order[:cut]}, {edges[i] for i in order[cut:]}
