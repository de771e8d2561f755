"""SHyRe: learn on a training hypergraph which candidate cliques of a projection are hyperedges,
then reconstruct a query hypergraph from its projection alone (paper Section 4)."""
from __future__ import annotations

import warnings

import networkx as nx
import numpy as np
from sklearn.exceptions import ConvergenceWarning
from sklearn.neural_network import MLPClassifier

from methods.shyre.features import candidate_features
from methods.shyre.hypergraph import maximal_cliques, training_pair
from methods.shyre.sampler import clique_statistics, optimize_sampler, sample_candidates

PARTS = ("maximal", "nested")


class SHyRe:
    """SHyRe-count: the clique sampler (budget `budget` sub-cliques, fit on the training pair),
    nine count features, and two MLP classifiers (maximal and nested candidates; scikit-learn's
    MLPClassifier with the official settings: one hidden layer of `hidden`, L2 `alpha`,
    `max_iter` epochs, random_state = seed). A candidate is kept when p > `threshold`.
    `budget=0` takes no sub-cliques: the classifier filters the maximal cliques only."""

    def __init__(self, budget: int = 10_000, seed: int = 0, hidden: int = 100, alpha: float = 1e-4,
                 max_iter: int = 2000, threshold: float = 0.5):
        if budget < 0:
            raise ValueError(f"budget must be >= 0, got {budget}")
        self.budget, self.seed, self.hidden, self.alpha = budget, seed, hidden, alpha
        self.max_iter, self.threshold = max_iter, threshold
        self.plan_ = None

    def _candidates(self, graph: nx.Graph):
        cliques = maximal_cliques(graph)
        candidates = sample_candidates(cliques, self.plan_, self.seed)
        x = candidate_features(graph, cliques, candidates)           # (m, 9), z-scored on this graph
        nested = np.array([c not in cliques for c in candidates], dtype=bool)
        return list(candidates), x, nested

    def fit(self, hyperedges) -> SHyRe:
        truth, graph = training_pair(hyperedges, "SHyRe.fit")
        self.stats_ = clique_statistics(maximal_cliques(graph), truth)
        self.plan_ = optimize_sampler(self.stats_, self.budget, self.seed)
        cands, x, nested = self._candidates(graph)
        y = np.array([c in truth for c in cands], dtype=int)
        self.parts_ = {}
        for name, rows in zip(PARTS, (~nested, nested)):
            self.parts_[name] = self._fit_part(x[rows], y[rows])
        self.train_candidates_ = len(cands)
        return self

    def _fit_part(self, x: np.ndarray, y: np.ndarray):
        """An MLP, or the one label a part without two classes has (0 when it has no rows)."""
        if len(y) == 0 or y.min() == y.max():
            return int(y[0]) if len(y) else 0
        model = MLPClassifier(hidden_layer_sizes=(self.hidden,), alpha=self.alpha, max_iter=self.max_iter,
                              random_state=self.seed)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ConvergenceWarning)
            return model.fit(x, y)

    def reconstruct(self, graph: nx.Graph) -> set[frozenset]:
        """The candidates of `graph` that the classifiers call hyperedges."""
        if self.plan_ is None:
            raise RuntimeError("SHyRe.reconstruct was called before fit: call fit(training_hyperedges) first")
        cands, x, nested = self._candidates(graph)
        self.query_candidates_ = len(cands)
        keep = np.zeros(len(cands), dtype=bool)
        for name, rows in zip(PARTS, (~nested, nested)):
            part = self.parts_[name]
            if not rows.any():
                continue
            if isinstance(part, int):
                keep[rows] = bool(part)
            else:
                keep[rows] = part.predict_proba(x[rows])[:, 1] > self.threshold
        return {c for c, k in zip(cands, keep) if k}
