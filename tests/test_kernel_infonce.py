"""Kernel-InfoNCE: every kernel against an anchor loop with the kernel written from its definition,
Gaussian = NT-Xent, the official cdist form, symmetries, gradients at coincident pairs, bad
input, the tau-selection splits and a training step."""
import math

import pytest
import torch
import torch.nn.functional as F

from common.config import UserError
from common.nn.backbones import SmallCNN
from common.ssl import Augment, info_nce
from methods.kernel_infonce import KERNELS, OBJECTIVES, KernelInfoNCE, build, kernel_infonce, kernel_loss_sum, log_kernel
from methods.kernel_infonce.model import READS_GAMMA

AUG = Augment(min_scale=0.3, flip_prob=0.5, jitter_prob=0.8, brightness=0.4, contrast=0.4)


def rand(n, d=6, seed=0):
    return torch.randn(n, d, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)


def distance(u, v):
    return math.sqrt(sum((a - b) ** 2 for a, b in zip(u, v)))


def kernel_value(u, v, kernel, t, gamma, t2):
    """K(u, v) from the kernel's definition, in python floats."""
    t2 = t if t2 is None else t2
    d = distance(u, v)
    if kernel == "gaussian":
        return math.exp(-d ** 2 / t)
    if kernel == "laplacian":
        return math.exp(-d / t)
    if kernel == "exponential":
        return math.exp(-d ** gamma / t)
    if kernel == "simple_sum":
        return math.exp(-d ** gamma / t) + math.exp(-d ** 2 / t2)
    half = len(u) // 2                                   # concat_sum
    return math.exp(-distance(u[:half], v[:half]) ** gamma / t) + math.exp(-distance(u[half:], v[half:]) ** 2 / t2)


def slow_kernel_infonce(z1, z2, kernel, t, gamma=1.0, t2=None):
    u = F.normalize(torch.cat([z1, z2]), dim=1).tolist()
    n2 = len(u)
    total = 0.0
    for a in range(n2):
        pos = (a + n2 // 2) % n2
        denom = sum(kernel_value(u[a], u[b], kernel, t, gamma, t2) for b in range(n2) if b != a)
        total += -math.log(kernel_value(u[a], u[pos], kernel, t, gamma, t2) / denom)
    return total / n2


def slow_nt_xent(z1, z2, t):
    u = F.normalize(torch.cat([z1, z2]), dim=1).tolist()
    n2 = len(u)
    total = 0.0
    for a in range(n2):
        pos = (a + n2 // 2) % n2
        sim = [sum(x * y for x, y in zip(u[a], u[b])) / t for b in range(n2)]
        total += -(sim[pos] - math.log(sum(math.exp(sim[b]) for b in range(n2) if b != a)))
    return total / n2


def official_gamma_loss(z1, z2, gamma, t):
    """The official `gamma_loss` expression written out (cdist to the power gamma, exp, row sum
    minus the diagonal, positive from the norm of the difference), without its 1e-6 guards."""
    out = torch.cat([z1, z2])
    sim = torch.exp(-torch.cdist(out, out).pow(gamma) / t)
    neg = sim.sum(dim=-1) - sim.diag()
    pos = torch.exp(-torch.norm(z1 - z2, dim=-1).pow(gamma) / t).repeat(2)
    return -torch.log(pos / neg).mean()


# --- equations ------------------------------------------------------------------------------
@pytest.mark.parametrize("kernel", KERNELS)
@pytest.mark.parametrize("t,gamma,t2", [(0.5, 1.0, None), (0.2, 0.5, 0.7), (1.0, 1.7, 0.3)])
def test_each_kernel_matches_its_anchor_loop(kernel, t, gamma, t2):
    z1, z2 = rand(5, seed=1), rand(5, seed=2)
    got = kernel_infonce(z1, z2, kernel, t, gamma, t2).item()
    assert got == pytest.approx(slow_kernel_infonce(z1, z2, kernel, t, gamma, t2), rel=1e-8)


@pytest.mark.parametrize("t", [0.1, 0.5])
def test_gaussian_at_twice_tau_is_nt_xent(t):
    z1, z2 = rand(7, seed=3), rand(7, seed=4)
    got = kernel_infonce(z1, z2, "gaussian", 2 * t).item()
    assert got == pytest.approx(slow_nt_xent(z1, z2, t), rel=1e-8)
    assert got == pytest.approx(info_nce(z1, z2, t).item(), rel=1e-8)


def test_laplacian_is_exponential_with_gamma_one():
    z1, z2 = rand(6, seed=5), rand(6, seed=6)
    assert kernel_infonce(z1, z2, "laplacian", 0.3).item() == pytest.approx(
        kernel_infonce(z1, z2, "exponential", 0.3, gamma=1.0).item(), rel=1e-12)


@pytest.mark.parametrize("kernel", ["simple_sum", "concat_sum", "exponential"])
def test_log_kernel_elementwise(kernel):
    a, b = rand(4, seed=7), rand(3, seed=8)
    got = log_kernel(a, b, kernel, 0.4, gamma=0.5, temperature2=0.9)
    want = torch.tensor([[math.log(kernel_value(u, v, kernel, 0.4, 0.5, 0.9)) for v in b.tolist()] for u in a.tolist()],
                        dtype=torch.float64)
    torch.testing.assert_close(got, want, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("gamma", [0.5, 1.0, 2.0])
def test_exponential_matches_the_official_cdist_form(gamma):
    z1, z2 = F.normalize(rand(8, seed=9), dim=1), F.normalize(rand(8, seed=10), dim=1)
    assert kernel_infonce(z1, z2, "exponential", 0.5, gamma).item() == pytest.approx(
        official_gamma_loss(z1, z2, gamma, 0.5).item(), rel=1e-8)


def test_loss_sum_is_the_official_weighted_sum():
    z1, z2 = rand(5, seed=11), rand(5, seed=12)
    want = 0.3 * slow_kernel_infonce(z1, z2, "exponential", 0.5, 0.5) + 0.7 * slow_kernel_infonce(z1, z2, "gaussian", 0.5)
    assert kernel_loss_sum(z1, z2, 0.5, gamma=0.5, weight=0.3).item() == pytest.approx(want, rel=1e-8)


@pytest.mark.parametrize("kernel", KERNELS)
def test_symmetric_in_views_and_invariant_to_batch_order_and_scale(kernel):
    z1, z2 = rand(6, seed=13), rand(6, seed=14)
    base = kernel_infonce(z1, z2, kernel, 0.5, 0.5).item()
    perm = torch.randperm(6, generator=torch.Generator().manual_seed(0))
    assert kernel_infonce(z2, z1, kernel, 0.5, 0.5).item() == pytest.approx(base, rel=1e-12)
    assert kernel_infonce(z1[perm], z2[perm], kernel, 0.5, 0.5).item() == pytest.approx(base, rel=1e-12)
    assert kernel_infonce(3 * z1, 0.2 * z2, kernel, 0.5, 0.5).item() == pytest.approx(base, rel=1e-12)


@pytest.mark.parametrize("kernel", KERNELS)
@pytest.mark.parametrize("gamma", [0.5, 1.0])
def test_gradient_finite_when_a_positive_pair_coincides(kernel, gamma):
    z1 = rand(5, seed=15)
    z2 = rand(5, seed=16)
    z2[0] = z1[0]                       # the two views of image 0 embed to the same point
    for dtype in (torch.float64, torch.float32):
        a, b = z1.detach().to(dtype).clone().requires_grad_(), z2.detach().to(dtype).clone().requires_grad_()
        loss = kernel_infonce(a, b, kernel, 0.5, gamma)
        loss.backward()
        assert torch.isfinite(loss) and torch.isfinite(a.grad).all() and torch.isfinite(b.grad).all()


@pytest.mark.parametrize("kernel", KERNELS)
def test_gradient_matches_finite_differences(kernel):
    z1, z2 = rand(3, d=4, seed=17).requires_grad_(), rand(3, d=4, seed=18)
    assert torch.autograd.gradcheck(lambda a: kernel_infonce(a, z2, kernel, 0.5, 0.5), (z1,))


def test_loss_keeps_the_input_dtype():
    for dtype in (torch.float32, torch.float64):
        assert all(kernel_infonce(rand(4).to(dtype), rand(4, seed=1).to(dtype), k, 0.5).dtype == dtype for k in KERNELS)


# --- bad input ------------------------------------------------------------------------------
@pytest.mark.parametrize("z1,z2,kwargs,match", [
    (rand(4), rand(4), dict(kernel="cauchy", temperature=0.5), "gaussian, laplacian, exponential, simple_sum, concat_sum"),
    (rand(4), rand(4), dict(kernel="exponential", temperature=0.5, gamma=0.0), r"gamma must lie in \(0, 2\]"),
    (rand(4), rand(4), dict(kernel="exponential", temperature=0.5, gamma=2.5), "got 2.5"),
    (rand(4), rand(4), dict(kernel="gaussian", temperature=0.0), "temperature must be > 0"),
    (rand(4), rand(4), dict(kernel="simple_sum", temperature=0.5, temperature2=-1.0), "temperature2"),
    (rand(4), rand(5), dict(kernel="gaussian", temperature=0.5), "same shape"),
    (rand(4)[None], rand(4)[None], dict(kernel="gaussian", temperature=0.5), r"\(N, d\)"),
    (rand(4, d=5), rand(4, d=5), dict(kernel="concat_sum", temperature=0.5), "even, got 5"),
])
def test_bad_input_is_a_value_error_naming_it(z1, z2, kwargs, match):
    with pytest.raises(ValueError, match=match):
        kernel_infonce(z1, z2, **kwargs)


def test_log_kernel_refuses_embeddings_of_different_widths():
    with pytest.raises(ValueError, match=r"same d, got \(4, 8\) and \(3, 6\)"):
        log_kernel(rand(4, d=8), rand(3, d=6), "gaussian", 0.5)


@pytest.mark.parametrize("kernel", ["gaussian", "exponential", "simple_sum"])
def test_model_loss_runs_in_float32_under_bf16_autocast(kernel):
    """Under bf16 autocast the matmul of |a|^2 + |b|^2 - 2 a.b would run in bf16 (the loss moves by
    ~1e-3 here); the model computes its loss with autocast off, so it equals the float32 loss."""
    gamma = 0.5 if kernel != "gaussian" else None
    model = KernelInfoNCE(torch.nn.Flatten(), 4, kernel=kernel, temperature=0.1, gamma=gamma, proj_hidden=8, proj_dim=8)
    z1, z2 = rand(64, d=128, seed=3).float(), rand(64, d=128, seed=4).float()
    exact = model.loss(z1, z2)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        inside = model.loss(z1, z2)
        bare = kernel_infonce(z1, z2, kernel, 0.1, gamma or 1.0)     # the pure function follows autocast
    assert inside.dtype == torch.float32 and torch.equal(inside, exact)
    assert (bare.float() - exact).abs() > 1e-5                          # so the test can fail
    assert model.loss(z1.double(), z2.double()).dtype == torch.float64
    assert model.loss(z1.to("meta"), z2.to("meta")).device.type == "meta"   # paper-tier dry runs build on meta


def test_model_rejects_bad_arguments():
    with pytest.raises(ValueError, match="loss_sum"):
        KernelInfoNCE(SmallCNN(1, 4), 16, kernel="cosine")
    with pytest.raises(ValueError, match="proj_dim must be even"):
        KernelInfoNCE(SmallCNN(1, 4), 16, kernel="concat_sum", proj_dim=63)
    with pytest.raises(ValueError, match="gamma"):
        KernelInfoNCE(SmallCNN(1, 4), 16, kernel="loss_sum", gamma=3.0)
    with pytest.raises(ValueError, match="does not read gamma"):        # a key that would do nothing
        KernelInfoNCE(SmallCNN(1, 4), 16, kernel="gaussian", gamma=0.5)
    with pytest.raises(ValueError, match="does not read temperature2"):
        KernelInfoNCE(SmallCNN(1, 4), 16, kernel="exponential", temperature2=0.5)
    with pytest.raises(ValueError, match="does not read loss_sum_weight"):
        KernelInfoNCE(SmallCNN(1, 4), 16, kernel="simple_sum", loss_sum_weight=0.5)


# --- model ------------------------------------------------------------------------------
@pytest.mark.parametrize("kernel", OBJECTIVES)
def test_training_step_runs_with_finite_gradients(kernel):
    torch.manual_seed(0)
    encoder = SmallCNN(1, 4)
    gamma = 0.5 if kernel in READS_GAMMA else None
    model = KernelInfoNCE(encoder, encoder.num_features, kernel=kernel, temperature=0.5, gamma=gamma, augment=AUG)
    loss, _ = model.training_step(torch.randint(0, 256, (6, 1, 28, 28), dtype=torch.uint8))
    loss.backward()
    assert torch.isfinite(loss)
    assert all(p.grad is not None and torch.isfinite(p.grad).all() for p in model.parameters())


def test_model_reads_its_defaults_where_the_kernel_uses_them():
    encoder = SmallCNN(1, 4)
    model = KernelInfoNCE(encoder, encoder.num_features, kernel="loss_sum", temperature=0.3, augment=AUG)
    assert (model.gamma, model.loss_sum_weight, model.temperature2, model.temperature) == (1.0, 0.5, None, 0.3)
    z1, z2 = torch.randn(4, 128), torch.randn(4, 128)
    torch.testing.assert_close(model.loss(z1, z2), kernel_loss_sum(z1, z2, 0.3, 1.0, 0.5))


# --- configs --------------------------------------------------------------------------------
@pytest.mark.parametrize("override, says", [("method.model.kernel=cauchy", "choose one of"),
                                            ("method.model.gamma=2.5", r"gamma must lie in \(0, 2\]"),
                                            ("method.model.proj_dim=15", "even"),
                                            ("method.model.temperature2=-1", "temperature2")])
def test_bad_kernel_settings_in_a_config_are_config_errors(compose_cfg, override, says):
    extra = ["method.model.kernel=concat_sum"] if "proj_dim" in override else []
    with pytest.raises(UserError, match=says) as err:
        build(compose_cfg(["experiment=kernel_infonce_smoke", *extra, override]))
    assert err.value.exit_code == 2
