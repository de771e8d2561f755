"""Causal dropout (methods/causal_dropout): simulators against their equations, the Fisher-z test against
least squares, deletion rows by a loop, the theorem on a fork, PC against causal-learn's `pc`,
d-separation against a moralised ancestral graph, SHD and F1 by hand, bad input."""
from itertools import combinations
from types import SimpleNamespace

import numpy as np
import pytest
from scipy.special import expit
from scipy.stats import norm

from methods.causal_dropout import (RandomDeletionFisherZ, ZeroDeletionFisherZ, apply_dropout, blocking_separations,
                                    ci_error_rates, cpdag_shd, d_connections, d_separated, fisher_z, impute,
                                    fixed_graph, linear_sem, pc_cpdag, random_dag, run, skeleton_scores)

CHAIN = np.array([[0, 1, 0], [0, 0, 1], [0, 0, 0]])    # 0 -> 1 -> 2


# --- simulators -------------------------------------------------------------------------------------

def test_random_dag_has_round_p_deg_over_2_edges_and_no_cycle():
    for p, deg, seed in [(20, 3, 0), (10, 1, 1), (7, 2.5, 2), (5, 10, 3)]:
        a = random_dag(p, deg, seed=seed)
        assert a.shape == (p, p) and a.sum() == min(round(p * deg / 2), p * (p - 1) // 2)
        assert np.all(np.diag(a) == 0) and np.all(a * a.T == 0)
        # a DAG: the power p of the adjacency matrix is zero (no walk of length p)
        assert not np.linalg.matrix_power(a, p).any()
    assert np.array_equal(random_dag(20, 3, seed=5), random_dag(20, 3, seed=5))
    assert not np.array_equal(random_dag(20, 3, seed=5), random_dag(20, 3, seed=6))


def test_linear_sem_follows_its_equation():
    a = random_dag(8, 3, seed=1)
    z, w = linear_sem(a, 40_000, seed=2)
    assert np.all((w != 0) == (a == 1))
    assert np.all((np.abs(w[a == 1]) >= 0.25) & (np.abs(w[a == 1]) <= 1.0))
    noise = z - z @ w                              # eps_j = z_j - sum_i W[i, j] z_i
    # the noise is independent across genes and N(mu_j, s_j^2) with mu in [-1, 1], s in [1, 2]:
    se_mean = noise.std(axis=0) / np.sqrt(len(z))
    assert np.all(noise.mean(axis=0) > -1 - 4 * se_mean) and np.all(noise.mean(axis=0) < 1 + 4 * se_mean)
    sd = noise.std(axis=0)
    assert np.all(sd > 1 - 0.03) and np.all(sd < 2 + 0.05)
    corr = np.corrcoef(noise.T)[np.triu_indices(8, 1)]
    assert np.abs(corr).max() < 5 / np.sqrt(len(z))


def test_exp_transform_is_the_standardised_gene_exponentiated():
    a = random_dag(6, 2, seed=3)
    z, w = linear_sem(a, 1_000, seed=4)
    lognormal, w2 = linear_sem(a, 1_000, seed=4, transform="exp")
    assert np.array_equal(w, w2)
    assert np.allclose(np.log(lognormal), (z - z.mean(axis=0)) / z.std(axis=0))


def test_car_dropout_rates_lie_in_their_range():
    z = np.random.default_rng(0).normal(size=(20_000, 6)) + 3
    x, dropped = apply_dropout(z, "car", seed=1, rate_range=(0.4, 0.7))
    assert np.array_equal(x, np.where(dropped, 0.0, z))
    tol = 4 * np.sqrt(0.25 / len(z))
    assert np.all(dropped.mean(axis=0) > 0.4 - tol) and np.all(dropped.mean(axis=0) < 0.7 + tol)


def test_truncated_dropout_removes_the_lowest_values_only():
    z = np.random.default_rng(0).normal(size=(5_000, 6))
    x, dropped = apply_dropout(z, "truncated", seed=3)
    for j in range(6):
        assert z[dropped[:, j], j].max() < z[~dropped[:, j], j].min()
        assert 0.2 - 1e-3 <= dropped[:, j].mean() <= 0.5 + 1e-3
    assert np.array_equal(x == 0, dropped)


def test_logistic_dropout_probability_is_its_sigmoid():
    z = np.random.default_rng(0).normal(size=(200_000, 1))
    _, dropped = apply_dropout(z, "logistic", seed=4, logistic=(-0.5, -1.5))
    bins = np.digitize(z[:, 0], [-1.0, -0.3, 0.3, 1.0])
    for b in range(5):
        inside = bins == b
        expected = expit(-0.5 - 1.5 * z[inside, 0]).mean()
        assert abs(dropped[inside, 0].mean() - expected) < 4 * np.sqrt(0.25 / inside.sum())


def test_mean_imputation_by_a_loop():
    x = np.array([[0.0, 2.0], [3.0, 0.0], [5.0, 4.0], [0.0, 0.0]])
    filled = impute(x, "mean")
    expected = x.copy()
    for j in range(2):
        nonzero = [x[k, j] for k in range(4) if x[k, j] != 0]
        for k in range(4):
            if x[k, j] == 0:
                expected[k, j] = sum(nonzero) / len(nonzero)
    assert np.allclose(filled, expected)


def test_knn_imputation_is_the_mean_of_the_nearest_cells_in_nan_euclidean_distance():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(40, 4)) + 5
    x[rng.random(x.shape) < 0.3] = 0
    x[0] = [0, 5.5, 4.2, 6.1]
    filled = impute(x, "knn", k=3)
    for cell in range(len(x)):
        for gene in np.flatnonzero(x[cell] == 0):
            distances = []
            for other in range(len(x)):
                if other == cell or x[other, gene] == 0:
                    continue
                both = (x[cell] != 0) & (x[other] != 0)
                if both.any():   # sklearn: sqrt(genes / co-measured genes * squared distance over them)
                    d = np.sqrt(x.shape[1] / both.sum() * ((x[cell, both] - x[other, both]) ** 2).sum())
                    distances.append((d, x[other, gene]))
            nearest = sorted(distances)[:3]
            assert filled[cell, gene] == pytest.approx(np.mean([v for _, v in nearest]))
    assert np.array_equal(filled[x != 0], x[x != 0])


# --- CI tests ---------------------------------------------------------------------------------------

def _residual_correlation(data, i, j, cond):
    design = np.column_stack([np.ones(len(data)), data[:, list(cond)]])
    ri = data[:, i] - design @ np.linalg.lstsq(design, data[:, i], rcond=None)[0]
    rj = data[:, j] - design @ np.linalg.lstsq(design, data[:, j], rcond=None)[0]
    return float(ri @ rj / np.sqrt((ri @ ri) * (rj @ rj)))


def test_fisher_z_is_the_least_squares_residual_correlation():
    a = random_dag(6, 3, seed=0)
    z, _ = linear_sem(a, 500, seed=1)
    for i, j, cond in [(0, 1, ()), (2, 5, (0,)), (1, 4, (0, 3)), (0, 5, (1, 2, 3))]:
        p, r, n = fisher_z(z, i, j, cond)
        expected_r = _residual_correlation(z, i, j, cond)
        assert r == pytest.approx(expected_r, abs=1e-10) and n == 500
        statistic = np.sqrt(500 - len(cond) - 3) * abs(0.5 * np.log((1 + expected_r) / (1 - expected_r)))
        assert p == pytest.approx(2 * (1 - norm.cdf(statistic)), abs=1e-12)
    rows = np.arange(0, 500, 3)
    assert fisher_z(z, 0, 1, (2,), rows=rows)[1] == pytest.approx(_residual_correlation(z[rows], 0, 1, (2,)))
    assert fisher_z(z, 0, 1, (2,), rows=rows[:4]) == (1.0, 0.0, 4)    # N <= |S| + 3: p = 1
    assert fisher_z(z, 0, 1, (2,), rows=rows[:5])[0] < 1


def test_plain_test_equals_causal_learns_fisher_z():
    from causallearn.utils.cit import FisherZ

    z, _ = linear_sem(random_dag(7, 3, seed=2), 300, seed=3)
    ours, theirs = ZeroDeletionFisherZ(z, delete="none"), FisherZ(z)
    for i, j, cond in [(0, 1, []), (3, 6, [1]), (2, 4, [0, 5, 6])]:
        assert ours(i, j, cond) == pytest.approx(theirs(i, j, cond), rel=1e-9, abs=1e-15)


def test_deletion_rows_by_a_loop():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(300, 6))
    x[rng.random(x.shape) < 0.4] = 0
    zerodel, listwise, random_del = ZeroDeletionFisherZ(x), ZeroDeletionFisherZ(x, "all"), RandomDeletionFisherZ(x, 7)
    for i, j, cond in [(0, 1, ()), (4, 2, (5,)), (1, 3, (0, 5)), (5, 0, (4, 1, 2))]:
        conditioning = [c for c in range(300) if all(x[c, s] != 0 for s in cond)]
        involved = [c for c in range(300) if all(x[c, s] != 0 for s in (i, j, *cond))]
        assert zerodel.rows(i, j, cond).tolist() == conditioning
        assert listwise.rows(i, j, cond).tolist() == involved
        drawn = random_del.rows(i, j, cond)
        assert len(drawn) == len(conditioning) == len(set(drawn.tolist()))
        assert np.array_equal(drawn, random_del.rows(j, i, tuple(reversed(cond))))   # seeded by (seed, i, j, S)
        assert zerodel.test(i, j, cond) == pytest.approx(fisher_z(x, i, j, cond, rows=conditioning), rel=1e-12)
        assert random_del.test(i, j, cond) == pytest.approx(fisher_z(x, i, j, cond, rows=drawn), rel=1e-12)
    assert not np.array_equal(random_del.rows(1, 3, (0, 5)), RandomDeletionFisherZ(x, 8).rows(1, 3, (0, 5)))


def test_listwise_matched_random_deletion_keeps_as_many_cells_as_listwise_by_a_loop():
    rng = np.random.default_rng(1)
    x = rng.normal(size=(300, 6))
    x[rng.random(x.shape) < 0.4] = 0
    matched = RandomDeletionFisherZ(x, 7, match="all")
    for i, j, cond in [(0, 1, ()), (4, 2, (5,)), (1, 3, (0, 5)), (5, 0, (4, 1, 2))]:
        involved = sum(all(x[c, s] != 0 for s in (i, j, *cond)) for c in range(300))
        drawn = matched.rows(i, j, cond)
        assert len(drawn) == involved == len(set(drawn.tolist())) and involved < 300
        assert np.array_equal(drawn, matched.rows(j, i, tuple(reversed(cond))))
        assert matched.test(i, j, cond) == pytest.approx(fisher_z(x, i, j, cond, rows=drawn), rel=1e-12)


def test_fork_under_car_dropout_is_dependent_given_x0_and_independent_on_cells_with_x0_nonzero():
    # Z1 <- Z0 -> Z2, 50% dropout at random on every gene: a zero of X0 does not block the fork
    adjacency = np.array([[0, 1, 1], [0, 0, 0], [0, 0, 0]])
    z, _ = linear_sem(adjacency, 20_000, seed=0, weight_range=(1.0, 1.0), noise_mean_range=(2.0, 2.0))
    x, _ = apply_dropout(z, "car", seed=1, rate_range=(0.5, 0.5))
    assert ZeroDeletionFisherZ(x, delete="none")(1, 2, [0]) < 1e-6          # zeros as values: spurious dependence
    assert ZeroDeletionFisherZ(impute(x, "mean"), delete="none")(1, 2, [0]) < 1e-6
    assert ZeroDeletionFisherZ(x, delete="conditioning")(1, 2, [0]) > 0.01   # the theorem
    assert ZeroDeletionFisherZ(x, delete="all")(1, 2, [0]) > 0.01
    assert ZeroDeletionFisherZ(x, delete="conditioning")(1, 2, []) < 1e-6    # marginally dependent


# --- PC, graphs, scores -----------------------------------------------------------------------------

def test_pc_cpdag_is_causal_learns_pc_on_zero_free_data():
    from causallearn.search.ConstraintBased.PC import pc

    for seed in range(3):
        z, _ = linear_sem(random_dag(8, 3, seed=seed), 2_000, seed=seed + 10)
        expected = pc(z, 0.05, "fisherz", show_progress=False).G.graph
        assert np.array_equal(pc_cpdag(z, ZeroDeletionFisherZ(z), 0.05), expected)
        assert np.array_equal(pc_cpdag(z, ZeroDeletionFisherZ(z, "none"), 0.05), expected)
        bounded = pc(z, 0.05, "fisherz", show_progress=False, max_k=1).G.graph
        assert np.array_equal(pc_cpdag(z, ZeroDeletionFisherZ(z), 0.05, max_depth=1), bounded)


def _d_separated_by_moralisation(adjacency, i, j, cond):
    """Lauritzen: i, j d-separated by S iff S separates them in the moral graph of the ancestral set of
    {i, j} ∪ S."""
    a = np.asarray(adjacency)
    keep = {i, j, *cond}
    while True:
        more = keep | {int(k) for v in keep for k in np.flatnonzero(a[:, v])}
        if more == keep:
            break
        keep = more
    edges = {frozenset((u, v)) for u in keep for v in keep if a[u, v]}
    for v in keep:                                     # marry the parents
        parents = [u for u in keep if a[u, v]]
        edges |= {frozenset(pair) for pair in combinations(parents, 2)}
    seen, frontier = {i}, [i]
    while frontier:
        u = frontier.pop()
        for e in edges:
            if u in e:
                (v,) = e - {u}
                if v not in seen and v not in cond:
                    seen.add(v)
                    frontier.append(v)
    return j not in seen


def test_d_separation_against_a_moralised_ancestral_graph():
    rng = np.random.default_rng(0)
    for seed in range(4):
        a = random_dag(9, 3, seed=seed)
        for _ in range(60):
            i, j = sorted(rng.choice(9, size=2, replace=False).tolist())
            others = [v for v in range(9) if v not in (i, j)]
            cond = tuple(rng.choice(others, size=int(rng.integers(0, 4)), replace=False).tolist())
            assert d_separated(a, i, j, cond) == _d_separated_by_moralisation(a, i, j, cond)


def test_blocking_separations_and_connections_are_what_they_say():
    a = random_dag(15, 3, seed=1)
    separations = blocking_separations(a, sizes=(1, 2), per_size=10, seed=0)
    connections = d_connections(a, sizes=(1, 2), per_size=10, seed=0)
    assert len(separations) == len(connections) == 20 and len(set(separations)) == 20
    for i, j, cond in separations:
        assert i < j and list(cond) == sorted(cond) and len(cond) in (1, 2)
        assert not _d_separated_by_moralisation(a, i, j, ()) and _d_separated_by_moralisation(a, i, j, cond)
    for i, j, cond in connections:
        assert not _d_separated_by_moralisation(a, i, j, cond)
    assert blocking_separations(a, (1, 2), 10, seed=0) == separations


def test_skeleton_scores_and_shd_by_hand():
    # truth 0 -> 1 -> 2 (CPDAG 0 - 1 - 2); estimate: 0 -> 1, 1 - 2, 0 - 2
    estimate = np.zeros((3, 3), dtype=int)
    estimate[1, 0], estimate[0, 1] = 1, -1           # 0 -> 1
    estimate[1, 2] = estimate[2, 1] = -1             # 1 - 2
    estimate[0, 2] = estimate[2, 0] = -1             # 0 - 2 (spurious)
    scores = skeleton_scores(CHAIN, estimate)
    assert scores == pytest.approx({"precision": 2 / 3, "recall": 1.0, "f1": 0.8, "tp": 2.0, "fp": 1.0, "fn": 0.0})
    assert cpdag_shd(CHAIN, estimate) == 2           # 0 -> 1 vs 0 - 1, and the extra 0 - 2
    empty = np.zeros((3, 3), dtype=int)
    assert skeleton_scores(CHAIN, empty)["f1"] == 0.0 and cpdag_shd(CHAIN, empty) == 2
    collider = np.array([[0, 0, 1], [0, 0, 1], [0, 0, 0]])   # 0 -> 2 <- 1: its CPDAG is itself
    v = np.zeros((3, 3), dtype=int)
    v[2, 0], v[0, 2], v[2, 1], v[1, 2] = 1, -1, 1, -1
    assert cpdag_shd(collider, v) == 0 and skeleton_scores(collider, v)["f1"] == 1.0


def test_fixed_graphs_score_by_hand():
    # truth 0 -> 1 -> 2 (CPDAG 0 - 1 - 2): the empty graph misses both adjacencies; the complete one
    # (0 - 1, 0 - 2, 1 - 2, all undirected) finds both, adds 0 - 2, and matches the CPDAG's marks
    empty, complete = fixed_graph("empty", 3), fixed_graph("complete", 3)
    assert skeleton_scores(CHAIN, empty) == pytest.approx(
        {"precision": 0.0, "recall": 0.0, "f1": 0.0, "tp": 0.0, "fp": 0.0, "fn": 2.0})
    assert cpdag_shd(CHAIN, empty) == 2
    assert complete.tolist() == [[0, -1, -1], [-1, 0, -1], [-1, -1, 0]]
    assert skeleton_scores(CHAIN, complete) == pytest.approx(
        {"precision": 2 / 3, "recall": 1.0, "f1": 0.8, "tp": 2.0, "fp": 1.0, "fn": 0.0})
    assert cpdag_shd(CHAIN, complete) == 1


def test_run_scores_the_fixed_graphs_without_a_test(compose_cfg):
    cfg = compose_cfg(["experiment=causal_dropout_smoke", "method.procedures=[zerodel,empty,complete]",
                       "method.n_samples=[500]", "method.num_nodes=8"])
    out = run(cfg, SimpleNamespace(seed=0))
    edges, pairs = out["true_edges"], 8 * 7 / 2
    assert (out["empty/tp"], out["empty/fp"], out["empty/fn"], out["empty/tests"]) == (0.0, 0.0, edges, 0.0)
    assert (out["complete/tp"], out["complete/fp"], out["complete/fn"]) == (edges, pairs - edges, 0.0)
    assert out["zerodel/tp"] + out["zerodel/fn"] == edges and out["zerodel/tests"] > 0
    ci = run(compose_cfg(["experiment=causal_dropout_smoke", "method.evaluate=ci", "method.n_samples=[500,1000]",
                          "method.separations.per_size=3", "method.num_nodes=8",
                          "method.procedures=[empty,complete]"]), SimpleNamespace(seed=0))
    assert (ci["empty/type1"], ci["empty/power"], ci["complete/type1"], ci["complete/power"]) == (0, 0, 1, 1)
    assert ci["empty/type1_growth"] == ci["complete/type1_growth"] == 0


def test_ci_error_rates_count_rejections():
    pvalues = {(0, 1, ()): 0.01, (0, 2, (1,)): 0.5, (1, 2, (0,)): 0.05, (0, 1, (2,)): 0.2}
    test = lambda i, j, cond: pvalues[(i, j, tuple(cond))]   # noqa: E731
    assert ci_error_rates(test, [(0, 1, ()), (0, 2, (1,))], [(1, 2, (0,)), (0, 1, (2,))], 0.05) == (0.5, 0.5)


def test_run_reports_every_procedure_as_a_row(compose_cfg, tmp_path):
    cfg = compose_cfg(["experiment=causal_dropout_smoke", "method.evaluate=ci", "method.n_samples=[500,1000]",
                       "method.separations.per_size=3", "method.num_nodes=8"])
    out = run(cfg, SimpleNamespace(seed=0))
    for procedure in cfg.method.procedures:
        assert out[f"{procedure}/type1_growth"] == pytest.approx(out[f"{procedure}/type1_n1000"]
                                                                  - out[f"{procedure}/type1_n500"])
        assert 0 <= out[f"{procedure}/power"] <= 1
    assert out["num_separations"] <= 9


# --- bad input --------------------------------------------------------------------------------------

@pytest.mark.parametrize("call, says", [
    (lambda: apply_dropout(np.ones((5, 2)), "mnar"), "unknown dropout mechanism"),
    (lambda: apply_dropout(np.ones((5, 2)), "car", rate_range=(0.5, 1.2)), "rate_range"),
    (lambda: apply_dropout(np.ones((5, 2)), "car", rate_range=(-0.1, 0.5)), "rate_range"),
    (lambda: apply_dropout(np.full((5, 2), np.nan), "car"), "NaN"),
    (lambda: ZeroDeletionFisherZ(np.ones((5, 2)), delete="some"), "unknown delete mode"),
    (lambda: ZeroDeletionFisherZ(np.array([[1.0, np.nan]])), "NaN"),
    (lambda: RandomDeletionFisherZ(np.array([[1.0, np.nan]])), "NaN"),
    (lambda: RandomDeletionFisherZ(np.ones((5, 2)), match="some"), "unknown match mode"),
    (lambda: fixed_graph("sparse", 3), "unknown fixed graph"),
    (lambda: fisher_z(np.array([[1.0, np.nan]] * 9), 0, 1), "NaN"),
    (lambda: linear_sem(np.ones((3, 3), dtype=int), 10), "not a DAG"),
    (lambda: linear_sem(np.zeros((3, 2), dtype=int), 10), "square"),
    (lambda: skeleton_scores(CHAIN + CHAIN.T, CHAIN), "not a DAG"),
    (lambda: impute(np.ones((3, 2)), "magic"), "unknown imputation"),
    (lambda: ci_error_rates(lambda *a: 0.5, [], [], alpha=1.0), "alpha"),
    (lambda: pc_cpdag(np.ones((9, 3)), ZeroDeletionFisherZ(np.ones((9, 3))), alpha=0.0), "alpha"),
    (lambda: random_dag(1, 2), "num_nodes"),
    (lambda: linear_sem(CHAIN, 10, transform="log"), "unknown transform"),
])
def test_bad_input_is_a_value_error(call, says):
    with pytest.raises(ValueError, match=says):
        call()
