"""RFM: exp/log, the geodesic path, the premetric field, divergence, and the uniform likelihood."""
import math

import pytest
import torch
from torch import nn

from methods.rfm import FlatTorus, Sphere, VMFMixture, conditional_path, divergence, log_likelihood, premetric_field
from methods.rfm.model import VectorField, ema

torch.set_default_dtype(torch.float32)
MANIFOLDS = [Sphere(), FlatTorus(2), FlatTorus(5)]


def points(manifold, n=64, seed=0):
    return manifold.random_uniform(n, generator=torch.Generator().manual_seed(seed))


@pytest.mark.parametrize("manifold", MANIFOLDS, ids=lambda m: type(m).__name__ + str(m.dim))
def test_exp_and_log_are_inverse(manifold):
    x, y = points(manifold), points(manifold, seed=1)
    torch.testing.assert_close(manifold.dist(manifold.exp(x, manifold.log(x, y)), y), torch.zeros(64, dtype=x.dtype), atol=1e-9, rtol=0)
    u = manifold.proju(x, 0.5 * torch.randn_like(x))   # short tangent vectors: log(exp(u)) = u
    torch.testing.assert_close(manifold.log(x, manifold.exp(x, u)), u, atol=1e-9, rtol=1e-7)


@pytest.mark.parametrize("manifold", MANIFOLDS, ids=lambda m: type(m).__name__ + str(m.dim))
def test_geodesic_path_contracts_distance_linearly_and_is_tangent(manifold):
    x0, x1 = points(manifold), points(manifold, seed=1)
    t = torch.rand(64, dtype=x0.dtype, generator=torch.Generator().manual_seed(2)) * 0.98
    x_t, u_t = conditional_path(manifold, x0, x1, t)
    torch.testing.assert_close(manifold.dist(x_t, x1), (1 - t) * manifold.dist(x0, x1), atol=1e-9, rtol=1e-7)
    torch.testing.assert_close(manifold.proju(x_t, u_t), u_t)                        # tangent at x_t
    torch.testing.assert_close(u_t, premetric_field(manifold, x_t, x1, t), atol=1e-7, rtol=1e-6)
    # finite difference of the path in t
    h = 1e-6
    fwd, _ = conditional_path(manifold, x0, x1, t + h)
    bwd, _ = conditional_path(manifold, x0, x1, t - h)
    torch.testing.assert_close(manifold.log(bwd, fwd) / (2 * h), u_t, atol=1e-5, rtol=1e-4)


def test_sphere_dist_closed_form():
    s = Sphere()
    x, y = torch.tensor([[1.0, 0, 0]], dtype=torch.float64), torch.tensor([[0.0, 1.0, 0]], dtype=torch.float64)
    assert s.dist(x, y).item() == pytest.approx(math.pi / 2)


class ZeroField(torch.nn.Module):
    def forward(self, t, x):
        return 0.0 * x  # depends on x, so the divergence is computed (and is 0)


@pytest.mark.parametrize("manifold, expected", [(Sphere(), math.log(4 * math.pi)), (FlatTorus(2), 2 * math.log(2 * math.pi))])
def test_uniform_model_nll(manifold, expected):
    nll = -log_likelihood(ZeroField(), manifold, points(manifold, 8), steps=4)
    torch.testing.assert_close(nll, torch.full((8,), expected, dtype=nll.dtype))


def test_hutchinson_divergence_is_unbiased_for_exact():
    torch.manual_seed(0)
    sphere = Sphere()
    field = VectorField(sphere, 16, 2).double()
    x = points(sphere, 5).requires_grad_(True)
    v = field(torch.tensor(0.3, dtype=x.dtype), x)
    exact = divergence(v, x, sphere, exact=True)
    probes = 4000
    samples = torch.stack([divergence(v, x, sphere, exact=False) for _ in range(probes)])
    se = samples.std(0) / math.sqrt(probes)
    assert ((samples.mean(0) - exact).abs() < 4 * se).all(), (samples.mean(0), exact, se)


def test_exact_divergence_matches_finite_differences_on_the_torus():
    torch.manual_seed(0)
    torus = FlatTorus(3)
    field = VectorField(torus, 16, 2).double()
    x = points(torus, 4).requires_grad_(True)
    t = torch.tensor(0.5, dtype=x.dtype)
    div = divergence(field(t, x), x, torus)
    h = 1e-5
    fd = sum((field(t, x + h * e)[:, i] - field(t, x - h * e)[:, i]) / (2 * h)
             for i, e in enumerate(torch.eye(3, dtype=x.dtype)))
    torch.testing.assert_close(div, fd.detach(), atol=1e-6, rtol=1e-5)


def test_flow_likelihood_integrates_to_one_on_the_sphere():
    """A non-trivial field still defines a density: Monte Carlo of E_uniform[p/p0] ≈ 1."""
    torch.manual_seed(1)
    sphere = Sphere()
    field = VectorField(sphere, 16, 2).double()
    with torch.no_grad():
        for p in field.parameters():
            p.mul_(2.0)
    x = points(sphere, 3000, seed=5)
    ratio = (log_likelihood(field, sphere, x, steps=10) + sphere.log_volume).exp()
    assert abs(ratio.mean().item() - 1.0) < 4 * ratio.std().item() / math.sqrt(len(x))
    assert ratio.std() > 0.05  # the density is not uniform


def test_vmf_mixture_fits_a_concentrated_cluster():
    sphere = Sphere()
    g = torch.Generator().manual_seed(0)
    centre = torch.tensor([0.0, 0.0, 1.0], dtype=torch.float64)
    x = sphere.projx(centre + 0.1 * torch.randn(2000, 3, dtype=torch.float64, generator=g))
    vmf = VMFMixture(2, iters=100).fit(x)
    assert -vmf.log_prob(x).mean() < math.log(4 * math.pi) - 2
    grid = sphere.random_uniform(20000, generator=g)        # normalised: E_uniform[p · 4π] = 1
    assert (vmf.log_prob(grid).exp() * 4 * math.pi).mean().item() == pytest.approx(1.0, abs=0.1)


# --- general geometry: the spectral premetric on a mesh ---------------------------------
import numpy as np  # noqa: E402

from methods.rfm.mesh import SpectralMesh, closest_point_on_triangle, icosphere  # noqa: E402


@pytest.fixture(scope="module")
def mesh():
    verts, faces = icosphere(3)
    return SpectralMesh(verts, faces, k=20)


def test_cotangent_laplacian_spectrum_matches_spherical_harmonics(mesh):
    # on the unit sphere, -Δ has eigenvalues l(l + 1) with multiplicity 2l + 1
    np.testing.assert_allclose(mesh.eigvals[:3], 2.0, rtol=0.01)
    np.testing.assert_allclose(mesh.eigvals[3:8], 6.0, rtol=0.02)
    np.testing.assert_allclose(mesh.eigvals[8:15], 12.0, rtol=0.03)


def test_spectral_path_contracts_premetric_linearly(mesh):
    rng = np.random.default_rng(0)
    for _ in range(3):
        x0, x1 = (mesh.locate(v / np.linalg.norm(v))[2] for v in rng.normal(size=(2, 3)))
        d0 = mesh.dist(x0, x1)
        xs = mesh.path(x0, x1, steps=200)   # projected Euler: the error shrinks with the step
        for k in (20, 80, 140, 190):
            assert mesh.dist(xs[k], x1) / d0 == pytest.approx(1 - k / 200, abs=0.01)


def test_closest_point_on_triangle_against_dense_sampling():
    rng = np.random.default_rng(1)
    a, b, c = rng.normal(size=(3, 3))
    uv = rng.random((200000, 2))
    uv = np.where(uv.sum(1, keepdims=True) > 1, 1 - uv, uv)
    samples = a + uv[:, :1] * (b - a) + uv[:, 1:] * (c - a)
    for p in rng.normal(size=(5, 3)) * 2:
        q, bary = closest_point_on_triangle(p, a, b, c)
        brute = np.linalg.norm(samples - p, axis=1).min()
        assert np.linalg.norm(q - p) <= brute + 1e-9 and np.linalg.norm(q - p) == pytest.approx(brute, abs=1e-2)
        np.testing.assert_allclose(bary @ np.stack([a, b, c]), q, atol=1e-12)


def test_ema_warms_up_like_the_official_schedule():
    """After updates with weights w_0, w_1, ...: e = w_0, then e ← e + (1 − d_n)(w_n − e) with
    d_n = min(0.999, (1 + n)/(10 + n)); the early weights (the random init) fade quickly."""
    torch.manual_seed(0)
    net = nn.Linear(3, 2)
    averaged = ema(net, 0.999)
    assert not any(p.requires_grad for p in averaged.parameters())
    expected = None
    for n in range(30):
        with torch.no_grad():
            net.weight.copy_(torch.randn(2, 3))
        averaged.update_parameters(net)
        w = net.weight.detach().clone()
        expected = w if expected is None else expected + (1 - min(0.999, (1 + n) / (10 + n))) * (w - expected)
    torch.testing.assert_close(averaged.module.weight, expected, rtol=1e-6, atol=1e-6)
