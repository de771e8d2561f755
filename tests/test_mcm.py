"""MCM: the losses against loops and closed forms, the batched generator against K nn.Linear
stacks, the masked autoencoder written out, the detector's contract, a correlation-breaking toy."""
import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn

from common.eval import auprc, auroc
from methods.mcm import (MCM, MCMDetector, MaskGenerator, anomaly_score, diversity_loss, make_detector, mcm_loss,
                         reconstruction_loss)
from methods.mcm.loss import diversity_scale


def diversity_loop(masks, tau):
    """scale · Σ_k log Σ_{l≠k} exp(cos(M_k, M_l)/τ) per row, mean over rows, by plain loops."""
    b, k, _ = masks.shape
    scale = 1 / abs((k - 1) * math.log(1 / (k - 1)))
    rows = []
    for i in range(b):
        total = 0.0
        for a in range(k):
            inner = sum(math.exp(F.cosine_similarity(masks[i, a], masks[i, c], dim=0).item() / tau)
                        for c in range(k) if c != a)
            total += math.log(inner)
        rows.append(scale * total)
    return sum(rows) / b


def official_diversity(z, temp=0.1):
    """Model/Loss.py DiversityMask.forward (github.com/JXYin24/MCM), written out."""
    z = F.normalize(z, p=2, dim=-1)
    batch_size, mask_num, _ = z.shape
    sim = torch.exp(torch.matmul(z, z.permute(0, 2, 1) / temp))
    keep = (torch.ones_like(sim) - torch.eye(mask_num).unsqueeze(0)).bool()
    sim = sim.masked_select(keep).view(batch_size, mask_num, -1)
    k = mask_num - 1
    return (torch.log(sim.sum(-1)) / abs(k * np.log(1.0 / k))).sum(1).mean()


def test_diversity_loss_matches_loop_and_official_code():
    masks = torch.rand(3, 5, 7, dtype=torch.float64)
    assert diversity_loss(masks, 0.3).item() == pytest.approx(diversity_loop(masks, 0.3), rel=1e-10)
    logits = torch.randn(4, 15, 9)
    assert diversity_loss(logits, 0.1).item() == pytest.approx(official_diversity(logits).item(), rel=1e-5)


@pytest.mark.parametrize("k", [3, 5, 15])
def test_diversity_closed_forms(k):
    tau = 0.1
    orthogonal = torch.eye(k, dtype=torch.float64).expand(2, k, k)      # M_k = e_k: every cosine 0
    assert diversity_loss(orthogonal, tau).item() == pytest.approx(k / (k - 1), rel=1e-10)
    identical = torch.rand(1, 1, 6, dtype=torch.float64).expand(2, k, 6)  # every cosine 1
    expected = k * (math.log(k - 1) + 1 / tau) * diversity_scale(k)
    assert diversity_loss(identical, tau).item() == pytest.approx(expected, rel=1e-10)


def test_diversity_is_scale_invariant_per_mask():
    masks = torch.rand(2, 6, 5, dtype=torch.float64)
    scales = torch.rand(2, 6, 1, dtype=torch.float64) * 10 + 0.1
    assert diversity_loss(masks * scales).item() == pytest.approx(diversity_loss(masks).item(), rel=1e-10)


def test_diversity_needs_three_masks():
    with pytest.raises(ValueError, match="num_masks >= 3"):
        diversity_loss(torch.rand(2, 2, 4))
    with pytest.raises(ValueError, match="num_masks >= 3"):
        MCMDetector(num_masks=2, lambda_div=5.0)
    MCMDetector(num_masks=2, lambda_div=0.0)   # without L_div two masks are fine


def test_batched_generator_equals_k_linear_stacks():
    d, k, layers = 7, 4, 3
    gen = MaskGenerator(d, k, layers).double()
    x = torch.randn(5, d, dtype=torch.float64)
    masks, logits = gen(x)
    for j in range(k):   # the official SingleNet: Linear(bias=False), ReLU, ..., Linear
        net = nn.Sequential(*[m for i in range(layers) for m in
                              ([nn.Linear(d, d, bias=False)] + ([nn.ReLU()] if i < layers - 1 else []))]).double()
        with torch.no_grad():
            for i, lin in enumerate(m for m in net if isinstance(m, nn.Linear)):
                lin.weight.copy_(gen.weights[i][j])
        torch.testing.assert_close(logits[:, j], net(x))
        torch.testing.assert_close(masks[:, j], torch.sigmoid(net(x)))


def test_generator_init_matches_nn_linear_variance():
    d, k = 16, 15
    w = MaskGenerator(d, k, 1).weights[0].detach().flatten().double()
    bound = 1 / math.sqrt(d)          # nn.Linear: U(-1/√in, 1/√in), variance bound²/3
    var = bound ** 2 / 3
    sd_of_var = math.sqrt((bound ** 4 / 5 - var ** 2) / len(w))   # Var[w²] = E[w⁴] − var²
    assert w.abs().max() <= bound
    assert abs(w.pow(2).mean().item() - var) < 4 * sd_of_var


def test_reconstruction_is_decoder_of_encoder_of_masked_copy():
    torch.manual_seed(0)
    model = MCM(6, num_masks=3, hidden_dim=8, latent_dim=4).double()
    x = torch.randn(5, 6, dtype=torch.float64)
    x_hat, masks = model(x)
    assert x_hat.shape == masks.shape == (5, 3, 6)
    assert ((masks > 0) & (masks < 1)).all()
    for j in range(3):
        torch.testing.assert_close(x_hat[:, j], model.decoder(model.encoder(masks[:, j] * x)))
    assert all(m.bias is None for m in model.modules() if isinstance(m, nn.Linear))
    assert sum(isinstance(m, nn.Linear) for m in model.encoder) == 3 and model.encoder[-1].out_features == 4


def test_rows_are_independent():
    torch.manual_seed(0)
    model = MCM(5, num_masks=4, hidden_dim=8, latent_dim=3).double()
    x = torch.randn(6, 5, dtype=torch.float64)
    full, _ = model(x)
    for i in range(6):
        torch.testing.assert_close(full[i], model(x[i:i + 1])[0][0])


def test_score_and_reconstruction_loss_against_loop():
    x, x_hat = torch.randn(4, 3, dtype=torch.float64), torch.randn(4, 5, 3, dtype=torch.float64)
    loop = torch.tensor([sum(math.sqrt(sum((x_hat[i, k, j] - x[i, j]).item() ** 2 for j in range(3)))
                             for k in range(5)) / 5 for i in range(4)], dtype=torch.float64)
    torch.testing.assert_close(anomaly_score(x, x_hat), loop)
    assert reconstruction_loss(x, x_hat).item() == pytest.approx(loop.mean().item())
    masks = torch.rand(4, 5, 3, dtype=torch.float64)
    total, parts = mcm_loss(x, x_hat, masks, 5.0, 0.1)
    assert total.item() == pytest.approx(loop.mean().item() + 5 * diversity_loss(masks, 0.1).item())
    assert set(parts) == {"rec", "div"} and mcm_loss(x, x_hat, masks, 0.0)[0].item() == pytest.approx(loop.mean().item())


def test_ablation_maskings():
    ae = MCM(5, num_masks=1, masking="none")
    x = torch.randn(3, 5)
    x_hat, masks = ae(x)
    assert x_hat.shape == (3, 1, 5) and (masks == 1).all()
    rnd = MCM(10, num_masks=6, masking="random", mask_ratio=0.5, generator=torch.Generator().manual_seed(0))
    _, m = rnd(x.repeat(1, 2))
    assert (m[0].sum(-1) == 5).all() and torch.equal(m[0], m[2])       # fixed: the same for every row
    assert len({tuple(r.tolist()) for r in m[0]}) > 1                  # masks differ from each other
    with pytest.raises(ValueError, match="num_masks must be 1"):
        MCM(5, num_masks=3, masking="none")


def test_bad_input_gives_value_errors():
    det = MCMDetector(epochs=1, hidden_dim=8, latent_dim=4, num_masks=3)
    x = np.random.default_rng(0).normal(size=(20, 4))
    bad = x.copy()
    bad[7, 2] = np.nan
    with pytest.raises(ValueError, match="NaN or inf.*row 7"):
        det.fit(bad)
    with pytest.raises(ValueError, match="needs fit"):
        det.decision_function(x)
    det.fit(x)
    with pytest.raises(ValueError, match="3 features but the detector was fitted on 4"):
        det.decision_function(x[:, :3])
    inf = x.copy()
    inf[3, 0] = np.inf
    with pytest.raises(ValueError, match="NaN or inf"):
        det.decision_function(inf)
    with pytest.raises(ValueError, match="diversity_on"):
        MCMDetector(diversity_on="z")
    with pytest.raises(ValueError, match="lambda_div=0"):
        MCMDetector(masking="random")
    with pytest.raises(ValueError, match="unknown row"):
        make_detector("knn")
    with pytest.raises(ValueError, match="both normal"):
        auroc(np.arange(4.0), np.zeros(4))


def correlated_toy(n=400, d=8, seed=0):
    """Normal rows on a 2-D linear subspace plus noise; anomalies = normal-like rows with each
    column permuted independently: every marginal is kept, the correlations are gone."""
    rng = np.random.default_rng(seed)
    a = rng.normal(size=(2, d))

    def normal(m):
        return rng.normal(size=(m, 2)) @ a + 0.1 * rng.normal(size=(m, d))
    anomalies = normal(40)
    anomalies = np.stack([rng.permutation(anomalies[:, j]) for j in range(d)], axis=1)
    return normal(n), np.concatenate([normal(100), anomalies]), np.r_[np.zeros(100), np.ones(40)]


def test_toy_correlation_anomalies_are_found():
    torch.set_num_threads(1)
    x_train, x_test, y_test = correlated_toy()
    det = MCMDetector(num_masks=5, epochs=60, batch_size=128, lr=0.01, hidden_dim=32, latent_dim=2, seed=0)
    scores = det.fit(x_train).decision_function(x_test)
    assert auroc(scores, y_test) > 0.9
    assert det.history[-1]["rec"] < det.history[0]["rec"]
    # the marginals alone carry little signal: the mean |z-score| of a row is near chance (0.59)
    z = np.abs((x_test - x_train.mean(0)) / x_train.std(0)).mean(1)
    assert auroc(z, y_test) < 0.7


def test_detector_is_deterministic_and_leaves_global_rng_alone():
    x = np.random.default_rng(1).normal(size=(30, 4))
    torch.manual_seed(123)
    before = torch.rand(1)
    torch.manual_seed(123)
    kw = dict(num_masks=3, epochs=3, batch_size=16, hidden_dim=8, latent_dim=4)
    s1 = MCMDetector(seed=5, **kw).fit(x).decision_function(x)
    assert torch.rand(1).item() == before.item()
    s2 = MCMDetector(seed=5, **kw).fit(x).decision_function(x)
    s3 = MCMDetector(seed=6, **kw).fit(x).decision_function(x)
    np.testing.assert_array_equal(s1, s2)
    assert not np.allclose(s1, s3)


def test_diversity_on_logits_trains_and_differs():
    x = np.random.default_rng(2).normal(size=(40, 5))
    kw = dict(num_masks=3, epochs=3, batch_size=64, hidden_dim=8, latent_dim=4, seed=0)
    masks = MCMDetector(**kw).fit(x)
    logits = MCMDetector(diversity_on="logits", **kw).fit(x)
    assert masks.history[0]["div"] != logits.history[0]["div"]
    assert np.isfinite(logits.decision_function(x)).all()


def test_pyod_baselines_rank_outliers():
    rng = np.random.default_rng(0)
    x_train = rng.normal(size=(200, 3))
    x_test = np.concatenate([rng.normal(size=(50, 3)), rng.normal(size=(10, 3)) + 6])
    y = np.r_[np.zeros(50), np.ones(10)]
    for row in ("iforest", "lof", "ocsvm", "ecod"):
        assert auroc(make_detector(row, seed=0).fit(x_train).decision_function(x_test), y) > 0.95, row
    assert auprc(np.r_[np.zeros(50), np.ones(10)], y) == pytest.approx(1.0)


def test_optimizer_factory_replaces_the_default_adam():
    """The run hands `trainer.optimizer` in as a factory: SGD with lr 0 leaves the initial weights."""
    x = np.random.default_rng(3).normal(size=(20, 4))
    kw = dict(num_masks=3, epochs=2, batch_size=32, hidden_dim=8, latent_dim=4, seed=0)   # one full batch
    frozen = MCMDetector(optimizer=lambda params: torch.optim.SGD(params, lr=0.0), **kw).fit(x)
    assert frozen.history[0]["loss"] == pytest.approx(frozen.history[-1]["loss"], rel=1e-6)
    trained = MCMDetector(**kw).fit(x)
    assert trained.history[-1]["loss"] != pytest.approx(trained.history[0]["loss"], rel=1e-6)


def test_run_config_builds_and_rejects_unknown_detectors(compose_cfg):
    from common.config import UserError
    from methods.mcm import build, detector_factory

    cfg = compose_cfg(["experiment=mcm_smoke"])
    model = build(cfg)
    assert isinstance(model, MCM) and model.num_features == cfg.dataset.num_features[cfg.dataset.tables[0]]
    assert model.num_masks == cfg.method.model.num_masks
    det = detector_factory(cfg, seed=4)()
    assert isinstance(det, MCMDetector) and det.epochs == cfg.trainer.epochs and det.seed == 4
    cfg.method.detector = "knn"
    with pytest.raises(UserError, match="method.detector"):
        detector_factory(cfg, seed=0)
