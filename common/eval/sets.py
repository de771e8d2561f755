"""Set reconstruction scores (hypergraph reconstruction): items are any iterables of vertices."""
from __future__ import annotations


def _as_set(items) -> set[frozenset]:
    return {frozenset(i) for i in items}


def set_scores(reconstructed, truth) -> dict[str, float]:
    """precision, recall, f1, jaccard of two sets of sets; the empty set against itself scores 1."""
    r, t = _as_set(reconstructed), _as_set(truth)
    hit = len(r & t)
    precision = hit / len(r) if r else float(not t)
    recall = hit / len(t) if t else float(not r)
    f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
    union = len(r | t)
    return {"precision": precision, "recall": recall, "f1": f1, "jaccard": hit / union if union else 1.0}


def jaccard(reconstructed, truth) -> float:
    return set_scores(reconstructed, truth)["jaccard"]
