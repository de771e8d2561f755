"""methods/metr: exits, losses (closed forms; the teacher gets no gradient), the keep-rate schedule,
the canvas and bad input."""
import math

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from methods.metr import (KeepSchedule, METRViT, keep_rate_schedule, metr_loss, multi_exit_loss, place_on_canvas,
                          self_distillation_loss)
from common.nn.token_reduction import forward_reduced


def tiny(**kw):
    torch.manual_seed(0)
    args = dict(img_size=16, in_chans=1, num_classes=3, patch_size=4, dim=8, depth=4, heads=2,
                exit_blocks=(1, 2), drop_blocks=(1, 2))
    return METRViT(**(args | kw)).eval()


def test_exits_are_the_official_heads_on_cls_after_their_blocks():
    model = tiny()
    assert set(model.exits) == {"1", "2"}
    head = model.exits["1"]
    assert [type(m) for m in head] == [nn.LayerNorm, nn.Linear, nn.Tanh, nn.Linear]
    assert (head[1].in_features, head[1].out_features, head[3].out_features) == (8, 8, 3)
    images = torch.randint(0, 256, (2, 1, 16, 16), dtype=torch.uint8)
    logits, exits = model(images, keep_rate=0.5)
    signed = images.float() / 255 * 2 - 1
    want, cls = forward_reduced(model.vit, signed, [1, 0.5, 0.5, 1])
    torch.testing.assert_close(logits, want)
    for z, b in zip(exits, (1, 2)):
        h = model.exits[str(b)]
        torch.testing.assert_close(z, h[3](torch.tanh(h[1](h[0](cls[b])))))
    assert model.keep_rates(0.5) == [1.0, 0.5, 0.5, 1.0]


def test_multi_exit_loss_is_a_sum_of_cross_entropies_in_closed_form():
    g = torch.Generator().manual_seed(0)
    zs, y = [torch.randn(4, 3, generator=g) for _ in range(3)], torch.tensor([0, 2, 1, 1])
    slow = sum(-sum(float(z[i, y[i]]) - math.log(sum(math.exp(float(v)) for v in z[i])) for i in range(4)) / 4
               for z in zs)
    assert float(multi_exit_loss(zs, y)) == pytest.approx(slow, rel=1e-5)


@pytest.mark.parametrize("tau", [1.0, 2.5])
def test_self_distillation_is_tau_squared_kl_of_the_final_to_each_exit(tau):
    g = torch.Generator().manual_seed(1)
    final, zs = torch.randn(3, 4, generator=g), [torch.randn(3, 4, generator=g) for _ in range(2)]
    slow = 0.0
    for z in zs:
        for i in range(3):
            p = [math.exp(float(v) / tau) for v in final[i]]
            q = [math.exp(float(v) / tau) for v in z[i]]
            p, q = [v / sum(p) for v in p], [v / sum(q) for v in q]
            slow += tau ** 2 * sum(a * math.log(a / b) for a, b in zip(p, q)) / 3
    assert float(self_distillation_loss(zs, final, tau)) == pytest.approx(slow, rel=1e-5)


def test_the_final_exit_is_a_teacher_without_gradient():
    final = torch.randn(3, 4, requires_grad=True)
    z = torch.randn(3, 4, requires_grad=True)
    self_distillation_loss([z], final).backward()
    assert final.grad is None and z.grad is not None and z.grad.abs().sum() > 0


def test_metr_loss_combines_the_terms_with_their_weights():
    g = torch.Generator().manual_seed(2)
    final, zs, y = torch.randn(5, 3, generator=g), [torch.randn(5, 3, generator=g)], torch.tensor([0, 1, 2, 0, 1])
    want = F.cross_entropy(final, y) + 0.2 * multi_exit_loss(zs, y) + 0.3 * self_distillation_loss(zs, final, 2.0)
    torch.testing.assert_close(metr_loss(final, zs, y, 0.2, 0.3, 2.0), want)
    torch.testing.assert_close(metr_loss(final, zs, y, 0.0, 0.0), F.cross_entropy(final, y))


def test_keep_rate_schedule_is_evits_adjust_keep_rate():
    assert keep_rate_schedule(4, 5, 10, 0.5) == 1.0
    assert keep_rate_schedule(5, 5, 10, 0.5) == pytest.approx(1.0)
    assert keep_rate_schedule(10, 5, 10, 0.5) == pytest.approx(0.75)       # half-way: cos(pi/2) = 0
    t = 3
    assert keep_rate_schedule(5 + t, 5, 10, 0.7) == pytest.approx(0.7 + 0.3 * (math.cos(math.pi * t / 10) + 1) / 2)
    assert keep_rate_schedule(15, 5, 10, 0.5) == 0.5 and keep_rate_schedule(99, 5, 10, 0.5) == 0.5
    assert keep_rate_schedule(0, 0, 0, 0.7) == 0.7                          # official METR: from step 0


def test_keep_schedule_is_the_typed_train_keep_field_with_the_official_default():
    official = KeepSchedule()                       # metr/main.py --base_keep_rate 0.7, shrink from epoch 0 over 0
    assert [official(s) for s in (0, 1, 500)] == [0.7, 0.7, 0.7]
    sched = KeepSchedule(base_keep_rate=0.5, warmup_steps=5, shrink_steps=10)
    for step in (0, 4, 5, 8, 10, 15, 99):
        # EViT's helpers.adjust_keep_rate written out (epochs of one iteration)
        want = 1 if step < 5 else 0.5 if step >= 15 else 0.5 + 0.5 * (math.cos((step - 5) / 10 * math.pi) + 1) * 0.5
        assert sched(step) == pytest.approx(want)
    assert KeepSchedule(base_keep_rate=1.0)(0) == 1.0
    with pytest.raises(ValueError, match=r"\(0, 1\], got 0"):
        KeepSchedule(base_keep_rate=0.0)
    with pytest.raises(ValueError, match=r"got -1, 0"):
        KeepSchedule(warmup_steps=-1)


def test_fine_tune_batches_carry_the_schedules_rate_and_training_reduces():
    from omegaconf import OmegaConf
    from methods.metr import Learner, _batches
    cfg = OmegaConf.create({"method": {"canvas": None}})
    x, y = torch.randint(0, 256, (8, 1, 16, 16), dtype=torch.uint8), torch.arange(8) % 3
    sched = KeepSchedule(base_keep_rate=0.5, warmup_steps=1, shrink_steps=0)
    batch = _batches(cfg, (x, y), 0, lambda step: torch.arange(4), sched)
    assert batch(0)[2] == 1.0 and batch(1)[2] == 0.5 and batch(7)[2] == 0.5
    assert _batches(cfg, (x, y), 0, lambda step: torch.arange(4), None)(7)[2] == 1.0
    # a training step at rate 0.5 is the reduced forward (dropout 0: the eval-mode expression), and the
    # exits' losses reach the blocks below them (block 0) through [CLS]
    model = tiny().train()
    learner = Learner(model, 0.15, 0.15, 1.0)
    images, labels, rate = batch(1)
    loss, logs = learner.training_step((images, labels, rate))
    logits, exits = model.eval()(images, keep_rate=0.5)
    torch.testing.assert_close(loss, metr_loss(logits, exits, labels, 0.15, 0.15, 1.0))
    assert logs["keep_rate"] == 0.5
    exits_only = Learner(tiny().train(), 1.0, 0.0, 1.0)
    loss, _ = exits_only.training_step((images, labels, rate))
    ce, _ = Learner(exits_only.model, 0.0, 0.0, 1.0).training_step((images, labels, rate))
    (loss - ce).backward()
    block0 = exits_only.model.vit.blocks[0].attn.qkv.weight.grad
    assert block0 is not None and block0.abs().sum() > 0
    assert exits_only.model.vit.head.weight.grad.abs().sum() == 0     # the exits' loss leaves the final head alone


def test_place_on_canvas_matches_a_loop():
    g = torch.Generator().manual_seed(3)
    images = torch.randint(1, 256, (3, 2, 4, 5), generator=g, dtype=torch.uint8)
    offsets = torch.tensor([[0, 0], [6, 5], [2, 3]])
    got = place_on_canvas(images, offsets, 10)
    want = torch.zeros(3, 2, 10, 10, dtype=torch.uint8)
    for b, (r, c) in enumerate(offsets.tolist()):
        want[b, :, r:r + 4, c:c + 5] = images[b]
    assert got.dtype == torch.uint8 and torch.equal(got, want)


def test_bad_input_raises_value_errors_with_the_numbers():
    with pytest.raises(ValueError, match=r"\[7\].*\[0, 4\)"):
        tiny(exit_blocks=(1, 7))
    with pytest.raises(ValueError, match=r"\[-1\]"):
        tiny(drop_blocks=(-1,))
    with pytest.raises(ValueError, match="select"):
        tiny()(torch.zeros(1, 1, 16, 16), select="lowest")
    with pytest.raises(ValueError, match=r"got 0"):
        tiny()(torch.zeros(1, 1, 16, 16), keep_rate=0.0)
    z, y = [torch.randn(2, 3)], torch.tensor([0, 1])
    with pytest.raises(ValueError, match="tau must be > 0, got 0"):
        self_distillation_loss(z, torch.randn(2, 3), tau=0.0)
    with pytest.raises(ValueError, match=r"me_weight=-0.1"):
        metr_loss(torch.randn(2, 3), z, y, me_weight=-0.1)
    with pytest.raises(ValueError, match=r"\(0, 1\], got 1.2"):
        keep_rate_schedule(0, 0, 0, 1.2)
    with pytest.raises(ValueError, match=r"\[0, 6\] x \[0, 5\].*rows \[0, 7\]"):
        place_on_canvas(torch.ones(2, 1, 4, 5), torch.tensor([[0, 0], [7, 1]]), 10)
    with pytest.raises(ValueError, match="offsets"):
        place_on_canvas(torch.ones(2, 1, 4, 5), torch.tensor([[0, 0]]), 10)


def test_an_exit_reads_cls_after_its_own_block_by_timms_modules():
    """Independent of forward_reduced: at rate 1, exit b is its head on [CLS] after timm's blocks 0..b."""
    model = tiny()
    images = torch.randint(0, 256, (3, 1, 16, 16), dtype=torch.uint8)
    _, exits = model(images, keep_rate=1.0)
    vit = model.vit
    x = vit.norm_pre(vit._pos_embed(vit.patch_embed(images.float() / 255 * 2 - 1)))
    after = []
    for blk in vit.blocks:
        x = blk(x)
        after.append(x[:, 0])
    for z, b in zip(exits, model.exit_blocks):
        torch.testing.assert_close(z, model.exits[str(b)](after[b]))


def test_score_shares_random_draws_across_rows():
    """Random ranks come from one generator seeded eval_seed per rate: two models (rows) see the
    same draws, and the accuracy is that of forward(select='random') with that generator."""
    from methods.metr import score
    x = torch.randint(0, 256, (10, 1, 16, 16), dtype=torch.uint8)
    y = torch.arange(10) % 3
    a, b = tiny(), tiny()
    out = score(a, (x, y), [0.5], 4, "cpu", eval_seed=7, selects=("random",))
    hits = 0
    g = torch.Generator().manual_seed(7)
    for i in range(0, 10, 4):
        hits += int((a(x[i:i + 4], keep_rate=0.5, select="random", generator=g)[0].argmax(-1) == y[i:i + 4]).sum())
    assert out["random/acc_k50"] == pytest.approx(100 * hits / 10)
    assert score(b, (x, y), [0.5], 4, "cpu", eval_seed=7, selects=("random",)) == out   # same weights, same draws
