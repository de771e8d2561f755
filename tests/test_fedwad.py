"""FedWaD (methods/fedwad): W against POT, the interpolants written out and on the geodesic, the
upper bound at every iterate, convergence, the exact midpoint, Bures against scipy, the label
embedding against sqrtm, spectral clustering, bad input."""
import numpy as np
import ot
import pytest
from scipy.linalg import sqrtm
from sklearn.metrics import adjusted_rand_score

from methods.fedwad import (augment_with_labels, bures_wasserstein, cluster_clients, fedwad, interpolate,
                            wasserstein)
from methods.fedwad.data import gaussian_pair


def _clouds(n=40, m=30, d=3, seed=0):
    rng = np.random.default_rng(seed)
    return rng.standard_normal((n, d)), rng.standard_normal((m, d)) + 2.0


def test_wasserstein_against_pot_emd2():
    x, y = _clouds()
    rng = np.random.default_rng(1)
    a, b = rng.random(40), rng.random(30)
    a, b = a / a.sum(), b / b.sum()
    assert wasserstein(x, y) == pytest.approx(np.sqrt(ot.emd2([], [], ot.dist(x, y))), rel=1e-9)
    assert wasserstein(x, y, a, b) == pytest.approx(np.sqrt(ot.emd2(a, b, ot.dist(x, y))), rel=1e-9)
    eucl = ot.emd2(a, b, ot.dist(x, y, metric="euclidean"))
    assert wasserstein(x, y, a, b, metric="euclidean") == pytest.approx(eucl, rel=1e-9)


def test_approximate_interpolant_written_out():
    x, y = _clouds(n=12, m=9)
    a = np.full(12, 1 / 12)
    z, w, cost = interpolate(x, None, y, None, 0.3)
    plan = ot.emd(a, np.full(9, 1 / 9), ot.dist(x, y))
    for i in range(12):   # each atom toward its barycentric projection sum_j G_ij y_j / a_i
        target = sum(plan[i, j] * y[j] for j in range(9)) / a[i]
        assert np.allclose(z[i], 0.7 * x[i] + 0.3 * target)
    assert np.allclose(w, a) and cost == pytest.approx(wasserstein(x, y))


@pytest.mark.parametrize("t", [0.0, 0.25, 0.6, 1.0])
def test_exact_interpolant_lies_on_the_geodesic(t):
    x, y = _clouds(n=15, m=11)
    rng = np.random.default_rng(2)
    a = rng.random(15)
    a /= a.sum()
    z, w, cost = interpolate(x, a, y, None, t, exact=True)
    assert w.sum() == pytest.approx(1.0) and (w > 0).all()
    assert wasserstein(x, z, a, w) == pytest.approx(t * cost, abs=1e-7)          # W(mu_0, mu_t) = t W
    assert wasserstein(z, y, w, None) == pytest.approx((1 - t) * cost, abs=1e-7)  # W(mu_t, mu_1) = (1-t) W


def test_every_iterate_bounds_the_exact_distance_and_converges_in_2d():
    x, y = gaussian_pair(120, 40, 2, 4.0, seed=3)   # the table's pair, smaller
    exact = wasserstein(x, y)
    res = fedwad(x, y, n_supp=120, n_iter=30, seed=4)
    assert res.costs.shape == (31,) and res.costs[-1] == res.estimate
    assert (res.costs >= exact - 1e-9).all()
    assert res.costs[0] > exact * 1.01                    # the random start is a loose bound
    assert (res.estimate - exact) / exact < 1e-3         # measured ~1e-5 on 2-D Gaussians
    ex = fedwad(x, y, n_supp=120, n_iter=10, seed=4, exact=True)
    assert (ex.costs >= exact - 1e-9).all() and (ex.estimate - exact) / exact < 1e-3


def test_init_at_the_exact_midpoint_is_exact_at_zero_iterations():
    x, y = _clouds(n=25, m=25)   # equal sizes, uniform weights: the plan is a permutation
    mid, w, exact = interpolate(x, None, y, None, 0.5, exact=True)
    assert len(mid) == 25 and np.allclose(w, 1 / 25)
    res = fedwad(x, y, n_iter=0, init=mid)
    assert res.costs.shape == (1,)
    assert res.estimate == pytest.approx(exact, rel=1e-9)


def test_one_rng_draws_eta0_then_every_t():
    x, y = _clouds(n=10, m=8, d=2)
    res = fedwad(x, y, n_supp=5, n_iter=2, seed=7)
    rng = np.random.default_rng(7)
    eta = rng.standard_normal((5, 2))
    w = np.full(5, 0.2)
    for _ in range(2):
        g, gw, _ = interpolate(eta, w, x, None, rng.uniform())
        h, hw, _ = interpolate(eta, w, y, None, rng.uniform())
        eta, w, _ = interpolate(h, hw, g, gw, rng.uniform())
    assert np.allclose(res.support, eta)


def _bures_by_sqrtm(xs, xt):
    cs, ct = np.atleast_2d(np.cov(xs, rowvar=False)), np.atleast_2d(np.cov(xt, rowvar=False))
    r = np.real(sqrtm(cs))
    cross = np.real(sqrtm(r @ ct @ r))
    return np.sqrt(np.sum((xs.mean(0) - xt.mean(0)) ** 2) + np.trace(cs + ct - 2 * cross))


def test_bures_against_scipy_sqrtm_and_the_1d_form():
    rng = np.random.default_rng(5)
    xs = rng.standard_normal((200, 4)) @ rng.standard_normal((4, 4))
    xt = rng.standard_normal((150, 4)) @ rng.standard_normal((4, 4)) + 1.0
    assert bures_wasserstein(xs, xt) == pytest.approx(_bures_by_sqrtm(xs, xt), rel=1e-8)
    u, v = rng.normal(0, 2, (300, 1)), rng.normal(3, 0.5, (120, 1))
    one_d = np.sqrt((u.mean() - v.mean()) ** 2 + (u.std(ddof=1) - v.std(ddof=1)) ** 2)
    assert bures_wasserstein(u, v) == pytest.approx(one_d, rel=1e-10)


def test_label_embedding_against_sqrtm():
    rng = np.random.default_rng(6)
    x = rng.standard_normal((30, 4))
    y = np.array([0] * 10 + [3] * 12 + [7] * 8)
    aug = augment_with_labels(x, y)
    assert aug.shape == (30, 12) and np.allclose(aug[:, :4], x)
    for c in (0, 3, 7):
        xc = x[y == c]
        root = np.real(sqrtm(np.cov(xc.T) + 1e-6 * np.eye(4)))
        assert np.allclose(aug[y == c, 4:8], xc.mean(0))
        assert np.allclose(aug[y == c, 8:], np.diag(root), atol=1e-10)


def test_otdd_cost_is_the_squared_distance_of_augmented_vectors():
    """|x - x'|^2 + |m_y - m_y'|^2 + |s_y - s_y'|^2: the ground cost plus the Bures term of the
    diagonal class Gaussians (written out for one pair of points)."""
    rng = np.random.default_rng(8)
    x1, y1 = rng.standard_normal((20, 3)), np.repeat([0, 1], 10)
    x2, y2 = rng.standard_normal((20, 3)) + 1, np.repeat([0, 1], 10)
    a1, a2 = augment_with_labels(x1, y1), augment_with_labels(x2, y2)
    i, j = 3, 15
    c1, c2 = x1[y1 == y1[i]], x2[y2 == y2[j]]
    s1 = np.diag(np.real(sqrtm(np.cov(c1.T) + 1e-6 * np.eye(3))))
    s2 = np.diag(np.real(sqrtm(np.cov(c2.T) + 1e-6 * np.eye(3))))
    want = np.sum((x1[i] - x2[j]) ** 2) + np.sum((c1.mean(0) - c2.mean(0)) ** 2) + np.sum((s1 - s2) ** 2)
    assert ot.dist(a1, a2)[i, j] == pytest.approx(want, rel=1e-9)


def test_spectral_clustering_of_a_block_matrix():
    truth = np.repeat(np.arange(5), 2)
    rng = np.random.default_rng(9)
    d = np.where(truth[:, None] == truth[None], 0.1, 5.0) + rng.random((10, 10)) * 0.05
    d = (d + d.T) / 2
    np.fill_diagonal(d, 0)
    labels = cluster_clients(d, 5, n_neighbors=2, seed=0)
    assert adjusted_rand_score(truth, labels) == 1.0


@pytest.mark.parametrize("call, match", [
    (lambda x, y: wasserstein(x, y[:, :2]), "mismatched dimensions"),
    (lambda x, y: wasserstein(np.where(x > 1, np.nan, x), y), "NaN"),
    (lambda x, y: wasserstein(x, np.full_like(y, np.inf)), "NaN or inf"),
    (lambda x, y: fedwad(x, y, n_supp=0), "n_supp"),
    (lambda x, y: fedwad(x, y, t=1.5), "t must be in"),
    (lambda x, y: interpolate(x, None, y, None, -0.1), "t must be in"),
    (lambda x, y: wasserstein(x, y, a=np.full(len(x), 0.5)), "sum to 1"),
    (lambda x, y: wasserstein(x, y, a=-np.full(len(x), 1 / len(x))), "non-negative"),
    (lambda x, y: wasserstein(x, y, a=np.ones(3) / 3), "shape"),
    (lambda x, y: wasserstein(x, y, metric="cosine"), "cosine"),
    (lambda x, y: augment_with_labels(x[:5], np.array([0, 0, 1, 1, 2])), r"\[2\]"),
    (lambda x, y: cluster_clients(np.ones((3, 4)), 2), "square"),
])
def test_bad_input(call, match):
    x, y = _clouds(n=10, m=8)
    with pytest.raises(ValueError, match=match):
        call(x, y)
