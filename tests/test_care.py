"""CARE: the loss against a slow double loop, its zero set, the metrics, per-chunk pairs."""
import pytest
import torch
import torch.nn.functional as F
from omegaconf import OmegaConf

from methods.care import chunk_params, equivariance_loss, relative_equivariance, wahba_error
from methods.care.metrics import procrustes_rotation, sensitivity_r2

AUG = OmegaConf.create(dict(min_scale=0.3, flip_prob=0.5, jitter_prob=0.8, brightness=0.4, contrast=0.4))


def unit(*shape, seed=0):
    return F.normalize(torch.randn(*shape, generator=torch.Generator().manual_seed(seed), dtype=torch.float64), dim=-1)


def random_rotation(d, seed=0):
    q, r = torch.linalg.qr(torch.randn(d, d, generator=torch.Generator().manual_seed(seed), dtype=torch.float64))
    q = q * torch.sign(torch.diagonal(r))
    if torch.linalg.det(q) < 0:
        q[:, 0] = -q[:, 0]
    return q


def slow_equivariance_loss(z1, z2):
    total = 0.0
    for k in range(z1.shape[0]):
        n = z1.shape[1]
        acc = 0.0
        for i in range(n):
            for j in range(n):
                if i != j:
                    acc += (float(z1[k, i] @ z1[k, j]) - float(z2[k, i] @ z2[k, j])) ** 2
        total += acc / (n * (n - 1))
    return total / z1.shape[0]


def test_equivariance_loss_matches_double_loop():
    z1, z2 = unit(3, 5, 4, seed=1), unit(3, 5, 4, seed=2)
    assert equivariance_loss(z1, z2).item() == pytest.approx(slow_equivariance_loss(z1, z2), rel=1e-10)


def test_equivariance_loss_zero_iff_chunk_rotated():
    z1 = unit(4, 6, 8)
    rotated = torch.stack([z1[k] @ random_rotation(8, seed=k) for k in range(4)])  # a rotation per chunk
    assert equivariance_loss(z1, rotated).item() == pytest.approx(0.0, abs=1e-12)
    assert equivariance_loss(z1, unit(4, 6, 8, seed=5)).item() > 1e-3


def test_equivariance_loss_gradient_matches_finite_difference():
    z1, z2 = unit(2, 4, 3, seed=3).requires_grad_(), unit(2, 4, 3, seed=4)
    assert torch.autograd.gradcheck(lambda a: equivariance_loss(a, z2), (z1,))


def test_wahba_error_zero_for_rotation_and_positive_otherwise():
    Fm = unit(50, 6)
    R = random_rotation(6, seed=3)
    assert wahba_error(Fm, Fm @ R) == pytest.approx(0.0, abs=1e-10)
    torch.testing.assert_close(procrustes_rotation(Fm, Fm @ R), R)
    assert wahba_error(Fm, unit(50, 6, seed=9)) > 0.1


def test_wahba_rotation_excludes_reflections():
    Fm = unit(40, 3)
    reflect = torch.diag(torch.tensor([1.0, 1.0, -1.0], dtype=torch.float64))
    R = procrustes_rotation(Fm, Fm @ reflect)
    assert torch.linalg.det(R).item() == pytest.approx(1.0)
    assert wahba_error(Fm, Fm @ reflect) > 0.05


def test_wahba_error_matches_brute_force_in_2d():
    Fm, Fa = unit(30, 2, seed=1), unit(30, 2, seed=2)
    best = min(torch.linalg.norm(Fm @ torch.tensor([[c, -s], [s, c]], dtype=torch.float64) - Fa)
               for th in torch.linspace(0, 2 * torch.pi, 20001, dtype=torch.float64)
               for c, s in [(torch.cos(th), torch.sin(th))])
    assert wahba_error(Fm, Fa) == pytest.approx(float(best / torch.linalg.norm(Fa)), abs=1e-6)


def test_relative_equivariance_zero_for_rotations_and_one_scale_for_noise():
    Fm = unit(64, 5)
    augs = torch.stack([Fm @ random_rotation(5, seed=s) for s in range(3)])
    assert relative_equivariance(Fm, augs) == pytest.approx(0.0, abs=1e-10)
    noisy = torch.stack([unit(64, 5, seed=10 + s) for s in range(3)])
    assert 0.3 < relative_equivariance(Fm, noisy) <= 1.0 + 1e-9


def test_chunk_pairs_shared_within_and_distinct_across_chunks():
    t1, t2 = chunk_params(4, 8, AUG)
    assert len(t1) == 32
    per_chunk = t1.scale.view(4, 8)
    assert torch.all(per_chunk == per_chunk[:, :1])                # same t1 for a chunk's images
    assert per_chunk[:, 0].unique().numel() == 4                    # a fresh pair per chunk
    assert not torch.equal(t1.scale, t2.scale)                      # t1 != t2


def test_sensitivity_r2_recovers_a_linear_signal():
    g = torch.Generator().manual_seed(0)
    t = torch.rand(400, generator=g)
    z = torch.randn(400, 8, generator=g)
    z[:, 0] = 3 * t
    assert sensitivity_r2(z[:300], t[:300], z[300:], t[300:], alpha=1e-3) > 0.99
    assert sensitivity_r2(torch.randn(300, 8, generator=g), t[:300], torch.randn(100, 8, generator=g), t[300:]) < 0.1
