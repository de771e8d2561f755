"""LRR / IMP: schedule, masks against a global sort, the rewind of each round, pruned weights held
at zero, sign flips against a hand count, the run's stages (the single hidden neuron of section 2:
tests/test_lrr_theory.py)."""
import copy
import math

import pytest
import torch
from torch import nn

from methods.lrr import (LeNet300100, global_magnitude_masks, iterative_pruning, keep_masked, prunable_weights,
                         random_masks, rewind_to, sign_experiment, sign_flip_fraction, sparsity_schedule, train_sgd)


class Tiny(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(1, 3, 3)
        self.bn = nn.BatchNorm2d(3)
        self.fc1 = nn.Linear(12, 7)
        self.fc2 = nn.Linear(7, 3)

    def forward(self, x):                                 # (B, 1, 4, 4) -> (B, 3)
        h = torch.relu(self.bn(self.conv(x))).flatten(1)
        return self.fc2(torch.relu(self.fc1(h)))


def sgd_train_fn(steps=5, lr=0.1, seed=0, log=None):
    """A small train_fn: fresh SGD (momentum, weight decay) on fixed random data; logs the entry state."""
    gen = torch.Generator().manual_seed(seed)
    x, y = torch.randn(32, 1, 4, 4, generator=gen), torch.randint(0, 3, (32,), generator=gen)

    def fn(model, k):
        if log is not None:
            log.append(copy.deepcopy(model.state_dict()))
        opt = torch.optim.SGD(model.parameters(), lr=lr, momentum=0.9, weight_decay=1e-2)
        for _ in range(steps):
            loss = nn.functional.cross_entropy(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
        return {"loss": float(loss.detach())}
    return fn


def test_schedule_closed_form_and_bad_input():
    assert sparsity_schedule(3, 0.2) == pytest.approx([0.2, 0.36, 0.488])
    s = sparsity_schedule(10)
    assert s[-1] == pytest.approx(1 - 0.8 ** 10) and 0.89 < s[-1] < 0.9
    for kwargs, word in (({"num_rounds": 0}, "num_rounds"), ({"num_rounds": 2, "rate": 1.0}, "rate"),
                         ({"num_rounds": 2, "rate": 0.0}, "rate"), ({"num_rounds": 2, "rate": -0.1}, "rate")):
        with pytest.raises(ValueError, match=word):
            sparsity_schedule(**kwargs)


def test_prunable_weights_are_linear_and_conv_weights_only():
    w = prunable_weights(Tiny())
    assert list(w) == ["conv", "fc1", "fc2"]
    assert all(isinstance(p, nn.Parameter) and p.dim() > 1 for p in w.values())
    assert list(prunable_weights(LeNet300100())) == ["fc1", "fc2", "fc3"]


def test_magnitude_masks_equal_a_global_sort_and_nest():
    torch.manual_seed(0)
    weights = {"a": torch.randn(5, 4), "b": torch.randn(7)}
    flat = [(abs(float(v)), name, i) for name, w in weights.items() for i, v in enumerate(w.flatten())]
    masks = None
    for s in sparsity_schedule(4, 0.3):
        prev = masks
        masks = global_magnitude_masks(weights, s, masks)
        # independent: weights already pruned go first, then the smallest |θ| (stable order)
        alive = [t for t in flat if prev is None or bool(prev[t[1]].flatten()[t[2]])]
        dead = [t for t in flat if t not in alive]
        n_prune = round(s * len(flat))
        pruned = dead + sorted(alive, key=lambda t: t[0])[:n_prune - len(dead)]
        want = {n: torch.ones(w.numel(), dtype=torch.bool) for n, w in weights.items()}
        for _, n, i in pruned:
            want[n][i] = False
        for n in weights:
            assert torch.equal(masks[n].flatten(), want[n])
            if prev is not None:
                assert not (masks[n] & ~prev[n]).any()        # nest
        assert sum(int((~m).sum()) for m in masks.values()) == n_prune


def test_magnitude_masks_ignore_weights_that_were_pruned_earlier():
    # a pruned weight that has (somehow) grown must not come back: masks nest whatever the values
    w = {"a": torch.tensor([5.0, 1.0, 2.0, 3.0])}
    m = global_magnitude_masks(w, 0.5, {"a": torch.tensor([False, True, True, True])})
    assert m["a"].tolist() == [False, False, True, True]
    with pytest.raises(ValueError, match="sparsity"):
        global_magnitude_masks(w, 0.25, m)


def test_random_masks_counts_nesting_and_uniformity():
    weights = {"a": torch.zeros(6, 5), "b": torch.zeros(10)}
    gen = torch.Generator().manual_seed(0)
    masks = random_masks(weights, 0.2, generator=gen)
    nxt = random_masks(weights, 0.5, masks, generator=gen)
    for n, w in weights.items():
        assert int((~masks[n]).sum()) == round(0.2 * w.numel())
        assert int((~nxt[n]).sum()) == round(0.5 * w.numel())
        assert not (nxt[n] & ~masks[n]).any()
    # each of the 30 weights of 'a' is pruned with p = 9/30; over T draws its count is Binomial(T, p)
    T, counts = 600, torch.zeros(30)
    for _ in range(T):
        counts += (~random_masks(weights, 0.3, generator=gen)["a"]).flatten().float()
    p = 9 / 30
    sd = math.sqrt(T * p * (1 - p))
    assert (counts - T * p).abs().max() < 4.5 * sd        # 30 weights: P(any beyond 4.5 sd) < 1e-4


def test_sign_flips_against_a_hand_count():
    before = {"a": torch.tensor([1.0, -2.0, 3.0, -0.5]), "b": torch.tensor([[0.3, -0.1], [2.0, 1.0]])}
    after = {"a": torch.tensor([-1.0, -1.0, 0.2, 0.5]), "b": torch.tensor([[-0.3, 0.1], [2.0, -1.0]])}
    masks = {"a": torch.tensor([True, True, False, True]), "b": torch.tensor([[True, False], [True, True]])}
    # kept: a0 (flip), a1 (same), a3 (flip), b00 (flip), b10 (same), b11 (flip) -> 4 of 6
    assert sign_flip_fraction(before, after, masks) == pytest.approx(4 / 6)


def test_pruned_weights_stay_zero_under_momentum_and_weight_decay():
    torch.manual_seed(1)
    model = Tiny()
    x, y = torch.randn(16, 1, 4, 4), torch.randint(0, 3, (16,))
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, weight_decay=0.1)

    def step():
        loss = nn.functional.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
    for _ in range(3):
        step()                                         # momentum buffers now non-zero everywhere
    masks = global_magnitude_masks(prunable_weights(model), 0.6)
    control = copy.deepcopy((model, opt))              # same state, trained without the masking
    seen = []
    pruned_fc1 = ~masks["fc1"]
    hook = model.fc1.register_forward_hook(lambda m, a, o: seen.append(float(m.weight.detach()[pruned_fc1].abs().max())))
    with keep_masked(model, masks):
        for _ in range(5):
            step()
    hook.remove()
    assert seen == [0.0] * 5                           # every forward ran with the pruned weights at 0
    for n, w in prunable_weights(model).items():
        assert float(w.detach()[~masks[n]].abs().max()) == 0.0
        assert float(w.detach()[masks[n]].abs().min()) > 0.0
    c_model, c_opt = control
    for n, w in prunable_weights(c_model).items():
        with torch.no_grad():
            w.mul_(masks[n])
    model, opt = c_model, c_opt
    for _ in range(5):
        step()
    revived = sum(int((w[~masks[n]] != 0).sum()) for n, w in prunable_weights(c_model).items())
    assert revived > 0                                 # without keep_masked, momentum revives them


def test_keep_masked_allows_two_forwards_before_one_backward():
    # e.g. two views through one model: the pre-forward re-masking must not write in place
    # when nothing needs zeroing, or autograd would reject the first graph
    torch.manual_seed(7)
    model = Tiny()
    masks = global_magnitude_masks(prunable_weights(model), 0.5)
    x = torch.randn(4, 1, 4, 4)
    with keep_masked(model, masks):
        loss = model(x).sum() + model(2 * x).sum()
        loss.backward()
    assert all(float(w.grad[~masks[n]].abs().max()) == 0.0 for n, w in prunable_weights(model).items())


def test_keep_masked_equals_masked_sgd_written_out():
    # fresh SGD: masked gradients + zeroed weights are exactly SGD on the kept weights only
    torch.manual_seed(2)
    model = Tiny()
    masks = random_masks(prunable_weights(model), 0.5, generator=torch.Generator().manual_seed(0))
    ref = copy.deepcopy(model)
    fn = sgd_train_fn(steps=4)
    with keep_masked(model, masks):
        fn(model, 1)
    gen = torch.Generator().manual_seed(0)
    x, y = torch.randn(32, 1, 4, 4, generator=gen), torch.randint(0, 3, (32,), generator=gen)
    params = dict(ref.named_parameters())
    mask_of = {f"{n}.weight": m for n, m in masks.items()}
    with torch.no_grad():
        for k, p in params.items():
            p.mul_(mask_of.get(k, torch.ones_like(p)))
    bufs = {k: torch.zeros_like(p) for k, p in params.items()}
    for _ in range(4):
        loss = nn.functional.cross_entropy(ref(x), y)
        grads = torch.autograd.grad(loss, list(params.values()))
        with torch.no_grad():
            for (k, p), g in zip(params.items(), grads):
                m = mask_of.get(k, torch.ones_like(p))
                d = g * m + 1e-2 * p
                bufs[k] = 0.9 * bufs[k] + d if _ else d
                p.sub_(0.1 * bufs[k])
    for (k, p), q in zip(model.named_parameters(), params.values()):
        torch.testing.assert_close(p, q, atol=1e-6, rtol=1e-5)


@pytest.mark.parametrize("mask_fn", ["magnitude", "random"])
def test_imp_rewinds_every_round_to_theta_rw_times_mask(mask_fn):
    torch.manual_seed(3)
    model = Tiny()
    rewind = copy.deepcopy(model.state_dict())
    sgd_train_fn(steps=3, seed=9)(model, 0)            # round 0: dense training
    log, ends = [], []
    fn = sgd_train_fn(log=log)

    def train_fn(m, k):
        out = fn(m, k)
        ends.append(copy.deepcopy(m.state_dict()))
        return out
    end0 = copy.deepcopy(model.state_dict())
    hist = iterative_pruning(model, train_fn, 3, rate=0.3, method="imp", rewind_state=rewind, mask_fn=mask_fn,
                             generator=torch.Generator().manual_seed(0))
    prev_end = end0
    for k, (start, h) in enumerate(zip(log, hist), start=1):
        for key, v in rewind.items():
            name = key.rsplit(".", 1)[0]
            want = v * h["masks"][name] if key.endswith("weight") and name in h["masks"] else v
            assert torch.equal(start[key], want), key       # biases, BN affine and buffers rewound too
        if mask_fn == "magnitude":                          # the mask comes from the previous round's end
            w = {n: prev_end[f"{n}.weight"] for n in h["masks"]}
            prev = hist[k - 2]["masks"] if k > 1 else None
            want_m = global_magnitude_masks(w, h["target_sparsity"], prev)
            assert all(torch.equal(want_m[n], h["masks"][n]) for n in want_m)
            total = sum(m.numel() for m in h["masks"].values())
            assert sum(int((~m).sum()) for m in h["masks"].values()) == round(h["target_sparsity"] * total)
        else:                                               # random: each layer to its own count
            for n, m in h["masks"].items():
                assert int((~m).sum()) == round(h["target_sparsity"] * m.numel())
        prev_end = ends[k - 1]
        assert h["round"] == k
        zeros = sum(int((start[f"{n}.weight"] == 0).sum()) for n in h["masks"])
        assert h["sparsity"] >= zeros / sum(m.numel() for m in h["masks"].values()) - 1e-12


def test_lrr_keeps_last_weights_times_mask_and_counts_flips():
    torch.manual_seed(4)
    model = Tiny()
    sgd_train_fn(steps=3, seed=9)(model, 0)
    log, ends = [], []
    fn = sgd_train_fn(log=log, lr=0.5)

    def train_fn(m, k):
        out = fn(m, k)
        ends.append(copy.deepcopy(m.state_dict()))
        return out
    prev = copy.deepcopy(model.state_dict())
    hist = iterative_pruning(model, train_fn, 3, rate=0.2, method="lrr")
    for start, end, h in zip(log, ends, hist):
        for key, v in prev.items():
            name = key.rsplit(".", 1)[0]
            want = v * h["masks"][name] if key.endswith("weight") and name in h["masks"] else v
            assert torch.equal(start[key], want), key
        flips = sum(int(((start[f"{n}.weight"] * end[f"{n}.weight"] < 0) & m).sum()) for n, m in h["masks"].items())
        assert h["sign_flips"] == pytest.approx(flips / sum(int(m.sum()) for m in h["masks"].values()))
        assert "loss" in h                                   # train_fn's metrics are kept
        prev = end
    assert hist[-1]["sparsity"] == pytest.approx(1 - 0.8 ** 3, abs=0.01)


def test_iterative_pruning_bad_input():
    model = Tiny()
    fn = sgd_train_fn(steps=1)
    good = copy.deepcopy(model.state_dict())
    cases = [({"num_rounds": 0}, "num_rounds"), ({"rate": 1.5}, "rate"), ({"method": "snip"}, "method"),
             ({"mask_fn": "synflow"}, "mask_fn"), ({"method": "imp"}, "rewind_state"),
             ({"method": "imp", "rewind_state": {"conv.weight": good["conv.weight"]}}, "does not match"),
             ({"method": "imp", "rewind_state": model.state_dict()}, "shares memory")]
    for kwargs, word in cases:
        args = {"num_rounds": 2, **kwargs}
        with pytest.raises(ValueError, match=word):
            iterative_pruning(model, fn, **args)


def test_sign_experiment_sets_abs_rewind_times_given_signs():
    torch.manual_seed(5)
    model = Tiny()
    rewind = copy.deepcopy(model.state_dict())
    masks = random_masks(prunable_weights(model), 0.5, generator=torch.Generator().manual_seed(1))
    signs = {n: torch.randn_like(w) for n, w in prunable_weights(model).items()}
    rewind_to(model, rewind, masks, signs)
    for n, w in prunable_weights(model).items():
        r, w = rewind[f"{n}.weight"], w.detach()
        for i in range(w.numel()):
            sign = 1 if signs[n].flatten()[i] > 0 else -1
            want = abs(float(r.flatten()[i])) * sign if masks[n].flatten()[i] else 0.0
            assert float(w.flatten()[i]) == pytest.approx(want)
    log = []
    out = sign_experiment(model, sgd_train_fn(steps=1, log=log), rewind, masks, signs, round_index=3)
    assert set(out) == {"a", "b"} and len(log) == 2
    assert torch.equal(log[0]["fc1.weight"], rewind["fc1.weight"] * masks["fc1"])


def test_train_sgd_snapshot_is_the_state_after_that_many_steps():
    torch.manual_seed(6)
    model = LeNet300100(in_features=20, hidden=(8, 6), num_classes=3)
    x, y = torch.randn(50, 20), torch.randint(0, 3, (50,))
    ref = copy.deepcopy(model)
    out = train_sgd(model, x, y, epochs=1, batch_size=16, seed=3, snapshot_step=1)
    # one SGD step written out: the first batch of the seeded order, lr = 0.1·cos-factor(0) = 0.1
    idx = torch.randperm(50, generator=torch.Generator().manual_seed(3))[:16]
    loss = nn.functional.cross_entropy(ref(x[idx]), y[idx])
    grads = torch.autograd.grad(loss, list(ref.parameters()))
    for (k, p), g in zip(ref.named_parameters(), grads):
        torch.testing.assert_close(out["snapshot"][k], p.detach() - 0.1 * (g + 1e-4 * p.detach()))
    with pytest.raises(ValueError, match="snapshot_step"):
        train_sgd(model, x, y, batch_size=16, snapshot_step=99)


# --- the run's stages -----------------------------------------------------------------------

def test_snapshot_holds_the_weights_after_that_many_steps():
    from types import SimpleNamespace

    from methods.lrr import Snapshot

    model = nn.Linear(3, 2)
    at0 = Snapshot(model, 0)
    assert torch.equal(at0.state["weight"], model.weight)
    snap = Snapshot(model, 2)
    for step in (1, 2, 3):
        with torch.no_grad():
            model.weight.add_(1.0)
        snap.after_step(SimpleNamespace(step=step))
        if step == 2:
            expected = model.weight.detach().clone()
    assert torch.equal(snap.state["weight"], expected) and not torch.equal(snap.state["weight"], model.weight)


def test_standardize_uses_the_training_statistics_per_channel():
    from methods.lrr import standardize

    gen = torch.Generator().manual_seed(0)
    train = (torch.randint(0, 256, (50, 2, 4, 4), generator=gen, dtype=torch.uint8), torch.arange(50))
    test = (torch.randint(0, 256, (7, 2, 4, 4), generator=gen, dtype=torch.uint8), torch.arange(7))
    (x, y), (xt, yt) = standardize(train, test)
    flat = x.transpose(0, 1).reshape(2, -1)
    assert torch.allclose(flat.mean(1), torch.zeros(2), atol=1e-5) and torch.allclose(flat.std(1), torch.ones(2))
    raw = train[0].float().div(255).transpose(0, 1).reshape(2, -1)
    expect = (test[0].float().div(255)[:, 1] - raw[1].mean()) / raw[1].std()
    assert torch.allclose(xt[:, 1], expect, atol=1e-5) and torch.equal(yt, test[1])


def test_build_follows_the_config(compose_cfg):
    from methods.lrr import ResNetClassifier, build

    assert isinstance(build(compose_cfg(["experiment=lrr_smoke"])), LeNet300100)
    cfg = compose_cfg(["experiment=lrr_smoke", "method.backbone={_target_: common.nn.build_backbone, "
                       "name: small_cnn, width: 4}", "method.model={_target_: methods.lrr.ResNetClassifier}"])
    model = build(cfg)
    assert isinstance(model, ResNetClassifier) and model(torch.zeros(2, 1, 28, 28)).shape == (2, 10)
