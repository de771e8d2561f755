"""Kernel-InfoNCE's guarded form (`guarded=True`): the official `gamma_loss` of simclr_module.py,
with its two 1e-6 guards, written out here, against ours; where the guards matter and where they
do not; the weighted loss sum; a slow loop for the kernel sums; the model and config option."""
import math

import pytest
import torch
import torch.nn.functional as F

from common.nn.backbones import SmallCNN
from methods.kernel_infonce import KERNELS, KernelInfoNCE, build, kernel_infonce, kernel_loss_sum

EPS = 1e-6


def rand(n, d=6, seed=0):
    return torch.randn(n, d, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)


def unit_pairs(n, d, cosine, seed=0):
    """n positive pairs on the unit sphere at exactly `cosine` (z2 = c z1 + sqrt(1 - c^2) v, v unit and
    orthogonal to z1), with random negatives."""
    g = torch.Generator().manual_seed(seed)
    z1 = F.normalize(torch.randn(n, d, generator=g, dtype=torch.float64), dim=1)
    v = torch.randn(n, d, generator=g, dtype=torch.float64)
    v = F.normalize(v - (v * z1).sum(1, keepdim=True) * z1, dim=1)
    return z1, cosine * z1 + math.sqrt(1 - cosine ** 2) * v


def official_guarded_gamma_loss(out_1, out_2, gamma, temperature, eps=EPS):
    """simclr_module.py `gamma_loss` on one device (distance_p = 2), written out line by line from
    the official code: the exponentials of -cdist^gamma / tau, the row sum minus its diagonal clamped
    at eps, the positive from the norm of the difference, and -log(pos / (neg + eps)). The inputs
    are the projector's L2-normalised outputs (the official Projection normalises)."""
    out = torch.cat([out_1, out_2], dim=0)
    cov = torch.pow(torch.cdist(out, out, p=2.0), gamma) * -1.
    sim = torch.exp(cov / temperature)
    neg = torch.clamp(sim.sum(dim=-1) - sim.diag(), min=eps)
    sim_adj = torch.pow(torch.norm(out_1 - out_2, dim=-1, p=2.0), gamma) * -1.
    pos = torch.exp(sim_adj / temperature)
    pos = torch.cat([pos, pos], dim=0)
    return -torch.log(pos / (neg + eps)).mean()


def slow_guarded(z1, z2, kernel_value, eps=EPS):
    """Anchor loop: -log(K(a, a+) / (max(sum_{b != a} K(a, b), eps) + eps)), K given as a function."""
    u = F.normalize(torch.cat([z1, z2]), dim=1).tolist()
    n2 = len(u)
    total = 0.0
    for a in range(n2):
        denom = sum(kernel_value(u[a], u[b]) for b in range(n2) if b != a)
        total += -math.log(kernel_value(u[a], u[(a + n2 // 2) % n2]) / (max(denom, eps) + eps))
    return total / n2


def dist(u, v):
    return math.sqrt(sum((a - b) ** 2 for a, b in zip(u, v)))


# --- against the official expression --------------------------------------------------------
@pytest.mark.parametrize("gamma", [0.5, 1.0, 2.0])
@pytest.mark.parametrize("t", [0.03, 0.0625, 0.25, 0.5])
def test_guarded_exponential_is_the_official_gamma_loss(gamma, t):
    z1, z2 = unit_pairs(16, 8, 0.7, seed=1)
    got = kernel_infonce(z1, z2, "exponential", t, gamma, guarded=True).item()
    assert got == pytest.approx(official_guarded_gamma_loss(z1, z2, gamma, t).item(), rel=1e-8)


def test_guarded_matches_the_official_where_its_clamp_acts():
    """tau so small that every row's sum is below eps (the clamp at eps acts; float64 does not underflow)."""
    z1, z2 = unit_pairs(8, 8, 0.7, seed=2)
    t = 0.01
    s = torch.exp(-torch.cdist(torch.cat([z1, z2]), torch.cat([z1, z2])) / t)
    assert ((s.sum(-1) - s.diag()) < EPS).all()                        # the clamp is live on every row
    got = kernel_infonce(z1, z2, "laplacian", t, guarded=True).item()
    assert got == pytest.approx(official_guarded_gamma_loss(z1, z2, 1.0, t).item(), rel=1e-8)


def test_the_guards_matter_at_small_tau_and_not_at_large():
    """The issue's case: gamma = 1 (Laplacian), positives at cosine 0.7. At tau 0.0625 the positive's
    kernel (e^{-0.775/0.0625} ~ 4e-6) is of the order of eps and the guarded loss is ~0.2 higher; at
    tau 0.5 the two agree to 1e-6."""
    z1, z2 = unit_pairs(128, 64, 0.7, seed=3)
    plain, guarded = (kernel_infonce(z1, z2, "laplacian", 0.0625, guarded=g).item() for g in (False, True))
    assert guarded - plain > 0.1
    assert guarded == pytest.approx(official_guarded_gamma_loss(z1, z2, 1.0, 0.0625).item(), rel=1e-8)
    plain, guarded = (kernel_infonce(z1, z2, "laplacian", 0.5, guarded=g).item() for g in (False, True))
    assert abs(guarded - plain) < 1e-6
    assert guarded > plain                                               # eps only ever adds to a denominator


@pytest.mark.parametrize("kernel", ["simple_sum", "concat_sum", "gaussian"])
def test_guarded_kernel_sums_match_an_anchor_loop(kernel):
    z1, z2 = unit_pairs(5, 6, 0.6, seed=4)
    t, gamma, t2 = 0.05, 1.0, 0.08

    def k(u, v):
        if kernel == "gaussian":
            return math.exp(-dist(u, v) ** 2 / t)
        if kernel == "simple_sum":
            return math.exp(-dist(u, v) ** gamma / t) + math.exp(-dist(u, v) ** 2 / t2)
        return math.exp(-dist(u[:3], v[:3]) ** gamma / t) + math.exp(-dist(u[3:], v[3:]) ** 2 / t2)

    got = kernel_infonce(z1, z2, kernel, t, gamma if kernel != "gaussian" else 1.0,
                         t2 if kernel != "gaussian" else None, guarded=True).item()
    assert got == pytest.approx(slow_guarded(z1, z2, k), rel=1e-8)


def test_guarded_loss_sum_is_the_official_weighted_sum_of_guarded_losses():
    z1, z2 = unit_pairs(6, 8, 0.7, seed=5)
    want = (0.3 * official_guarded_gamma_loss(z1, z2, 0.5, 0.05) + 0.7 * official_guarded_gamma_loss(z1, z2, 2.0, 0.05))
    assert kernel_loss_sum(z1, z2, 0.05, gamma=0.5, weight=0.3, guarded=True).item() == pytest.approx(want.item(), rel=1e-8)


def test_guarded_is_finite_where_the_official_float32_exp_underflows():
    z1, z2 = (z.float() for z in unit_pairs(8, 8, 0.3, seed=6))
    a, b = z1.clone().requires_grad_(), z2.clone().requires_grad_()
    official = official_guarded_gamma_loss(a.detach(), b.detach(), 1.0, 0.005)
    assert not torch.isfinite(official)                                   # exp(-d / 0.005) = 0 in float32
    loss = kernel_infonce(a, b, "laplacian", 0.005, guarded=True)
    loss.backward()
    assert torch.isfinite(loss) and torch.isfinite(a.grad).all() and torch.isfinite(b.grad).all()
    # all kernels are 0 against eps: the loss is -log K(pos) + log(2 eps), the positive's log-kernel alone
    d = (z1 - z2).double().norm(dim=1)
    assert loss.item() == pytest.approx((d / 0.005).mean().item() + math.log(2 * EPS), rel=1e-5)


@pytest.mark.parametrize("kernel", KERNELS)
def test_guarded_gradient_matches_finite_differences(kernel):
    z1, z2 = rand(3, d=4, seed=17).requires_grad_(), rand(3, d=4, seed=18)
    assert torch.autograd.gradcheck(lambda a: kernel_infonce(a, z2, kernel, 0.05, 0.5, guarded=True), (z1,))


# --- model and config -----------------------------------------------------------------------
def test_model_passes_guarded_to_its_loss():
    encoder = SmallCNN(1, 4)
    z1, z2 = unit_pairs(16, 8, 0.7, seed=7)
    for kernel, gamma in (("laplacian", None), ("loss_sum", 0.5)):
        model = KernelInfoNCE(encoder, encoder.num_features, kernel=kernel, temperature=0.0625, gamma=gamma,
                              guarded=True, proj_hidden=8, proj_dim=8)
        plain = KernelInfoNCE(encoder, encoder.num_features, kernel=kernel, temperature=0.0625, gamma=gamma,
                              proj_hidden=8, proj_dim=8)
        want = (kernel_infonce(z1, z2, "laplacian", 0.0625, guarded=True) if kernel == "laplacian"
                else kernel_loss_sum(z1, z2, 0.0625, 0.5, 0.5, guarded=True))
        torch.testing.assert_close(model.loss(z1, z2), want)
        assert model.loss(z1, z2) > plain.loss(z1, z2) + 1e-3


def test_model_refuses_a_guarded_that_is_not_a_bool():
    with pytest.raises(ValueError, match="guarded must be true or false"):
        KernelInfoNCE(SmallCNN(1, 4), 16, kernel="laplacian", gamma=None, guarded=1e-6)


def test_the_config_option_builds_a_guarded_model(compose_cfg):
    cfg = compose_cfg(["experiment=kernel_infonce_smoke", "method.model.guarded=true"])
    assert build(cfg).guarded is True
    assert build(compose_cfg(["experiment=kernel_infonce_smoke"])).guarded is False
