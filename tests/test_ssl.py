import math

import pytest
import torch
import torch.nn.functional as F
from common.data import StepSampler
from common.ssl import Augment, apply, info_nce, sample_params

AUG = Augment(min_scale=0.3, flip_prob=0.5, jitter_prob=0.8, brightness=0.4, contrast=0.4)


def slow_nt_xent(z1, z2, t):
    """SimCLR's loss written out anchor by anchor: -log exp(s_ip/t) / sum_{k != i} exp(s_ik/t)."""
    z = F.normalize(torch.cat([z1, z2]), dim=1)
    n2 = len(z)
    total = 0.0
    for i in range(n2):
        pos = (i + n2 // 2) % n2
        denom = sum(math.exp(float(z[i] @ z[k]) / t) for k in range(n2) if k != i)
        total += -(float(z[i] @ z[pos]) / t - math.log(denom))
    return total / n2


@pytest.mark.parametrize("t", [0.1, 0.5])
def test_info_nce_matches_slow_loop(t):
    g = torch.Generator().manual_seed(0)
    z1, z2 = torch.randn(7, 5, generator=g), torch.randn(7, 5, generator=g)
    assert info_nce(z1, z2, t).item() == pytest.approx(slow_nt_xent(z1, z2, t), rel=1e-5)


def test_info_nce_lower_for_aligned_views():
    z = torch.randn(16, 8)
    assert info_nce(z, z, 0.5) < info_nce(z, torch.randn(16, 8), 0.5)


def test_identity_params_leave_image_unchanged():
    x = torch.rand(3, 1, 28, 28)
    p = sample_params(3, AUG)
    for name in ("scale", "flip", "brightness", "contrast"):
        getattr(p, name).fill_(1.0)
    p.log_ratio.zero_(), p.cx.zero_(), p.cy.zero_()
    assert torch.allclose(apply(x, p), x, atol=1e-5)


def test_flip_param_mirrors_image():
    x = torch.rand(2, 1, 8, 8)
    p = sample_params(2, AUG)
    for name in ("scale", "brightness", "contrast"):
        getattr(p, name).fill_(1.0)
    p.log_ratio.zero_(), p.cx.zero_(), p.cy.zero_(), p.flip.fill_(-1.0)
    assert torch.allclose(apply(x, p), x.flip(-1), atol=1e-5)


def test_params_differ_per_sample_and_repeat_in_chunks():
    p = sample_params(64, AUG)
    assert p.scale.unique().numel() == 64
    q = p.repeat_interleave(4)
    assert len(q) == 256 and torch.equal(q.scale[:4], p.scale[0].repeat(4))


def test_augment_refuses_bad_ranges():
    with pytest.raises(ValueError, match="flip_prob"):
        Augment(flip_prob=1.5)
    with pytest.raises(ValueError, match="min_scale"):
        Augment(min_scale=0.0)


def test_step_sampler_is_a_pure_function_and_shards_the_global_batch():
    a, b = StepSampler(100, 20, seed=3), StepSampler(100, 20, seed=3)
    assert torch.equal(a(7), b(7)) and torch.equal(a(2), StepSampler(100, 20, 3)(2))
    epoch = torch.cat([a(s) for s in range(5)])
    assert epoch.sort().values.tolist() == list(range(100))   # one epoch covers every item once
    shards = torch.cat([StepSampler(100, 20, 3, rank=r, world_size=2)(4) for r in range(2)])
    assert torch.equal(shards, a(4))
