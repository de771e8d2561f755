"""SHyRe: projection and maximal cliques against itertools and brute force, scores by hand, the
seeded split, the sampler's statistics by brute force and its budget/greedy order, candidates and
features on hand-built graphs, the baselines, and a planted hypergraph that only learning solves."""
import math
import random
from itertools import combinations

import networkx as nx
import numpy as np
import pytest

from methods.shyre import (CFinder, SHyRe, candidate_features, clique_cover, clique_statistics, jaccard,
                           maximal_cliques, optimize_sampler, own_edge_cliques, project, sample_candidates, scores,
                           split_hyperedges)

F = frozenset


def random_hypergraph(num_vertices=14, num_edges=12, max_size=5, seed=0):
    rng = random.Random(seed)
    return [rng.sample(range(num_vertices), rng.randint(1, max_size)) for _ in range(num_edges)]


def brute_maximal_cliques(graph):
    """Every vertex subset that is a clique and that no vertex outside extends (size >= 2)."""
    nodes, adj = sorted(graph), {v: set(graph[v]) for v in graph}
    cliques = [set(s) for r in range(2, len(nodes) + 1) for s in combinations(nodes, r)
               if all(b in adj[a] for a, b in combinations(s, 2))]
    return {F(c) for c in cliques if not any(all(v in adj[u] for u in c) for v in set(nodes) - c)}


# --- projection, maximal cliques ------------------------------------------------------------

@pytest.mark.parametrize("seed", range(4))
def test_projection_is_the_union_of_each_hyperedges_pairs(seed):
    edges = random_hypergraph(seed=seed)
    graph = project(edges + edges[:3])                       # duplicates collapse
    pairs = {F(p) for e in edges for p in combinations(e, 2)}
    assert {F(e) for e in graph.edges} == pairs
    assert set(graph.nodes) == {v for e in edges for v in e}  # size-1 hyperedges leave their vertex


@pytest.mark.parametrize("seed", range(4))
def test_maximal_cliques_match_brute_force_and_networkx(seed):
    graph = project(random_hypergraph(num_vertices=12, num_edges=10, seed=seed))
    graph.add_node(99)                                       # an isolated vertex is no candidate
    found = maximal_cliques(graph)
    assert found == brute_maximal_cliques(graph)
    assert found == {F(c) for c in nx.find_cliques(graph) if len(c) >= 2}


# --- scores ---------------------------------------------------------------------------------

def test_scores_by_hand():
    rec = [[1, 2], (1, 2, 3), {3, 4}]
    truth = [[3, 2, 1], [4, 3], [4, 5], [5, 6]]
    s = scores(rec, truth)                                   # 2 hits, 3 found, 4 true, 5 in the union
    assert s == pytest.approx({"precision": 2 / 3, "recall": 1 / 2, "f1": 4 / 7, "jaccard": 2 / 5})
    assert jaccard(rec, truth) == pytest.approx(2 / 5)
    assert jaccard([], []) == 1.0 and scores([], [])["jaccard"] == 1.0
    assert jaccard([[1, 2]], []) == 0.0


# --- split ----------------------------------------------------------------------------------

def test_split_is_a_seeded_partition_of_the_unique_hyperedges():
    edges = random_hypergraph(num_vertices=30, num_edges=60, seed=1)
    edges += edges[:5] + [[7]]                               # duplicates and a size-1 hyperedge
    unique = {F(e) for e in edges if len(set(e)) >= 2}
    train, query = split_hyperedges(edges, 0.5, seed=3)
    assert train | query == unique and not train & query
    assert len(train) == round(0.5 * len(unique))
    assert split_hyperedges(edges, 0.5, seed=3) == (train, query)
    assert split_hyperedges(edges, 0.5, seed=4) != (train, query)
    small, _ = split_hyperedges(edges, 0.2, seed=3)
    assert len(small) == round(0.2 * len(unique))


@pytest.mark.parametrize("fraction", [0.0, 1.0, 1.5, -0.1])
def test_split_refuses_a_fraction_outside_the_open_interval(fraction):
    with pytest.raises(ValueError, match="train_fraction"):
        split_hyperedges([[1, 2], [2, 3]], fraction)


def test_no_hyperedge_of_size_two_is_refused():
    with pytest.raises(ValueError, match="size >= 2"):
        split_hyperedges([[1], [2], [2]])
    with pytest.raises(ValueError, match="size >= 2"):
        SHyRe().fit([[1], [3]])


# --- statistics and the sampler --------------------------------------------------------------

@pytest.mark.parametrize("seed", range(3))
def test_statistics_match_brute_force(seed):
    edges = {F(e) for e in random_hypergraph(num_vertices=15, num_edges=14, seed=seed) if len(e) >= 2}
    cliques = maximal_cliques(project(edges))
    stats = clique_statistics(cliques, edges)
    ns, ks = {len(c) for c in cliques}, {len(e) for e in edges}
    assert set(stats) == {(n, k) for n in ns for k in ks if 2 <= k <= n}
    for (n, k), (covered, cost) in stats.items():
        assert covered == {e for e in edges if len(e) == k and any(len(c) == n and e <= c for c in cliques)}
        assert cost == sum(len(c) == n for c in cliques) * math.comb(n, k)


def planted_statistics():
    edges = {F(e) for e in random_hypergraph(num_vertices=40, num_edges=50, max_size=6, seed=7) if len(e) >= 2}
    return edges, maximal_cliques(project(edges))


@pytest.mark.parametrize("budget", [5, 40, 200])
def test_sampler_keeps_to_its_budget(budget):
    edges, cliques = planted_statistics()
    stats = clique_statistics(cliques, edges)
    plan = optimize_sampler(stats, budget, seed=0)
    spent = [r * stats[(n, k)][1] for n, k, r in plan]
    assert sum(spent) <= budget + 1e-9
    assert all(r == 1.0 for _, _, r in plan[:-1]) and 0 < plan[-1][2] <= 1
    # the sub-cliques actually drawn stay within the budget too
    drawn = sum(math.floor(r * sum(len(c) == n for c in cliques)) * math.comb(n, k) for n, k, r in plan)
    assert drawn <= budget


def test_sampler_takes_the_most_efficient_pair_first_and_covers_all_with_a_large_budget():
    edges, cliques = planted_statistics()
    stats = clique_statistics(cliques, edges)
    plan = optimize_sampler(stats, 10**9, seed=0)
    best = max(len(cov) / cost for cov, cost in stats.values())
    n, k, r = plan[0]
    assert len(stats[(n, k)][0]) / stats[(n, k)][1] == pytest.approx(best) and r == 1.0
    assert set().union(*(stats[(n, k)][0] for n, k, _ in plan)) == edges
    assert all(stats[(n, k)][0] for n, k, _ in plan)        # no pair taken that adds nothing
    candidates = sample_candidates(cliques, plan, seed=0)
    assert edges <= set(candidates)                          # every training hyperedge is a candidate
    assert optimize_sampler(stats, 0) == []
    with pytest.raises(ValueError, match="budget"):
        optimize_sampler(stats, -1)


def test_sampler_greedy_by_hand():
    """k = 2: (2, 2) gives 3 hyperedges for 3 (1 each); (3, 2) gives 1 new for 6 (1/6);
    k = 3: (3, 3) gives 1 for 2 (1/2). Order: (2,2), (3,3), (3,2); a budget of 4 cuts (3,3) at r = 1/2."""
    stats = {(2, 2): ({F((1, 2)), F((3, 4)), F((5, 6))}, 3), (3, 2): ({F((1, 2)), F((7, 8))}, 6),
             (3, 3): ({F((7, 8, 9))}, 2)}
    assert optimize_sampler(stats, 100) == [(2, 2, 1.0), (3, 3, 1.0), (3, 2, 1.0)]
    assert optimize_sampler(stats, 4) == [(2, 2, 1.0), (3, 3, 0.5)]


def test_candidates_and_parent_counts_by_hand():
    a, b = F((1, 2, 3, 4)), F((2, 3, 4, 5))                  # two 4-cliques sharing the triangle 234
    pair = F((6, 7))
    cands = sample_candidates({a, b, pair}, [(4, 3, 1.0)])
    triangles = {F(t) for c in (a, b) for t in combinations(c, 3)}
    assert set(cands) == {a, b, pair} | triangles
    assert cands[F((2, 3, 4))] == 2 and cands[F((1, 2, 3))] == 1
    assert cands[a] == cands[b] == cands[pair] == 0
    assert sample_candidates({a, b, pair}, [(4, 4, 1.0)])[a] == 1   # a maximal clique counts itself
    half = sample_candidates({a, b, pair}, [(4, 2, 0.5)], seed=1)   # floor(0.5 * 2) = 1 clique opened
    opened = [c for c in (a, b) if all(F(p) in half for p in combinations(c, 2))]
    assert len(opened) == 1 and len(half) == 3 + 6
    assert sample_candidates({a, b, pair}, [(4, 2, 0.5)], seed=1) == half


# --- features -------------------------------------------------------------------------------

def test_features_on_two_triangles_sharing_an_edge():
    graph = nx.Graph([("a", "b"), ("a", "c"), ("b", "c"), ("b", "d"), ("c", "d")])
    cliques = maximal_cliques(graph)
    assert cliques == {F("abc"), F("bcd")}
    cands = {F("abc"): 0, F("bcd"): 1, F("bc"): 2}
    x = candidate_features(graph, cliques, cands, standardize=False)
    # degrees a2 b3 c3 d2; neighbour means a 3, b c 7/3, d 3; cliques per vertex a1 b2 c2 d1;
    # clustering a 1, b c 2/3, d 1; edge multiplicity ab ac 1, bc 2, bd cd 1
    expected = np.array([[0, 3, 0, 4 / 3, 8 / 3, 23 / 9, 5 / 3, 7 / 9, 0],
                         [0, 3, 0, 4 / 3, 8 / 3, 23 / 9, 5 / 3, 7 / 9, 1],
                         [1, 2, 1, 2, 3, 7 / 3, 2, 2 / 3, 2]])
    np.testing.assert_allclose(x, expected, rtol=1e-12)
    z = candidate_features(graph, cliques, cands)
    np.testing.assert_allclose(z, (expected - expected.mean(0)) / (expected.std(0) + 1e-8), atol=1e-12)


# --- baselines ------------------------------------------------------------------------------

def test_clique_cover_by_hand_and_covers_every_edge_with_cliques():
    graph = nx.Graph([(1, 2), (2, 3), (3, 1), (3, 4), (4, 5), (5, 6), (6, 4), (1, 6)])   # official ecc.py example
    assert clique_cover(graph) == {F((1, 2, 3)), F((1, 6)), F((3, 4)), F((4, 5, 6))}
    for seed in range(3):
        g = project(random_hypergraph(num_vertices=20, num_edges=15, seed=seed))
        cover = clique_cover(g)
        assert all(g.has_edge(u, v) for c in cover for u, v in combinations(c, 2))
        assert {F(e) for e in g.edges} <= {F(p) for c in cover for p in combinations(c, 2)}


def test_own_edge_rule_against_a_brute_force_over_edges_and_cliques():
    for seed in range(4):
        g = project(random_hypergraph(num_vertices=16, num_edges=14, max_size=4, seed=seed))
        cliques = [F(c) for c in nx.find_cliques(g) if len(c) >= 2]
        keep = {c for c in cliques
                if any(sum(set(e) <= d for d in cliques) == 1 for e in combinations(sorted(c), 2))}
        assert own_edge_cliques(g) == keep
    # three triangles pairwise sharing an edge around a centre triangle: the centre has no edge of its own
    g = nx.Graph([(1, 2), (2, 3), (3, 1), (1, 4), (2, 4), (2, 5), (3, 5), (3, 6), (1, 6)])
    assert own_edge_cliques(g) == {F((1, 2, 4)), F((2, 3, 5)), F((1, 3, 6))}


def test_fit_accepts_a_generator_as_it_accepts_a_list():
    edges = random_hypergraph(num_vertices=30, num_edges=25, max_size=4, seed=3)
    graph = project(edges)
    assert (SHyRe(budget=200, seed=0).fit(e for e in edges).reconstruct(graph)
            == SHyRe(budget=200, seed=0).fit(list(edges)).reconstruct(graph))
    assert CFinder().fit(e for e in edges).k_ == CFinder().fit(list(edges)).k_


def test_cfinder_picks_the_best_training_k_and_percolates_with_networkx():
    edges = random_hypergraph(num_vertices=40, num_edges=30, max_size=6, seed=2)
    truth = {F(e) for e in edges if len(e) >= 2}
    model = CFinder().fit(edges)
    sizes = [len(e) for e in truth]
    ks = {max(2, int(np.quantile(sizes, q)) + 1) for q in (0.1, 0.2, 0.3, 0.4, 0.5)}
    graph = project(edges)
    score = {k: jaccard(nx.community.k_clique_communities(graph, k), truth) for k in ks}
    assert model.k_ == max(ks, key=lambda k: (score[k], k))
    assert model.reconstruct(graph) == {F(c) for c in nx.community.k_clique_communities(graph, model.k_)}


# --- SHyRe ----------------------------------------------------------------------------------

def planted(true_triangles, fake_triangles, start):
    """True triangles (one size-3 hyperedge, alone) and triangles of pairs (three size-2
    hyperedges, each vertex with a pendant pair as well): the projections look alike up to
    degrees, maximal cliques score exactly 0.5 when the counts are equal."""
    edges, v = [], start
    for _ in range(true_triangles):
        edges.append((v, v + 1, v + 2))
        v += 3
    for _ in range(fake_triangles):
        a, b, c = v, v + 1, v + 2
        edges += [(a, b), (b, c), (a, c), (a, v + 3), (b, v + 4), (c, v + 5)]
        v += 6
    return edges


def test_planted_hypergraph_maximal_cliques_half_shyre_above_0_9():
    train, query = planted(30, 30, 0), planted(20, 20, 10_000)
    graph = project(query)
    assert jaccard(maximal_cliques(graph), query) == pytest.approx(0.5)
    model = SHyRe(budget=10_000, seed=0).fit(train)
    assert jaccard(model.reconstruct(graph), query) >= 0.9
    only_max = SHyRe(budget=0, seed=0).fit(train)            # no sampler: the pairs are never candidates
    assert only_max.plan_ == [] and jaccard(only_max.reconstruct(graph), query) < 0.9


def test_reconstruct_before_fit_names_fit():
    with pytest.raises(RuntimeError, match="fit"):
        SHyRe().reconstruct(nx.complete_graph(3))
    with pytest.raises(RuntimeError, match="fit"):
        CFinder().reconstruct(nx.complete_graph(3))
