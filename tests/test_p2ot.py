"""P²OT: the augmented scaling solver against the KKT conditions, an exact LP and POT; the
schedule, the long-tailed subset, the metrics against brute force, the loss, the head, the
memory, bad input, and a smoke run of the head training."""
import itertools
import math
import warnings

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn

from methods.p2ot import (ClusterHead, CosineHead, LogitsMemory, cluster_metrics, evaluate_clusters,
                          kmeans_clusters, long_tailed_counts, long_tailed_indices, p2ot_objective,
                          predict_clusters, pseudo_labels, rho_schedule, solve_augmented, solve_p2ot,
                          swapped_label_loss, train_head, view_features)

INF = math.inf
TIGHT = dict(max_iter=100_000, tol=1e-12)


def logits(n=40, k=5, scale=3.0, seed=0):
    return scale * torch.randn(n, k, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)


def cost(n=40, k=5, seed=0):
    return -torch.log_softmax(logits(n, k, seed=seed), dim=1)


# ---------------------------------------------------------------- the plan and its optimality

@pytest.mark.parametrize("rho,lam", [(0.2, 1.0), (0.6, 0.3), (1.0, 1.0), (0.3, INF), (1.0, INF)])
def test_plan_is_feasible(rho, lam):
    c = cost()
    n, k = c.shape
    q = solve_p2ot(c, rho, 0.3, lam, **TIGHT)
    assert q.shape == (n, k) and q.dtype == torch.float64
    assert (q >= 0).all()
    assert (n * q.sum(1) <= 1 + 1e-12).all()                        # rows <= 1/N (to tol)
    assert q.sum().item() == pytest.approx(rho, abs=1e-10)          # mass rho
    if math.isinf(lam):
        torch.testing.assert_close(q.sum(0), torch.full((k,), rho / k, dtype=torch.float64), rtol=0, atol=1e-12)


@pytest.mark.parametrize("rho,lam,eps", [(0.3, 1.0, 0.1), (0.7, 0.2, 0.05), (0.5, 5.0, 0.3)])
def test_kkt_conditions_of_the_augmented_entropic_problem(rho, lam, eps):
    """Stationarity of L = ⟨Q,C⟩ + ε Σ Q̂ log Q̂ + λ KL(Qᵀ1‖ρ/K) − Σ f_i (Q̂1 − 1/N)_i − g (1ᵀξ − 1 + ρ):
    C_ij + ε log Q_ij + λ log(q_j K/ρ) = f_i − ε for every real j, and ε log ξ_i − (f_i − ε) = g."""
    c = cost(30, 4, seed=1)
    n, k = c.shape
    sol = solve_augmented(c, rho, eps, lam, **TIGHT)
    q, xi = sol.plan[:, :k], sol.plan[:, k]
    torch.testing.assert_close(sol.plan.sum(1), torch.full((n,), 1 / n, dtype=torch.float64), rtol=1e-10, atol=0)
    assert xi.sum().item() == pytest.approx(1 - rho, abs=1e-12)
    col = q.sum(0)
    r = c + eps * q.log() + lam * torch.log(col * k / rho)          # (N, K): must not depend on j
    assert (r.max(1).values - r.min(1).values).max() < 1e-8
    g = eps * xi.log() - r[:, 0]                                     # (N,): must not depend on i
    assert (g.max() - g.min()).item() < 1e-8


def test_kkt_conditions_with_hard_column_marginal():
    """λ = ∞: Ĉ + ε log Q̂ = f_i + h_j (column multipliers free), virtual column included."""
    c = cost(30, 4, seed=2)
    sol = solve_augmented(c, 0.4, 0.1, INF, **TIGHT)
    g = torch.cat([c, torch.zeros(len(c), 1, dtype=c.dtype)], 1) + 0.1 * sol.plan.log()   # (N, K+1)
    centred = g - g.mean(1, keepdim=True) - g.mean(0, keepdim=True) + g.mean()
    assert centred.abs().max() < 1e-8


@pytest.mark.parametrize("rho,lam", [(0.4, 1.0), (1.0, 0.5)])
def test_objective_is_minimal_along_segments_to_feasible_plans(rho, lam):
    """A derivative-free check: moving toward another feasible plan never lowers the objective."""
    c = cost(25, 4, seed=3)
    n, k = c.shape
    eps = 0.1
    best = solve_augmented(c, rho, eps, lam, **TIGHT).plan
    spread = torch.cat([torch.full((n, k), rho / (n * k)), torch.full((n, 1), (1 - rho) / n)], 1).double()
    gen = torch.Generator().manual_seed(0)
    other = torch.rand(n, k + 1, generator=gen, dtype=torch.float64)
    weights = 0.5 + torch.rand(n, generator=gen, dtype=torch.float64)          # ξ_i in [0.5, 1.5]·(1 − ρ)/N
    other[:, k] = (1 - rho) * weights / weights.sum()
    other[:, :k] = other[:, :k] / other[:, :k].sum(1, keepdim=True) * (1 / n - other[:, k:])
    assert (other >= 0).all() and other[:, k].sum().item() == pytest.approx(1 - rho)
    f0 = p2ot_objective(best, c, rho, eps, lam)
    for target in (spread, other):
        for t in (1e-3, 0.05, 0.5):
            assert p2ot_objective((1 - t) * best + t * target, c, rho, eps, lam) > f0 - 1e-12


@pytest.mark.parametrize("rho", [0.4, 1.0])
def test_small_epsilon_matches_exact_lp(rho):
    """λ = ∞ against scipy linprog of min ⟨Q,C⟩ s.t. Q ≥ 0, Q1 ≤ 1/N, Qᵀ1 = ρ/K. The entropic
    plan's cost exceeds the LP optimum by at most ε·log(K+1) (Σ Q̂ log Q̂ lies in
    [−log N(K+1), −log N] on the augmented feasible set)."""
    from scipy.optimize import linprog

    n, k, eps = 14, 3, 0.002
    c = torch.rand(n, k, generator=torch.Generator().manual_seed(4), dtype=torch.float64)
    a_ub = np.kron(np.eye(n), np.ones((1, k)))                     # row sums
    a_eq = np.kron(np.ones((1, n)), np.eye(k))                     # column sums
    lp = linprog(c.numpy().ravel(), A_ub=a_ub, b_ub=np.full(n, 1 / n), A_eq=a_eq,
                 b_eq=np.full(k, rho / k), bounds=(0, None), method="highs")
    assert lp.status == 0
    q = solve_p2ot(c, rho, eps, INF, **TIGHT)
    gap = float((q * c).sum()) - lp.fun
    assert -1e-9 <= gap <= eps * math.log(k + 1)
    assert gap < 0.25 * lp.fun                                      # a bound that could fail


def test_hard_marginal_equals_pot_sinkhorn_on_the_augmented_problem():
    ot = pytest.importorskip("ot")
    c = cost(50, 6, seed=5)
    n, k = c.shape
    rho, eps = 0.35, 0.1
    beta = np.full(k + 1, rho / k)
    beta[k] = 1 - rho
    c_hat = torch.cat([c, torch.zeros(n, 1, dtype=c.dtype)], 1).numpy()
    ref = ot.sinkhorn(np.full(n, 1 / n), beta, c_hat, eps, stopThr=1e-13, numItermax=10_000)
    torch.testing.assert_close(solve_augmented(c, rho, eps, INF, **TIGHT).plan, torch.from_numpy(ref),
                               rtol=1e-7, atol=1e-12)


def test_full_mass_hard_marginal_equals_sela():
    ot = pytest.importorskip("ot")
    c = cost(50, 6, seed=6)
    n, k = c.shape
    ref = ot.sinkhorn(np.full(n, 1 / n), np.full(k, 1 / k), c.numpy(), 0.1, stopThr=1e-13, numItermax=10_000)
    torch.testing.assert_close(solve_p2ot(c, 1.0, 0.1, INF, **TIGHT), torch.from_numpy(ref), rtol=1e-7, atol=1e-12)


@pytest.mark.parametrize("lam", [0.3, 1.0, 4.0])
def test_full_mass_soft_marginal_equals_pot_semi_relaxed_unbalanced(lam):
    ot = pytest.importorskip("ot")
    c = cost(50, 6, seed=7)
    n, k = c.shape
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # POT notes that reg_type='entropy' ignores c
        ref = ot.unbalanced.sinkhorn_unbalanced(np.full(n, 1 / n), np.full(k, 1 / k), c.numpy(), 0.1,
                                                reg_m=(float("inf"), lam), reg_type="entropy",
                                                stopThr=1e-15, numItermax=100_000)
    torch.testing.assert_close(solve_p2ot(c, 1.0, 0.1, lam, **TIGHT), torch.from_numpy(ref), rtol=1e-7, atol=1e-12)


def test_soft_marginal_lets_cluster_sizes_follow_the_data_and_tends_to_hard():
    """Costs that favour cluster 0 for 70% of samples: λ = 1 gives cluster 0 more than ρ/K,
    and column sums approach ρ/K as λ grows."""
    gen = torch.Generator().manual_seed(8)
    n, k, rho = 200, 4, 0.8
    target = torch.where(torch.rand(n, generator=gen) < 0.7, 0, torch.randint(1, k, (n,), generator=gen))
    c = -torch.log_softmax(6.0 * F.one_hot(target, k).double() + 0.1 * torch.randn(n, k, generator=gen,
                                                                                   dtype=torch.float64), 1)
    sizes = [solve_p2ot(c, rho, 0.1, lam, max_iter=20_000, tol=1e-10).sum(0) for lam in (1.0, 3.0, 10.0)]
    assert sizes[0][0] > 1.5 * rho / k
    dev = [float((s - rho / k).abs().max()) for s in sizes]
    assert dev[0] > dev[1] > dev[2]


def test_partial_mass_goes_to_confident_samples():
    """ρ = 0.5 with half the samples confident (one-hot logits) and half unsure (flat logits):
    the confident half carries most of the transported mass."""
    n, k = 100, 4
    lg = torch.zeros(n, k, dtype=torch.float64)
    lg[torch.arange(n // 2), torch.arange(n // 2) % k] = 8.0
    y = pseudo_labels(lg, 0.5, 0.1, 1.0, max_iter=20_000)
    assert y[: n // 2].sum() > 3 * y[n // 2:].sum()


def test_common_cost_shift_is_harmless_but_a_per_row_shift_is_not():
    c = cost(30, 4, seed=9)
    q = solve_p2ot(c, 0.4, 0.1, 1.0, **TIGHT)
    torch.testing.assert_close(solve_p2ot(c + 3.7, 0.4, 0.1, 1.0, **TIGHT), q, rtol=1e-8, atol=1e-14)
    per_row = c - c.min(1, keepdim=True).values
    assert (solve_p2ot(per_row, 0.4, 0.1, 1.0, **TIGHT) - q).abs().max() > 1e-3
    # with rho = 1 the rows are equalities, so a per-row shift changes nothing
    torch.testing.assert_close(solve_p2ot(per_row, 1.0, 0.1, 1.0, **TIGHT), solve_p2ot(c, 1.0, 0.1, 1.0, **TIGHT),
                               rtol=1e-8, atol=1e-14)


def test_pseudo_labels_are_n_times_the_plan_of_the_softmax_cost():
    lg = logits(32, 5, seed=10).float().requires_grad_()
    y = pseudo_labels(lg, 0.3, 0.1, 1.0)
    assert y.dtype == torch.float32 and not y.requires_grad
    ref = 32 * solve_p2ot(-torch.log_softmax(lg.detach().double(), 1), 0.3, 0.1, 1.0)
    torch.testing.assert_close(y, ref.float())
    assert (y.sum(1) <= 1 + 1e-5).all() and y.sum().item() == pytest.approx(0.3 * 32, rel=1e-5)


def test_warm_start_changes_iterations_not_the_plan():
    c = cost(60, 5, seed=12)
    cold = solve_augmented(c, 0.3, 0.1, 1.0, tol=1e-10, max_iter=20_000)
    nearby = solve_augmented(c + 0.001 * torch.rand(c.shape, generator=torch.Generator().manual_seed(1),
                                                   dtype=torch.float64), 0.3, 0.1, 1.0, tol=1e-10, max_iter=20_000)
    warm = solve_augmented(c, 0.3, 0.1, 1.0, tol=1e-10, max_iter=20_000, init_scaling=nearby.scaling)
    torch.testing.assert_close(warm.plan, cold.plan, rtol=1e-7, atol=1e-13)
    assert warm.iterations < 0.75 * cold.iterations
    # a ρ = 1 solve leaves the virtual scaling at 0; a later ρ < 1 solve must still reach its mass
    full = solve_augmented(c, 1.0, 0.1, 1.0)
    assert full.scaling[-1] == 0
    after = solve_augmented(c, 0.3, 0.1, 1.0, tol=1e-10, max_iter=20_000, init_scaling=full.scaling)
    torch.testing.assert_close(after.plan, cold.plan, rtol=1e-7, atol=1e-13)


def test_max_iter_warns_once_with_the_row_error():
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        sol = solve_augmented(cost(), 0.3, 0.05, 1.0, max_iter=2, tol=1e-12)
    assert sol.iterations == 2 and sol.row_error > 1e-12
    assert len(caught) == 1 and "row error" in str(caught[0].message)
    assert f"{sol.row_error:.3g}" in str(caught[0].message)


# ---------------------------------------------------------------- bad input

@pytest.mark.parametrize("kwargs,match", [
    (dict(rho=0.0), "rho"), (dict(rho=1.5), "rho"), (dict(epsilon=0.0), "epsilon"),
    (dict(epsilon=-1.0), "epsilon"), (dict(kl_weight=0.0), "kl_weight"), (dict(kl_weight=-2.0), "kl_weight")])
def test_bad_parameters_are_value_errors(kwargs, match):
    args = dict(rho=0.5, epsilon=0.1, kl_weight=1.0) | kwargs
    with pytest.raises(ValueError, match=match):
        solve_p2ot(cost(), **args)


def test_bad_cost_and_logits_are_value_errors():
    c = cost()
    c[3, 2] = float("nan")
    with pytest.raises(ValueError, match="1 NaN/inf"):
        solve_p2ot(c, 0.5, 0.1, 1.0)
    with pytest.raises(ValueError, match="2-D"):
        solve_p2ot(cost()[0], 0.5, 0.1, 1.0)
    lg = logits()
    lg[0, 0] = float("inf")
    with pytest.raises(ValueError, match="logits have 1 NaN/inf"):
        pseudo_labels(lg, 0.5, 0.1, 1.0)
    with pytest.raises(ValueError, match="exceeds"):
        solve_p2ot(torch.tensor([[0.0, 100.0], [1.0, 2.0]]), 0.5, 0.1, 1.0)


# ---------------------------------------------------------------- schedule, data, metrics

def test_rho_schedule_values():
    assert rho_schedule(0, 100, 0.1, 1.0) == pytest.approx(0.1 + 0.9 * math.exp(-5))
    assert rho_schedule(50, 100, 0.1, 1.0) == pytest.approx(0.1 + 0.9 * math.exp(-1.25))
    assert rho_schedule(100, 100, 0.1, 1.0) == pytest.approx(1.0)
    assert rho_schedule(250, 100, 0.1, 1.0) == pytest.approx(1.0)           # clipped
    assert rho_schedule(-5, 100, 0.1, 1.0) == rho_schedule(0, 100, 0.1, 1.0)
    assert rho_schedule(30, 100, 0.2, 0.8, kind="linear") == pytest.approx(0.2 + 0.6 * 0.3)
    assert rho_schedule(3, 0, 0.1, 0.9) == 0.9
    values = [rho_schedule(t, 40, 0.1, 1.0) for t in range(41)]
    assert all(b > a for a, b in zip(values, values[1:]))
    with pytest.raises(ValueError, match="kind"):
        rho_schedule(1, 10, 0.1, 1.0, kind="cosine")
    with pytest.raises(ValueError, match="rho_start"):
        rho_schedule(1, 10, 0.0, 1.0)


def test_long_tailed_counts_and_indices():
    assert long_tailed_counts(10, 100, 2000) == [int(2000 * 100 ** (-c / 9)) for c in range(10)]
    assert long_tailed_counts(10, 100, 2000)[0] == 2000 and long_tailed_counts(10, 100, 2000)[-1] == 20
    labels = torch.arange(10).repeat_interleave(2100)[torch.randperm(21000, generator=torch.Generator().manual_seed(0))]
    idx = long_tailed_indices(labels, 100, 2000, seed=3)
    assert idx.dtype == torch.long and len(idx) == sum(long_tailed_counts(10, 100, 2000)) == 4958
    assert idx.unique().numel() == len(idx)                                 # without replacement
    assert torch.bincount(labels[idx], minlength=10).tolist() == long_tailed_counts(10, 100, 2000)
    assert torch.equal(idx, long_tailed_indices(labels, 100, 2000, seed=3))
    assert not torch.equal(idx, long_tailed_indices(labels, 100, 2000, seed=4))


def test_long_tailed_bad_input():
    labels = torch.arange(3).repeat_interleave(50)
    with pytest.raises(ValueError, match="class 0 has 50 images, fewer than the 60"):
        long_tailed_indices(labels, 10, 60, seed=0)
    with pytest.raises(ValueError, match="imbalance_ratio"):
        long_tailed_indices(labels, 0.5, 10, seed=0)


def brute_force_metrics(pred, target, k):
    """acc over all k! matchings; macc and f1 of the best one, by hand."""
    best = max(itertools.permutations(range(k)), key=lambda p: sum(p[a] == b for a, b in zip(pred, target)))
    matched = [best[a] for a in pred]
    classes = sorted(set(target))
    recall = [np.mean([m == c for m, t in zip(matched, target) if t == c]) for c in classes]
    f1s = []
    for c in sorted(set(target) | set(matched)):
        tp = sum(m == c and t == c for m, t in zip(matched, target))
        fp = sum(m == c and t != c for m, t in zip(matched, target))
        fn = sum(m != c and t == c for m, t in zip(matched, target))
        f1s.append(0.0 if tp == 0 else 2 * tp / (2 * tp + fp + fn))
    return 100 * np.mean(np.array(matched) == np.array(target)), 100 * np.mean(recall), 100 * np.mean(f1s)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_cluster_metrics_match_brute_force(seed):
    rng = np.random.default_rng(seed)
    k = 5
    target = rng.choice(k, size=60, p=[0.4, 0.25, 0.2, 0.1, 0.05])
    pred = np.where(rng.random(60) < 0.6, (target + 2) % k, rng.integers(0, k, 60))
    acc, macc, f1 = brute_force_metrics(pred.tolist(), target.tolist(), k)
    m = cluster_metrics(torch.from_numpy(pred), torch.from_numpy(target), k)
    assert m["acc"] == pytest.approx(acc) and m["macc"] == pytest.approx(macc) and m["f1"] == pytest.approx(f1)
    # NMI: I(T;P) / mean(H(T), H(P)) from the joint counts
    joint = np.histogram2d(target, pred, bins=[k, k], range=[[0, k], [0, k]])[0] / 60
    pt, pp = joint.sum(1), joint.sum(0)
    nz = joint > 0
    mi = (joint[nz] * np.log(joint[nz] / np.outer(pt, pp)[nz])).sum()
    h = lambda p: -(p[p > 0] * np.log(p[p > 0])).sum()  # noqa: E731
    assert m["nmi"] == pytest.approx(100 * mi / ((h(pt) + h(pp)) / 2))


def test_cluster_metrics_perfect_up_to_renaming_and_bad_input():
    target = torch.tensor([0, 0, 0, 1, 1, 2, 3, 3])
    m = cluster_metrics((target + 1) % 4, target, 4)
    assert all(v == pytest.approx(100.0) for v in m.values())
    with pytest.raises(ValueError, match="lie in"):
        cluster_metrics(torch.tensor([0, 5]), torch.tensor([0, 1]), 4)


# ---------------------------------------------------------------- loss, head, memory

def test_swapped_label_loss_matches_torch_soft_cross_entropy():
    gen = torch.Generator().manual_seed(11)
    lg = [torch.randn(8, 5, generator=gen) for _ in range(3)]
    ys = [torch.rand(8, 5, generator=gen) * 0.2 for _ in range(3)]            # rows sum below 1
    ref = sum(F.cross_entropy(lg[a], ys[b]) for a in range(3) for b in range(3) if a != b)
    torch.testing.assert_close(swapped_label_loss(lg, ys), ref)
    with pytest.raises(ValueError, match="same number"):
        swapped_label_loss(lg, ys[:2])


def test_cosine_head_equals_weight_normalised_linear_with_unit_gain():
    head = CosineHead(6, 4, logit_scale=10.0)
    lin = nn.Linear(6, 4, bias=False)
    lin.weight.data.copy_(head.prototypes.data)
    lin = nn.utils.parametrizations.weight_norm(lin)
    lin.parametrizations.weight.original0.data.fill_(1.0)                    # the gain g
    x = torch.randn(9, 6)
    torch.testing.assert_close(head(x), 10.0 * lin(F.normalize(x, dim=1)))
    torch.testing.assert_close(head(3.0 * x), head(x))
    assert head(x).abs().max() <= 10.0 + 1e-5
    assert ClusterHead(6, 4, hidden_dim=16, out_dim=8)(x).shape == (9, 4)


def test_logits_memory_is_a_ring_and_checkpointed():
    mem = LogitsMemory(3, 5)
    rows = mem.push(torch.ones(2, 3))
    assert rows.tolist() == [0, 1] and len(mem.contents()) == 2
    mem.overwrite(rows, 2 * torch.ones(2, 3))
    rows = mem.push(3 * torch.ones(4, 3))
    assert rows.tolist() == [2, 3, 4, 0] and len(mem.contents()) == 5
    assert mem.contents()[:, 0].tolist() == [3, 2, 3, 3, 3]
    state = mem.state_dict()
    assert {"logits", "next_row", "filled"} <= set(state) and int(state["next_row"]) == 1
    with pytest.raises(ValueError, match="does not fit"):
        mem.push(torch.ones(6, 3))


# ---------------------------------------------------------------- stages (smoke)

def blobs(n_per=(120, 60, 20), views=3, dim=8, seed=0):
    """Imbalanced, well separated Gaussian blobs, `views` noisy copies of each point."""
    gen = torch.Generator().manual_seed(seed)
    centres = 4.0 * torch.eye(len(n_per), dim)
    y = torch.cat([torch.full((m,), c) for c, m in enumerate(n_per)])
    base = centres[y] + 0.5 * torch.randn(len(y), dim, generator=gen)
    return base + 0.2 * torch.randn(views, len(y), dim, generator=gen), base, y


def test_train_head_smoke_on_imbalanced_blobs():
    feats, base, y = blobs()
    head, hist = train_head(feats, 3, epochs=4, batch_size=50, lr=5e-3, memory_batches=2, hidden_dim=16,
                            out_dim=8, seed=0, tol=1e-4)
    assert len(hist["loss"]) == 4 * 4 and all(math.isfinite(v) for v in hist["loss"])
    assert hist["rho"][0] == pytest.approx(0.1 + 0.9 * math.exp(-5)) and hist["rho"] == sorted(hist["rho"])
    # over the batch alone (first epoch) the labels' mean row mass is the step's transported mass
    np.testing.assert_allclose(hist["label_mass"][:4], hist["rho"][:4], rtol=1e-3)
    assert cluster_metrics(predict_clusters(head, base), y, 3)["macc"] > 60.0       # chance: 33


def test_memory_labels_are_the_batch_rows_of_the_memory_solve_warm_or_cold():
    from methods.p2ot.stages import batch_labels

    gen = torch.Generator().manual_seed(13)
    mem_cold, mem_warm = LogitsMemory(4, 12), LogitsMemory(4, 12)
    old = 5 * torch.randn(8, 4, generator=gen)
    mem_cold.push(old), mem_warm.push(old)
    views = [5 * torch.randn(4, 4, generator=gen) for _ in range(2)]
    solve = dict(epsilon=0.1, kl_weight=1.0, max_iter=20_000, tol=1e-10, warn=False)
    cold, _, _, _ = batch_labels(views, mem_cold, 0.5, solve)
    warm, _, iters, scaling = batch_labels(views, mem_warm, 0.5, solve, torch.ones(5), warm_start=True)
    for v in range(2):
        torch.testing.assert_close(warm[v], cold[v], rtol=1e-6, atol=1e-7)
    # view 2's labels: rows 8..11 of the solve over [old; view 2] (view 1 overwritten)
    ref = pseudo_labels(torch.cat([old, views[1]]), 0.5, 0.1, 1.0, max_iter=20_000, tol=1e-10)[8:]
    torch.testing.assert_close(cold[1], ref, rtol=1e-6, atol=1e-7)
    assert scaling.shape == (5,) and len(iters) == 2


def test_view_features_kmeans_and_evaluation_shapes():
    from omegaconf import OmegaConf

    aug = OmegaConf.create(dict(min_scale=0.5, flip_prob=0.5, jitter_prob=0.5, brightness=0.2, contrast=0.2))
    images = torch.randint(0, 256, (10, 1, 8, 8), dtype=torch.uint8)
    enc = nn.Sequential(nn.Flatten(), nn.Linear(64, 4))
    v = view_features(enc, images, 3, aug, seed=1, batch_size=4)
    assert v.shape == (3, 10, 4) and not torch.equal(v[0], v[1])
    torch.testing.assert_close(v, view_features(enc, images, 3, aug, seed=1, batch_size=4))
    _, base, y = blobs()
    train, test = kmeans_clusters(base, base[:30], 3, seed=0, n_init=2)
    m = evaluate_clusters(train, y, test, y[:30], 3)
    assert set(m) == {"acc", "macc", "nmi", "f1", "test_acc", "test_macc", "test_nmi", "test_f1"}
    assert m["nmi"] > 90.0
