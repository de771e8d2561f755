"""The dataset distillation floor (common/distill, issue #43), each piece against an independent
derivation written here."""
from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from common.distill import (ZCA, ConvNet, SyntheticSet, append_bias, cached, class_balanced_indices,
                            evaluate_synthetic, expert_buffer, fingerprint, flatten_params, functional_forward,
                            herding_coreset, kmeans_coreset, krr_predict, param_matching_loss,
                            soft_cross_entropy, train_expert, unflatten_params, unrolled_sgd)


def small_net(seed=0, norm="instancenorm"):
    torch.manual_seed(seed)
    return ConvNet(1, 3, channels=(4, 4), norm=norm, img_size=8)


def toy(n=12, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(n, 1, 8, 8, generator=g), torch.arange(n) % 3


def test_convnet_shapes_and_official_padding():
    net = ConvNet(1, 10, channels=(8, 8, 8), img_size=28)
    assert net.features[0].padding == (3, 3) and net.features[4].padding == (1, 1)
    assert net.feature_dim == 8 * 4 * 4                          # 28 -> 32 -> 16 -> 8 -> 4
    x = torch.randn(2, 1, 28, 28)
    assert net(x).shape == (2, 10) and torch.allclose(net(x), net.fc(net.embed(x)))
    net = ConvNet(3, 10)
    assert isinstance(net.features[1], torch.nn.GroupNorm) and net.features[1].num_groups == 128
    assert net.feature_dim == 128 * 4 * 4 and net(torch.randn(1, 3, 32, 32)).shape == (1, 10)
    with pytest.raises(ValueError, match="unknown norm 'layer'"):
        ConvNet(3, 10, norm="layer")


def test_class_balanced_indices():
    labels = torch.tensor([2, 0, 1, 0, 2, 1, 0, 2, 1, 1])
    idx = class_balanced_indices(labels, 2, torch.Generator().manual_seed(0))
    assert idx.dtype == torch.int64 and labels[idx].tolist() == [0, 0, 1, 1, 2, 2]
    assert len(set(idx.tolist())) == 6
    with pytest.raises(ValueError, match="class 0 has 3 samples, fewer than per_class = 4"):
        class_balanced_indices(labels, 4)


def test_synthetic_set_roles_and_bad_input():
    s = SyntheticSet(torch.zeros(4, 1, 2, 2), torch.zeros(4, 3), lr=0.01, learn_targets=True, learn_lr=True)
    names = {n for n, _ in s.named_parameters()}
    assert names == {"images", "targets", "lr"} and s.lr.dim() == 0
    s = SyntheticSet(torch.zeros(4, 1, 2, 2), torch.arange(4))
    assert {n for n, _ in s.named_parameters()} == {"images"} and "targets" in dict(s.named_buffers())
    with pytest.raises(ValueError, match="differ in length: 4 vs 3"):
        SyntheticSet(torch.zeros(4, 1, 2, 2), torch.arange(3))
    with pytest.raises(ValueError, match="learnt lr must start > 0, got -0.1"):
        SyntheticSet(torch.zeros(4, 1, 2, 2), torch.arange(4), lr=-0.1, learn_lr=True)


def test_flatten_unflatten_functional_forward():
    net = small_net()
    flat = flatten_params(net)
    assert flat.shape == (sum(p.numel() for p in net.parameters()),)
    views = unflatten_params(net, flat)
    for (name, p) in net.named_parameters():
        assert torch.equal(views[name], p)
    x, _ = toy()
    assert torch.allclose(functional_forward(net, flat, x), net(x), atol=1e-6)
    with pytest.raises(ValueError, match="do not fit a network of"):
        unflatten_params(net, flat[:-1])


def hand_unroll(net, start, x, t, lr, steps, batch, seed):
    """The loop written out with a fresh module per step (no functional_call)."""
    gen = torch.Generator().manual_seed(seed)
    order, theta = [], start.clone()
    for _ in range(steps):
        if not order:
            order = list(torch.randperm(len(x), generator=gen).split(batch))
        idx = order.pop(0)
        m = small_net()
        torch.nn.utils.vector_to_parameters(theta, m.parameters())
        loss = F.cross_entropy(m(x[idx]), t[idx])
        g = torch.autograd.grad(loss, list(m.parameters()))
        theta = theta - lr * torch.cat([gi.reshape(-1) for gi in g])
    return theta


def test_unrolled_sgd_matches_hand_loop_and_zero_steps():
    net = small_net()
    start = flatten_params(net)
    x, t = toy(10)
    got = unrolled_sgd(net, start, x, t, 0.1, 7, 4, F.cross_entropy, torch.Generator().manual_seed(3))
    want = hand_unroll(net, start, x, t, 0.1, 7, 4, 3)
    assert torch.allclose(got, want, atol=1e-5)
    assert unrolled_sgd(net, start, x, t, 0.1, 0, 4, F.cross_entropy) is start


def test_unrolled_sgd_lr_gradient_matches_finite_difference():
    net = small_net()
    start = flatten_params(net).double()
    net = net.double()
    x, t = toy(8)
    x = x.double()
    target = torch.randn_like(start)

    def f(lr):
        th = unrolled_sgd(net, start, x, t, lr, 5, 3, F.cross_entropy, torch.Generator().manual_seed(1))
        return ((th - target) ** 2).sum()

    lr = torch.tensor(0.05, dtype=torch.float64, requires_grad=True)
    (g,) = torch.autograd.grad(f(lr), lr)
    h = 1e-5
    fd = (f(torch.tensor(0.05 + h, dtype=torch.float64)) - f(torch.tensor(0.05 - h, dtype=torch.float64))) / (2 * h)
    assert float(g.detach()) == pytest.approx(float(fd), rel=1e-5)
    xs = x.clone().requires_grad_(True)           # differentiable in the images too
    th = unrolled_sgd(net, start, xs, t, 0.05, 3, 3, F.cross_entropy, torch.Generator().manual_seed(1))
    assert torch.autograd.grad(th.sum(), xs)[0].abs().sum() > 0


def test_matching_and_soft_ce():
    a, b, c = torch.tensor([1.0, 2.0]), torch.tensor([0.0, 0.0]), torch.tensor([1.0, 1.0])
    assert float(param_matching_loss(a, b, c)) == pytest.approx(1.0 / 2.0)
    logits, tl = torch.randn(5, 4), torch.randn(5, 4)
    want = np.mean([-sum(np.exp(tl[i, c].item()) / np.exp(tl[i].numpy()).sum()
                         * (logits[i, c].item() - np.log(np.exp(logits[i].numpy()).sum())) for c in range(4))
                    for i in range(5)])
    assert float(soft_cross_entropy(logits, tl)) == pytest.approx(want, rel=1e-5)


def test_train_expert_snapshots():  # noqa: D103
    net = small_net()
    x, y = toy(10)
    init = flatten_params(net)
    traj = train_expert(net, x, y, epochs=3, lr=0.1, batch_size=4, generator=torch.Generator().manual_seed(0))
    assert traj.shape == (4, init.numel()) and torch.equal(traj[0], init)
    assert torch.equal(traj[-1], flatten_params(net)) and not torch.equal(traj[1], traj[0])


def test_fingerprint_and_cache(tmp_path):
    s = {"b": 1, "a": [1, 2]}
    import hashlib
    import json
    assert fingerprint(s) == hashlib.sha256(b'{"a":[1,2],"b":1}').hexdigest()
    calls = []

    def build():
        calls.append(1)
        return {"w": torch.arange(3.0)}

    first = cached(s, build, tmp_path)
    again = cached(s, build, tmp_path)
    assert len(calls) == 1 and torch.equal(first["w"], again["w"])
    (tmp_path / f"{fingerprint(s)}.pt").write_bytes(b"not a torch file")
    with pytest.warns(UserWarning, match="unreadable"):
        cached(s, build, tmp_path)
    assert len(calls) == 2


def test_expert_buffer_seeds_and_cache(tmp_path):
    x, y = toy(9)
    settings = dict(data="toy", num_experts=2, epochs=2, lr=0.1, batch_size=4, momentum=0.0, expert_seed=5, version=1)
    buf = expert_buffer(settings, x, y, lambda: ConvNet(1, 3, (4, 4), img_size=8), tmp_path)
    torch.manual_seed(6)                                   # expert 1 = seed expert_seed + 1
    net = ConvNet(1, 3, (4, 4), img_size=8)
    want = train_expert(net, x, y, 2, 0.1, 4, torch.Generator().manual_seed(6))
    assert buf.shape == (2, 3, want.shape[1]) and torch.allclose(buf[1], want)
    assert len(list(tmp_path.glob("*.pt"))) == 1
    with pytest.raises(ValueError, match="lack"):
        expert_buffer({"num_experts": 1}, x, y, small_net, tmp_path)


def test_zca_matches_numpy():
    g = torch.Generator().manual_seed(0)
    x = torch.randn(50, 2, 3, 3, generator=g, dtype=torch.float64) @ torch.randn(3, 3, generator=g, dtype=torch.float64)
    z = ZCA().fit(x, eps=0.1)
    xf = x.reshape(50, -1).numpy()
    mu = xf.mean(0)
    cov = np.cov(xf, rowvar=False)                          # (N - 1) normalisation
    u, s, _ = np.linalg.svd(cov)
    w = u @ np.diag(1 / np.sqrt(s + 0.1)) @ u.T
    assert np.allclose(z.transform(x).reshape(50, -1).numpy(), (xf - mu) @ w, atol=1e-8)
    assert torch.allclose(z.inverse(z.transform(x)), x, atol=1e-8)
    with pytest.raises(ValueError, match="eps must be >= 0, got -1"):
        ZCA().fit(x, eps=-1)
    with pytest.raises(ValueError, match="at least 2 samples"):
        ZCA().fit(x[:1])


def test_krr_matches_sklearn():
    from sklearn.kernel_ridge import KernelRidge
    g = torch.Generator().manual_seed(0)
    fs, fq, ys = (torch.randn(20, 5, generator=g, dtype=torch.float64), torch.randn(7, 5, generator=g, dtype=torch.float64),
                  torch.randn(20, 3, generator=g, dtype=torch.float64))
    lam = 1e-2 * float(torch.trace(fs @ fs.T))
    want = KernelRidge(kernel="linear", alpha=lam).fit(fs.numpy(), ys.numpy()).predict(fq.numpy())
    assert np.allclose(krr_predict(fq, fs, ys, rel_ridge=1e-2).numpy(), want, atol=1e-8)
    fb = append_bias(fs)
    assert fb.shape == (20, 6) and torch.all(fb[:, -1] == 1)
    with pytest.raises(ValueError, match="must be 2-D"):
        krr_predict(fq[0], fs, ys)


def test_herding_matches_loop_and_kmeans_coreset():
    g = torch.Generator().manual_seed(0)
    f = torch.randn(30, 4, generator=g, dtype=torch.float64)
    labels = torch.arange(30) % 2
    got = herding_coreset(f, labels, 3)
    want = []
    for c in (0, 1):
        members = [i for i in range(30) if labels[i] == c]
        mu = f[members].mean(0)
        chosen = []
        for _ in range(3):
            best = min((i for i in members if i not in chosen),
                       key=lambda i: float(((f[chosen + [i]].mean(0) - mu) ** 2).sum()))
            chosen.append(best)
        want += chosen
    assert got.tolist() == want
    km = kmeans_coreset(f, labels, 3, seed=0)
    assert km.dtype == torch.int64 and labels[km].tolist() == [0, 0, 0, 1, 1, 1] and len(set(km.tolist())) == 6
    assert len(kmeans_coreset(f, None, 4, seed=0)) == 4
    with pytest.raises(ValueError, match="class 0 has 15 samples, fewer than per_class = 16"):
        herding_coreset(f, labels, 16)
    with pytest.raises(ValueError, match="2-D"):
        kmeans_coreset(f[0], None, 1, seed=0)


def test_evaluate_vectorized_matches_loop_and_soft_targets():
    x, y = toy(12)
    xt, yt = toy(20, seed=1)
    make = lambda: ConvNet(1, 3, (4, 4), img_size=8)   # noqa: E731
    kw = dict(lr=0.05, num_nets=2, epochs=2, batch_size=5, seed=2)
    loop = evaluate_synthetic(make, x, y, xt, yt, **kw)
    vec = evaluate_synthetic(make, x, y, xt, yt, vectorized=True, **kw)
    assert loop["accs"] == pytest.approx(vec["accs"], abs=1e-9) and len(loop["accs"]) == 2
    soft = F.one_hot(y, 3).float() * 100.0              # softmax = one-hot to e^-100: soft CE = CE
    s = evaluate_synthetic(make, x, soft, xt, yt, **kw)
    assert s["accs"] == pytest.approx(loop["accs"], abs=1e-6)
    with pytest.raises(ValueError, match="differ in length"):
        evaluate_synthetic(make, x, y[:-1], xt, yt, **kw)
