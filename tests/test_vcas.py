"""VCAS: water-filling, unbiasedness of SampleA / SampleW / both (z-tests whose tolerance comes
from the measured variance, with a check that a 10% bias would fail them), the analytic SampleW
variance, no recomputation, the official skip of resampling, the per-linear controller, and the
FLOPs bookkeeping against a hand count and against torch's FLOP counter."""
import copy
import math

import pytest
import torch
from timm.models.vision_transformer import Block
from torch import nn

from common.nn import ViTClassifier
from methods.vcas import Sampled, VarianceController, install, keep_fraction, official_flops_ratio, water_fill
from methods.vcas import sampling
from methods.vcas.flops import counter, forward_backward_flops
from methods.vcas.sampling import SampledLinear, SamplingState, sampled_weight_grad


def bisection(w: torch.Tensor, budget: float) -> torch.Tensor:
    w = w.double()
    lo, hi = 0.0, 1e30                                   # c in Σ min(1, c w) = budget
    for _ in range(400):
        c = (lo + hi) / 2
        lo, hi = (c, hi) if torch.clamp(c * w, max=1).sum() < budget else (lo, c)
    return torch.clamp(lo * w, max=1)


@pytest.mark.parametrize("n,budget", [(50, 10.0), (50, 37.5), (8, 1.0), (200, 150.0), (2048, 1800.0), (2048, 3.0)])
def test_water_fill_matches_bisection(n, budget):
    w = torch.rand(n, generator=torch.Generator().manual_seed(n)).pow(6)   # heavy-tailed: many saturate
    w[:3] = 0
    want = bisection(w, budget).float()
    p = water_fill(w, budget)
    torch.testing.assert_close(p, want, atol=2e-6, rtol=1e-5)
    assert abs(float(p.sum()) - budget) < 1e-3 and float(p[:3].abs().sum()) == 0
    assert torch.equal(water_fill(torch.tensor([0.0, 2.0, 1.0]), 5), torch.tensor([0.0, 1.0, 1.0]))
    torch.testing.assert_close(water_fill(torch.tensor([1.0, 2.0, 1.0]), 2), torch.tensor([0.5, 1.0, 0.5]))


def test_keep_fraction_matches_loop():
    norms = torch.tensor([5.0, 1.0, 3.0, 1.0])  # sorted 5, 3, 1, 1; total 10
    for share, want in ((0.5, 0.25), (0.51, 0.5), (0.8, 0.5), (0.85, 0.75), (1.0, 1.0)):
        assert keep_fraction(norms, share) == want


def test_sampled_weight_grad_is_the_weighted_sum_of_row_products():
    g = torch.Generator().manual_seed(0)
    for out_f, in_f in ((3, 5), (5, 3)):               # either operand is the one scaled
        gz, x, inv = torch.randn(7, out_f, generator=g), torch.randn(7, in_f, generator=g), torch.rand(7, generator=g) + 1
        loop = sum(inv[r] * torch.outer(gz[r], x[r]) for r in range(7))
        torch.testing.assert_close(sampled_weight_grad(gz, x, inv), loop)


def tiny_blocks(depth=2, dim=16, seed=0) -> nn.Sequential:
    torch.manual_seed(seed)
    return nn.Sequential(*[Block(dim, num_heads=2, mlp_ratio=2.0) for _ in range(depth)])


def sampled_copy(model, rho, nu):
    model = copy.deepcopy(model)
    state = install(model)
    state.rho, state.nu = list(rho), [nu] * state.num_linears if isinstance(nu, float) else list(nu)
    return model, state


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


def assert_unbiased(exact_model, model, draws=300):
    """300 sampled gradients on one batch of unequal sample norms (so water-filling is not
    uniform): their mean is within noise of the exact gradient, and a 10% bias would not be."""
    torch.manual_seed(1)
    x, target = torch.randn(12, 5, 16), torch.randn(12, 5, 16)
    x[:4] *= 3
    exact = grads_of(exact_model, x, target)
    samples = torch.stack([grads_of(model, x, target) for _ in range(draws)])
    z, z_biased = max_z(samples, exact)
    # ~3k coordinates: P(max |z| > 5.5) under unbiasedness is about 1e-4 (normal tails)
    assert z < 5.5, z
    assert z_biased > 5.5, "the test should be able to detect a 10% bias"


@pytest.mark.parametrize("act,w", [(True, False), (False, True), (True, True)])
def test_sampled_gradient_is_unbiased(act, w):
    exact_model = tiny_blocks()
    model, state = sampled_copy(exact_model, [0.4, 0.6], [0.3, 0.5, 0.4, 0.6, 0.3, 0.5, 0.4, 0.6])
    state.sample_act, state.sample_w = act, w
    assert_unbiased(exact_model, model)


def test_samplew_variance_matches_analytic():
    torch.manual_seed(0)
    lin = SampledLinear(8, 6)
    state = SamplingState(1, 1, nu=[0.3], measure_w=True)
    lin.state = state
    x, gz = torch.randn(40, 8) * torch.rand(40, 1) * 3, torch.randn(40, 6)
    gws = []
    for _ in range(2000):
        state.reset_stats()
        gws.append(torch.autograd.grad(lin(x), lin.weight, gz)[0])
    gws = torch.stack(gws)
    errors = ((gws - gz.t() @ x) ** 2).sum(dim=(1, 2))
    empirical, analytic = float(errors.mean()), state.w_var[0]
    rel_sd = float(errors.std()) / empirical / math.sqrt(2000)   # of the mean of 2000 squared errors
    assert abs(empirical / analytic - 1) < 5 * rel_sd, (empirical, analytic, rel_sd)


class Probe(nn.Module):
    """A block that logs every forward call (grad mode, rows) and drops rows' gradients nowhere."""

    def __init__(self, seen):
        super().__init__()
        self.lin, self.seen = nn.Linear(4, 4), seen

    def forward(self, x):
        self.seen.append((torch.is_grad_enabled(), x.shape[0]))
        return self.lin(x)


def test_the_forward_runs_once_and_dropped_samples_get_zero_gradient():
    seen = []
    blocks = nn.Sequential(Probe(seen))
    state = install(blocks)
    state.rho, state.sample_w = [0.25], False
    x = torch.randn(64, 3, 4, requires_grad=True)
    blocks(x).sum().backward()
    assert seen == [(True, 64)], "one forward with the graph, nothing recomputed in the backward"
    kept = int((x.grad.abs().sum(dim=(1, 2)) > 0).sum())
    assert kept == len(state.kept) and kept < 40
    assert state.norms[0] == [], "training passes must not pile up statistics (only controller passes record)"


def test_resampling_is_skipped_where_rho_does_not_change(monkeypatch):
    calls = []
    real = sampling.water_fill
    monkeypatch.setattr(sampling, "water_fill", lambda w, b: calls.append(b) or real(w, b))
    x, target = torch.randn(20, 5, 16), torch.randn(20, 5, 16)
    for rho, draws in (([0.5, 0.5], 1), ([0.3, 0.6], 2), ([1.0, 1.0], 0)):
        model, state = sampled_copy(tiny_blocks(), rho, 1.0)
        calls.clear()
        grads_of(model, x, target)
        assert len(calls) == draws, (rho, calls)


def test_controller_variances_are_per_linear_over_block_linears_only():
    blocks = tiny_blocks()
    model, state = sampled_copy(blocks, [1.0, 1.0], 1.0)
    head = nn.Linear(16, 3)
    torch.manual_seed(0)
    batches = [(torch.randn(8, 5, 16), torch.randint(0, 3, (8,))) for _ in range(3)]

    def loss_fn(net):
        return lambda b: nn.functional.cross_entropy(head(net(b[0]).mean(1)), b[1])

    weights = [m.weight for m in model.modules() if isinstance(m, SampledLinear)]
    ctl = VarianceController(state, m=3)
    est = ctl.estimate(loss_fn(model), batches, weights)
    # independent: plain autograd on the unwrapped blocks, the block linears' weights only
    plain = [m.weight for m in blocks.modules() if type(m) is nn.Linear]
    g = [torch.autograd.grad(loss_fn(blocks)(b), plain) for b in batches]
    want = torch.tensor([sum(float((gb[j] - sum(gs[j] for gs in g) / 3).pow(2).sum()) for gb in g) / 2
                         for j in range(len(plain))], dtype=torch.float64)
    assert len(est["v_sgd"]) == len(plain) == 8
    torch.testing.assert_close(est["v_sgd"], want, rtol=1e-4, atol=0)
    assert float(est["v_act"].abs().max()) < 1e-6 * float(want.max()), "ρ = 1 adds no variance"
    assert float(est["v_w"].abs().max()) == 0.0, "ν = 1 adds no variance"


def test_nu_moves_against_its_own_layers_sgd_variance():
    state = SamplingState(1, 2, nu=[0.5, 0.5])
    ctl = VarianceController(state, w_var_tau=0.1, w_ratio_mul=0.9)
    # layer 0: V_w = 0.2 against its own V_sgd = 1 (too noisy), though small against the total 101
    est = {"v_sgd": torch.tensor([1.0, 100.0], dtype=torch.float64), "v_act": torch.zeros(2, dtype=torch.float64),
           "v_w": torch.tensor([0.2, 5.0], dtype=torch.float64), "norms": {0: [torch.ones(4)]}}
    ctl.update(est)
    assert state.nu == pytest.approx([0.5 / 0.9, 0.5 * 0.9])
    assert ctl.s == pytest.approx(0.99) and state.rho[0] == pytest.approx(0.6 * 1 + 0.4 * 1.0)


def test_controller_drives_act_variance_to_tau():
    torch.manual_seed(0)
    model, state = sampled_copy(tiny_blocks(depth=3), [1.0] * 3, 1.0)
    ctl = VarianceController(state, act_var_tau=0.05, s_step=0.05, m=2, sched_decay=0.0)
    data = [(torch.randn(32, 5, 16) * torch.rand(32, 1, 1) * 3, torch.randn(32, 5, 16)) for _ in range(8)]

    def loss_fn(b):
        return ((model(b[0]) - b[1]) ** 2).sum(dim=(1, 2)).mean()

    weights = [m.weight for m in model.modules() if isinstance(m, SampledLinear)]
    ratios, ss = [], []
    for t in range(36):
        logs = ctl.step(loss_fn, [data[(2 * t) % 8], data[(2 * t + 1) % 8]], weights)
        ratios.append(logs["act_ratio"])
        ss.append(ctl.s)
    # s walks down while V_act < τ·V_sgd and back up when above: late on it brackets τ
    late = torch.tensor(ratios[16:])
    assert min(ss) < 1 and 0.2 < float((late > 0.05).float().mean()) < 0.8, ratios
    assert float(late.max()) < 4 * 0.05, ratios
    assert all(a <= b for a, b in zip(state.rho, state.rho[1:])), "ρ must not decrease with depth"


# --- FLOPs ------------------------------------------------------------------------------------

class TinyNet(nn.Module):
    """One block Linear(3, 5) -> ReLU -> Linear(5, 3), mean over tokens, head Linear(3, 2); no biases."""

    def __init__(self):
        super().__init__()
        self.blocks = nn.ModuleList([nn.Sequential(nn.Linear(3, 5, bias=False), nn.ReLU(), nn.Linear(5, 3, bias=False))])
        self.head = nn.Linear(3, 2, bias=False)
        for p in self.parameters():
            nn.init.uniform_(p, 0.1, 1.0)       # positive: every ReLU unit is on for positive inputs

    def forward(self, x):                       # (N, T=2, 3)
        for block in self.blocks:
            x = block(x)
        return self.head(x.mean(1))


def test_exact_flops_per_sample_match_a_hand_count():
    net = TinyNet()
    fwd, bwd = forward_backward_flops(lambda: net(torch.rand(1, 2, 3)).sum(), list(net.parameters()))
    # forward: 2·T·(3·5 + 5·3) in the block + 2·3·2 in the head = 120 + 12
    # backward: weight grads 2·T·15 twice and 2·3·2; input grads of Linear(5, 3) (2·T·15) and of
    # the head (2·3·2); none for Linear(3, 5), whose input is the data
    assert (fwd, bwd) == (132, 120 + 12 + 60 + 12)


def test_sampled_backward_skips_exactly_the_hand_counted_flops():
    net = TinyNet()
    state = install(net.blocks)
    state.rho, state.nu = [0.5], [0.5, 0.5]
    x = torch.rand(4, 2, 3) + 0.5
    x[:, 1] = 0       # token 1 is zero in every layer (no biases): its rows have leverage 0
    # only samples 0 and 1 get an output gradient, so ρ·N = 2 keeps exactly those; within them
    # 2 of 4 rows have a non-zero leverage score, so ν·4 = 2 keeps exactly those: no randomness
    with counter() as sampled:
        net.blocks[0](x)[:2].sum().backward()
    plain = TinyNet()
    with counter() as exact:
        plain.blocks[0](x)[:2].sum().backward()
    # Linear(5, 3): input grads on 4 of 8 rows (2·4·15 skipped), weight grad on 2 of 8 (2·6·15);
    # Linear(3, 5): no input grad (data), weight grad on 2 of 8 rows (2·6·15)
    hand = 2 * 4 * 15 + 2 * 6 * 15 + 2 * 6 * 15
    assert state.skipped_flops == hand == 480
    assert exact.get_total_flops() - sampled.get_total_flops() == hand   # what really ran


def test_official_flops_ratio_is_the_official_expression():
    act_ratio_sched, w_ratio_list, freq, m = [0.4, 0.7, 0.9], [0.2, 0.5, 0.3, 0.9, 1.0, 0.6], 50, 2
    # vcas_trainer.py, written out
    flops, nb = 3, len(act_ratio_sched)
    nl = len(w_ratio_list) // nb
    flops_act_only = 1 + 2 * sum(act_ratio_sched) / nb
    flops_act_and_w = 1 + sum(act_ratio_sched) / nb + sum(
        [sum(w_ratio_list[i] for i in range(j * nl, (j + 1) * nl)) / nl * act_ratio_sched[j] for j in range(nb)]) / nb
    want = (flops_act_and_w * freq + flops * m + flops_act_only * m**2) / (flops * freq)
    nu_per_block = [sum(w_ratio_list[j * nl:(j + 1) * nl]) / nl for j in range(nb)]
    assert official_flops_ratio(act_ratio_sched, nu_per_block, freq, m) == pytest.approx(want)


def small_vit():
    torch.manual_seed(0)
    return ViTClassifier(img_size=8, in_chans=1, num_classes=3, patch_size=4, dim=8, depth=2, heads=2)


def test_the_tally_equals_torchs_flop_count_of_everything_a_step_runs():
    """A VCAS step with a controller update (forwards, exact and SampleA backwards) and sampling."""
    net = small_vit()
    model = Sampled(net, net.blocks, mode="vcas", every=2, m=2)
    g = torch.Generator().manual_seed(0)
    batches = [(torch.randint(0, 256, (6, 1, 8, 8), generator=g, dtype=torch.uint8), torch.randint(0, 3, (6,), generator=g))
               for _ in range(4)]
    model.controller_batches = lambda step: batches[2:]
    model.rho.fill_(0.5)
    model.nu.fill_(0.5)
    model.training_step(batches[0])[0].backward()     # step 0 measures F, B and B_ctl
    before = float(model.flops[0] - model.skipped)
    with counter() as ran:                            # step 1: the controller, then a sampled step
        loss, _ = model.training_step(batches[1])
        loss.backward()
    assert float(model.official[1]) == 1, "the controller ran"
    assert float(model.skipped) > 0, "something was sampled"
    assert float(model.flops[0] - model.skipped) - before == pytest.approx(ran.get_total_flops(), rel=1e-9)
    exact = float(model.flops[1])
    fwd, bwd, _ = model.per_sample.tolist()
    assert exact == 2 * 6 * (fwd + bwd)
    assert fwd > 0 and bwd > fwd


def test_ub_and_sb_spend_the_budget():
    net = small_vit()
    batch = (torch.randint(0, 256, (30, 1, 8, 8), dtype=torch.uint8), torch.randint(0, 3, (30,)))
    for mode in ("ub", "sb"):
        model = Sampled(copy.deepcopy(net), net.blocks, mode=mode, budget=0.8)
        model.training_step(batch)
        fwd, bwd, _ = model.per_sample.tolist()
        k = round(30 * (0.8 - fwd / (fwd + bwd)))
        spent = 30 * fwd + k * (fwd + bwd)            # selection forward over all, then k samples
        assert model.flops_reduction()["flops_reduction"] == pytest.approx(100 * (1 - spent / (30 * (fwd + bwd))))
        assert abs(model.flops_reduction()["flops_reduction"] - 20) < 100 / 30
    with pytest.raises(ValueError, match="budget 0.2 does not cover"):
        Sampled(copy.deepcopy(net), net.blocks, mode="sb", budget=0.2).training_step(batch)


def test_ub_loss_is_unbiased_for_the_batch_mean():
    torch.manual_seed(0)
    net = small_vit()
    model = Sampled(net, net.blocks, mode="ub", budget=0.6)
    batch = (torch.randint(0, 256, (24, 1, 8, 8), dtype=torch.uint8), torch.randint(0, 3, (24,)))
    model.training_step(batch)                          # measures F and B (needs gradients)
    with torch.no_grad():
        draws = torch.stack([model.training_step(batch)[0] for _ in range(400)])
        exact = float(model.loss(batch))
    se = float(draws.std()) / math.sqrt(len(draws))
    assert abs(float(draws.mean()) - exact) < 4.5 * se, (float(draws.mean()), exact, se)
    assert float(draws.std()) > 0, "UB samples"


def test_bad_arguments_are_named():
    net = small_vit()
    with pytest.raises(ValueError, match="mode must be one of"):
        Sampled(net, net.blocks, mode="fast")
    with pytest.raises(ValueError, match="m >= 2"):
        Sampled(net, net.blocks, m=1)
    with pytest.raises(ValueError, match="kernels must be one of"):
        Sampled(net, net.blocks, kernels="cuda")


def test_hf_bert_layers_are_wrapped_and_unbiased():
    transformers = pytest.importorskip("transformers")
    cfg = transformers.BertConfig(vocab_size=50, hidden_size=16, num_hidden_layers=2, num_attention_heads=2,
                                  intermediate_size=32, max_position_embeddings=16, num_labels=2,
                                  hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    torch.manual_seed(0)
    exact_model = transformers.BertForSequenceClassification(cfg).train()
    model = copy.deepcopy(exact_model)
    state = install(model.bert.encoder.layer)
    state.rho, state.nu = [0.5, 0.5], [0.5] * state.num_linears
    ids = torch.randint(0, 50, (10, 8))
    mask = torch.ones_like(ids)
    mask[:3, 5:] = 0
    labels = torch.randint(0, 2, (10,))

    def g(m):
        loss = m(input_ids=ids, attention_mask=mask, labels=labels).loss
        ps = [p for p in m.bert.encoder.parameters()]
        return torch.cat([x.flatten() for x in torch.autograd.grad(loss, ps)])

    exact = g(exact_model)
    samples = torch.stack([g(model) for _ in range(150)])
    z, _ = max_z(samples, exact)
    assert z < 5.5, z

