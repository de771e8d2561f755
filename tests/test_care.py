"""CARE: the losses against the official expressions written out, the two equivariance forward
calls, per-chunk augmentation pairs, the hue geometry of the tinted data, the metrics."""
import math

import pytest
import torch
import torch.nn.functional as F

from common.nn import SmallCNN
from common.ssl import Augment
from methods.care import CARE, equivariance_loss, relative_equivariance, uniformity_loss, wahba_error
from methods.care.colour import hue_of, hue_rotation, rotate_hue, tint, tint_colour
from methods.care.metrics import displacement, procrustes_rotation, rotation_residual, sensitivity_r2
from methods.care.model import augment_images

AUG = Augment(min_scale=0.3, flip_prob=0.5, jitter_prob=0.8, brightness=0.4, contrast=0.4)


def unit(*shape, seed=0):
    return F.normalize(torch.randn(*shape, generator=torch.Generator().manual_seed(seed), dtype=torch.float64), dim=-1)


def random_rotation(d, seed=0):
    q, r = torch.linalg.qr(torch.randn(d, d, generator=torch.Generator().manual_seed(seed), dtype=torch.float64))
    q = q * torch.sign(torch.diagonal(r))
    if torch.linalg.det(q) < 0:
        q[:, 0] = -q[:, 0]
    return q


def care(chans=1, **kw):
    torch.manual_seed(0)
    return CARE(SmallCNN(chans, width=4), 16, proj_hidden=16, proj_dim=8, augment=AUG, **kw)


# --- losses ------------------------------------------------------------------------------------

def official_equivariance_loss(out_1, out_2, num_chunks):
    """Sharut/CARE cifar10_cifar100_stl10/utils.py `equivariance_loss`, written out."""
    chunk_size = out_1.shape[0] // num_chunks
    loss = 0.
    for index in range(num_chunks):
        sub_1 = out_1[index * chunk_size: (index + 1) * chunk_size]
        sub_2 = out_2[index * chunk_size: (index + 1) * chunk_size]
        bs = sub_1.shape[0]
        t1 = torch.mm(sub_1, sub_1.t().contiguous())
        t2 = torch.mm(sub_2, sub_2.t().contiguous())
        mask = torch.ones((bs, bs), dtype=bool)
        for i in range(bs):
            mask[i, i] = 0
        t1 = t1.masked_select(mask).view(bs, -1)
        t2 = t2.masked_select(mask).view(bs, -1)
        loss += 2 * torch.norm(t1 - t2, p='fro', dim=-1).pow(2).mean()
    return loss / num_chunks


def pair_mean(z1, z2):
    """The paper's expectation over pairs x != x', one chunk at a time (a slow double loop)."""
    total = 0.0
    for k in range(z1.shape[0]):
        n = z1.shape[1]
        total += sum((float(z1[k, i] @ z1[k, j]) - float(z2[k, i] @ z2[k, j])) ** 2
                     for i in range(n) for j in range(n) if i != j) / (n * (n - 1))
    return total / z1.shape[0]


def test_equivariance_loss_is_the_official_expression():
    z1, z2 = unit(4, 16, 8, seed=1), unit(4, 16, 8, seed=2)
    ours = equivariance_loss(z1, z2).item()
    assert ours == pytest.approx(official_equivariance_loss(z1.reshape(64, 8), z2.reshape(64, 8), 4).item(), rel=1e-12)
    assert ours == pytest.approx(2 * (16 - 1) * pair_mean(z1, z2), rel=1e-10)  # 30x the pair mean at n = 16


def test_equivariance_loss_zero_iff_chunk_rotated_and_gradient():
    z1 = unit(4, 6, 8)
    rotated = torch.stack([z1[k] @ random_rotation(8, seed=k) for k in range(4)])  # a rotation per chunk
    assert equivariance_loss(z1, rotated).item() == pytest.approx(0.0, abs=1e-12)
    assert equivariance_loss(z1, unit(4, 6, 8, seed=5)).item() > 1e-2
    a, b = unit(2, 4, 3, seed=3).requires_grad_(), unit(2, 4, 3, seed=4)
    assert torch.autograd.gradcheck(lambda x: equivariance_loss(x, b), (a,))
    with pytest.raises(ValueError, match="at least 2 images"):
        equivariance_loss(unit(3, 1, 4), unit(3, 1, 4))


def official_uniformity(out_1, out_2, temperature):
    """Sharut/CARE utils.py `infoNCE`'s third output (loss_subtype=uniformity), written out."""
    bs = out_1.shape[0]
    out = torch.cat([out_1, out_2], dim=0)
    neg = torch.exp(torch.mm(out, out.t().contiguous()) / temperature)
    mask = torch.ones((bs, 2 * bs), dtype=bool)
    for i in range(bs):
        mask[i, i] = 0
        mask[i, i + bs] = 0
    mask = torch.cat((mask, mask), 0)
    neg = neg.masked_select(mask).view(2 * bs, -1)
    return torch.log(neg.sum(dim=-1)).mean()


def test_uniformity_loss_is_the_official_expression():
    z1, z2 = unit(10, 6, seed=7), unit(10, 6, seed=8)
    assert uniformity_loss(z1, z2, 0.5).item() == pytest.approx(official_uniformity(z1, z2, 0.5).item(), rel=1e-12)
    # rows are L2-normalised inside (the official model returns unit embeddings)
    assert uniformity_loss(3 * z1, z2, 0.2).item() == pytest.approx(official_uniformity(z1, z2, 0.2).item(), rel=1e-12)


# --- the model ---------------------------------------------------------------------------------

def test_equivariance_views_go_through_two_forward_calls():
    model = care(equi_weight=1.0, chunks=4)
    calls = []
    model.encoder.register_forward_hook(lambda m, i, o: calls.append(i[0].shape[0]))
    images = torch.randint(0, 256, (32, 1, 28, 28), dtype=torch.uint8)
    loss, logs = model.training_step(images)
    assert calls == [64, 32, 32] and torch.isfinite(loss) and "equi" in logs  # InfoNCE pair, t1 views, t2 views
    calls.clear()
    plain = care(equi_weight=0.0, chunks=4)               # the lambda = 0 rows skip the extra views
    plain.encoder.register_forward_hook(lambda m, i, o: calls.append(i[0].shape[0]))
    plain.training_step(images)
    assert calls == [64]


def test_equivariance_term_matches_separate_batchnorm_statistics():
    """With BN in training mode, the term equals the loss of two independent calls (one per view
    set), and differs from one call over both sets: the t1 and t2 views are normalised apart."""
    model = care(equi_weight=1.0, chunks=2)
    x = torch.rand(16, 1, 28, 28, generator=torch.Generator().manual_seed(0))
    torch.manual_seed(5)
    term = model.equivariance_term(x)
    torch.manual_seed(5)
    t1 = model.sample_views(2).repeat_interleave(8)
    t2 = model.sample_views(2).repeat_interleave(8)
    v1, v2 = augment_images(x, t1), augment_images(x, t2)
    z1, z2 = (F.normalize(model.embed(v), dim=1).view(2, 8, -1) for v in (v1, v2))
    assert term.item() == pytest.approx(equivariance_loss(z1, z2).item(), rel=1e-5)
    joint = F.normalize(model.embed(torch.cat([v1, v2])), dim=1).view(2, 2, 8, -1)
    assert abs(equivariance_loss(joint[0], joint[1]).item() - term.item()) > 1e-4 * term.item()


def test_chunk_views_shared_within_and_distinct_across_chunks():
    model = care(chans=3, hue=0.1)
    t1 = model.sample_views(4).repeat_interleave(8)
    t2 = model.sample_views(4).repeat_interleave(8)
    assert len(t1) == 32
    per_chunk = t1.aug.scale.view(4, 8)
    assert torch.all(per_chunk == per_chunk[:, :1])                # same t1 for a chunk's images
    assert per_chunk[:, 0].unique().numel() == 4                    # a fresh pair per chunk
    assert torch.all(t1.hue.view(4, 8) == t1.hue.view(4, 8)[:, :1])
    assert not torch.equal(t1.aug.scale, t2.aug.scale)


def test_hue_jitter_range_and_off_without_colour():
    model = care(chans=3, hue=0.1)
    hue = model.sample_views(4000, generator=torch.Generator().manual_seed(0)).hue
    assert hue.abs().max() <= 0.1 * 2 * math.pi + 1e-6
    assert (hue == 0).float().mean().item() == pytest.approx(0.2, abs=4 * math.sqrt(0.16 / 4000))  # 1 - jitter_prob
    assert torch.all(care().sample_views(50).hue == 0)


def test_bad_arguments_name_the_value():
    for kw, match in ((dict(equi_weight=-1.0), "equi_weight"), (dict(chunks=0), "chunks"),
                      (dict(base_loss="alignment"), "alignment"), (dict(hue=0.7), "hue")):
        with pytest.raises(ValueError, match=match):
            care(**kw)
    with pytest.raises(ValueError, match=r"hue is set twice.*augment.hue = 0.1"):   # two hue shifts
        CARE(SmallCNN(3, width=4), 16, proj_hidden=16, proj_dim=8, augment=Augment(hue=0.1), hue=0.1)


def test_uniformity_variant_trains_without_positives():
    model = care(equi_weight=1.0, chunks=2, base_loss="uniformity")
    loss, logs = model.training_step(torch.randint(0, 256, (16, 1, 28, 28), dtype=torch.uint8))
    assert set(logs) == {"uniformity", "equi"} and torch.isfinite(loss)


# --- colour ------------------------------------------------------------------------------------

def test_tint_keeps_range_and_hue_is_recovered():
    hue = torch.linspace(-math.pi + 0.01, math.pi, 24)
    grey = torch.randint(30, 256, (24, 1, 8, 8), dtype=torch.uint8)
    rgb = tint(grey, hue)
    assert rgb.shape == (24, 3, 8, 8) and rgb.dtype == torch.uint8
    colours = tint_colour(torch.linspace(0, 2 * math.pi, 1000))
    assert colours.min() >= 0 and colours.max() <= 1
    err = hue_of(rgb) - hue
    assert torch.atan2(torch.sin(err), torch.cos(err)).abs().max() < 0.02  # uint8 rounding only
    with pytest.raises(ValueError, match="grey"):
        tint(rgb, hue)


def test_hue_shift_is_a_rotation_about_grey_that_moves_the_hue():
    angle = torch.tensor([0.3, -2.0, 1.0], dtype=torch.float64)
    R = hue_rotation(angle)
    eye = torch.eye(3, dtype=torch.float64).expand(3, 3, 3)
    assert torch.allclose(R @ R.transpose(1, 2), eye, atol=1e-12)
    assert torch.allclose(torch.linalg.det(R), torch.ones(3, dtype=torch.float64))
    assert torch.allclose(R @ torch.ones(3, dtype=torch.float64), torch.ones(3, 3, dtype=torch.float64))
    hue = torch.tensor([0.5, 1.0, -3.0])
    grey = torch.rand(3, 1, 6, 6, generator=torch.Generator().manual_seed(1))
    x = grey * tint_colour(hue)[:, :, None, None]
    shifted = rotate_hue(x, angle.float())
    expected = grey * tint_colour(hue + angle.float())[:, :, None, None]
    assert torch.allclose(shifted, expected, atol=1e-6)
    wrapped = torch.atan2(torch.sin(hue + angle.float()), torch.cos(hue + angle.float()))
    assert torch.allclose(hue_of(shifted), wrapped, atol=1e-5)


# --- metrics -----------------------------------------------------------------------------------

def test_wahba_error_zero_for_rotation_and_excludes_reflections():
    Fm = unit(50, 6)
    R = random_rotation(6, seed=3)
    assert wahba_error(Fm, Fm @ R) == pytest.approx(0.0, abs=1e-10)
    torch.testing.assert_close(procrustes_rotation(Fm, Fm @ R), R)
    F3 = unit(40, 3)
    reflect = torch.diag(torch.tensor([1.0, 1.0, -1.0], dtype=torch.float64))
    assert torch.linalg.det(procrustes_rotation(F3, F3 @ reflect)).item() == pytest.approx(1.0)
    assert wahba_error(F3, F3 @ reflect) > 0.05


def test_wahba_error_matches_brute_force_in_2d():
    Fm, Fa = unit(30, 2, seed=1), unit(30, 2, seed=2)
    th = torch.linspace(0, 2 * torch.pi, 20001, dtype=torch.float64)
    rot = torch.stack([torch.stack([th.cos(), -th.sin()], -1), torch.stack([th.sin(), th.cos()], -1)], -2)
    best = torch.linalg.norm(torch.einsum("nd,tde->tne", Fm, rot) - Fa, dim=(1, 2)).min()  # every angle
    assert wahba_error(Fm, Fa) == pytest.approx(float(best / torch.linalg.norm(Fa)), abs=1e-6)


def test_gamma_is_residual_over_displacement_and_wahba_is_the_residual_on_the_sphere():
    Fm = unit(64, 5)
    augs = torch.stack([unit(64, 5, seed=10 + s) for s in range(3)])
    residual = sum(rotation_residual(Fm, a) for a in augs)
    moved = sum(displacement(Fm, a) for a in augs)
    assert relative_equivariance(Fm, augs) == pytest.approx(residual / moved, rel=1e-12)
    assert 0.3 < relative_equivariance(Fm, augs) <= 1.0 + 1e-9
    assert wahba_error(Fm, augs[0]) ** 2 == pytest.approx(rotation_residual(Fm, augs[0]), rel=1e-10)
    rotations = torch.stack([Fm @ random_rotation(5, seed=s) for s in range(3)])
    assert relative_equivariance(Fm, rotations) == pytest.approx(0.0, abs=1e-10)


def test_sensitivity_r2_recovers_a_linear_signal_and_a_hue_circle():
    g = torch.Generator().manual_seed(0)
    t = torch.rand(400, generator=g)
    z = torch.randn(400, 8, generator=g)
    z[:, 0] = 3 * t
    assert sensitivity_r2(z[:300], t[:300], z[300:], t[300:], alpha=1e-3) > 0.99
    assert sensitivity_r2(torch.randn(300, 8, generator=g), t[:300], torch.randn(100, 8, generator=g), t[300:]) < 0.1
    h = 2 * math.pi * torch.rand(400, generator=g)
    circle = torch.stack([torch.cos(h), torch.sin(h)], dim=1)
    z[:, 1:3] = circle
    assert sensitivity_r2(z[:300], circle[:300], z[300:], circle[300:], alpha=1e-3) > 0.99
