"""KRR-ST (issue #45): the outer loss against scikit-learn and its closed-form gradient, the model
pool's schedule, pretraining's losses and batches, and bad input."""
import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn

from common.distill import ConvNet
from methods.krr_st import ModelPool, batches, krr_outer_loss, pretrain


def _features(seed=0, m=6, n=9, h=4, d=3):
    g = torch.Generator().manual_seed(seed)
    w = torch.randn(5, h, generator=g, dtype=torch.float64)
    embed = lambda x: torch.tanh(x @ w)   # noqa: E731  (a fixed nonlinear feature map)
    xs = torch.randn(m, 5, generator=g, dtype=torch.float64)
    xt = torch.randn(n, 5, generator=g, dtype=torch.float64)
    return embed, xs, torch.randn(m, d, generator=g, dtype=torch.float64), xt, torch.randn(n, d, generator=g, dtype=torch.float64)


def test_outer_loss_matches_sklearn_kernel_ridge_and_a_numpy_mse():
    from sklearn.kernel_ridge import KernelRidge

    embed, xs, ys, xt, yt = _features()
    fs = np.hstack([embed(xs).numpy(), np.ones((len(xs), 1))])          # bias-augmented features
    ft = np.hstack([embed(xt).numpy(), np.ones((len(xt), 1))])
    lam = 0.05 * np.trace(fs @ fs.T)
    pred = KernelRidge(kernel="linear", alpha=lam).fit(fs, ys.numpy()).predict(ft)
    expected = np.mean((pred - yt.numpy()) ** 2)
    assert float(krr_outer_loss(embed, xs, ys, xt, yt, rel_ridge=0.05)) == pytest.approx(expected, rel=1e-9)


def test_gradient_in_the_targets_is_the_closed_form_and_none_reaches_the_real_images():
    embed, xs, ys, xt, yt = _features(seed=1)
    ys, xt = ys.clone().requires_grad_(True), xt.clone().requires_grad_(True)
    loss = krr_outer_loss(embed, xs, ys, xt, yt, rel_ridge=1e-3)
    loss.backward()
    fs = torch.cat([embed(xs), torch.ones(len(xs), 1, dtype=xs.dtype)], 1).detach()
    ft = torch.cat([embed(xt), torch.ones(len(xt), 1, dtype=xs.dtype)], 1).detach()
    kss = fs @ fs.T
    a = ft @ fs.T @ torch.linalg.inv(kss + 1e-3 * torch.trace(kss) * torch.eye(len(fs), dtype=xs.dtype))
    closed = 2 * a.T @ (a @ ys.detach() - yt) / yt.numel()
    torch.testing.assert_close(ys.grad, closed, rtol=1e-7, atol=1e-10)
    assert xt.grad is None


def test_outer_loss_reaches_the_synthetic_images():
    embed, xs, ys, xt, yt = _features(seed=2)
    xs = xs.clone().requires_grad_(True)
    krr_outer_loss(embed, xs, ys, xt, yt).backward()
    assert xs.grad is not None and float(xs.grad.abs().sum()) > 0


def _pool(num_models=3, online_steps=5, seed=0):
    torch.manual_seed(0)
    make = lambda: nn.Sequential(nn.Flatten(), nn.Linear(4, 2))   # noqa: E731
    return ModelPool(make, num_models, online_steps, torch.Generator().manual_seed(seed), lr=0.1, momentum=0.9,
                     weight_decay=1e-3)


def test_pool_init_draws_steps_in_range_and_trains_each_model_that_many_steps():
    x, y = torch.randn(8, 4), torch.randn(8, 2)
    pool = _pool(num_models=20, online_steps=4)
    pool.init(x, y)
    assert len(pool.models) == 20 and all(1 <= u < 4 for u in pool.steps)
    assert set(pool.steps) == {1, 2, 3}                     # 20 draws cover the range
    torch.manual_seed(0)                                    # the pool's models, rebuilt and trained by hand
    for model, u in zip(pool.models, pool.steps):
        hand = nn.Sequential(nn.Flatten(), nn.Linear(4, 2))
        opt = torch.optim.SGD(hand.parameters(), lr=0.1, momentum=0.9, weight_decay=1e-3)
        for _ in range(u):
            opt.zero_grad()
            F.mse_loss(hand(x), y).backward()
            opt.step()
        torch.testing.assert_close(model[1].weight, hand[1].weight)


def test_pool_update_is_one_hand_sgd_step_and_leaves_the_others_untouched():
    x, y = torch.randn(8, 4), torch.randn(8, 2)
    pool = _pool()
    pool.init(x, y)
    j = 1
    before = [[p.detach().clone() for p in m.parameters()] for m in pool.models]
    bufs = [pool.optimizers[j].state[p]["momentum_buffer"].clone() for p in pool.models[j].parameters()]
    u = pool.steps[j]
    steps = list(pool.steps)
    grads = torch.autograd.grad(F.mse_loss(pool.models[j](x), y), list(pool.models[j].parameters()))
    pool.update(j, x, y)
    for p0, g, b, p1 in zip(before[j], grads, bufs, pool.models[j].parameters()):
        d = g + 1e-3 * p0                                    # SGD: weight decay, then momentum
        b = 0.9 * b + d
        torch.testing.assert_close(p1.detach(), p0 - 0.1 * b)
    assert pool.steps[j] == u + 1
    for i in (0, 2):
        assert pool.steps[i] == steps[i]
        for p0, p1 in zip(before[i], pool.models[i].parameters()):
            assert torch.equal(p0, p1)


def test_pool_resets_a_model_at_online_steps_with_a_fresh_optimizer_and_counter():
    x, y = torch.randn(8, 4), torch.randn(8, 2)
    pool = _pool(online_steps=3)
    pool.init(x, y)
    j = 0
    while pool.steps[j] < 3:
        pool.update(j, x, y)
    old = pool.models[j]
    pool.update(j, x, y)
    assert pool.models[j] is not old and pool.steps[j] == 0
    assert all(not s for s in pool.optimizers[j].state.values())   # no momentum yet
    pool.update(j, x, y)
    assert pool.steps[j] == 1


def test_pretrain_uses_mse_on_float_targets_and_cross_entropy_on_labels():
    x = torch.randn(6, 4)
    for targets, loss_fn in ((torch.randn(6, 3), F.mse_loss), (torch.tensor([0, 1, 2, 0, 1, 2]), F.cross_entropy)):
        torch.manual_seed(0)
        model = nn.Linear(4, 3)
        hand = nn.Linear(4, 3)
        hand.load_state_dict(model.state_dict())
        pretrain(model, x, targets, steps=4, batch_size=4, lr=0.1, momentum=0.9, weight_decay=1e-3,
                 generator=torch.Generator().manual_seed(3))
        opt = torch.optim.SGD(hand.parameters(), lr=0.1, momentum=0.9, weight_decay=1e-3)
        g = torch.Generator().manual_seed(3)
        chunks = list(torch.randperm(6, generator=g).split(4)) + list(torch.randperm(6, generator=g).split(4))
        for idx in chunks:
            opt.zero_grad()
            loss_fn(hand(x[idx]), targets[idx]).backward()
            opt.step()
        torch.testing.assert_close(model.weight, hand.weight)


def test_batches_are_chunks_of_fresh_permutations():
    it = batches(5, 2, torch.Generator().manual_seed(0))
    got = [next(it) for _ in range(6)]
    assert [len(b) for b in got] == [2, 2, 1, 2, 2, 1]
    assert sorted(torch.cat(got[:3]).tolist()) == list(range(5))


def test_bad_input():
    embed, xs, ys, xt, yt = _features()
    with pytest.raises(ValueError, match="rel_ridge"):
        krr_outer_loss(embed, xs, ys, xt, yt, rel_ridge=-1.0)
    with pytest.raises(ValueError, match="online_steps"):
        _pool(online_steps=1)
    pool = ModelPool(lambda: ConvNet(1, 8, channels=(4,), norm="batchnorm", img_size=8), 2, 5)
    with pytest.raises(ValueError, match="head width"):
        pool.init(torch.randn(4, 1, 8, 8), torch.randn(4, 6))
    with pytest.raises(ValueError, match="head width"):
        pretrain(ConvNet(1, 8, channels=(4,), img_size=8), torch.randn(4, 1, 8, 8), torch.randn(4, 6), 1, 2, 0.1,
                 0.9, 0.0)


def _cfg(*overrides):
    from common.config import compose_checked

    return compose_checked(["experiment=krr_st_smoke", *overrides])


def _fake_data(n=40, classes=4, dim=6):
    g = torch.Generator().manual_seed(0)
    y = torch.arange(n) % classes
    return {"x": torch.randn(n, 1, 14, 14, generator=g), "y": y, "reps": torch.randn(n, dim, generator=g),
            "target_pool": (torch.randn(n, 1, 14, 14, generator=g), y), "target_eval": (torch.randn(8, 1, 14, 14), y[:8])}


def test_run_level_bad_input():
    from methods.krr_st import pretrained_student, transfer_metrics

    d = _fake_data()
    with pytest.raises(ValueError, match="larger than the source set"):
        pretrained_student(_cfg("method.num_images=41", "method.head_dim=6"), None, "krr_st", d, 0)
    with pytest.raises(ValueError, match="multiple of"):
        pretrained_student(_cfg("method.num_images=6"), None, "random_sup", d, 0)
    with pytest.raises(ValueError, match="head_dim = 64 differs from the dim of g"):
        pretrained_student(_cfg(), None, "random_target", d, 0)
    with pytest.raises(ValueError, match="fewer than per_class"):
        transfer_metrics(_cfg(), ConvNet(1, 6, channels=(4,), img_size=14), d, 0, labels_per_class=11)


def test_rows_share_the_initial_images_and_random_target_keeps_g_of_them():
    from methods.krr_st import pretrained_student

    d = _fake_data()
    cfg = _cfg("method.head_dim=6", "method.num_images=8", "method.pretrain.steps=0", "method.distill.steps=2")
    _, stats = pretrained_student(cfg, None, "krr_st", d, 0)
    assert stats["image_shift"] > 0 and stats["target_shift"] > 0
    _, stats = pretrained_student(cfg, None, "random_target", d, 0)
    assert stats == {}


def test_pool_init_leaves_batchnorm_statistics_to_the_training_steps_alone():
    """The head-width check runs in eval mode: after init a BatchNorm model's running statistics are
    those of its u training steps (num_batches_tracked == u), as in the official model_pool.init."""
    make = lambda: nn.Sequential(nn.Flatten(), nn.Linear(4, 3), nn.BatchNorm1d(3), nn.Linear(3, 2))  # noqa: E731
    pool = ModelPool(make, 5, 4, torch.Generator().manual_seed(0))
    pool.init(torch.randn(8, 4), torch.randn(8, 2))
    assert [int(m[2].num_batches_tracked) for m in pool.models] == pool.steps


def test_gradient_in_the_synthetic_images_matches_finite_differences_with_lambda_held():
    """dL/dX_s through the embedding, against central differences of the loss written out in numpy
    with lambda fixed at its value at X_s (the official distill.py detaches tr(K_ss))."""
    embed, xs, ys, xt, yt = _features(seed=3, m=4, n=7)
    rel = 1e-2

    def loss_np(x, lam):
        fs = np.hstack([np.tanh(x @ w), np.ones((len(x), 1))])
        ft = np.hstack([np.tanh(xt.numpy() @ w), np.ones((len(xt), 1))])
        pred = ft @ fs.T @ np.linalg.solve(fs @ fs.T + lam * np.eye(len(fs)), ys.numpy())
        return np.mean((pred - yt.numpy()) ** 2)

    g = torch.Generator().manual_seed(3)                      # the fixed map of _features, rebuilt
    w = torch.randn(5, 4, generator=g, dtype=torch.float64).numpy()
    fs0 = np.hstack([np.tanh(xs.numpy() @ w), np.ones((len(xs), 1))])
    lam = rel * np.trace(fs0 @ fs0.T)
    xg = xs.clone().requires_grad_(True)
    krr_outer_loss(embed, xg, ys, xt, yt, rel_ridge=rel).backward()
    num = np.zeros(xs.shape)
    for i in range(xs.shape[0]):
        for j in range(xs.shape[1]):
            e = np.zeros(xs.shape)
            e[i, j] = 1e-6
            num[i, j] = (loss_np(xs.numpy() + e, lam) - loss_np(xs.numpy() - e, lam)) / 2e-6
    np.testing.assert_allclose(xg.grad.numpy(), num, rtol=1e-5, atol=1e-10)


class _Tiny(nn.Module):
    """embed + fc, as the floor's ConvNet, small enough for hand computations."""

    def __init__(self, d_in=5, h=4, d_out=3):
        super().__init__()
        self.body, self.fc, self.feature_dim = nn.Linear(d_in, h), nn.Linear(h, d_out), h

    def embed(self, x):
        return torch.tanh(self.body(x))

    def forward(self, x):
        return self.fc(self.embed(x))


def test_one_distill_step_is_one_adamw_step_on_the_outer_loss_then_one_pool_update():
    from methods.krr_st import distill

    g0 = torch.Generator().manual_seed(0)
    xs, ys = torch.randn(4, 5, generator=g0), torch.randn(4, 3, generator=g0)
    xsrc, ysrc = torch.randn(12, 5, generator=g0), torch.randn(12, 3, generator=g0)
    torch.manual_seed(7)
    syn = distill(_Tiny, xs, ys, xsrc, ysrc, steps=1, batch_size=6, lr=0.05, num_models=3, online_steps=5,
                  generator=torch.Generator().manual_seed(1), rel_ridge=1e-3)
    # by hand: the same pool (models in order, u_j from the generator), j, the real batch
    torch.manual_seed(7)
    gen = torch.Generator().manual_seed(1)
    pool = ModelPool(_Tiny, 3, 5, gen)
    pool.init(xs, ys)
    j = int(torch.randint(3, (1,), generator=gen))
    idx = torch.randperm(12, generator=gen)[:6]
    x, y = xs.clone().requires_grad_(True), ys.clone().requires_grad_(True)
    krr_outer_loss(pool.models[j].eval().embed, x, y, xsrc[idx], ysrc[idx], 1e-3).backward()
    for p, new in ((x, syn.images), (y, syn.targets)):      # AdamW's first step: lr * g / (|g| + eps)
        torch.testing.assert_close(new.detach(), p.detach() - 0.05 * p.grad / (p.grad.abs() + 1e-8))


def test_finetune_is_a_new_head_and_cosine_sgd_on_cross_entropy():
    from methods.krr_st import finetune

    x, y = torch.randn(10, 5), torch.arange(10) % 4
    torch.manual_seed(0)
    model = _Tiny()
    hand = _Tiny()
    hand.load_state_dict(model.state_dict())
    torch.manual_seed(1)
    finetune(model, x, y, 4, steps=3, batch_size=4, lr=0.1, momentum=0.9, weight_decay=5e-4,
             generator=torch.Generator().manual_seed(2))
    torch.manual_seed(1)
    hand.fc = nn.Linear(4, 4)
    opt = torch.optim.SGD(hand.parameters(), lr=0.1, momentum=0.9, weight_decay=5e-4)
    g = torch.Generator().manual_seed(2)
    chunks = list(torch.randperm(10, generator=g).split(4))
    for s, idx in enumerate(chunks):
        for group in opt.param_groups:
            group["lr"] = 0.1 * 0.5 * (1 + np.cos(np.pi * s / 3))
        opt.zero_grad()
        F.cross_entropy(hand(x[idx]), y[idx]).backward()
        opt.step()
    assert model.fc.out_features == 4
    for a, b in zip(model.parameters(), hand.parameters()):
        torch.testing.assert_close(a, b)


def test_pretrain_schedules_and_adamw_match_a_hand_loop():
    x, t = torch.randn(6, 5), torch.randn(6, 3)
    for opt_name, schedule, lrs in (("sgd", "step", [0.1, 0.1, 0.01, 0.01]),
                                    # warm-up 2 of 5 steps, (s + 1) / 2 (the shared trainer's), then cosine
                                    ("adamw", "cosine", [0.05, 0.1, 0.1, 0.1 * 0.5 * (1 + np.cos(np.pi / 3)),
                                                         0.1 * 0.5 * (1 + np.cos(2 * np.pi / 3))])):
        torch.manual_seed(0)
        model, hand = _Tiny(), _Tiny()
        hand.load_state_dict(model.state_dict())
        pretrain(model, x, t, steps=len(lrs), batch_size=6, lr=0.1, momentum=0.9, weight_decay=1e-3,
                 generator=torch.Generator().manual_seed(0), optimizer=opt_name, schedule=schedule, warmup_steps=2)
        opt = (torch.optim.SGD(hand.parameters(), lr=0.1, momentum=0.9, weight_decay=1e-3) if opt_name == "sgd"
               else torch.optim.AdamW(hand.parameters(), lr=0.1, weight_decay=1e-3))
        for lr in lrs:
            for group in opt.param_groups:
                group["lr"] = lr
            opt.zero_grad()
            F.mse_loss(hand(x), t).backward()
            opt.step()
        for a, b in zip(model.parameters(), hand.parameters()):
            torch.testing.assert_close(a, b)
    with pytest.raises(ValueError, match="schedule"):
        pretrain(_Tiny(), x, t, 1, 2, 0.1, 0.9, 0.0, schedule="linear")
    with pytest.raises(ValueError, match="optimizer"):
        pretrain(_Tiny(), x, t, 1, 2, 0.1, 0.9, 0.0, optimizer="adam")


def test_krr_st_without_outer_steps_is_random_target_and_krr_sup_is_adamw_on_one_hot_labels():
    from common.distill import class_balanced_indices
    from methods.krr_st import _generator, pretrained_student

    d = _fake_data()
    over = ("method.head_dim=6", "method.num_images=8", "method.distill.steps=0", "method.pretrain.steps=2",
            "method.pretrain.batch_size=8", "method.pretrain.labels.warmup_steps=1")
    students, cfg = {}, _cfg(*over)
    for row in ("krr_st", "random_target", "krr_sup"):
        torch.manual_seed(0)
        students[row], _ = pretrained_student(cfg, None, row, d, 0)
    for a, b in zip(students["krr_st"].parameters(), students["random_target"].parameters()):
        torch.testing.assert_close(a, b)
    torch.manual_seed(0)
    hand = ConvNet(1, 4, channels=(32, 64), norm="batchnorm", img_size=14)
    idx = class_balanced_indices(d["y"], 2, _generator(0, 0))
    pretrain(hand, d["x"][idx], F.one_hot(d["y"][idx], 4).float(), 2, 8, 3e-4, 0.0, 0.0, _generator(0, 2),
             optimizer="adamw", schedule="cosine", warmup_steps=1)
    for a, b in zip(students["krr_sup"].parameters(), hand.parameters()):
        torch.testing.assert_close(a, b)


def test_the_controls_move_as_far_as_krr_st_at_random_and_shuffle_the_targets():
    from methods.krr_st import derangement, perturb_like

    g = torch.Generator().manual_seed(0)
    for m in (2, 3, 10):
        p = derangement(m, g)
        assert sorted(p.tolist()) == list(range(m)) and all(p[i] != i for i in range(m))
    with pytest.raises(ValueError, match="m >= 2"):
        derangement(1, g)
    xs, ts = torch.randn(5, 1, 4, 4), torch.randn(5, 6)
    px, pt = perturb_like(xs, ts, {"krr_st_shift": (0.7, 0.2)}, g)
    assert float((px - xs).norm()) == pytest.approx(0.7, rel=1e-5)
    assert float((pt - ts).norm()) == pytest.approx(0.2, rel=1e-5)
    from common.config import UserError
    with pytest.raises(UserError, match="needs krr_st before it"):
        perturb_like(xs, ts, {}, g)
