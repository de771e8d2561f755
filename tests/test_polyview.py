"""Poly-view losses against anchor-by-anchor loops, NT-Xent at M = 2, Algorithm 1 of the
appendix written out (geometric, the arithmetic line as printed and as the arithmetic mean),
Jensen, invariances, gradients (the fused log-mass on both exp paths), bad input, views and a
training step."""
import math

import pytest
import torch
import torch.nn.functional as F

from common.config import UserError
from common.nn.backbones import SmallCNN
from common.ssl import Augment, info_nce, multi_views
from methods.polyview import (LOSSES, PolyView, arithmetic_pvc, build, geometric_pvc, images_per_step, multi_crop,
                              poly_view_loss)

AUG = Augment(min_scale=0.3, flip_prob=0.5, jitter_prob=0.8, brightness=0.4, contrast=0.4)


def rand_z(n, m, d=5, seed=0):
    return torch.randn(n, m, d, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)


def unit_lists(z):
    """z as nested python lists of unit vectors, so the loops below use no torch ops."""
    zn = z / z.norm(dim=-1, keepdim=True)
    return zn.tolist()


def dot(u, v):
    return sum(a * b for a, b in zip(u, v))


# --- slow, anchor-by-anchor versions of the spec ------------------------------------------
def slow_pair_ll(z, t):
    """l[i][a][b] = s(ia,ib) - log(e^{s(ia,ib)} + sum_{j != i} sum_g e^{s(ia,jg)}), b != a."""
    u = unit_lists(z)
    n, m = len(u), len(u[0])
    ell = [[[None] * m for _ in range(m)] for _ in range(n)]
    for i in range(n):
        for a in range(m):
            negatives = sum(math.exp(dot(u[i][a], u[j][g]) / t) for j in range(n) if j != i for g in range(m))
            for b in range(m):
                if b != a:
                    s = dot(u[i][a], u[i][b]) / t
                    ell[i][a][b] = s - math.log(math.exp(s) + negatives)
    return ell


def slow_geometric(z, t):
    ell, (n, m) = slow_pair_ll(z, t), z.shape[:2]
    return -sum(ell[i][a][b] for i in range(n) for a in range(m) for b in range(m) if b != a) / (n * m * (m - 1))


def slow_arithmetic(z, t):
    ell, (n, m) = slow_pair_ll(z, t), z.shape[:2]
    total = 0.0
    for i in range(n):
        for a in range(m):
            total += math.log(sum(math.exp(ell[i][a][b]) for b in range(m) if b != a) / (m - 1))
    return -total / (n * m)


def slow_sufficient_statistics(z, t):
    u = unit_lists(z)
    n, m, d = z.shape
    total = 0.0
    for i in range(n):
        for a in range(m):
            stats = [[sum(u[j][b][k] for b in range(m) if b != a) / (m - 1) for k in range(d)] for j in range(n)]
            logits = [dot(u[i][a], stats[j]) / t for j in range(n)]
            total += logits[i] - math.log(sum(math.exp(x) for x in logits))
    return -total / (n * m)


def slow_nt_xent(x1, x2, t):
    """SimCLR's NT-Xent written out over the 2N anchors (positive stays in the denominator)."""
    u = unit_lists(torch.stack([torch.cat([x1, x2])], dim=1))
    u = [row[0] for row in u]
    n2 = len(u)
    total = 0.0
    for i in range(n2):
        pos = (i + n2 // 2) % n2
        denom = sum(math.exp(dot(u[i], u[k]) / t) for k in range(n2) if k != i)
        total += dot(u[i], u[pos]) / t - math.log(denom)
    return -total / n2


def slow_multi_crop(z, t):
    m = z.shape[1]
    pairs = [(a, b) for a in range(m) for b in range(a + 1, m)]
    return sum(slow_nt_xent(z[:, a], z[:, b], t) for a, b in pairs) / len(pairs)


def pseudo_code_geometric(z, t):
    """A loop over (alpha, beta) in the style of the paper's appendix pseudo-code: for each pair a
    cross-entropy over all M*N (view, sample) logits of anchor view alpha, target (beta, i), with the
    same sample's other views (and itself) pushed to -1e9; geometric = mean over beta, alpha, i."""
    n, m, _ = z.shape
    zn = F.normalize(z, dim=-1)
    losses = []
    for a in range(m):
        for b in range(m):
            if a == b:
                continue
            logits = torch.einsum("id,jgd->igj", zn[:, a], zn) / t          # (N, M, N): view g of sample j
            mask = torch.zeros(n, m, n, dtype=z.dtype)
            mask[torch.arange(n), :, torch.arange(n)] = 1.0                 # sample i's own views ...
            mask[:, b, :] = 0.0                                            # ... except the target view beta
            logits = (logits - 1e9 * mask).reshape(n, m * n)
            losses.append(F.cross_entropy(logits, torch.arange(n) + b * n))
    return torch.stack(losses).mean()


# --- equations ------------------------------------------------------------------------------
SLOW = {"geometric": slow_geometric, "arithmetic": slow_arithmetic,
        "sufficient_statistics": slow_sufficient_statistics, "multi_crop": slow_multi_crop}


@pytest.mark.parametrize("kind", LOSSES)
@pytest.mark.parametrize("n,m,t", [(5, 3, 0.5), (4, 4, 0.2), (3, 2, 1.0)])
def test_each_loss_matches_its_anchor_loop(kind, n, m, t):
    z = rand_z(n, m, seed=n * 10 + m)
    assert poly_view_loss(z, t, kind).item() == pytest.approx(SLOW[kind](z, t), rel=1e-9, abs=1e-12)


@pytest.mark.parametrize("t", [0.1, 0.5])
def test_two_views_reduce_to_nt_xent(t):
    z = rand_z(6, 2, d=4, seed=3)
    reference = slow_nt_xent(z[:, 0], z[:, 1], t)
    for loss in (geometric_pvc, arithmetic_pvc, multi_crop):
        assert loss(z, t).item() == pytest.approx(reference, rel=1e-9)
    assert geometric_pvc(z, t).item() == pytest.approx(info_nce(z[:, 0], z[:, 1], t).item(), rel=1e-9)


@pytest.mark.parametrize("m", [3, 4, 8])
def test_multi_crop_is_the_mean_of_pairwise_info_nce(m):
    z = rand_z(5, m, seed=m)
    pairs = [(a, b) for a in range(m) for b in range(a + 1, m)]
    loop = torch.stack([info_nce(z[:, a], z[:, b], 0.3) for a, b in pairs]).mean()
    assert multi_crop(z, 0.3).item() == pytest.approx(loop.item(), rel=1e-9)


@pytest.mark.parametrize("m", [2, 3, 5])
def test_geometric_matches_the_pseudo_code_loop(m):
    z = rand_z(6, m, seed=20 + m)
    assert geometric_pvc(z, 0.25).item() == pytest.approx(pseudo_code_geometric(z, 0.25).item(), rel=1e-9)


def test_arithmetic_below_geometric_by_jensen():
    for seed in range(5):
        z = rand_z(6, 4, seed=seed)
        gap = geometric_pvc(z, 0.5) - arithmetic_pvc(z, 0.5)
        assert gap.item() > 1e-6     # strict: the pair likelihoods of a random z are not all equal


def algorithm_1(z, t, method):
    """The appendix pseudo-code (Algorithm 1) written out as the public copies transcribe it
    (Multi-View-CL `PVCLoss`; README, Deviations), with the per-sample cross-entropy its `# [k]`
    comments state: for each anchor view alpha and target view beta != alpha, CE over the M*N
    (view, sample) logits with the sample's other views pushed to -1e9; then per sample
        "arithmetic_printed": logsumexp_beta(CE) - log(k)   (the line as printed, k = batch size)
        "geometric":          mean_beta(CE)
        "arithmetic_mean":    -logsumexp_beta(-CE) + log(M - 1)   (= -log mean_beta likelihood)
    and the mean over alpha and samples."""
    n, m, _ = z.shape
    zn = F.normalize(z, dim=-1)
    scores = torch.einsum("jmd,knd->jmnk", zn, zn) / t                    # [k, m, m, k]
    per_alpha = []
    for a in range(m):
        ce = []
        for b in range(m):
            if a == b:
                continue
            mask = torch.zeros(n, m, n, dtype=z.dtype)
            mask[torch.arange(n), :, torch.arange(n)] = 1.0
            mask[:, b, :] = 0.0
            logits = (scores[:, a] - 1e9 * mask).reshape(n, m * n)
            ce.append(F.cross_entropy(logits, torch.arange(n) + b * n, reduction="none"))   # [k]
        ce = torch.stack(ce, dim=-1)                                         # [k, m-1]
        if method == "arithmetic_printed":
            per_alpha.append(torch.logsumexp(ce, dim=-1) - math.log(n))
        elif method == "geometric":
            per_alpha.append(ce.mean(dim=-1))
        else:
            per_alpha.append(-torch.logsumexp(-ce, dim=-1) + math.log(m - 1))
    return torch.stack(per_alpha, dim=-1).mean()


@pytest.mark.parametrize("m", [2, 3, 5, 8])
def test_geometric_and_arithmetic_match_algorithm_1_written_out(m):
    """Geometric PVC is Algorithm 1's geometric line; Arithmetic PVC is Algorithm 1's loop with the
    arithmetic mean of the pair likelihoods as its aggregation (the decision, README Deviations)."""
    z = rand_z(6, m, seed=40 + m)
    assert geometric_pvc(z, 0.3).item() == pytest.approx(algorithm_1(z, 0.3, "geometric").item(), rel=1e-9)
    assert arithmetic_pvc(z, 0.3).item() == pytest.approx(algorithm_1(z, 0.3, "arithmetic_mean").item(), rel=1e-9)


@pytest.mark.parametrize("m", [3, 4, 8])
def test_printed_arithmetic_line_is_a_harmonic_mean_not_ours(m):
    """The printed line logsumexp_b(CE_iab) - log k is -log of the harmonic mean of the pair
    likelihoods e^{l_iab} plus log((M-1)/k): checked against that closed form, and it is not our
    Arithmetic PVC (-log of their arithmetic mean)."""
    n, t = 6, 0.5
    z = rand_z(n, m, seed=m)
    ell = torch.tensor([[[x if x is not None else float("nan") for x in row] for row in plane]
                        for plane in slow_pair_ll(z, t)], dtype=torch.float64)
    lik = ell[:, ~torch.eye(m, dtype=torch.bool)].view(n, m, m - 1).exp()
    harmonic = (m - 1) / (1 / lik).sum(dim=-1)                               # (N, M)
    closed_form = (-harmonic.log() + math.log((m - 1) / n)).mean()
    printed = algorithm_1(z, t, "arithmetic_printed")
    assert printed.item() == pytest.approx(closed_form.item(), rel=1e-9)
    assert abs(printed.item() - arithmetic_pvc(z, t).item()) > 0.1


def test_only_the_arithmetic_mean_reduces_to_nt_xent_at_two_views():
    """At M = 2 the arithmetic mean of one pair is that pair: ours is NT-Xent, the printed line is
    NT-Xent - log N (a constant off; same gradient at M = 2, different weights over beta at M > 2)."""
    n, t = 6, 0.5
    z = rand_z(n, 2, d=4, seed=3)
    reference = slow_nt_xent(z[:, 0], z[:, 1], t)
    assert arithmetic_pvc(z, t).item() == pytest.approx(reference, rel=1e-9)
    assert algorithm_1(z, t, "arithmetic_printed").item() == pytest.approx(reference - math.log(n), rel=1e-9)


@pytest.mark.parametrize("t", [0.5, 0.001])
def test_fused_log_mass_gradient_matches_the_pseudo_code_loop(t):
    """The custom backward of the (NM) x (NM) log-mass (two GEMMs on the saved exponentials, no
    elementwise pass) against autograd through Algorithm 1's loop, float64; t = 0.001 takes the
    row-max-shift path (1/t beyond float64's exp range), t = 0.5 the unshifted one."""
    z = rand_z(5, 4, d=6, seed=9)
    got = z.clone().requires_grad_()
    want = z.clone().requires_grad_()
    geometric_pvc(got, t).backward()
    algorithm_1(want, t, "geometric").backward()
    assert torch.allclose(got.grad, want.grad, rtol=1e-7, atol=1e-9)


@pytest.mark.parametrize("t", [0.5, 0.02, 0.01])
def test_float32_matches_float64_on_both_exp_paths(t):
    """float32 at 1/t = 2 and 50 (unshifted exponentials) and 100 (beyond e^87: row-max shift)."""
    z = rand_z(32, 8, d=16, seed=11)
    for kind in ("geometric", "arithmetic"):
        lo, hi = poly_view_loss(z.float(), t, kind).item(), poly_view_loss(z, t, kind).item()
        assert math.isfinite(lo) and lo == pytest.approx(hi, rel=1e-4, abs=1e-4)


@pytest.mark.parametrize("kind", LOSSES)
def test_invariant_to_sample_and_view_order_and_row_scale(kind):
    z = rand_z(6, 4, seed=7)
    base = poly_view_loss(z, 0.4, kind).item()
    g = torch.Generator().manual_seed(1)
    permuted = z[torch.randperm(6, generator=g)][:, torch.randperm(4, generator=g)]
    scaled = z * (0.1 + 5 * torch.rand(6, 4, 1, generator=g, dtype=torch.float64))
    assert poly_view_loss(permuted, 0.4, kind).item() == pytest.approx(base, rel=1e-12)
    assert poly_view_loss(scaled, 0.4, kind).item() == pytest.approx(base, rel=1e-12)


@pytest.mark.parametrize("kind", LOSSES)
def test_gradient_is_finite_and_matches_finite_differences(kind):
    z = rand_z(3, 3, d=3, seed=5).requires_grad_()
    assert torch.autograd.gradcheck(lambda x: poly_view_loss(x, 0.5, kind), (z,))
    big = rand_z(32, 8, d=16, seed=6).float().requires_grad_()
    poly_view_loss(big, 0.05, kind).backward()   # low temperature: logsumexp must keep it finite
    assert torch.isfinite(big.grad).all()


def test_loss_keeps_the_input_dtype():
    for dtype in (torch.float32, torch.float64):
        assert all(poly_view_loss(rand_z(4, 3).to(dtype), 0.5, k).dtype == dtype for k in LOSSES)


# --- bad input ------------------------------------------------------------------------------
@pytest.mark.parametrize("z,t,kind,match", [
    (torch.randn(12, 5), 0.5, "geometric", r"\(N, M, d\)"),
    (torch.randn(4, 1, 5), 0.5, "geometric", "M >= 2"),
    (torch.randn(1, 4, 5), 0.5, "arithmetic", "N >= 2"),
    (torch.randn(4, 3, 5), 0.0, "multi_crop", "temperature"),
    (torch.randn(4, 3, 5), -1.0, "sufficient_statistics", "temperature"),
    (torch.randn(4, 3, 5), 0.5, "harmonic", "geometric, arithmetic, sufficient_statistics, multi_crop"),
])
def test_bad_input_is_a_value_error_naming_it(z, t, kind, match):
    with pytest.raises(ValueError, match=match):
        poly_view_loss(z, t, kind)


def test_model_rejects_bad_arguments():
    with pytest.raises(ValueError, match="views >= 2"):
        PolyView(SmallCNN(1, 4), 16, views=1)
    with pytest.raises(ValueError, match="choose one of"):
        PolyView(SmallCNN(1, 4), 16, loss="mean")
    with pytest.raises(ValueError, match="multiple of views"):
        images_per_step(256, 3)
    assert images_per_step(256, 8) == 32


# --- views and model ------------------------------------------------------------------------
def test_multi_views_shape_and_independent_draws():
    x = torch.rand(3, 1, 28, 28)
    v = multi_views(x, 5, AUG, generator=torch.Generator().manual_seed(0))
    assert v.shape == (3, 5, 1, 28, 28)
    flat = v.flatten(2)
    # 15 views from 15 independent parameter draws: no two views coincide
    assert torch.cdist(flat.view(15, -1), flat.view(15, -1)).add(torch.eye(15)).min() > 1e-3


def test_training_step_encodes_all_views_in_one_forward():
    torch.manual_seed(0)
    encoder = SmallCNN(1, 4)
    calls = []
    encoder.register_forward_hook(lambda mod, inp, out: calls.append(inp[0].shape[0]))
    model = PolyView(encoder, encoder.num_features, views=4, loss="geometric", augment=AUG)
    images = torch.randint(0, 256, (6, 1, 28, 28), dtype=torch.uint8)
    loss, _ = model.training_step(images)
    loss.backward()
    assert calls == [24]          # N*M views in one batch: BatchNorm sees every view
    assert torch.isfinite(loss) and loss.item() > 0
    assert all(p.grad is not None and torch.isfinite(p.grad).all() for p in model.parameters())
    assert model.features(images).shape == (6, encoder.num_features)


def test_model_keeps_the_contrastive_model_settings():
    encoder = SmallCNN(1, 4)
    model = PolyView(encoder, encoder.num_features, views=3, loss="arithmetic", temperature=0.3, proj_hidden=32,
                     proj_dim=8, augment=AUG)
    assert (model.views, model.loss_kind, model.temperature, model.augment) == (3, "arithmetic", 0.3, AUG)
    assert model.projector(torch.randn(5, encoder.num_features)).shape == (5, 8)


# --- configs --------------------------------------------------------------------------------
def test_mini_rows_make_both_of_the_papers_comparisons(compose_cfg):
    """polyview_mini: the equal-views rows encode N * M = 256 views per step (SimCLR's batch M/2
    times larger); the chain m2, m4, geometric_m8 keeps N = 32 images per step; every row the same 150 steps
    on the same 2,000 pre-training images (the pilot's regime)."""
    base = compose_cfg(["experiment=polyview_mini"])
    rows = {}
    for row, overrides in base.table.rows.items():
        cfg = compose_cfg(["experiment=polyview_mini", *overrides])
        rows[row] = (cfg.trainer.batch_size, cfg.method.model.views, cfg.method.model.loss)
        assert (cfg.trainer.max_steps, cfg.dataset.train_size) == (150, 2000), row
    for row in ("simclr", "geometric_m8", "sufficient_statistics_m8", "multicrop_m8"):
        assert images_per_step(256, rows[row][1]) == rows[row][0], row
    assert [rows[r] for r in ("m2", "m4", "geometric_m8")] == [(32, m, "geometric") for m in (2, 4, 8)]
    assert rows["simclr"] == (128, 2, "geometric")
    assert dict(base.table.controls) == {"geometric_m8": ["multicrop_m8", "simclr"],
                                         "sufficient_statistics_m8": ["multicrop_m8"]}


@pytest.mark.parametrize("override, says", [("method.model.views=1", "views >= 2"),
                                            ("method.model.loss=harmonic", "choose one of")])
def test_bad_model_settings_in_a_config_are_config_errors(compose_cfg, override, says):
    with pytest.raises(UserError, match=says) as err:
        build(compose_cfg(["experiment=polyview_smoke", override]))
    assert err.value.exit_code == 2
