"""SHyRe: hypergraph reconstruction from a projected graph (Wang & Kleinberg, ICLR 2024). See README.md."""
from __future__ import annotations

from hydra.utils import instantiate

from common.config import UserError
from common.eval import jaccard, set_scores
from methods.shyre.baselines import CFinder, clique_cover, own_edge_cliques
from methods.shyre.classifier import SHyRe
from methods.shyre.data import hypergraph_pair, official_pair, read_hyperedges
from methods.shyre.features import FEATURES, candidate_features
from methods.shyre.hypergraph import as_hyperedges, maximal_cliques, project, split_hyperedges
from methods.shyre.sampler import clique_statistics, optimize_sampler, sample_candidates

BASELINES = ("max_clique", "clique_cover", "cfinder", "shyre_max_only", "own_edge")


def scores(reconstructed, truth) -> dict[str, float]:
    """precision, recall, f1, jaccard of two hypergraphs (any iterables of vertex iterables;
    the empty set against itself scores 1)."""
    return set_scores(reconstructed, truth)


def run(cfg, ctx) -> dict[str, float]:
    """Split (or load) a training and a query hypergraph, fit SHyRe (`method.model`) and the
    baselines on the training one, reconstruct the query hypergraph from its projection alone;
    `<procedure>/{precision,recall,f1,jaccard}` per procedure (a sub-row per procedure of the
    reproduce tables: `shyre`, `max_clique`, `clique_cover`, ...), and the candidate counts."""
    m = cfg.method
    unknown = sorted(set(m.baselines) - set(BASELINES))
    if unknown:
        raise UserError(f"method.baselines: unknown {unknown}; choose from {', '.join(BASELINES)}", exit_code=2)
    train, query = hypergraph_pair(cfg.dataset, ctx.seed, m.train_fraction)
    truth, graph = as_hyperedges(query), project(query)
    model = instantiate(m.model, seed=ctx.seed).fit(train)
    found = {"shyre": model.reconstruct(graph)}
    out = {"train_candidates": float(model.train_candidates_), "query_candidates": float(model.query_candidates_),
           "plan_pairs": float(len(model.plan_)), "query_hyperedges": float(len(truth))}
    for name in m.baselines:
        if name == "max_clique":
            found[name] = maximal_cliques(graph)
        elif name == "clique_cover":
            found[name] = clique_cover(graph)
        elif name == "own_edge":
            found[name] = own_edge_cliques(graph)
        elif name == "cfinder":
            cfinder = CFinder().fit(train)
            found[name] = cfinder.reconstruct(graph)
            out["cfinder_k"] = float(cfinder.k_)
        else:
            found[name] = instantiate(m.model, seed=ctx.seed, budget=0).fit(train).reconstruct(graph)
    for name, hyperedges in found.items():
        out |= {f"{name}/{metric}": value for metric, value in scores(hyperedges, truth).items()}
    return out


__all__ = ["BASELINES", "CFinder", "FEATURES", "SHyRe", "as_hyperedges", "candidate_features", "clique_cover",
           "clique_statistics", "hypergraph_pair", "jaccard", "maximal_cliques", "official_pair",
           "optimize_sampler", "own_edge_cliques", "project", "read_hyperedges", "run", "sample_candidates", "scores",
           "split_hyperedges"]
