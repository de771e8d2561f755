"""The clique sampler (paper Section 4.2): which sub-cliques of which maximal cliques to take
as candidates, learned on the training pair (H', G') under a budget of beta sub-cliques.

    E(n, k) = size-k hyperedges of H' inside some size-n maximal clique of G'   (n >= k >= 2)
    Q(n, k) = |M_n| * C(n, k)                         (sub-cliques drawn if every M_n is opened)
    greedy: per k keep Gamma_k (collected) and the unused n; take the (n, k) of largest
            (|Gamma_k ∪ E(n, k)| - |Gamma_k|) / Q(n, k); r = min(1, beta / Q); beta -= Q
"""
from __future__ import annotations

import math
from collections import defaultdict
from itertools import combinations

import numpy as np

from methods.shyre.hypergraph import canonical


def clique_statistics(max_cliques, hyperedges) -> dict[tuple[int, int], tuple[set[frozenset], int]]:
    """{(n, k): (E(n, k), Q(n, k))} for every maximal-clique size n and hyperedge size k with
    2 <= k <= n (E may be empty)."""
    cliques = [frozenset(c) for c in max_cliques]
    edges = {e for e in map(frozenset, hyperedges) if len(e) >= 2}
    by_vertex: dict = defaultdict(set)       # vertex -> ids of the maximal cliques holding it
    for i, c in enumerate(cliques):
        for v in c:
            by_vertex[v].add(i)
    count = defaultdict(int)                 # n -> |M_n|
    for c in cliques:
        count[len(c)] += 1
    covered: dict[tuple[int, int], set[frozenset]] = defaultdict(set)
    for e in edges:
        members = sorted((by_vertex.get(v, set()) for v in e), key=len)
        for i in set.intersection(*members):
            covered[(len(cliques[i]), len(e))].add(e)
    sizes = {len(e) for e in edges}
    return {(n, k): (covered.get((n, k), set()), count[n] * math.comb(n, k))
            for n in sorted(count) for k in sorted(sizes) if 2 <= k <= n}


def optimize_sampler(stats, budget: int, seed: int = 0) -> list[tuple[int, int, float]]:
    """The greedy plan [(n, k, r)] in the order taken; r is the share of the size-n maximal
    cliques whose k-subsets are drawn. Stops when the budget is spent or no pair adds a
    hyperedge. Ties: the smaller n within a k, then the larger k (the official tie order)."""
    if budget < 0:
        raise ValueError(f"budget must be >= 0, got {budget}")
    rng = np.random.default_rng(seed)
    ks = sorted({k for _, k in stats})
    gamma = {k: set() for k in ks}
    unused = {k: sorted(n for n, kk in stats if kk == k) for k in ks}

    def best(k):                             # (gain per cost, n) of the best unused n for k
        top = (0.0, None)
        for n in unused[k]:
            found, cost = stats[(n, k)]
            gain = len(found - gamma[k]) / cost if cost else 0.0
            if gain > top[0]:
                top = (gain, n)
        return top

    plan, left = [], budget
    while left > 0:
        gain, k = max(((best(k)[0], k) for k in ks), default=(0.0, None))
        if gain <= 0:
            break
        n = best(k)[1]
        found, cost = stats[(n, k)]
        r = min(1.0, left / cost)
        if r < 1:                            # a random r-share of what the pair would collect
            pool = canonical(found)
            gamma[k] |= {pool[i] for i in rng.choice(len(pool), int(r * len(pool)), replace=False)}
        else:
            gamma[k] |= found
        unused[k].remove(n)
        left -= cost
        plan.append((n, k, r))
    return plan


def sample_candidates(max_cliques, plan, seed: int = 0) -> dict[frozenset, int]:
    """Every maximal clique, plus the k-subsets of floor(r * |M_n|) of the size-n maximal
    cliques for each (n, k, r) of the plan; each candidate mapped to the number of sampled
    maximal cliques it came from (a maximal clique counts itself when (n, n) is in the plan).
    The size-n cliques are opened in one seeded order per n, so the plan's pairs for one n
    share their first cliques (as the official code's fixed list order does)."""
    by_size: dict[int, list[frozenset]] = defaultdict(list)
    for c in canonical({frozenset(c) for c in max_cliques}):
        by_size[len(c)].append(c)
    order = {n: np.random.default_rng([seed, n]).permutation(len(cs)) for n, cs in by_size.items()}
    candidates = {c: 0 for cs in by_size.values() for c in cs}
    for n, k, r in plan:
        cliques = by_size.get(n, [])
        take = math.floor(r * len(cliques) + 1e-9)
        for i in order.get(n, [])[:take]:
            for child in combinations(sorted(cliques[i]), k):
                child = frozenset(child)
                candidates[child] = candidates.get(child, 0) + 1
    return candidates
