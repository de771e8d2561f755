"""RFM on the sphere and the torus: exp/log, the geodesic path, the premetric field, divergence,
likelihoods, the vector field and its loss against the official expressions, and the data split,
each against an independent derivation written here (the mesh: test_rfm_mesh.py)."""
import math

import pytest
import torch
from torch import nn

from methods.rfm import (FlatTorus, FlowMatching, Sphere, VMFMixture, VectorField, conditional_path, divergence,
                         log_likelihood, premetric_field, projected_euclidean_loss, split_points)
from methods.rfm.loss import rfm_loss
from methods.rfm.model import TimeDependentSwish, TimeLinear

MANIFOLDS = [Sphere(), FlatTorus(2), FlatTorus(5)]


def points(manifold, n=64, seed=0):
    return manifold.random_uniform(n, generator=torch.Generator().manual_seed(seed))


# --- sphere and torus --------------------------------------------------------------------
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
    h = 1e-6                                                                          # finite difference in t
    fwd, _ = conditional_path(manifold, x0, x1, t + h)
    bwd, _ = conditional_path(manifold, x0, x1, t - h)
    torch.testing.assert_close(manifold.log(bwd, fwd) / (2 * h), u_t, atol=1e-5, rtol=1e-4)


def test_sphere_dist_closed_form():
    x, y = torch.tensor([[1.0, 0, 0]], dtype=torch.float64), torch.tensor([[0.0, 1.0, 0]], dtype=torch.float64)
    assert Sphere().dist(x, y).item() == pytest.approx(math.pi / 2)


def test_projected_euclidean_target_written_out():
    """The ablation's (x̂_t, û_t): the chord point normalised, x1 − x0 minus its radial part."""
    sphere, field = Sphere(), _Recorder()
    x0, x1 = points(sphere, 16), points(sphere, 16, seed=1)
    t = torch.linspace(0.05, 0.95, 16, dtype=torch.float64)
    loss = projected_euclidean_loss(field, sphere, x0, x1, t)
    chord = (1 - t[:, None]) * x0 + t[:, None] * x1
    x_hat = chord / chord.norm(dim=-1, keepdim=True)
    u_hat = (x1 - x0) - ((x1 - x0) * x_hat).sum(-1, keepdim=True) * x_hat
    torch.testing.assert_close(field.x, x_hat)
    torch.testing.assert_close(loss, u_hat.pow(2).sum(-1).mean() / 3)                # the recorder outputs 0
    torus = FlatTorus(2)                                                              # flat: the raw straight line
    y0, y1 = points(torus, 16), points(torus, 16, seed=1)
    assert projected_euclidean_loss(_Recorder(), torus, y0, y1, t).item() == pytest.approx(
        float((y1 - y0).pow(2).sum(-1).mean() / 2))


class _Recorder(nn.Module):
    def forward(self, t, x):
        self.x = x
        return torch.zeros_like(x)


class ZeroField(nn.Module):
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


def test_vector_field_dtypes_are_explicit_and_its_output_tangent():
    """float32 weights (as the official code trains) on float64 points give float64 tangent vectors;
    a .double() copy computes in float64 throughout; nothing touches the default dtype."""
    assert torch.get_default_dtype() == torch.float32
    field = VectorField(Sphere(), 8, 2)
    assert all(p.dtype == torch.float32 for p in field.parameters())
    x = points(Sphere(), 6)
    for f in (field, VectorField(Sphere(), 8, 2).double()):
        v = f(torch.rand(6, dtype=torch.float64), x)
        assert v.dtype == torch.float64
        torch.testing.assert_close((v * x).sum(-1), torch.zeros(6, dtype=torch.float64), atol=1e-12, rtol=0)
    assert torch.get_default_dtype() == torch.float32
    with pytest.raises(ValueError, match="hidden >= 1"):
        VectorField(Sphere(), 0, 2)
    with pytest.raises(ValueError, match="variant must be one of"):
        FlowMatching(field, Sphere(), variant="straight")


def _softplus(z: float) -> float:
    return math.log1p(math.exp(z))


def test_time_dependent_swish_is_the_official_expression():
    """Official TimeDependentSwish (diffeq_layers/basic.py:487-500), unit by unit:
    β_j(t) = softplus(Σ_k W2[j, k] softplus(W1[k] t + b1[k]) + b2[j]), out_j = x_j σ(β_j(t) x_j),
    the hidden width min(64, 4 dim)."""
    torch.manual_seed(0)
    assert TimeDependentSwish(256, torch.float32).beta[0].out_features == 64
    act = TimeDependentSwish(5, torch.float64)
    lin1, lin2 = act.beta[0], act.beta[2]
    assert (lin1.in_features, lin1.out_features, lin2.out_features) == (1, 20, 5)
    x = torch.randn(4, 5, dtype=torch.float64)
    t = torch.tensor([0.0, 0.3, 0.7, 1.0], dtype=torch.float64)
    got = act(x, t.reshape(-1, 1))
    W1, b1, W2, b2 = (p.detach().tolist() for p in (lin1.weight, lin1.bias, lin2.weight, lin2.bias))
    for n in range(4):
        h = [_softplus(W1[k][0] * t[n].item() + b1[k]) for k in range(20)]
        for j in range(5):
            beta = _softplus(sum(W2[j][k] * h[k] for k in range(20)) + b2[j])
            xj = x[n, j].item()
            assert got[n, j].item() == pytest.approx(xj / (1 + math.exp(-beta * xj)), rel=1e-12, abs=1e-15)


def test_time_weights_start_at_zero_so_time_enters_the_initial_field_only_through_beta():
    """ConcatLinear_v2 (diffeq_layers/basic.py:64-72): the w of w · t starts at 0, no bias of its own.
    Every layer's output is then the same at two t; the initial field's only t-dependence is the
    swish's β(t), so with β made constant in t the whole field is the same at t = 0.1 and 0.9."""
    torch.manual_seed(0)
    field = VectorField(Sphere(), 16, 3).double()
    x = points(Sphere(), 6)
    t0, t1 = torch.full((6,), 0.1, dtype=torch.float64), torch.full((6,), 0.9, dtype=torch.float64)
    for layer in [*field.hidden, field.out]:
        assert isinstance(layer, TimeLinear) and layer.time.bias is None
        assert (layer.time.weight == 0).all()
        h = torch.randn(6, layer.linear.in_features, dtype=torch.float64)
        torch.testing.assert_close(layer(h, t0[:, None]), layer(h, t1[:, None]), atol=0, rtol=0)
    assert not torch.allclose(field(t0, x), field(t1, x))             # β(t) depends on t
    with torch.no_grad():
        for act in field.acts:
            act.beta[0].weight.zero_()                                # β constant in t
    torch.testing.assert_close(field(t0, x), field(t1, x), atol=0, rtol=0)


class _Affine(nn.Module):
    """A fixed field depending on t and x: v = x · a + t · c (not tangent; the loss does not care)."""

    def forward(self, t, x):
        return 0.3 * x + t.reshape(-1, 1) * torch.arange(1, x.shape[-1] + 1, dtype=x.dtype)


@pytest.mark.parametrize("manifold, ambient", [(Sphere(), 3), (FlatTorus(2), 2), (FlatTorus(5), 5)],
                         ids=["sphere", "torus2", "torus5"])
def test_rfm_loss_is_the_official_reduction(manifold, ambient):
    """Official rfm_loss_fn (model_pl.py:614-615): manifold.inner(x_t, diff, diff) is the per-point sum
    of squares (metric_normalize False), .mean() over the batch, / self.dim = the ambient dimension
    (EarthData.dim = 3, Top500.dim = 2). Written out as loops over points and coordinates."""
    x0, x1 = points(manifold, 7), points(manifold, 7, seed=1)
    t = torch.linspace(0.1, 0.9, 7, dtype=torch.float64)
    loss = rfm_loss(_Affine(), manifold, x0, x1, t)
    x_t, u_t = conditional_path(manifold, x0, x1, t)
    v = _Affine()(t, x_t)
    total = 0.0
    for n in range(7):
        total += sum((v[n, j].item() - u_t[n, j].item()) ** 2 for j in range(ambient))
    assert loss.item() == pytest.approx(total / 7 / ambient, rel=1e-12)


class _EarlierField(nn.Module):
    """The field before the switch to the official form (f4998d6^: model.py), written out: SiLU after
    each hidden layer, every Linear (the time weights too) PyTorch's default init, built in the order
    linear_0, time_0, linear_1, time_1, ..., out."""

    def __init__(self, hidden, layers):
        super().__init__()
        dims = [3] + [hidden] * layers + [3]
        self.lin, self.time = nn.ModuleList(), nn.ModuleList()
        for a, b in zip(dims[:-1], dims[1:]):
            self.lin.append(nn.Linear(a, b))
            self.time.append(nn.Linear(1, b, bias=False))

    def forward(self, t, x):
        t = t.reshape(-1, 1).float().expand(len(x), 1)
        h = x.float()
        for i, (lin, time) in enumerate(zip(self.lin, self.time)):
            h = lin(h) + time(t)
            h = torch.nn.functional.silu(h) if i < len(self.lin) - 1 else h
        h = h.to(x.dtype)
        return h - (h * x).sum(-1, keepdim=True) * x     # the tangent part on S²


def test_the_ablations_together_rebuild_the_earlier_field_and_each_is_refused_when_unknown():
    """activation='silu', time_init='default' is the earlier field draw for draw under one seed (the
    switch's ablation rows rest on this); the official default is not; loss_dim='intrinsic' divides
    by the manifold's dimension (2 on S²) instead of 3. Unknown values are ValueErrors."""
    x, t = points(Sphere(), 6), torch.rand(6, dtype=torch.float64)
    torch.manual_seed(3)
    earlier = _EarlierField(8, 2)
    torch.manual_seed(3)
    ours = VectorField(Sphere(), 8, 2, activation="silu", time_init="default")
    torch.testing.assert_close(ours(t, x), earlier(t, x), atol=1e-12, rtol=0)   # the same draws; rounding of the projection
    assert all(not any(True for _ in act.parameters()) for act in ours.acts)
    assert any((layer.time.weight != 0).any() for layer in ours.hidden)
    torch.manual_seed(3)
    assert not torch.allclose(VectorField(Sphere(), 8, 2)(t, x), earlier(t, x))
    x0, x1, tt = points(Sphere(), 7), points(Sphere(), 7, seed=1), torch.linspace(0.1, 0.9, 7, dtype=torch.float64)
    for variant in ("riemannian", "euclidean"):
        torch.manual_seed(0)
        official = FlowMatching(_Affine(), Sphere(), variant).training_step(x1)[0]
        torch.manual_seed(0)
        intrinsic = FlowMatching(_Affine(), Sphere(), variant, loss_dim="intrinsic").training_step(x1)[0]
        assert intrinsic.item() == pytest.approx(official.item() * 3 / 2, rel=1e-12)
    assert rfm_loss(_Affine(), Sphere(), x0, x1, tt, dim=2).item() == pytest.approx(
        rfm_loss(_Affine(), Sphere(), x0, x1, tt).item() * 3 / 2, rel=1e-12)
    with pytest.raises(ValueError, match="activation must be one of"):
        VectorField(Sphere(), 8, 2, activation="relu")
    with pytest.raises(ValueError, match="time_init must be one of"):
        VectorField(Sphere(), 8, 2, time_init="ones")
    with pytest.raises(ValueError, match="loss_dim must be one of"):
        FlowMatching(_Affine(), Sphere(), loss_dim="both")


def test_vmf_mixture_fits_a_concentrated_cluster():
    sphere = Sphere()
    g = torch.Generator().manual_seed(0)
    centre = torch.tensor([0.0, 0.0, 1.0], dtype=torch.float64)
    x = sphere.projx(centre + 0.1 * torch.randn(2000, 3, dtype=torch.float64, generator=g))
    vmf = VMFMixture(2, iters=100).fit(x)
    assert -vmf.log_prob(x).mean() < math.log(4 * math.pi) - 2
    grid = sphere.random_uniform(20000, generator=g)        # normalised: E_uniform[p · 4π] = 1
    assert (vmf.log_prob(grid).exp() * 4 * math.pi).mean().item() == pytest.approx(1.0, abs=0.1)


def test_split_fixes_the_test_points_and_redraws_train_and_val_per_seed():
    x = torch.arange(1000, dtype=torch.float64)[:, None]
    a, b = split_points(x, 0, val=0.1, test=0.1, test_seed=0), split_points(x, 1, val=0.1, test=0.1, test_seed=0)
    assert torch.equal(a["test"], b["test"]) and not torch.equal(a["val"], b["val"])
    for s in (a, b):
        sizes = {k: len(v) for k, v in s.items()}
        assert sizes == {"train": 800, "val": 100, "test": 100}
        assert len(torch.cat(list(s.values())).unique()) == 1000                     # disjoint, complete
    with pytest.raises(ValueError, match="split fractions"):
        split_points(x, 0, val=0.5, test=0.5, test_seed=0)
