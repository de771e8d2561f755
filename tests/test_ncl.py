"""NCL: the non-negative maps, NCE's logits, and every metric against an independent derivation
(the official code's expressions written out, slow loops, hand-computed examples)."""
import math

import pytest
import torch
import torch.nn.functional as F

from methods.ncl import (NCL, NonNegClassifier, class_consistency, class_consistency_pos, conditional_mi,
                         effective_rank, feature_metrics, infonce_mi, nce_logits, nonneg, orthogonality,
                         orthogonality_corr, sepin_at_k, sparsity, top_dimensions)

EPS = 1e-5


def sparse_features(n=300, k=12, seed=0, classes=5):
    """Non-negative features in which each dimension prefers one class, and labels."""
    g = torch.Generator().manual_seed(seed)
    y = torch.randint(0, classes, (n,), generator=g)
    z = torch.rand(n, k, generator=g) * (torch.rand(n, k, generator=g) < 0.15)
    z[torch.arange(n), y % k] += 1.0
    z[:, -1] = 0.0   # a dead dimension: the official metrics drop it
    return z, y


# --- the official statistics (PKU-ML/non_neg, solo/methods/simclr.py), written out ------------
def official_sparsity(z):
    return 1 - (z.abs() > 1e-5).float().mean()


def official_erank(z):
    s = torch.linalg.svdvals(z.float())
    s = s / s.sum()
    return -torch.sum(s * torch.log(s + 1e-6))


def official_semantic_consistency(features, labels, eps=1e-5):
    features = features[:, features.abs().sum(0) > 0]
    features = F.normalize(features, dim=1)
    acc_per_dim = []
    for i in range(features.shape[1]):
        labels_selected = labels[features.abs()[:, i] > eps]
        try:
            dist = labels_selected.bincount()
            dist = dist / dist.sum()
            acc_per_dim.append(dist.max().item())
        except RuntimeError:   # an empty selection: the official bare `except: pass`
            pass
    return torch.tensor(acc_per_dim).mean()


def official_orthogonality(features):
    features = features[:, features.abs().sum(0) > 0]
    n, d = features.shape
    features = F.normalize(features, dim=0)
    corr = features.T @ features
    return (corr - torch.eye(d)).abs().mean()


def official_rank(feats, k):   # solo/methods/linear.py, training_epoch_end
    feats = F.normalize(torch.nn.functional.relu(feats))
    _, index = torch.sort(torch.sum(feats, dim=0), descending=True)
    return index[:k]


# --- maps and logits ----------------------------------------------------------------------------
def test_rep_relu_forward_is_relu_and_gradient_is_gelus():
    z = torch.linspace(-3, 3, 41, dtype=torch.float64, requires_grad=True)
    out = nonneg(z, "rep_relu")
    assert torch.equal(out.detach(), F.relu(z.detach()))
    out.sum().backward()
    # GELU'(x) = Φ(x) + x φ(x), written out independently of torch's gelu
    x = z.detach()
    expected = 0.5 * (1 + torch.erf(x / math.sqrt(2))) + x * torch.exp(-x ** 2 / 2) / math.sqrt(2 * math.pi)
    torch.testing.assert_close(z.grad, expected)
    assert (z.grad[x < 0] != 0).all()  # negative units still learn: the point of rep_relu


def test_relu_none_and_bad_kind():
    z = torch.tensor([-1.0, 0.5])
    assert nonneg(z, "relu").tolist() == [0.0, 0.5] and nonneg(z, "none").tolist() == [-1.0, 0.5]
    with pytest.raises(ValueError, match="softplus"):
        nonneg(z, "softplus")


def test_nce_logits_against_a_loop():
    g = torch.Generator().manual_seed(1)
    h, w = torch.randn(4, 6, generator=g), torch.randn(3, 6, generator=g)
    out = nce_logits(h, w, "relu")
    for i in range(4):
        for c in range(3):
            expected = sum(max(h[i, d].item(), 0.0) * max(w[c, d].item(), 0.0) for d in range(6))
            assert out[i, c].item() == pytest.approx(expected, abs=1e-5)
    torch.testing.assert_close(nce_logits(h, w, "none"), h @ w.T)


# --- metrics against the official expressions --------------------------------------------------
def test_sparsity_matches_official_and_a_hand_count():
    z = torch.tensor([[0.0, 1.0, 0.0], [2.0, 0.0, 1e-6]])
    assert sparsity(z, EPS) == pytest.approx(4 / 6)
    zs, _ = sparse_features()
    assert sparsity(zs, EPS) == pytest.approx(float(official_sparsity(zs)))


@pytest.mark.parametrize("signed", [False, True])
def test_class_consistency_matches_the_official_loop(signed):
    z, y = sparse_features()
    if signed:  # CL-like features: every sample is 'active' under |z| > eps
        z = z - 0.5 * z.mean()
    zn = F.normalize(z, dim=1)
    assert class_consistency(zn, y, EPS) == pytest.approx(float(official_semantic_consistency(zn, y)), abs=1e-6)


def test_class_consistency_by_hand_and_dense_features_give_the_largest_class_share():
    # dim 0 active on classes [0, 0, 1] -> 2/3; dim 1 on [1] -> 1; dim 2 never active (dropped)
    z = torch.tensor([[1.0, 0.0, 0.0], [1.0, 0.0, 0.0], [1.0, 3.0, 0.0], [0.0, 0.0, 0.0]])
    y = torch.tensor([0, 0, 1, 1])
    assert class_consistency(z, y, EPS) == pytest.approx((2 / 3 + 1) / 2)
    dense = torch.randn(1000, 8, generator=torch.Generator().manual_seed(0))
    labels = torch.arange(1000) % 10
    assert class_consistency(dense, labels, EPS) == pytest.approx(0.1)
    # ours counts positive entries only
    assert class_consistency_pos(torch.tensor([[1.0], [-1.0], [1.0]]), torch.tensor([0, 1, 0]), EPS) == 1.0


def test_orthogonality_matches_official_and_by_hand():
    z, _ = sparse_features()
    assert orthogonality(z) == pytest.approx(float(official_orthogonality(z)), abs=1e-6)
    # two orthogonal columns and a copy of the first: cosines 0, 1, 0 off the diagonal -> 2/9
    a = torch.tensor([[1.0, 0.0, 2.0], [0.0, 1.0, 0.0]]).T
    assert orthogonality(torch.cat([a, a[:, :1]], 1)) == pytest.approx(2 / 9)


def test_orthogonality_corr_by_hand():
    a = torch.tensor([1.0, 2.0, 3.0, 4.0])
    assert orthogonality_corr(torch.stack([a, 2 * a, -a], dim=1)) == pytest.approx(6 / 9)
    g = torch.Generator().manual_seed(0)
    # |r| of independent columns is ~ sqrt(2/(π n)) = 0.0056 at n = 20000: 6/16 of the entries
    assert orthogonality_corr(torch.randn(20000, 4, generator=g)) < 0.01


def test_effective_rank_is_the_official_entropy():
    z, _ = sparse_features()
    assert effective_rank(z) == pytest.approx(float(official_erank(z)), abs=1e-5)
    # singular values (3, 1): p = (3/4, 1/4); exp(entropy) of the identity is its size
    assert effective_rank(torch.diag(torch.tensor([3.0, 1.0]))) == pytest.approx(
        -(0.75 * math.log(0.75 + 1e-6) + 0.25 * math.log(0.25 + 1e-6)))
    assert math.exp(effective_rank(torch.eye(5))) == pytest.approx(5.0, rel=1e-4)


def test_top_dimensions_is_the_official_ranking():
    g = torch.Generator().manual_seed(3)
    p = torch.randn(200, 16, generator=g) + torch.linspace(-1, 1, 16)
    for k in (1, 4, 16):
        assert top_dimensions(p, k).tolist() == official_rank(p, k).tolist()


def test_feature_metrics_normalise_rows_first():
    z, y = sparse_features()
    a, b = feature_metrics(z, y, EPS), feature_metrics(7.0 * z, y, EPS)
    assert a == pytest.approx(b)


# --- SEPIN@k ------------------------------------------------------------------------------------
def slow_infonce_mi(z1, z2, tau):
    n = len(z1)
    total = 0.0
    for a in range(n):
        for view, other in ((z1, z2), (z2, z1)):
            sims = [F.cosine_similarity(view[a], other[b], dim=0).item() / tau for b in range(n)]
            total += sims[a] - math.log(sum(math.exp(s) for s in sims))
    return math.log(n) + total / (2 * n)


def test_infonce_mi_against_a_double_loop():
    g = torch.Generator().manual_seed(0)
    z1 = torch.rand(12, 5, generator=g, dtype=torch.float64)
    z2 = z1 + 0.3 * torch.rand(12, 5, generator=g, dtype=torch.float64)
    assert infonce_mi(z1, z2, 0.2) == pytest.approx(slow_infonce_mi(z1, z2, 0.2), abs=1e-9)


def test_conditional_mi_matches_dropping_each_column():
    g = torch.Generator().manual_seed(1)
    z1 = torch.rand(40, 6, generator=g)
    z2 = z1 + 0.2 * torch.randn(40, 6, generator=g)
    fast = conditional_mi(z1, z2, 0.5)
    full = infonce_mi(z1, z2, 0.5)
    for i in range(6):
        keep = [j for j in range(6) if j != i]
        assert fast[i].item() == pytest.approx(full - infonce_mi(z1[:, keep], z2[:, keep], 0.5), abs=1e-9)


def test_sepin_ranks_the_dimensions_that_identify_images_first():
    # dims 0-1 carry each image's identity (equal in both views); dims 2-7 are view noise
    g = torch.Generator().manual_seed(2)
    n = 256
    ident = torch.rand(n, 2, generator=g) * 3
    z1 = torch.cat([ident, torch.rand(n, 6, generator=g)], 1)
    z2 = torch.cat([ident, torch.rand(n, 6, generator=g)], 1)
    cmi = conditional_mi(z1, z2, 0.2)
    assert cmi[:2].min() > cmi[2:].max() + 0.1
    s = sepin_at_k(z1, z2, [1, 2, 8], 0.2)
    assert s[1] >= s[2] >= s[8] and s[2] == pytest.approx(float(cmi[:2].mean()))
    with pytest.raises(ValueError, match="9"):
        sepin_at_k(z1, z2, [9], 0.2)


# --- models and splits --------------------------------------------------------------------------
def _encoder():
    from common.nn import SmallCNN

    return SmallCNN(1, 4), 16


def test_ncl_projector_is_the_official_one_and_z_is_nonnegative():
    enc, dim = _encoder()
    model = NCL(enc, dim, proj_hidden=8, proj_dim=6)
    assert [type(m) for m in model.projector] == [torch.nn.Linear, torch.nn.ReLU, torch.nn.Linear]
    assert all(m.bias is not None for m in model.projector if isinstance(m, torch.nn.Linear))
    with_bn = NCL(*_encoder(), proj_hidden=8, proj_dim=6, proj_batchnorm=True)
    assert any(isinstance(m, torch.nn.BatchNorm1d) for m in with_bn.projector)
    x = torch.randint(0, 255, (32, 1, 28, 28), dtype=torch.uint8)
    model.eval()
    with torch.no_grad():
        p, z = model.projection(x), model.embedding(x)
    assert (z >= 0).all() and torch.equal(z, F.relu(p)) and (p < 0).any()
    model.train()
    loss, _ = model.training_step(x)
    loss.backward()
    assert torch.isfinite(loss) and model.projector[0].weight.grad.abs().sum() > 0
    with pytest.raises(ValueError, match="softplus"):
        NCL(*_encoder(), nonneg="softplus")


def test_nce_classifier_is_nonnegative_and_ce_is_not():
    enc, dim = _encoder()
    model = NonNegClassifier(enc, dim, num_classes=10, hidden=8, nonneg="relu")
    x = torch.randint(0, 255, (5, 1, 28, 28), dtype=torch.uint8)
    assert (model.features(x) >= 0).all() and model.bias is None and (model.weight >= 0).all()
    torch.testing.assert_close(model(x), nce_logits(model.pre_features(x), model.weight, "relu"))
    loss, _ = model.training_step((x, torch.arange(5)))
    loss.backward()
    assert torch.isfinite(model.weight.grad).all()
    ce = NonNegClassifier(*_encoder(), num_classes=10, hidden=8, nonneg="none")
    assert ce.bias is not None and (ce.features(x) < 0).any()


def test_the_sweep_tunes_on_validation_and_the_tables_report_other_seeds(compose_cfg):
    sweep = compose_cfg(["experiment=ncl_mini_sweep"])
    assert sweep.eval.on == "val" and sweep.table.purpose == "tuning"
    mini = compose_cfg(["experiment=ncl_mini"])
    assert mini.eval.on == "test" and not set(mini.table.seeds) & set(mini.tuned_on.seeds)


@pytest.mark.parametrize("mode", ["contrastive", "supervised"])
def test_build_from_the_config(compose_cfg, mode):
    from methods.ncl import build

    model = build(compose_cfg(["method=ncl", f"method.mode={mode}"]))
    assert isinstance(model, NCL if mode == "contrastive" else NonNegClassifier)


def test_the_official_row_is_the_official_form_stabilised(compose_cfg):
    """issue #35: the official projector (no BatchNorm) and rep_relu, with gradient clipping and
    the official warm-up share (10 of 200 epochs, 5% of the steps), controlled by an untrained ReLU encoder."""
    base = compose_cfg(["experiment=ncl_mini"])
    official = compose_cfg(["experiment=ncl_mini", *base.table.rows.ncl_official])
    assert official.method.model.proj_batchnorm is False and official.method.model.nonneg == "rep_relu"
    assert official.trainer.clip_grad == 1.0
    assert official.trainer.schedule.warmup_steps == round(0.05 * official.trainer.max_steps)
    assert official.trainer.optimizer.lr == base.trainer.optimizer.lr       # the table's one recipe
    assert list(base.table.controls.ncl_official) == ["random_relu"]
    random = compose_cfg(["experiment=ncl_mini", *base.table.rows.random_relu])
    assert random.trainer.max_steps == 0 and random.method.model.nonneg == "relu"
