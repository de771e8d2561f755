"""SHyRe against a written-out transcription of the official code (Abel0828/supervised_hypergraph_
reconstruction at d49c77e): `CliqueSampler.find_children` (cliques.py), `DataLoader.get_child_parents_map`
and the 'count' branch of `DataLoader.extract_features` (train.py), before its z-scoring.

The transcription below restates those functions step by step on plain tuples, as the official code
holds them (maximal cliques as sorted tuples, a plan as the greedy's sequence of (n, k) with a share
r[n, k], children grouped under their parent); it is not our code path. The official code opens the
first int(r·|M_n|) size-n maximal cliques in the order of its clique list (Python set order); ours
opens them in a seeded permutation per n (README, Deviations), so the tests hand the transcription
the cliques in our order. Size-1 hyperedges and cliques are left out of the fixed hypergraphs (the
other documented deviation).
"""
from collections import defaultdict
from itertools import combinations

import networkx as nx
import numpy as np
import pytest

from methods.shyre import (FEATURES, candidate_features, clique_statistics, maximal_cliques, optimize_sampler,
                           project, sample_candidates)
from methods.shyre.hypergraph import canonical

F = frozenset

# A small fixed hypergraph: overlapping hyperedges of sizes 2-5, nested ones (inside a larger
# maximal clique of the projection) and pairs that close triangles, so that the plan has (n, k < n) pairs.
HYPEREDGES = [(0, 1, 2, 3, 4), (0, 1, 2), (2, 3, 4), (3, 4, 5, 6), (5, 6, 7), (6, 7), (7, 8), (8, 9), (7, 9),
              (9, 10, 11, 12), (10, 11), (11, 12, 13), (13, 14), (14, 15, 16), (15, 16, 17, 18), (16, 17),
              (0, 19), (19, 20, 21), (1, 20), (21, 22, 23, 24, 25), (22, 23), (24, 25, 26), (26, 27), (27, 28, 29),
              (2, 29), (4, 30, 31), (30, 31, 32, 33), (31, 32), (12, 33)]


# --- the transcription ------------------------------------------------------------------------

def official_find_children(max_cliques: list[tuple], seq: list[tuple[int, int]], r: dict) -> dict:
    """cliques.CliqueSampler.find_children: group the maximal cliques by size in list order; for
    each (n, k) of the greedy sequence open the first int(|M_n|·r[n, k]) size-n cliques and append
    every k-combination of each (a sorted tuple) to the list of children under that parent."""
    by_size = defaultdict(list)
    for i, clique in enumerate(max_cliques):
        by_size[len(clique)].append(i)
    children = defaultdict(list)
    for n, k in seq:
        end = int(len(by_size[n]) * r[n, k])
        for i in by_size[n][:end]:
            parent = max_cliques[i]
            for child in combinations(parent, k):
                children[parent].append(tuple(sorted(child)))
    return children


def official_child_parents(children: dict) -> dict:
    """train.DataLoader.get_child_parents_map: child -> the list of its parents."""
    child2parents = defaultdict(list)
    for parent, kids in children.items():
        for child in kids:
            child2parents[child].append(parent)
    return child2parents


def official_count_features(graph: nx.Graph, max_cliques: set[tuple], child2parents: dict) -> dict:
    """train.DataLoader.extract_features, features='count', no ablation, no extension, not yet
    normalised: candidates = the maximal cliques, then the sampled children that are not maximal;
    per candidate the nine columns of DataLoader.feature_names."""
    nested = set(child2parents) - max_cliques
    final = list(max_cliques) + list(nested)
    degree = graph.degree
    recur = {}                               # get_node_degree_recur: mean degree of the neighbours
    for v in graph.nodes:
        nb = [degree[u] for u in graph.neighbors(v)]
        recur[v] = np.array(nb).mean() if nb else 0.0
    per_vertex = {}                          # get_node_degree2: maximal cliques holding the vertex
    edge_count = {}                          # get_edge_degree: maximal cliques holding the edge
    for clique in max_cliques:
        for v in clique:
            per_vertex[v] = per_vertex.get(v, 0) + 1
        for e in combinations(clique, 2):
            e = tuple(sorted(e))
            edge_count[e] = edge_count.get(e, 0) + 1
    clustering = nx.algorithms.cluster.clustering(graph)
    rows = {}
    for i, clique in enumerate(final):
        size = len(clique)
        edges = [edge_count[e] for e in combinations(clique, 2)]
        rows[F(clique)] = [int(i >= len(max_cliques)), size,
                           all(d > 1 for d in edges) if size > 1 else False,
                           sum(edges) / max(size * (size - 1) / 2, 1),
                           sum(degree[v] for v in clique) / size,
                           sum(recur[v] for v in clique) / size,
                           sum(per_vertex[v] for v in clique) / size,
                           sum(clustering[v] for v in clique) / size,
                           len(child2parents[clique]) if clique in child2parents else 0]
    return rows


# --- the regression tests -----------------------------------------------------------------------

def ours_and_official(budget: int, seed: int = 0):
    graph = project(HYPEREDGES)
    cliques = maximal_cliques(graph)
    plan = optimize_sampler(clique_statistics(cliques, HYPEREDGES), budget, seed)
    cands = sample_candidates(cliques, plan, seed)
    ours = candidate_features(graph, cliques, cands, standardize=False)
    # the official list of maximal cliques, in the order in which ours opens them (per size n: the
    # canonical order permuted by the seeded generator of sample_candidates)
    by_size = defaultdict(list)
    for c in canonical(cliques):
        by_size[len(c)].append(c)
    ordered = [tuple(sorted(by_size[n][i])) for n in sorted(by_size)
               for i in np.random.default_rng([seed, n]).permutation(len(by_size[n]))]
    children = official_find_children(ordered, [(n, k) for n, k, _ in plan], {(n, k): r for n, k, r in plan})
    official = official_count_features(graph, set(ordered), official_child_parents(children))
    return plan, cands, ours, official


@pytest.mark.parametrize("budget,seed", [(10_000, 0), (60, 0), (60, 3), (25, 1)])
def test_candidates_and_count_features_equal_the_official_transcription(budget, seed):
    plan, cands, ours, official = ours_and_official(budget, seed)
    assert any(k < n for n, k, _ in plan), "the fixed hypergraph should make the plan open sub-cliques"
    assert (plan[-1][2] < 1) == (budget < 10_000)            # a cut budget draws its last pair at r < 1
    assert set(cands) == set(official)                       # the same candidates
    for row, cand in zip(ours, cands):                       # the same nine features, column by column
        np.testing.assert_allclose(row, np.asarray(official[F(cand)], dtype=float), rtol=1e-12, atol=0,
                                   err_msg=f"candidate {sorted(cand)}: columns {FEATURES}")


def test_the_transcription_sees_an_opened_clique_through_its_sub_cliques():
    """The transcription itself, by hand: two 4-cliques sharing a triangle, the plan (4, 3) at r = 1."""
    cliques = [(1, 2, 3, 4), (2, 3, 4, 5)]
    children = official_find_children(cliques, [(4, 3)], {(4, 3): 1.0})
    parents = official_child_parents(children)
    assert len(parents) == 7 and parents[(2, 3, 4)] == [(1, 2, 3, 4), (2, 3, 4, 5)]
    graph = nx.Graph([(a, b) for c in cliques for a, b in combinations(c, 2)])
    rows = official_count_features(graph, set(cliques), parents)
    assert rows[F((2, 3, 4))][0] == 1 and rows[F((2, 3, 4))][8] == 2 and rows[F((1, 2, 3, 4))][8] == 0
    assert rows[F((2, 3, 4))][2] is True and rows[F((1, 2, 3))][2] is False
