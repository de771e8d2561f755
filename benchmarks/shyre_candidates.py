"""SHyRe's cost on synthetic hypergraphs (1 hyperedge per vertex): (1) candidates + features
against maximal-clique enumeration alone, at 1k / 5k / 20k vertices (ratio in the same process);
(2) candidates and sampling time against the budget beta on the 5k hypergraph.

    python benchmarks/shyre_candidates.py [--quick]  -> tables + benchmarks/results/shyre_candidates.json
"""
import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.common_bench import interleaved, save  # noqa: E402
from common.data.hypergraphs import synthetic_hypergraph  # noqa: E402
from methods.shyre import (candidate_features, clique_statistics, maximal_cliques, optimize_sampler,  # noqa: E402
                           project, sample_candidates, split_hyperedges)


def pair(num_vertices: int):
    edges = synthetic_hypergraph(num_vertices, 5, edges_per_vertex=1.0, seed=0).edges
    train, query = split_hyperedges(edges, 0.5, seed=0)
    return train, project(query)


def plan_for(train, budget: int):
    return optimize_sampler(clique_statistics(maximal_cliques(project(train)), train), budget, seed=0)


def size_rows(sizes, budget, repeats):
    rows = []
    for n in sizes:
        train, graph = pair(n)
        plan = plan_for(train, budget)
        cliques = maximal_cliques(graph)
        fns = {"cliques": lambda: maximal_cliques(graph),
               "cliques+candidates+features": lambda: candidate_features(
                   graph, maximal_cliques(graph), sample_candidates(maximal_cliques(graph), plan))}
        t = interleaved(fns, repeats)
        m = len(sample_candidates(cliques, plan))
        rows.append({"vertices": n, "edges": graph.number_of_edges(), "max_cliques": len(cliques), "candidates": m,
                     "cliques_s": t["cliques"], "pipeline_s": t["cliques+candidates+features"],
                     "ratio": t["cliques+candidates+features"] / t["cliques"]})
    return rows


def budget_rows(num_vertices, budgets, repeats):
    train, graph = pair(num_vertices)
    cliques = maximal_cliques(graph)
    rows = []
    for beta in budgets:
        plan = plan_for(train, beta)
        t = interleaved({"cliques": lambda: maximal_cliques(graph),
                         "candidates": lambda: sample_candidates(cliques, plan)}, repeats)
        rows.append({"budget": beta, "plan_pairs": len(plan), "candidates": len(sample_candidates(cliques, plan)),
                     "candidates_s": t["candidates"], "ratio_to_cliques": t["candidates"] / t["cliques"]})
    return rows


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true", help="1k and 5k vertices, one repeat")
    args = parser.parse_args()
    sizes, repeats = ((1000, 5000), 1) if args.quick else ((1000, 5000, 20000), 3)
    by_size = size_rows(sizes, 10_000, repeats)
    by_budget = budget_rows(5000, (0, 1_000, 10_000, 100_000), repeats)
    table = ["| vertices | graph edges | maximal cliques | candidates (β = 10⁴) | cliques (s) | + candidates + features (s) | ratio |",
             "|---|---|---|---|---|---|---|"]
    table += [f"| {r['vertices']} | {r['edges']} | {r['max_cliques']} | {r['candidates']} | {r['cliques_s']:.3f} | "
              f"{r['pipeline_s']:.3f} | {r['ratio']:.1f}× |" for r in by_size]
    table += ["", "| β (5k vertices) | plan pairs | candidates | sampling (s) | ÷ clique enumeration |", "|---|---|---|---|---|"]
    table += [f"| {r['budget']} | {r['plan_pairs']} | {r['candidates']} | {r['candidates_s']:.3f} | "
              f"{r['ratio_to_cliques']:.2f}× |" for r in by_budget]
    text = "\n".join(table)
    print(text)
    save("shyre_candidates", {"by_size": by_size, "by_budget": by_budget, "quick": args.quick,
                              "note": "2-core machine shared with other jobs; ratios measured in one process"},
         table=text)


if __name__ == "__main__":
    main()
