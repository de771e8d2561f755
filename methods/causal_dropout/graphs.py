"""PC with a given CI test (causal-learn), graph scores, and the CI-level evaluation on d-separations.

Graph matrices follow causal-learn: G[j, i] = 1 and G[i, j] = −1 is i → j; G[i, j] = G[j, i] = −1 is
i — j. A DAG's adjacency is A[i, j] = 1 iff i → j.
"""
from __future__ import annotations

import networkx as nx
import numpy as np
from causallearn.graph.Dag import Dag
from causallearn.graph.Edge import Edge
from causallearn.graph.Endpoint import Endpoint
from causallearn.graph.GeneralGraph import GeneralGraph
from causallearn.graph.GraphNode import GraphNode
from causallearn.graph.SHD import SHD
from causallearn.utils.DAG2CPDAG import dag2cpdag
from causallearn.utils.PCUtils import Meek, SkeletonDiscovery, UCSepset

from methods.causal_dropout.simulate import topological_order


def _check_alpha(alpha: float) -> float:
    if not 0 < alpha < 1:
        raise ValueError(f"alpha must lie in (0, 1), got {alpha}")
    return float(alpha)


def pc_cpdag(data, test, alpha: float = 0.05, max_depth: int | None = None) -> np.ndarray:
    """PC (official `pc(data, alpha, tester)`, causal-learn defaults): stable skeleton discovery with
    conditioning sets up to `max_depth` (None: unbounded), unshielded colliders from the sepsets with
    priority 2 (existing colliders kept), Meek's rules. `test`: a `CIT_Base` on data with the same genes.
    Returns the causal-learn graph matrix (p, p)."""
    alpha = _check_alpha(alpha)
    data = np.asarray(data, dtype=float)
    if data.ndim != 2 or not np.all(np.isfinite(data)):
        raise ValueError("data must be a finite (cells, genes) matrix")
    if test.num_features != data.shape[1]:
        raise ValueError(f"the test holds {test.num_features} genes, the data {data.shape[1]}")
    if max_depth is not None and (int(max_depth) != max_depth or max_depth < 0):
        raise ValueError(f"max_depth must be a non-negative integer or None, got {max_depth}")
    cg = SkeletonDiscovery.skeleton_discovery(data, alpha, test, stable=True, show_progress=False,
                                              max_k=None if max_depth is None else int(max_depth))
    cg = Meek.meek(UCSepset.uc_sepset(cg, 2))
    return np.array(cg.G.graph, dtype=int)


def _nodes(p: int) -> list[GraphNode]:
    return [GraphNode(f"X{i + 1}") for i in range(p)]     # causal-learn's default names


def dag_graph(adjacency) -> Dag:
    """The causal-learn Dag of an adjacency matrix."""
    topological_order(adjacency)
    a = np.asarray(adjacency)
    nodes = _nodes(len(a))
    dag = Dag(nodes)
    for i, j in zip(*np.nonzero(a)):
        dag.add_directed_edge(nodes[i], nodes[j])
    return dag


def general_graph(graph) -> GeneralGraph:
    """The causal-learn GeneralGraph of a graph matrix (G[i, j]: the endpoint at i of the edge i, j)."""
    g = np.asarray(graph, dtype=int)
    nodes = _nodes(len(g))
    out = GeneralGraph(nodes)
    for i in range(len(g)):
        for j in range(i + 1, len(g)):
            if g[i, j] != 0 or g[j, i] != 0:
                out.add_edge(Edge(nodes[i], nodes[j], Endpoint(int(g[i, j])), Endpoint(int(g[j, i]))))
    return out


def _skeleton(adjacency) -> set[tuple[int, int]]:
    a = np.asarray(adjacency) != 0
    a = a | a.T
    return {(int(i), int(j)) for i, j in zip(*np.nonzero(np.triu(a, 1)))}


def skeleton_scores(adjacency, graph) -> dict[str, float]:
    """Skeleton (adjacencies, orientation ignored) of the estimate against the DAG's: precision, recall,
    f1 (0 when either is 0), tp (adjacencies found), fp (spurious ones), fn (missed ones)."""
    topological_order(adjacency)
    truth, found = _skeleton(adjacency), _skeleton(graph)
    hits = len(truth & found)
    precision = hits / len(found) if found else 0.0
    recall = hits / len(truth) if truth else 0.0
    f1 = 2 * precision * recall / (precision + recall) if precision + recall > 0 else 0.0
    return {"f1": f1, "precision": precision, "recall": recall, "tp": float(hits), "fp": float(len(found - truth)),
            "fn": float(len(truth - found))}


def cpdag_shd(adjacency, graph) -> int:
    """causal-learn SHD between the DAG's CPDAG and the estimate (one per pair of nodes whose edge marks
    differ: a missing, extra or differently oriented edge)."""
    return int(SHD(dag2cpdag(dag_graph(adjacency)), general_graph(graph)).get_shd())


def _digraph(adjacency) -> nx.DiGraph:
    a = np.asarray(adjacency)
    graph = nx.DiGraph()
    graph.add_nodes_from(range(len(a)))
    graph.add_edges_from((int(i), int(j)) for i, j in zip(*np.nonzero(a)))
    return graph


def d_separated(adjacency, i: int, j: int, cond=()) -> bool:
    """i ⊥_d j | cond in the DAG (networkx)."""
    topological_order(adjacency)
    return bool(nx.is_d_separator(_digraph(adjacency), {int(i)}, {int(j)}, {int(c) for c in cond}))


def _draw(adjacency, sizes, per_size: int, seed: int, keep, max_tries: int) -> list[tuple[int, int, tuple]]:
    """Up to `per_size` distinct (i, j, S), i < j, S sorted, per |S| in `sizes`, drawn uniformly (pair,
    then S among the other nodes) and kept when `keep(graph, i, j, S)`."""
    topological_order(adjacency)
    p = len(np.asarray(adjacency))
    if per_size < 1 or any(int(s) != s or s < 0 or s > p - 2 for s in sizes):
        raise ValueError(f"sizes must lie in [0, {p - 2}] and per_size >= 1, got {tuple(sizes)}, {per_size}")
    graph = _digraph(adjacency)
    rng = np.random.default_rng(seed)
    out = []
    for size in sizes:
        found: set = set()
        for _ in range(max_tries * per_size):
            i, j = sorted(int(v) for v in rng.choice(p, size=2, replace=False))
            others = np.setdiff1d(np.arange(p), [i, j])
            cond = tuple(sorted(int(v) for v in rng.choice(others, size=int(size), replace=False)))
            if (i, j, cond) not in found and keep(graph, i, j, cond):
                found.add((i, j, cond))
                out.append((i, j, cond))
                if len(found) == per_size:
                    break
    return out


def blocking_separations(adjacency, sizes=(1, 2, 3), per_size: int = 50, seed: int = 0,
                         max_tries: int = 400) -> list[tuple[int, int, tuple]]:
    """(i, j, S): i, j d-connected given ∅ and d-separated given S, |S| in `sizes` (per_size each when
    found within max_tries·per_size draws): the separations a biased test gets wrong."""
    def keep(graph, i, j, cond):
        return not nx.is_d_separator(graph, {i}, {j}, set()) and nx.is_d_separator(graph, {i}, {j}, set(cond))
    return _draw(adjacency, sizes, per_size, seed, keep, max_tries)


def d_connections(adjacency, sizes=(1, 2, 3), per_size: int = 50, seed: int = 0,
                  max_tries: int = 400) -> list[tuple[int, int, tuple]]:
    """(i, j, S): i, j d-connected given S, |S| in `sizes`: the dependences a test should detect."""
    def keep(graph, i, j, cond):
        return not nx.is_d_separator(graph, {i}, {j}, set(cond))
    return _draw(adjacency, sizes, per_size, seed + 1, keep, max_tries)


def ci_error_rates(test, separations, connections, alpha: float = 0.05) -> tuple[float, float]:
    """(type1, power): the share of rejections (p ≤ alpha) on the separations and on the connections
    (NaN for an empty list)."""
    alpha = _check_alpha(alpha)

    def rejected(triples) -> float:
        return float(np.mean([test(i, j, cond) <= alpha for i, j, cond in triples])) if triples else float("nan")

    return rejected(separations), rejected(connections)
