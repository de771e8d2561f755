"""VCAS: water-filling, unbiasedness of SampleA / SampleW / both (z-tests whose tolerance comes
from the measured variance, with a check that a 10% bias would fail them), the analytic
SampleW variance, the gather (dropped samples are never recomputed), and the controller."""
import copy
import math

import pytest
import torch
from omegaconf import OmegaConf
from timm.models.vision_transformer import Block
from torch import nn

from methods.vcas import Sampled, VarianceController, keep_fraction, water_fill
from methods.vcas.sampling import SampledLinear, SamplingState, install


def test_water_fill_matches_bisection():
    g = torch.Generator().manual_seed(0)
    for n, budget in ((50, 10.0), (50, 37.5), (8, 1.0), (200, 150.0)):
        w = torch.rand(n, generator=g).pow(4)          # heavy-tailed: several saturate at 1
        w[:3] = 0
        p = water_fill(w, budget)
        lo, hi = 0.0, 1e9                               # bisection on c in Σ min(1, c w) = budget
        for _ in range(200):
            c = (lo + hi) / 2
            lo, hi = (c, hi) if torch.clamp(c * w, max=1).sum() < budget else (lo, c)
        torch.testing.assert_close(p, torch.clamp(lo * w, max=1), atol=1e-5, rtol=1e-5)
        assert abs(float(p.sum()) - budget) < 1e-3 and float(p[:3].abs().sum()) == 0
    assert torch.equal(water_fill(torch.tensor([0.0, 2.0, 1.0]), 5), torch.tensor([0.0, 1.0, 1.0]))


def test_keep_fraction_matches_loop():
    norms = torch.tensor([5.0, 1.0, 3.0, 1.0])  # sorted 5, 3, 1, 1; total 10
    for share, want in ((0.5, 0.25), (0.51, 0.5), (0.8, 0.5), (0.85, 0.75), (1.0, 1.0)):
        assert keep_fraction(norms, share) == want


def tiny_blocks(depth=2, dim=16, seed=0) -> nn.Sequential:
    torch.manual_seed(seed)
    return nn.Sequential(*[Block(dim, num_heads=2, mlp_ratio=2.0) for _ in range(depth)])


def grads_of(model, x, target) -> torch.Tensor:
    loss = ((model(x) - target) ** 2).sum(dim=(1, 2)).mean()
    gs = torch.autograd.grad(loss, [p for p in model.parameters()])
    return torch.cat([g.flatten() for g in gs])


def max_z(samples: torch.Tensor, exact: torch.Tensor) -> tuple[float, float]:
    """Largest |z| of the per-coordinate mean against the exact gradient (coordinates the
    sampler leaves exact are compared directly), and the same with a 10% bias added."""
    k = samples.shape[0]
    mean, sd = samples.mean(0), samples.std(0)
    noisy = sd > 1e-7 * (exact.abs().max() + 1e-12)
    assert noisy.sum() > 100, "the sampler should add variance to most coordinates"
    torch.testing.assert_close(mean[~noisy], exact[~noisy], rtol=1e-4, atol=1e-6)
    se = sd[noisy] / math.sqrt(k)
    z = ((mean[noisy] - exact[noisy]) / se).abs().max()
    z_biased = ((1.1 * mean[noisy] - exact[noisy]) / se).abs().max()
    return float(z), float(z_biased)


@pytest.mark.parametrize("act,w", [(True, False), (False, True), (True, True)])
def test_sampled_gradient_is_unbiased(act, w):
    exact_model = tiny_blocks()
    model = copy.deepcopy(exact_model)
    state = SamplingState(2, rho=[0.4, 0.6], nu=[0.3, 0.5], sample_act=act, sample_w=w)
    install(model, state)
    torch.manual_seed(1)
    x, target = torch.randn(12, 5, 16), torch.randn(12, 5, 16)
    x[:4] *= 3  # unequal sample norms so water-filling is not uniform
    exact = grads_of(exact_model, x, target)
    samples = torch.stack([grads_of(model, x, target) for _ in range(1500)])
    z, z_biased = max_z(samples, exact)
    # ~3k coordinates: P(max |z| > 5.5) under unbiasedness is about 1e-4 (normal tails)
    assert z < 5.5, z
    assert z_biased > 5.5, "the test should be able to detect a 10% bias"


def test_samplew_variance_matches_analytic():
    torch.manual_seed(0)
    lin = SampledLinear(8, 6)
    state = SamplingState(1, nu=[0.3], record=True)
    lin.state = state
    x, gz = torch.randn(40, 8) * torch.rand(40, 1) * 3, torch.randn(40, 6)
    gws = []
    for _ in range(4000):
        state.reset_stats()
        w = lin.weight
        out = lin(x)
        gws.append(torch.autograd.grad(out, w, gz)[0])
    gws = torch.stack(gws)
    exact = gz.t() @ x
    empirical = float(((gws - exact) ** 2).sum(dim=(1, 2)).mean())
    analytic = state.w_var[0]
    # the empirical mean of 4000 squared errors: relative sd ≈ sqrt(var(‖e‖²)) / mean / sqrt(4000)
    rel_sd = float(((gws - exact) ** 2).sum(dim=(1, 2)).std()) / empirical / math.sqrt(4000)
    assert abs(empirical / analytic - 1) < 5 * rel_sd, (empirical, analytic, rel_sd)


def test_dropped_samples_are_not_recomputed():
    seen = []

    class Probe(nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = nn.Linear(4, 4)

        def forward(self, x):
            seen.append((torch.is_grad_enabled(), x.shape[0]))
            return self.lin(x)

    blocks = nn.Sequential(Probe())
    state = SamplingState(1, rho=[0.25], sample_w=False)
    install(blocks, state)
    x = torch.randn(64, 3, 4, requires_grad=True)
    blocks(x).sum().backward()
    recomputed = [n for grad_on, n in seen if grad_on]
    assert seen[0] == (False, 64) and len(recomputed) == 1
    assert recomputed[0] == round(state.kept_act[0] * 64) and recomputed[0] < 40
    assert int((x.grad.abs().sum(dim=(1, 2)) > 0).sum()) == recomputed[0]
    assert state.norms[0] == [], "training passes must not pile up statistics (only controller passes record)"


def test_controller_drives_act_variance_to_tau():
    torch.manual_seed(0)
    model = tiny_blocks(depth=3)
    state = SamplingState(3)
    install(model, state)
    ctl = VarianceController(state, tau_act=0.05, alpha=0.05, m=2)
    data = [(torch.randn(32, 5, 16) * torch.rand(32, 1, 1) * 3, torch.randn(32, 5, 16)) for _ in range(8)]

    def loss_fn(b):
        return ((model(b[0]) - b[1]) ** 2).sum(dim=(1, 2)).mean()

    ratios, ss = [], []
    for t in range(50):
        logs = ctl.step(loss_fn, [data[(2 * t) % 8], data[(2 * t + 1) % 8]], list(model.parameters()))
        ratios.append(logs["act_ratio"])
        ss.append(ctl.s)
    # s walks down while V_act < τ·V_sgd and back up when above: late on it brackets τ,
    # and one α step never overshoots by more than a small factor
    late = torch.tensor(ratios[20:])
    assert min(ss) < 1 and 0.2 < float((late > 0.05).float().mean()) < 0.8, ratios
    assert float(late.max()) < 4 * 0.05, ratios
    assert all(a <= b for a, b in zip(state.rho, state.rho[1:])), "ρ must not decrease with depth"


def test_flops_accounting():
    cfg = OmegaConf.create({"mode": "ub", "keep": 1 / 3})
    net = nn.Sequential(nn.Flatten(), nn.Linear(4, 3))
    model = Sampled(net, nn.ModuleList([nn.Identity()] * 4), cfg)
    batch = (torch.randn(30, 4), torch.randint(0, 3, (30,)))
    loss, logs = model.training_step(batch)
    loss.backward()
    red = model.flops_reduction()
    assert red["bp_flops_reduction"] == pytest.approx(100 * 2 / 3)
    assert red["flops_reduction"] == pytest.approx(100 * (1 - (1 + 2 / 3) / 3))
    assert "loss" in logs


def test_hf_bert_layers_are_wrapped_and_unbiased():
    transformers = pytest.importorskip("transformers")
    cfg = transformers.BertConfig(vocab_size=50, hidden_size=16, num_hidden_layers=2, num_attention_heads=2,
                                  intermediate_size=32, max_position_embeddings=16, num_labels=2,
                                  hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    torch.manual_seed(0)
    exact_model = transformers.BertForSequenceClassification(cfg).train()
    model = copy.deepcopy(exact_model)
    state = SamplingState(2, rho=[0.5, 0.5], nu=[0.5, 0.5])
    install(model.bert.encoder.layer, state)
    ids = torch.randint(0, 50, (10, 8))
    mask = torch.ones_like(ids)
    mask[:3, 5:] = 0
    labels = torch.randint(0, 2, (10,))

    def g(m):
        loss = m(input_ids=ids, attention_mask=mask, labels=labels).loss
        ps = [p for p in m.bert.encoder.parameters()]
        return torch.cat([x.flatten() for x in torch.autograd.grad(loss, ps)])

    exact = g(exact_model)
    samples = torch.stack([g(model) for _ in range(600)])
    z, _ = max_z(samples, exact)
    assert z < 5.5, z
