"""RFM on a general geometry, a mesh: the closest point, face location, the cotangent spectrum,
the premetric and its spectral path, the eigenfunction target density, likelihoods and the
simulated-path training step, each against an independent derivation written here."""
import math

import numpy as np
import pytest
import torch

from methods.rfm import (EigenfunctionDensity, FlowMatching, Mesh, SimulatedPaths, VectorField, bumpy_sphere, icosphere, log_likelihood, premetric_path)
from methods.rfm.mesh import closest_point, eigenpairs
from methods.rfm.path import stratified_times
from tests.test_rfm import ZeroField


@pytest.fixture(scope="module")
def ico():
    return Mesh(*icosphere(3), num_eigs=20)


@pytest.fixture(scope="module")
def bumpy():
    return Mesh(*bumpy_sphere(2), num_eigs=30)


def ericson(p, a, b, c):
    """Closest point on triangle abc, Ericson's RTCD 5.1.5 as published (scalar branches)."""
    ab, ac, ap = b - a, c - a, p - a
    d1, d2 = ab @ ap, ac @ ap
    if d1 <= 0 and d2 <= 0:
        return a
    bp = p - b
    d3, d4 = ab @ bp, ac @ bp
    if d3 >= 0 and d4 <= d3:
        return b
    vc = d1 * d4 - d3 * d2
    if vc <= 0 and d1 >= 0 and d3 <= 0:
        return a + d1 / (d1 - d3) * ab
    cp = p - c
    d5, d6 = ab @ cp, ac @ cp
    if d6 >= 0 and d5 <= d6:
        return c
    vb = d5 * d2 - d1 * d6
    if vb <= 0 and d2 >= 0 and d6 <= 0:
        return a + d2 / (d2 - d6) * ac
    va = d3 * d6 - d5 * d4
    if va <= 0 and d4 - d3 >= 0 and d5 - d6 >= 0:
        return b + (d4 - d3) / ((d4 - d3) + (d5 - d6)) * (c - b)
    denom = 1.0 / (va + vb + vc)
    return a + ab * vb * denom + ac * vc * denom


def test_batched_closest_point_matches_ericson_and_dense_sampling():
    rng = np.random.default_rng(1)
    a, b, c = rng.normal(size=(3, 3))
    queries = rng.normal(size=(300, 3)) * 2                                            # every region is hit
    point, bary = closest_point(*(torch.from_numpy(v) for v in (queries, a, b, c)))
    reference = np.stack([ericson(q, a, b, c) for q in queries])
    np.testing.assert_allclose(point.numpy(), reference, atol=1e-12)
    np.testing.assert_allclose(bary.numpy() @ np.stack([a, b, c]), reference, atol=1e-12)
    assert (bary >= -1e-12).all()
    uv = rng.random((200000, 2))
    uv = np.where(uv.sum(1, keepdims=True) > 1, 1 - uv, uv)
    samples = a + uv[:, :1] * (b - a) + uv[:, 1:] * (c - a)
    for q, p in zip(queries[:5], point.numpy()[:5]):
        brute = np.linalg.norm(samples - q, axis=1).min()
        assert np.linalg.norm(p - q) <= brute + 1e-9 and np.linalg.norm(p - q) == pytest.approx(brute, abs=1e-2)


def test_locate_by_voxels_equals_a_search_over_every_face(bumpy):
    g = torch.Generator().manual_seed(0)
    on = bumpy.random_uniform(500, generator=g)
    for x in (on + 0.02 * torch.randn(500, 3, dtype=torch.float64, generator=g),     # near: the voxel lists
              on + 0.5 * torch.randn(500, 3, dtype=torch.float64, generator=g)):     # far: the fallback
        face, bary, point = bumpy.locate(x)
        every = torch.arange(len(bumpy.f)).expand(len(x), -1)
        _, _, brute = bumpy._closest_among(x, every)
        torch.testing.assert_close((point - x).norm(dim=-1), (brute - x).norm(dim=-1), atol=1e-12, rtol=0)
        torch.testing.assert_close(torch.einsum("nj,njc->nc", bary, bumpy.v[bumpy.f[face]]), point)


def test_cotangent_laplacian_spectrum_matches_spherical_harmonics(ico):
    # on the unit sphere, -Δ has eigenvalues l(l + 1) with multiplicity 2l + 1
    vals = ico.eigvals.numpy()
    np.testing.assert_allclose(vals[:3], 2.0, rtol=0.01)
    np.testing.assert_allclose(vals[3:8], 6.0, rtol=0.02)
    np.testing.assert_allclose(vals[8:15], 12.0, rtol=0.03)
    assert len(vals) == 24    # 20 asked, extended to the end of the l = 4 eigenspace (15 + 9)


def test_premetric_gradient_matches_finite_differences_within_a_face(bumpy):
    g = torch.Generator().manual_seed(3)
    x, y = bumpy.random_uniform(20, generator=g), bumpy.random_uniform(20, generator=g)
    d, grad = bumpy.dist_grad(x, bumpy.embedding(y))
    torch.testing.assert_close(d, bumpy.dist(x, y))
    face = bumpy.locate(x)[0]
    tangent = torch.linalg.cross(bumpy.normals[face], torch.randn(20, 3, dtype=torch.float64, generator=g))
    tangent = tangent / tangent.norm(dim=-1, keepdim=True)
    h = 1e-7   # stays inside the face (x is interior almost surely): d is smooth there
    fd = (bumpy.dist(x + h * tangent, y) - bumpy.dist(x - h * tangent, y)) / (2 * h)
    torch.testing.assert_close((grad * tangent).sum(-1), fd, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close((grad * bumpy.normals[face]).sum(-1), torch.zeros(20, dtype=torch.float64), atol=1e-12, rtol=0)


def test_spectral_path_contracts_premetric_linearly_and_ends_at_x1(ico):
    g = torch.Generator().manual_seed(0)
    x0, x1 = ico.random_uniform(16, generator=g), ico.random_uniform(16, generator=g)
    times = torch.linspace(0, 1 - 1e-5, 201, dtype=torch.float64)
    xs, us = premetric_path(ico, x0, x1, times)
    d0 = ico.dist(x0, x1)
    ratio = torch.stack([ico.dist(xs[k], x1) / d0 for k in (20, 80, 140, 190)])
    expected = 1 - times[[20, 80, 140, 190]][:, None]
    # projected Euler: most paths within 0.01; one that starts at d's maximum (∇d ≈ 0) recovers
    assert ((ratio - expected).abs() < 0.01).float().mean() > 0.9
    assert (ico.dist(xs[-1], x1) / d0 < 0.01).all()
    torch.testing.assert_close(ico.proju(xs[5], us[5]), us[5])                        # tangent
    # u = −d0 ∇d / ‖∇d‖², by finite differences of d along two tangent directions
    k, n = 50, ico.normals[ico.locate(xs[50])[0]]
    e1 = torch.linalg.cross(n, torch.randn(16, 3, dtype=torch.float64, generator=g))
    e1 = e1 / e1.norm(dim=-1, keepdim=True)
    e2 = torch.linalg.cross(n, e1)
    h = 1e-7
    grad = sum(e * ((ico.dist(xs[k] + h * e, x1) - ico.dist(xs[k] - h * e, x1)) / (2 * h))[:, None] for e in (e1, e2))
    torch.testing.assert_close(us[k], -d0[:, None] * grad / grad.pow(2).sum(-1, keepdim=True), atol=1e-4, rtol=1e-4)


def test_mesh_random_uniform_is_uniform_in_area(bumpy):
    face = bumpy.locate(bumpy.random_uniform(40000, generator=torch.Generator().manual_seed(0)))[0]
    counts = torch.bincount(face, minlength=len(bumpy.f)).double()
    expected = 40000 * bumpy.areas / bumpy.areas.sum()
    chi2 = ((counts - expected) ** 2 / expected).sum().item()
    dof = len(bumpy.f) - 1
    assert abs(chi2 - dof) < 5 * math.sqrt(2 * dof)


def test_eigenfunction_density_samples_and_log_prob_agree(bumpy):
    verts, faces = bumpy_sphere(2)
    density = EigenfunctionDensity(verts, faces, k=10)
    x = density.sample(20000, seed=0)
    face, bary, point = bumpy.locate(x)
    torch.testing.assert_close(point, x, atol=1e-12, rtol=0)                          # on the surface
    assert (density.values[faces[face.numpy()]] * bary.numpy()).sum(1).min() > 0       # never where p = 0
    # faces by mass: χ² against face_mass / Z over the faces with mass
    counts = np.bincount(face.numpy(), minlength=len(faces))
    p = density.face_mass / density.face_mass.sum()
    used = p > 0
    chi2 = ((counts[used] - 20000 * p[used]) ** 2 / (20000 * p[used])).sum()
    dof = used.sum() - 1
    assert abs(chi2 - dof) < 5 * math.sqrt(2 * dof) and counts[~used].sum() == 0
    # within faces: E[b_j] = Σ_i c_i (1 + δ_ij) / 4 / Σ_i c_i for the density ∝ Σ_i c_i b_i
    c = density.values[faces[face.numpy()]]
    expected = (c.sum(1, keepdims=True) + c) / 4 / c.sum(1, keepdims=True)
    z = (bary.numpy() - expected).mean(0) / ((bary.numpy() - expected).std(0) / math.sqrt(len(x)))
    assert np.abs(z).max() < 4
    # normalised: E_uniform[p · area] = 1
    g = torch.Generator().manual_seed(1)
    face_u, bary_u, _ = bumpy.locate(bumpy.random_uniform(40000, generator=g))
    ratio = (density.log_prob(bary_u, face_u).exp() * math.exp(bumpy.log_volume)).numpy()
    assert abs(ratio.mean() - 1) < 4 * ratio.std() / math.sqrt(len(ratio))


def test_an_eigenfunction_of_a_degenerate_eigenvalue_is_refused():
    with pytest.raises(ValueError, match="not simple"):
        EigenfunctionDensity(*icosphere(2), k=3)      # l = 1 on a sphere: three-fold
    with pytest.raises(ValueError, match="k must be >= 2"):
        EigenfunctionDensity(*icosphere(2), k=1)


def test_eigenpairs_solve_the_generalised_problem():
    from methods.rfm.mesh import cotangent_laplacian

    verts, faces = bumpy_sphere(1)
    vals, vecs = eigenpairs(verts, faces, 8)
    L, M = cotangent_laplacian(verts, faces)
    np.testing.assert_allclose(L @ vecs, M @ vecs * vals, atol=1e-8)
    np.testing.assert_allclose(vecs.T @ (M @ vecs), np.eye(8), atol=1e-8)


class FaceProjected(VectorField):
    """The official ProjectToTangent on a mesh: the MLP output projected onto the face only."""

    def forward(self, t, x):
        t = t.reshape(-1, 1).expand(x.shape[0], 1)
        h = x
        for layer, act in zip(self.hidden, self.acts):
            h = act(layer(h, t), t)
        return self.manifold.proju(x, self.out(h, t))


def test_uniform_and_flow_likelihoods_on_the_mesh(bumpy):
    nll = -log_likelihood(ZeroField(), bumpy, bumpy.random_uniform(6), steps=3)
    torch.testing.assert_close(nll, torch.full((6,), bumpy.log_volume, dtype=torch.float64))
    x = bumpy.random_uniform(500, generator=torch.Generator().manual_seed(4))
    masses = {}
    for kind in (VectorField, FaceProjected):   # a random field defines a density: E_uniform[p/p0] = 1
        torch.manual_seed(2)
        ratio = (log_likelihood(kind(bumpy, 16, 2).double(), bumpy, x, steps=3) + bumpy.log_volume).exp()
        masses[kind] = (ratio.mean().item(), ratio.std().item() / math.sqrt(len(x)))
    mass, se = masses[VectorField]
    assert abs(mass - 1.0) < 4 * se and se > 1e-3                  # Mesh.to_tangent: normalised
    mass, se = masses[FaceProjected]
    assert abs(mass - 1.0) > 8 * se                                  # face-only: the edges leak mass


def test_stratified_times_hold_one_draw_per_stratum():
    torch.manual_seed(0)
    for _ in range(20):
        t = stratified_times(10, 1e-5)
        assert len(t) == 12 and t[0] == 0 and t[-1] == 1 - 1e-5 and (t.diff() >= 0).all()
        strata = torch.linspace(0, 1 - 1e-5, 11, dtype=torch.float64)
        assert ((t[1:-1] >= strata[:-1]) & (t[1:-1] <= strata[1:])).all()


def test_simulated_paths_are_a_pure_function_of_the_step_and_use_every_grid_point(bumpy):
    from common.data import StepSampler

    data = bumpy.random_uniform(40, generator=torch.Generator().manual_seed(0))
    paths = SimulatedPaths(bumpy, data, StepSampler(40, 8, seed=0), seed=3, path_steps=4)
    batches = [paths(step) for step in range(12)]                # two solves of 6 steps each
    fresh = SimulatedPaths(bumpy, data, StepSampler(40, 8, seed=0), seed=3, path_steps=4)
    for step in (7, 2, 11):                                       # out of order, as after a resume
        for got, want in zip(fresh(step), batches[step]):
            torch.testing.assert_close(got, want, atol=0, rtol=0)
    times = torch.stack([b[2] for b in batches[:6]])              # (6 steps, 8 paths)
    for path in range(8):                                         # each path gives each grid point once
        assert times[:, path].unique().numel() == 6 and times[:, path].min() == 0
    x_t, u_t, t = batches[0]
    assert x_t.shape == (8, 3) and u_t.shape == (8, 3) and t.shape == (8,)
    torch.testing.assert_close(bumpy.proju(x_t, u_t), u_t)        # tangent targets


def test_mesh_training_step_regresses_onto_the_simulated_targets(bumpy):
    torch.manual_seed(0)
    model = FlowMatching(VectorField(bumpy, 16, 2), bumpy)
    x_t = bumpy.random_uniform(5)
    u_t, t = bumpy.proju(x_t, torch.randn(5, 3, dtype=torch.float64)), torch.rand(5, dtype=torch.float64)
    loss, _ = model.training_step((x_t, u_t, t))
    expected = (model.field(t, x_t) - u_t).pow(2).sum(-1).mean() / 3             # ambient R³
    torch.testing.assert_close(loss, expected)
    loss.backward()
    assert all(p.grad is not None for p in model.field.parameters())
    with pytest.raises(ValueError, match="not for a mesh"):
        FlowMatching(VectorField(bumpy, 16, 2), bumpy, variant="euclidean")
