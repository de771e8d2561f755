"""Unsupervised baselines: maximal cliques (hypergraph.maximal_cliques), a greedy edge clique
cover, CFinder (k-clique communities, k chosen on the training pair), and the "own edge" rule
(ours: a maximal clique is kept when one of its edges lies in no other maximal clique)."""
from __future__ import annotations

import networkx as nx
import numpy as np
from networkx.algorithms.community import k_clique_communities

from common.eval import jaccard
from methods.shyre.hypergraph import maximal_cliques, training_pair


def own_edge_cliques(graph: nx.Graph) -> set[frozenset]:
    """The maximal cliques with an edge that no other maximal clique contains. Not from the paper:
    a one-line, unlearned rule (the cold review found it scores as SHyRe does on the mini tier), kept
    as a baseline so that the table shows how much of SHyRe's gain over maximal cliques it needs
    no learning for. A clique whose every edge is shared could be the union of other hyperedges'
    projections; one with an edge of its own must contain a hyperedge that covers that edge."""
    cliques = maximal_cliques(graph)
    count: dict[frozenset, int] = {}
    for c in cliques:
        members = sorted(c)
        for i, a in enumerate(members):
            for b in members[i + 1:]:
                count[frozenset((a, b))] = count.get(frozenset((a, b)), 0) + 1
    return {c for c in cliques
            if any(count[frozenset((a, b))] == 1 for i, a in enumerate(sorted(c)) for b in sorted(c)[i + 1:])}


def clique_cover(graph: nx.Graph) -> set[frozenset]:
    """Greedy edge clique cover (the official baselines/ecc.py, in a fixed order): each edge not
    yet covered, in sorted order, starts a clique {u, v}; the clique grows by the common
    neighbour that covers the most uncovered edges towards it (ties: the smallest vertex) while
    one covers any."""
    covered: set[frozenset] = set()
    cover = set()
    for u, v in sorted(tuple(sorted(e)) for e in graph.edges):
        if frozenset((u, v)) in covered:
            continue
        clique = [u, v]
        common = set(graph[u]) & set(graph[v])
        while True:
            best, z = 0, None
            for p in sorted(common):
                gain = sum(frozenset((p, r)) not in covered for r in clique)
                if gain > best:
                    best, z = gain, p
            if z is None:
                break
            clique.append(z)
            common &= set(graph[z])
        covered |= {frozenset((a, b)) for i, a in enumerate(clique) for b in clique[i + 1:]}
        cover.add(frozenset(clique))
    return cover


class CFinder:
    """k-clique percolation (networkx `k_clique_communities`), with k chosen among the official
    candidates int(quantile(training sizes, q)) + 1, q = 0.1 ... 0.5, by Jaccard on the training
    pair (ties: the larger k)."""

    def __init__(self, quantiles=(0.1, 0.2, 0.3, 0.4, 0.5)):
        self.quantiles = tuple(quantiles)
        self.k_ = None

    def fit(self, hyperedges) -> CFinder:
        truth, graph = training_pair(hyperedges, "CFinder.fit")
        sizes = [len(e) for e in truth]
        ks = sorted({max(2, int(np.quantile(sizes, q)) + 1) for q in self.quantiles})
        self.k_ = max(ks, key=lambda k: (jaccard(self._communities(graph, k), truth), k))
        return self

    @staticmethod
    def _communities(graph: nx.Graph, k: int) -> set[frozenset]:
        return {frozenset(c) for c in k_clique_communities(graph, k)}

    def reconstruct(self, graph: nx.Graph) -> set[frozenset]:
        if self.k_ is None:
            raise RuntimeError("CFinder.reconstruct was called before fit: call fit(training_hyperedges) first")
        return self._communities(graph, self.k_)
