"""Causal dropout: gene-network inference with test-wise deletion of zeros (Dai, Ng, Luo, Spirtes,
Stojanov & Zhang, ICLR 2024). See README.md."""
from __future__ import annotations

import numpy as np
from hydra.utils import instantiate

from common.config import UserError
from methods.causal_dropout.ci_tests import RandomDeletionFisherZ, ZeroDeletionFisherZ, fisher_z
from methods.causal_dropout.graphs import (blocking_separations, ci_error_rates, cpdag_shd, d_connections,
                                           d_separated, dag_graph, general_graph, pc_cpdag, skeleton_scores)
from methods.causal_dropout.simulate import apply_dropout, impute, linear_sem, random_dag, topological_order

PROCEDURES = ("oracle", "zerodel", "listwise", "zeros", "mean_imputed", "knn_imputed", "random_del",
              "random_del_listwise", "empty", "complete")
# Rows that run no test: PC's output of a test that never rejects (`empty`: no adjacency) or always
# rejects (`complete`: every pair adjacent, unoriented); at the CI level their rejection rate is 0 / 1.
FIXED = {"empty": 0.0, "complete": 1.0}
EVALUATIONS = ("ci", "pc")


def make_test(procedure: str, z: np.ndarray, x: np.ndarray, seed: int, knn: dict | None = None):
    """The CI test of one procedure (a row of the tables) on the true (z) and measured (x) expressions."""
    knn = dict(knn or {})
    if procedure == "oracle":
        return ZeroDeletionFisherZ(z, delete="none")
    if procedure == "zerodel":
        return ZeroDeletionFisherZ(x, delete="conditioning")
    if procedure == "listwise":
        return ZeroDeletionFisherZ(x, delete="all")
    if procedure == "zeros":
        return ZeroDeletionFisherZ(x, delete="none")
    if procedure == "mean_imputed":
        return ZeroDeletionFisherZ(impute(x, "mean"), delete="none")
    if procedure == "knn_imputed":
        return ZeroDeletionFisherZ(impute(x, "knn", seed=seed, **knn), delete="none")
    if procedure == "random_del":
        return RandomDeletionFisherZ(x, seed=seed)
    if procedure == "random_del_listwise":
        return RandomDeletionFisherZ(x, seed=seed, match="all")
    if procedure in FIXED:
        raise ValueError(f"{procedure!r} runs no test: see fixed_graph")
    raise ValueError(f"unknown procedure {procedure!r}; choose from {', '.join(PROCEDURES)}")


def fixed_graph(procedure: str, num_nodes: int) -> np.ndarray:
    """The causal-learn graph matrix of a row that runs no test: no edge (`empty`) or every pair joined
    by an undirected edge (`complete`: what PC returns when every test rejects, as no sepset is found)."""
    if procedure not in FIXED:
        raise ValueError(f"unknown fixed graph {procedure!r}; choose from {', '.join(FIXED)}")
    if procedure == "empty":
        return np.zeros((num_nodes, num_nodes), dtype=int)
    return -(1 - np.eye(num_nodes, dtype=int))


def simulate(cfg, seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(adjacency, z, x) of one run: the DAG, the SEM and the dropout each from their own stream."""
    m = cfg.method
    dag_seed, sem_seed, dropout_seed = (int(s) for s in np.random.SeedSequence(seed).generate_state(3))
    adjacency = random_dag(m.num_nodes, m.avg_degree, seed=dag_seed)
    z, _ = instantiate(m.sem)(adjacency, max(m.n_samples), seed=sem_seed)
    x, _ = instantiate(m.dropout)(z, seed=dropout_seed)
    return adjacency, z, x


def evaluate_ci(cfg, adjacency, z, x, seed: int) -> dict[str, float]:
    """`<procedure>/type1` and `/power` at the largest n (every n: `/type1_n<N>`, `/power_n<N>`), and
    `/type1_growth` = type1(largest n) − type1(smallest n); the n are prefixes of one draw."""
    m = cfg.method
    sizes = list(m.separations.sizes)
    separations = blocking_separations(adjacency, sizes, m.separations.per_size, seed=seed)
    connections = d_connections(adjacency, sizes, m.separations.per_size, seed=seed)
    out: dict[str, float] = {"num_separations": float(len(separations)), "num_connections": float(len(connections))}
    ns = sorted(int(n) for n in m.n_samples)
    for procedure in m.procedures:
        for n in ns:
            if procedure in FIXED:      # never / always rejects
                out |= {f"{procedure}/type1_n{n}": FIXED[procedure], f"{procedure}/power_n{n}": FIXED[procedure]}
                continue
            test = make_test(procedure, z[:n], x[:n], seed, m.knn)
            type1, power = ci_error_rates(test, separations, connections, m.alpha)
            out |= {f"{procedure}/type1_n{n}": type1, f"{procedure}/power_n{n}": power}
        out |= {f"{procedure}/type1": out[f"{procedure}/type1_n{ns[-1]}"],
                f"{procedure}/power": out[f"{procedure}/power_n{ns[-1]}"],
                f"{procedure}/type1_growth": out[f"{procedure}/type1_n{ns[-1]}"] - out[f"{procedure}/type1_n{ns[0]}"]}
    return out


def evaluate_pc(cfg, adjacency, z, x, seed: int) -> dict[str, float]:
    """`<procedure>/{skel_f1, precision, recall, tp, fp, fn, shd}` of PC with each procedure's test
    (`empty`, `complete`: the fixed graph, no test)."""
    m = cfg.method
    out: dict[str, float] = {"true_edges": float(np.asarray(adjacency).sum())}
    for procedure in m.procedures:
        if procedure in FIXED:
            graph, tests = fixed_graph(procedure, len(adjacency)), 0
        else:
            test = make_test(procedure, z, x, seed, m.knn)
            graph = pc_cpdag(test.data, test, m.alpha, m.max_depth)
            tests = len(test.pvalue_cache) - 3      # less data_hash, method_name, parameters_hash
        skeleton = skeleton_scores(adjacency, graph)
        out |= {f"{procedure}/skel_f1": skeleton["f1"], f"{procedure}/precision": skeleton["precision"],
                f"{procedure}/recall": skeleton["recall"], f"{procedure}/tp": skeleton["tp"],
                f"{procedure}/fp": skeleton["fp"], f"{procedure}/fn": skeleton["fn"],
                f"{procedure}/shd": float(cpdag_shd(adjacency, graph)), f"{procedure}/tests": float(tests)}
    return out


def run(cfg, ctx) -> dict[str, float]:
    """Simulate one DAG, its expressions and their dropouts (the run's seed), then evaluate every
    procedure (`method.procedures`) on that one draw: at the CI level (`method.evaluate: ci`) or as
    the test inside PC (`pc`). Metrics are `<procedure>/<metric>`: one row of the table each."""
    m = cfg.method
    unknown = sorted(set(m.procedures) - set(PROCEDURES))
    if unknown:
        raise UserError(f"method.procedures: unknown {unknown}; choose from {', '.join(PROCEDURES)}", exit_code=2)
    if m.evaluate not in EVALUATIONS:
        raise UserError(f"method.evaluate must be one of {', '.join(EVALUATIONS)}, got {m.evaluate!r}", exit_code=2)
    if not 0 < m.alpha < 1:
        raise UserError(f"method.alpha must lie in (0, 1), got {m.alpha}", exit_code=2)
    adjacency, z, x = simulate(cfg, ctx.seed)
    metrics = {"zero_fraction": float((x == 0).mean())}
    if m.evaluate == "ci":
        return metrics | evaluate_ci(cfg, adjacency, z, x, ctx.seed)
    return metrics | evaluate_pc(cfg, adjacency, z, x, ctx.seed)


__all__ = ["FIXED", "PROCEDURES", "RandomDeletionFisherZ", "ZeroDeletionFisherZ", "apply_dropout", "blocking_separations",
           "ci_error_rates", "cpdag_shd", "d_connections", "d_separated", "dag_graph", "fisher_z", "fixed_graph", "general_graph",
           "impute", "linear_sem", "make_test", "pc_cpdag", "random_dag", "run", "simulate", "skeleton_scores",
           "topological_order"]
