"""P²OT's solver: the augmented scaling plan against the KKT conditions, an exact LP and POT
(sinkhorn, SeLa, semi-relaxed unbalanced OT), its pseudo-labels, warm starts, and bad input. The
schedule, data, metrics, loss, head and training stages: test_p2ot.py."""
import math
import warnings

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from methods.p2ot import p2ot_objective, pseudo_labels, solve_augmented, solve_p2ot

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


@pytest.mark.parametrize("rho,lam", [(0.3, 1.0), (1.0, INF), (0.5, INF)])
def test_numpy_scaling_loop_is_the_torch_loop_it_replaced(rho, lam):
    """The loop runs in numpy for speed; the torch loop of the issue's spec, written out here,
    gives the same plan and stops at the same iteration."""
    c = cost(50, 6, seed=7)
    n, k = c.shape
    eps, tol = 0.1, 1e-9
    sol = solve_augmented(c, rho, eps, lam, max_iter=5000, tol=tol, relax=False)
    m = torch.cat([torch.exp(-(c - c.min()) / eps), torch.ones(n, 1, dtype=torch.float64)], dim=1)
    beta = torch.tensor([rho / k] * k + [1 - rho], dtype=torch.float64)
    b, power = torch.ones(k + 1, dtype=torch.float64), 1.0 if math.isinf(lam) else lam / (lam + eps)
    for it in range(1, 5001):
        a = (1 / n) / (m @ b)
        b = beta / (m.T @ a)
        b[:k] = b[:k] ** power
        if (n * a * (m @ b) - 1).abs().max() < tol:
            break
    assert sol.iterations == it
    torch.testing.assert_close(sol.plan, a[:, None] * m * b[None, :], rtol=1e-12, atol=1e-15)


def test_warm_start_changes_iterations_not_the_plan():
    c = cost(60, 5, seed=12)
    cold = solve_augmented(c, 0.3, 0.1, 1.0, tol=1e-10, max_iter=20_000, relax=False)
    nearby = solve_augmented(c + 0.001 * torch.rand(c.shape, generator=torch.Generator().manual_seed(1),
                                                   dtype=torch.float64), 0.3, 0.1, 1.0, tol=1e-10, max_iter=20_000)
    warm = solve_augmented(c, 0.3, 0.1, 1.0, tol=1e-10, max_iter=20_000, init_scaling=nearby.scaling, relax=False)
    torch.testing.assert_close(warm.plan, cold.plan, rtol=1e-7, atol=1e-13)
    assert warm.iterations < 0.75 * cold.iterations
    # a ρ = 1 solve leaves the virtual scaling at 0; a later ρ < 1 solve must still reach its mass
    full = solve_augmented(c, 1.0, 0.1, 1.0)
    assert full.scaling[-1] == 0
    after = solve_augmented(c, 0.3, 0.1, 1.0, tol=1e-10, max_iter=20_000, init_scaling=full.scaling)
    torch.testing.assert_close(after.plan, cold.plan, rtol=1e-7, atol=1e-13)


@pytest.mark.parametrize("rho,lam", [(0.5, INF), (0.3, 1.0), (1.0, INF), (1.0, 2.0)])
def test_over_relaxed_scaling_reaches_the_same_plan_in_fewer_iterations(rho, lam):
    """Over-relaxation changes the path, not the fixed point: against a plain solve at 1e-13 the
    relaxed plan (stopped at 1e-9 on rows and columns) has both marginals within 1e-9 and the same
    entries to 1e-6 relative, in fewer iterations on a slowly converging (small ε) problem."""
    c = cost(200, 8, seed=5)
    n, k = c.shape
    ref = solve_augmented(c, rho, 0.05, lam, max_iter=200_000, tol=1e-13, relax=False)
    plain = solve_augmented(c, rho, 0.05, lam, max_iter=200_000, tol=1e-9, relax=False)
    fast = solve_augmented(c, rho, 0.05, lam, max_iter=200_000, tol=1e-9)
    assert fast.row_error < 1e-9
    assert (n * fast.plan.sum(1) - 1).abs().max() < 1e-9
    if math.isinf(lam):
        beta = torch.tensor([rho / k] * k + [1 - rho], dtype=torch.float64)
        cols = fast.plan.sum(0)[beta > 0] / beta[beta > 0]
        assert (cols - 1).abs().max() < 1e-9
    torch.testing.assert_close(fast.plan, ref.plan, rtol=1e-6, atol=1e-6 * float(ref.plan.max()))
    assert fast.iterations < 0.7 * plain.iterations


def test_relaxation_rate_estimate():
    """ω from errors that contract by η per plain iteration is Young's optimum 2/(1+√(1−η)); the
    same η seen through relaxation ω₀ (rate μ with (μ+ω₀−1)² = ω₀²ημ) gives the same ω; no
    contraction gives 1."""
    from methods.p2ot.transport import MAX_OMEGA, RATE_WINDOW, relaxation
    eta = 0.9
    errors = [eta ** t for t in range(RATE_WINDOW + 3)]
    assert relaxation(errors) == pytest.approx(2 / (1 + math.sqrt(1 - eta)))
    w0 = 1.3   # the root μ in (0, 1) of μ² + (2(ω₀−1) − ω₀²η) μ + (ω₀−1)² = 0, the larger one
    p = 2 * (w0 - 1) - w0 ** 2 * eta
    mu = (-p + math.sqrt(p * p - 4 * (w0 - 1) ** 2)) / 2
    assert relaxation([mu ** t for t in range(RATE_WINDOW + 3)], w0) == pytest.approx(2 / (1 + math.sqrt(1 - eta)))
    assert relaxation([1.0] * (RATE_WINDOW + 2)) == 1.0
    assert relaxation([0.5 ** t for t in range(3)]) == 1.0                  # too few errors
    assert relaxation([0.9999 ** t for t in range(RATE_WINDOW + 3)]) == MAX_OMEGA


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
