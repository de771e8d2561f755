"""twinsight: each equation against an independent derivation."""
import math

import pytest
import torch
import torch.nn.functional as F

from methods.twinsight import TinyCNN, TwinModel, client_loss, fixmatch_loss, neighbourhood_loss, single_loss


def _gen(seed=0):
    return torch.Generator().manual_seed(seed)


def _np_loop(fu, fs, denom):
    b = fu.shape[0]
    total = 0.0
    for i in range(b):
        for j in range(b):
            cu = sum(float(fu[i, k]) * float(fu[j, k]) for k in range(fu.shape[1])) / (
                math.sqrt(sum(float(v) ** 2 for v in fu[i])) * math.sqrt(sum(float(v) ** 2 for v in fu[j])))
            cs = sum(float(fs[i, k]) * float(fs[j, k]) for k in range(fs.shape[1])) / (
                math.sqrt(sum(float(v) ** 2 for v in fs[i])) * math.sqrt(sum(float(v) ** 2 for v in fs[j])))
            total += (cu - cs) ** 2
    return total / denom


@pytest.mark.parametrize("normalizer,denom", [("square", 36), ("official", 6 ^ 2)])
def test_neighbourhood_loss_matches_a_double_loop_with_unequal_widths(normalizer, denom):
    fu, fs = torch.randn(6, 5, generator=_gen(0)), torch.randn(6, 3, generator=_gen(1))
    got = float(neighbourhood_loss(fu, fs, normalizer))
    assert got == pytest.approx(_np_loop(fu, fs, denom), rel=1e-5)
    assert got > 0


def test_official_normalizer_is_xor_66_for_64():
    fu, fs = torch.randn(64, 4, generator=_gen(2)), torch.randn(64, 4, generator=_gen(3))
    ratio = float(neighbourhood_loss(fu, fs, "official")) / float(neighbourhood_loss(fu, fs, "square"))
    assert ratio == pytest.approx(64 * 64 / 66, rel=1e-5)


def _official_gram_loss(unsup_f, sup_f, real_bs, square):
    """The official `gram_loss` (trainers/normal_trainer.py, labeled and unlabeled clients) written
    out line by line; `square=True` replaces its `real_bs ^ 2` (a Python xor) by real_bs ** 2."""
    unsup_sim_f = unsup_f[:real_bs]
    sup_sim_f = sup_f[:real_bs]
    unsup_sim_f = unsup_sim_f / torch.norm(unsup_sim_f, dim=1, keepdim=True)
    sup_sim_f = sup_sim_f / torch.norm(sup_sim_f, dim=1, keepdim=True)
    unsup_gram_matrix = torch.mm(unsup_sim_f, unsup_sim_f.t())
    sup_gram_matrix = torch.mm(sup_sim_f, sup_sim_f.t())
    return torch.sum(torch.pow((unsup_gram_matrix - sup_gram_matrix), 2) / (real_bs ** 2 if square else real_bs ^ 2))


@pytest.mark.parametrize("b", [3, 7, 64])
def test_neighbourhood_loss_matches_the_official_transcription(b):
    # the official features are cat(x_w, x_s) of both twins; the loss reads the weak half only
    fu, fs = torch.randn(2 * b, 9, generator=_gen(20)), torch.randn(2 * b, 5, generator=_gen(21))
    for normalizer, square in (("square", True), ("official", False)):
        want = float(_official_gram_loss(fu, fs, b, square))
        assert float(neighbourhood_loss(fu[:b], fs[:b], normalizer)) == pytest.approx(want, rel=1e-5)


def test_official_normalizer_at_batch_two_raises():
    fu, fs = torch.randn(2, 3, generator=_gen(22)), torch.randn(2, 3, generator=_gen(23))
    assert float(neighbourhood_loss(fu, fs, "square")) >= 0     # 2 xor 2 = 0 only breaks the official one
    with pytest.raises(ValueError, match="xor"):
        neighbourhood_loss(fu, fs, "official")


def test_neighbourhood_loss_is_zero_under_rotation_and_row_scaling():
    fu = torch.randn(8, 4, generator=_gen(4), dtype=torch.float64)
    q, _ = torch.linalg.qr(torch.randn(4, 4, generator=_gen(5), dtype=torch.float64))
    scale = torch.rand(8, 1, generator=_gen(6), dtype=torch.float64) + 0.1
    assert float(neighbourhood_loss(fu, (fu @ q) * scale)) == pytest.approx(0.0, abs=1e-12)
    assert float(neighbourhood_loss(fu, torch.randn(8, 4, generator=_gen(7), dtype=torch.float64))) > 1e-3


def test_neighbourhood_loss_gives_both_twins_a_gradient():
    fu = torch.randn(5, 4, generator=_gen(8), requires_grad=True)
    fs = torch.randn(5, 6, generator=_gen(9), requires_grad=True)
    neighbourhood_loss(fu, fs).backward()
    assert fu.grad.abs().sum() > 0 and fs.grad.abs().sum() > 0


@pytest.mark.parametrize("bad", [dict(feat_u=torch.randn(4, 3), feat_s=torch.randn(5, 3)),
                                 dict(feat_u=torch.randn(1, 3), feat_s=torch.randn(1, 3)),
                                 dict(feat_u=torch.randn(4, 3), feat_s=torch.randn(4, 3), normalizer="b2")])
def test_neighbourhood_loss_bad_input(bad):
    with pytest.raises(ValueError):
        neighbourhood_loss(**bad)


def test_fixmatch_matches_a_loop_and_has_no_gradient_through_the_weak_logits():
    lw = (3 * torch.randn(7, 4, generator=_gen(10))).requires_grad_()
    ls = torch.randn(7, 4, generator=_gen(11), requires_grad=True)
    loss, rate = fixmatch_loss(lw, ls, threshold=0.8)
    total, kept = 0.0, 0
    for i in range(7):
        p = [math.exp(float(v)) for v in lw[i].detach()]
        p = [v / sum(p) for v in p]
        if max(p) >= 0.8:
            c = p.index(max(p))
            total += -(float(ls[i, c]) - math.log(sum(math.exp(float(v)) for v in ls[i].detach())))
            kept += 1
    assert 0 < kept < 7   # the test covers both masked and kept rows
    assert float(loss) == pytest.approx(total / 7, rel=1e-5)
    assert float(rate) == pytest.approx(kept / 7)
    loss.backward()
    assert lw.grad is None and ls.grad.abs().sum() > 0


def test_fixmatch_threshold_one_gives_zero_and_bad_threshold_raises():
    lw, ls = torch.randn(5, 3, generator=_gen(12)), torch.randn(5, 3, generator=_gen(13))
    loss, rate = fixmatch_loss(lw, ls, threshold=1.0)
    assert float(loss) == 0.0 and float(rate) == 0.0
    for t in (-0.1, 1.5):
        with pytest.raises(ValueError):
            fixmatch_loss(lw, ls, threshold=t)


def _nt_xent(z1, z2, t):
    """NT-Xent written out: anchor i of 2N, positive its other view, the rest negatives."""
    z = torch.cat([z1, z2])
    z = z / z.norm(dim=1, keepdim=True)
    n2 = z.shape[0]
    n = n2 // 2
    total = 0.0
    for i in range(n2):
        pos = (i + n) % n2
        num = math.exp(float(z[i] @ z[pos]) / t)
        den = sum(math.exp(float(z[i] @ z[k]) / t) for k in range(n2) if k != i)
        total += -math.log(num / den)
    return total / n2


def test_client_loss_is_the_sum_of_its_terms():
    g = _gen(14)
    hs, hu = torch.randn(6, 5, generator=g), torch.randn(6, 4, generator=g)
    lw, ls = 3 * torch.randn(6, 3, generator=g), torch.randn(6, 3, generator=g)
    zw, zs = torch.randn(6, 4, generator=g), torch.randn(6, 4, generator=g)
    y = torch.tensor([0, 1, 2, 0, 1, 2])
    ins, npl = _nt_xent(zw, zs, 0.5), _np_loop(hu, hs, 36)
    ce = float(F.cross_entropy(lw, y))
    lab, logs = client_loss(hs, lw, ls, hu, zw, zs, labels=y, insdis=0.3, sim=2.0, temperature=0.5)
    assert float(lab) == pytest.approx(ce + 0.3 * ins + 2.0 * npl, rel=1e-5)
    assert logs["insdis"] == pytest.approx(ins, rel=1e-5)
    unl, _ = client_loss(hs, lw, ls, hu, zw, zs, insdis=0.3, sim=2.0, temperature=0.5)
    assert float(unl) == pytest.approx(0.3 * ins + 2.0 * npl, rel=1e-5)
    fm, _ = fixmatch_loss(lw, ls, 0.6)
    assert float(fm) > 0
    pl, logs = client_loss(hs, lw, ls, hu, zw, zs, insdis=0.3, sim=2.0, ulb_weight=0.5, threshold=0.6,
                           temperature=0.5)
    assert float(pl) == pytest.approx(0.3 * ins + 2.0 * npl + 0.5 * float(fm), rel=1e-5)
    s, _ = single_loss(lw, zw, zs, labels=y, insdis=0.3, temperature=0.5)
    assert float(s) == pytest.approx(ce + 0.3 * ins, rel=1e-5)


@pytest.mark.parametrize("bad", [dict(insdis=-1.0), dict(sim=-0.1), dict(ulb_weight=-1.0), dict(threshold=2.0),
                                 dict(temperature=0.0), dict(normalizer="x")])
def test_client_loss_bad_input(bad):
    x = torch.randn(4, 3)
    with pytest.raises(ValueError):
        client_loss(x, x, x, x, x, x, **bad)


def test_twin_model_shapes_and_separate_weights():
    twin = TwinModel(TinyCNN(1, 28, 16), TinyCNN(1, 28, 16), feat_dim=16, num_classes=10, proj_hidden=8, proj_dim=4)
    x = torch.rand(3, 1, 28, 28)
    h, logits = twin.sup(x)
    hu, z = twin.unsup(x)
    assert h.shape == (3, 16) and logits.shape == (3, 10) and hu.shape == (3, 16) and z.shape == (3, 4)
    enc = TinyCNN(1, 28, 16)
    with pytest.raises(ValueError):
        TwinModel(enc, enc, feat_dim=16)


def test_tiny_cnn_final_relu_and_batchnorm_options():
    torch.manual_seed(0)
    x = torch.rand(6, 1, 28, 28)
    assert float(TinyCNN(1, 28, 16)(x).min()) >= 0                          # the ReLU head: nonnegative
    assert float(TinyCNN(1, 28, 16, final_relu=False)(x).min()) < 0         # signed features
    bn = TinyCNN(1, 28, 16, batchnorm=True)
    assert sum(isinstance(m, torch.nn.BatchNorm2d) for m in bn.modules()) == 2
    assert bn(x).shape == (6, 16)
