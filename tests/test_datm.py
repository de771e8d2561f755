"""DATM (issue #44): the window schedule, the soft-label init, the matching loss, each against the
official expressions written out here."""
from __future__ import annotations

import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from common.distill import ConvNet, SyntheticSet, flatten_params
from methods.datm import (DATM, correct_logit_average, matching_loss, sample_start_epoch, select_correct,
                          start_epoch_bound)


def official_upper(it, min_start, max_start, cur, end, sequential=True):
    """distill/DATM.py: Upper_Bound = cur + int((max - cur) * it / end); min(., max)."""
    if not sequential:
        return max_start
    return min(cur + int((max_start - cur) * it / end), max_start)


def test_start_epoch_bound_closed_forms():
    assert start_epoch_bound(0, 0, 20, 10, 1000) == 10                   # it = 0: cur_max
    assert start_epoch_bound(500, 0, 20, 10, 1000) == 15                 # mid
    assert start_epoch_bound(999, 0, 20, 10, 1000) == 19
    assert start_epoch_bound(5000, 0, 20, 10, 1000) == 20                # past expansion_end
    assert start_epoch_bound(7, 0, 20) == 20                              # off
    for it in range(0, 130, 7):
        assert start_epoch_bound(it, 2, 40, 20, 100) == official_upper(it, 2, 40, 20, 100)
    with pytest.raises(ValueError, match=r"min_start \(4\) must be below max_start \(4\)"):
        start_epoch_bound(0, 4, 4)


def test_sample_start_epoch_range_and_uniformity():
    g = torch.Generator().manual_seed(0)
    n, lo, hi = 4000, 3, 8
    draws = [sample_start_epoch(0, g, lo, hi) for _ in range(n)]
    assert min(draws) == lo and max(draws) == hi - 1                      # upper exclusive
    counts = np.bincount(np.array(draws) - lo, minlength=hi - lo)
    chi2 = float(((counts - n / (hi - lo)) ** 2 / (n / (hi - lo))).sum())
    assert chi2 < 18.47                                                   # chi^2_4 at p = 0.001
    early = [sample_start_epoch(0, g, 0, 20, 10, 100) for _ in range(200)]
    assert max(early) <= 9


def test_correct_logit_average_vs_loop_and_error():
    g = torch.Generator().manual_seed(1)
    logits, labels = torch.randn(4, 6, 3, generator=g), torch.tensor([0, 1, 2, 0, 1, 2])
    for i in range(6):                                                    # every image right for expert 0
        logits[0, i, labels[i]] = 10.0
    got = correct_logit_average(logits, labels)
    for i in range(6):
        right = [logits[e, i] for e in range(4) if int(logits[e, i].argmax()) == int(labels[i])]
        assert torch.allclose(got[i], torch.stack(right).mean(0))
    logits[:, 4, :] = torch.tensor([5.0, 0.0, 0.0])                       # image 4 (label 1): nobody right
    with pytest.raises(ValueError, match=r"images \[4\]"):
        correct_logit_average(logits, labels)


def test_select_correct():
    labels = torch.tensor([0, 0, 0, 1, 1, 1, 1])
    logits = F.one_hot(torch.tensor([0, 1, 0, 1, 0, 1, 1]), 2).float()    # wrong: 1 (class 0), 4 (class 1)
    idx = select_correct(logits, labels, 2, torch.Generator().manual_seed(0))
    assert idx.dtype == torch.int64 and sorted(idx[:2].tolist()) == [0, 2] and set(idx[2:].tolist()) <= {3, 5, 6}
    with pytest.raises(ValueError, match="IPC 3 is above class 0's 2 correctly classified images"):
        select_correct(logits, labels, 3)


def net():
    torch.manual_seed(0)
    return ConvNet(1, 3, channels=(4,), img_size=4)


def test_matching_loss_vs_hand_unroll_and_n0():
    module = net()
    g = torch.Generator().manual_seed(2)
    traj = torch.stack([flatten_params(module) + 0.1 * k * torch.randn(flatten_params(module).shape, generator=g)
                        for k in range(5)])
    x, soft = torch.randn(6, 1, 4, 4, generator=g), torch.randn(6, 3, generator=g)
    syn = SyntheticSet(x, soft, lr=0.05, learn_targets=True, learn_lr=True)
    loss, end = matching_loss(module, syn, traj, 1, 2, 4, 3, torch.Generator().manual_seed(9))
    # official loop written out: randperm chunks, student_params[-1] - syn_lr * grad, mse sums
    gen, chunks, theta = torch.Generator().manual_seed(9), [], traj[1].clone().requires_grad_(True)
    for _ in range(4):
        if not chunks:
            chunks = list(torch.randperm(6, generator=gen).split(3))
        i = chunks.pop(0)
        m = net()
        torch.nn.utils.vector_to_parameters(theta, m.parameters())
        out = m(x[i])
        ce = -(F.softmax(soft[i], 1) * F.log_softmax(out, 1)).sum(1).mean()
        theta = theta - 0.05 * torch.cat([t.reshape(-1) for t in torch.autograd.grad(ce, list(m.parameters()))])
    want = F.mse_loss(theta, traj[3], reduction="sum") / F.mse_loss(traj[1], traj[3], reduction="sum")
    assert float(loss.detach()) == pytest.approx(float(want), rel=1e-5) and torch.allclose(end, theta, atol=1e-6)
    grads = torch.autograd.grad(loss, [syn.images, syn.targets, syn.lr])
    assert all(float(gr.abs().sum()) > 0 for gr in grads)
    zero, _ = matching_loss(module, syn, traj, 0, 2, 0, 3)
    assert float(zero) == pytest.approx(1.0)
    with pytest.raises(ValueError, match=r"3 \+ 2 exceeds the expert's 4 epochs"):
        matching_loss(module, syn, traj, 3, 2, 1, 3)
    with pytest.raises(ValueError, match="parameters per snapshot"):
        matching_loss(module, syn, traj[:, :-1], 0, 2, 1, 3)


def test_distill_updates_and_bad_input():
    module = net()
    g = torch.Generator().manual_seed(3)
    x, y = torch.randn(30, 1, 4, 4, generator=g), torch.arange(30) % 3
    from common.distill import train_expert
    buf = torch.stack([train_expert(net(), x, y, 4, 0.1, 10, torch.Generator().manual_seed(e)) for e in range(2)])
    d = DATM(ipc=2, syn_steps=2, min_start=0, max_start=2, current_max_start=1, expansion_end=2, iterations=3,
             lr_img=1.0, threshold=10.0, init="real", soft_labels=False)
    syn, stats = d.distill(module, buf, x, y, torch.Generator().manual_seed(0))
    assert stats["updated"] == 1.0 and len(syn) == 6 and syn.targets.dtype == torch.int64
    with pytest.raises(ValueError, match="threshold must be > 0"):
        DATM(threshold=0.0)
    with pytest.raises(ValueError, match="exceeds the experts' 4 epochs"):
        DATM(ipc=2, max_start=4, current_max_start=None, expansion_end=None).check_buffer(buf, module)
    with pytest.raises(ValueError, match="parameters per snapshot"):
        d.check_buffer(buf[:, :, :-1], module)
    assert math.isfinite(stats["match_loss"])


def test_distill_from_a_given_initial_set_is_the_same_run():
    """run() draws the initial set itself (to evaluate it at the learnt lr, DD-Ranking's control) and
    hands it to distill: the generator's first draw is the same, so the run is unchanged."""
    g = torch.Generator().manual_seed(4)
    x, y = torch.randn(30, 1, 4, 4, generator=g), torch.arange(30) % 3
    from common.distill import train_expert
    buf = torch.stack([train_expert(net(), x, y, 4, 0.1, 10, torch.Generator().manual_seed(e)) for e in range(2)])
    d = DATM(ipc=2, syn_steps=2, min_start=0, max_start=2, current_max_start=1, expansion_end=2, iterations=3,
             lr_img=1.0, threshold=10.0, init="real", soft_labels=False)
    plain, _ = d.distill(net(), buf, x, y, torch.Generator().manual_seed(0))
    gen = torch.Generator().manual_seed(0)
    initial = d.initial_set(net(), buf, x, y, gen)
    start = initial.images.detach().clone()
    given, _ = d.distill(net(), buf, x, y, gen, initial=initial)
    assert given is initial and torch.equal(given.images, plain.images) and torch.equal(given.lr, plain.lr)
    assert not torch.equal(start, given.images)   # updated in place, so run() clones it first


def test_real_subset_random_is_mtt_init():
    from common.distill import class_balanced_indices
    from methods.datm import real_subset
    y = torch.arange(40) % 4
    x = torch.randn(40, 1, 4, 4, generator=torch.Generator().manual_seed(1))
    want = class_balanced_indices(y, 3, torch.Generator().manual_seed(7))
    d = DATM(ipc=3, init="real", soft_labels=False, max_start=2, current_max_start=None, expansion_end=None)
    buf = torch.zeros(1, 3, sum(p.numel() for p in net().parameters()))
    init = d.initial_set(net(), buf, x, y, torch.Generator().manual_seed(7))
    assert torch.equal(real_subset("random", x, y, 3, 7), want) and torch.equal(init.images, x[want])


def test_threshold_gates_every_update():
    """L > threshold on every iteration: no optimiser steps, the set is its start (official
    `if grand_loss <= threshold: optimizer.step()`)."""
    g = torch.Generator().manual_seed(5)
    x, y = torch.randn(30, 1, 4, 4, generator=g), torch.arange(30) % 3
    from common.distill import train_expert
    buf = torch.stack([train_expert(net(), x, y, 4, 0.1, 10, torch.Generator().manual_seed(e)) for e in range(2)])
    d = DATM(ipc=2, syn_steps=2, min_start=0, max_start=2, current_max_start=None, expansion_end=None, iterations=3,
             lr_img=1.0, threshold=1e-12, init="real", soft_labels=False)
    gen = torch.Generator().manual_seed(0)
    initial = d.initial_set(net(), buf, x, y, gen)
    start, lr0 = initial.images.detach().clone(), float(initial.lr.detach())
    syn, stats = d.distill(net(), buf, x, y, gen, initial=initial)
    assert stats["updated"] == 0.0 and stats["match_loss"] > 1e-12
    assert torch.equal(syn.images, start) and float(syn.lr.detach()) == lr0


def test_optimiser_momenta(monkeypatch):
    """Images SGD(lr_img, 0.5), lr SGD(lr_lr, 0.5), soft labels SGD(lr_y, momentum_y 0.9): with a
    loss whose gradient is 1 everywhere, two steps move each by -lr (1 + (1 + momentum))."""
    import methods.datm.distill as distill_mod
    monkeypatch.setattr(distill_mod, "matching_loss",
                        lambda module, syn, *a, **k: (syn.images.sum() + syn.targets.sum() + syn.lr, None))
    g = torch.Generator().manual_seed(6)
    y = torch.arange(30) % 3
    x = 3.0 * torch.randn(3, 1, 4, 4, generator=g)[y] + 0.1 * torch.randn(30, 1, 4, 4, generator=g)   # separable
    from common.distill import train_expert
    buf = torch.stack([train_expert(net(), x, y, 4, 0.1, 10, torch.Generator().manual_seed(e)) for e in range(3)])
    d = DATM(ipc=2, syn_steps=2, min_start=0, max_start=2, current_max_start=None, expansion_end=None, iterations=2,
             lr_img=0.1, lr_lr=1e-3, lr_y=0.2, momentum_y=0.9, threshold=1e9, init="correct", soft_labels=True)
    gen = torch.Generator().manual_seed(0)
    initial = d.initial_set(net(), buf, x, y, gen)
    x0, y0, lr0 = initial.images.detach().clone(), initial.targets.detach().clone(), float(initial.lr.detach())
    syn, stats = d.distill(net(), buf, x, y, gen, initial=initial)
    assert stats["updated"] == 1.0
    assert torch.allclose(syn.images, x0 - 0.1 * 2.5)
    assert torch.allclose(syn.targets, y0 - 0.2 * 2.9)
    assert float(syn.lr.detach()) == pytest.approx(lr0 - 1e-3 * 2.5)


def test_distill_splits_validation_and_standardisation():
    from methods.datm import distill_splits
    (x, y), (xt, yt) = distill_splits("digits", "data", False, "test")
    (xf, yf), (xv, yv) = distill_splits("digits", "data", False, "val", 0.2)
    assert len(xf) + len(xv) == len(x) and len(xv) == round(0.2 * len(x)) and xf.shape[1:] == (1, 8, 8)
    assert len(xt) == len(yt) and set(yv.tolist()) == set(range(10))
    assert abs(float(xf.mean())) < 1e-4 and float(xf.std()) == pytest.approx(1.0, abs=1e-2)   # fitted stats
    assert torch.equal(torch.sort(torch.cat([yf, yv])).values, torch.sort(y).values)   # a split of train
    with pytest.raises(ValueError, match="eval_on"):
        distill_splits("digits", "data", False, "train")
    with pytest.raises(ValueError, match="val_share"):
        distill_splits("digits", "data", False, "val", 1.5)


def test_distill_splits_tinyimagenet_reaches_its_checked_loader(tmp_path, monkeypatch):
    """The paper tier's Tiny ImageNet: distill_splits itself registers the loader (no "unknown
    dataset" on a fresh import), which says how to get the data when absent and refuses an archive
    whose sha256 is not the pinned one."""
    import sys

    import common.data.tinyimagenet as tiny
    from common.data import REGISTRY
    from common.data.download import DatasetNotFound
    from methods.datm import distill_splits
    if tiny.is_unpacked(tiny.SHARED):
        pytest.skip("a shared Tiny ImageNet copy is on this machine: the absent-data path cannot be reached")
    monkeypatch.delitem(REGISTRY, "tinyimagenet", raising=False)        # as in a process that never imported it
    monkeypatch.delitem(sys.modules, "common.data.tinyimagenet", raising=False)
    with pytest.raises(DatasetNotFound, match="tinyimagenet.*is not on this machine"):
        distill_splits("tinyimagenet", str(tmp_path), False)
    (tmp_path / tiny.ARCHIVE).write_bytes(b"not the archive")
    with pytest.raises(DatasetNotFound, match="sha256"):
        distill_splits("tinyimagenet", str(tmp_path), False)


def official_pix_init_real_labels(module_factory, buffer, images):
    """distill/DATM.py, `pix_init == "real"` written out: Temp_net with the flat parameters of
    `buffer[0][-1]` (expert 0's final snapshot), label_syn = Temp_net(image_syn): every image's raw
    logits, no correctness filter, no averaging."""
    m = module_factory()
    torch.nn.utils.vector_to_parameters(buffer[0][-1].clone(), m.parameters())
    m.eval()
    with torch.no_grad():
        return m(images)


def test_expert_logits_vs_module_call_and_bad_input():
    from methods.datm import expert_logits
    module = net()
    p = flatten_params(module).numel()
    g = torch.Generator().manual_seed(11)
    buf, images = torch.randn(3, 4, p, generator=g), torch.randn(5, 1, 4, 4, generator=g)
    assert torch.allclose(expert_logits(module, buf, images), official_pix_init_real_labels(net, buf, images),
                          atol=1e-6)
    assert torch.allclose(expert_logits(module, buf, images, expert=2),
                          official_pix_init_real_labels(net, buf[2:], images), atol=1e-6)
    with pytest.raises(ValueError, match="buffer must be"):
        expert_logits(module, buf[:, :, :-1], images)
    with pytest.raises(ValueError, match="expert 3 is not among the buffer's 3 experts"):
        expert_logits(module, buf, images, expert=3)


def test_real_expert_init_is_official_pix_init_real():
    """init real_expert (official CIFAR-100 IPC 50): MTT's random class-balanced real images (the same
    draw as init real), float soft labels = expert 0's final-epoch logits on them, kept even where
    expert 0 is wrong (init correct would refuse such images); learnt; lr = lr_teacher."""
    g = torch.Generator().manual_seed(12)
    x, y = torch.randn(30, 1, 4, 4, generator=g), torch.arange(30) % 3
    from common.distill import train_expert
    buf = torch.stack([train_expert(net(), x, y, 2, 0.01, 10, torch.Generator().manual_seed(e)) for e in range(2)])
    kw = dict(ipc=4, max_start=1, current_max_start=None, expansion_end=None, lr_teacher=0.02)
    d = DATM(init="real_expert", soft_labels=True, **kw)
    init = d.initial_set(net(), buf, x, y, torch.Generator().manual_seed(7))
    mtt = DATM(init="real", soft_labels=False, **kw).initial_set(net(), buf, x, y, torch.Generator().manual_seed(7))
    assert torch.equal(init.images, mtt.images)
    assert [int(y[(x == im).flatten(1).all(1)][0]) for im in init.images] == [c for c in range(3) for _ in range(4)]
    want = official_pix_init_real_labels(net, buf, init.images)
    assert init.targets.dtype == torch.float32 and torch.allclose(init.targets, want, atol=1e-6)
    assert bool((want.argmax(1) != mtt.targets).any())   # an image expert 0 gets wrong keeps its logits
    assert init.targets.requires_grad and float(init.lr.detach()) == pytest.approx(0.02)
    d2 = DATM(init="real_expert", soft_labels=True, syn_steps=2, iterations=2, lr_y=1.0, threshold=1e9, **kw)
    syn, stats = d2.distill(net(), buf, x, y, torch.Generator().manual_seed(7))
    assert stats["updated"] == 1.0 and not torch.allclose(syn.targets.detach(), want)   # soft labels learnt
    with pytest.raises(ValueError, match="set soft_labels=True"):
        DATM(init="real_expert", soft_labels=False, **kw)
    with pytest.raises(ValueError, match="init='real' has hard labels"):
        DATM(init="real", soft_labels=True, **kw)
    with pytest.raises(ValueError, match="init must be one of correct, real, real_expert"):
        DATM(init="noise", **kw)


def test_cifar100_ipc50_paper_config_uses_the_official_real_init():
    from hydra.utils import instantiate

    from common.config import compose_checked
    cfg = compose_checked(["experiment=datm_cifar100_ipc50"])
    d = instantiate(cfg.method.datm)
    assert (d.init, d.soft_labels, d.ipc, d.min_start, d.max_start, d.current_max_start) == \
        ("real_expert", True, 50, 20, 70, None)
    for other in ("datm_cifar100_ipc10", "datm_cifar10_ipc10", "datm_mini"):
        assert compose_checked([f"experiment={other}"]).method.datm.init == "correct"
