"""common/nn/token_reduction.py: EViT's score, selection, fusion and reduced forward, each against
an independent derivation (an explicit softmax, per-sample loops, a hand-written EViT forward in
the official code's form)."""
import math

import pytest
import torch
from timm.models.vision_transformer import VisionTransformer

from common.nn.token_reduction import (cls_attention, evit_select, forward_reduced, num_kept, reduced_block,
                                       token_counts)


def small_vit(seed=0, depth=3, dim=16, heads=2, img=16, patch=4, classes=5):
    torch.manual_seed(seed)
    vit = VisionTransformer(img_size=img, patch_size=patch, in_chans=1, num_classes=classes, embed_dim=dim,
                            depth=depth, num_heads=heads, class_token=True, global_pool="token")
    with torch.no_grad():   # make the [CLS] scores spread out (zero-init cls_token / small weights)
        vit.cls_token.normal_(0, 1.0)
        vit.pos_embed.normal_(0, 0.5)
    return vit.eval()


def tokens(vit, images):
    return vit.norm_pre(vit._pos_embed(vit.patch_embed(images)))


def explicit_attention(block, x):
    """(full attention (B, H, N, N) by an explicit softmax, attention output (B, N, C))."""
    attn = block.attn
    h = block.norm1(x)
    B, N, C = h.shape
    H, d = attn.num_heads, C // attn.num_heads
    w, b = attn.qkv.weight, attn.qkv.bias
    q = (h @ w[:C].T + b[:C]).view(B, N, H, d).transpose(1, 2)
    k = (h @ w[C:2 * C].T + b[C:2 * C]).view(B, N, H, d).transpose(1, 2)
    v = (h @ w[2 * C:].T + b[2 * C:]).view(B, N, H, d).transpose(1, 2)
    logits = q @ k.transpose(-1, -2) / math.sqrt(d)
    a = logits.exp() / logits.exp().sum(-1, keepdim=True)
    out = (a @ v).transpose(1, 2).reshape(B, N, C)
    return a, attn.proj(out)


def test_cls_attention_is_the_cls_row_of_an_explicit_softmax_mean_over_heads():
    vit = small_vit()
    x = tokens(vit, torch.randn(3, 1, 16, 16))
    a, _ = explicit_attention(vit.blocks[0], x)
    want = a[:, :, 0, 1:].mean(1)
    got = cls_attention(vit.blocks[0], x)
    assert got.shape == (3, 16)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)
    assert torch.all(got.sum(1) < 1) and torch.all(got > 0)   # [CLS] column removed from a softmax row


def loop_select(x, a, rate, fuse, rank=None):
    """Per sample: sort patch indices by rank, keep the first ceil(rate (N-1)), fuse the rest."""
    rank = (a if rank is None else rank).detach()
    a = a.detach()
    out, kept = [], []
    n = x.shape[1] - 1
    k = math.ceil(rate * n)
    for b in range(x.shape[0]):
        order = sorted(range(n), key=lambda j: -float(rank[b, j]))
        keep, drop = order[:k], order[k:]
        rows = [x[b, 0]] + [x[b, 1 + j] for j in keep]
        if fuse:
            fused = torch.zeros_like(x[b, 0])
            for j in drop:
                fused = fused + float(a[b, j]) * x[b, 1 + j]
            rows.append(fused)
        out.append(torch.stack(rows))
        kept.append(keep)
    return torch.stack(out), torch.tensor(kept)


@pytest.mark.parametrize("fuse", [True, False])
@pytest.mark.parametrize("rate", [0.7, 0.5, 0.3, 0.05])
def test_selection_and_fusion_match_a_per_sample_loop(fuse, rate):
    g = torch.Generator().manual_seed(1)
    x = torch.randn(4, 11, 6, generator=g)
    a = torch.rand(4, 10, generator=g)
    got, kept = evit_select(x, a, rate, fuse=fuse)
    want, want_kept = loop_select(x, a, rate, fuse)
    assert kept.shape == (4, math.ceil(rate * 10))
    assert torch.equal(kept, want_kept)
    torch.testing.assert_close(got, want, rtol=1e-6, atol=1e-6)


def test_selection_by_another_rank_still_fuses_with_the_attention_weights():
    g = torch.Generator().manual_seed(2)
    x, a, r = torch.randn(2, 9, 4, generator=g), torch.rand(2, 8, generator=g), torch.rand(2, 8, generator=g)
    got, kept = evit_select(x, a, 0.5, fuse=True, rank=r)
    want, want_kept = loop_select(x, a, 0.5, True, rank=r)
    assert torch.equal(kept, want_kept)
    torch.testing.assert_close(got, want)


def test_ceil_of_the_float_product_and_no_drop_when_every_token_is_kept():
    assert num_kept(48, 0.3) == 15 and num_kept(48, 0.5) == 24 and num_kept(48, 0.7) == 34
    assert num_kept(100, 0.55) == math.ceil(0.55 * 100) == 56    # 0.55 * 100 = 55.00000000000001
    x, a = torch.randn(2, 5, 3), torch.rand(2, 4)
    out, kept = evit_select(x, a, 0.9, fuse=True)               # ceil(3.6) = 4 = N-1: nothing dropped
    assert out is x and torch.equal(kept, torch.arange(4).expand(2, 4))


def test_rate_one_is_timms_forward():
    vit = small_vit()
    images = torch.randn(3, 1, 16, 16)
    logits, cls = forward_reduced(vit, images, [1.0, 1.0, 1.0])
    torch.testing.assert_close(logits, vit(images), rtol=0, atol=0)
    assert len(cls) == 3
    x = tokens(vit, images)
    out, _ = reduced_block(vit.blocks[0], x, 1.0)
    torch.testing.assert_close(out, vit.blocks[0](x), rtol=0, atol=0)


def hand_evit_forward(vit, images, rates, fuse, ranks=None):
    """EViT as the official Block writes it: explicit attention, x + proj, per-sample loop select,
    x + MLP; ranks: per reducing block, in order (None: [CLS] attention)."""
    x = tokens(vit, images)
    ranks = list(ranks) if ranks is not None else None
    for block, rate in zip(vit.blocks, rates):
        if rate < 1:
            a, out = explicit_attention(block, x)
            x = x + out
            cls = a[:, :, 0, 1:].mean(1)
            x, _ = loop_select(x, cls, rate, fuse, None if ranks is None else ranks.pop(0))
            x = x + block.mlp(block.norm2(x))
        else:
            x = block(x)
    return vit.head(vit.norm(x)[:, 0])


@pytest.mark.parametrize("fuse", [True, False])
def test_forward_reduced_matches_a_hand_written_evit_forward(fuse):
    vit = small_vit(seed=3)
    images = torch.randn(2, 1, 16, 16)
    rates = [1.0, 0.5, 0.7]
    got, _ = forward_reduced(vit, images, rates, fuse=fuse)
    torch.testing.assert_close(got, hand_evit_forward(vit, images, rates, fuse), rtol=1e-4, atol=1e-5)
    assert not torch.allclose(got, vit(images), atol=1e-4)   # the reduction did something


def test_random_ranks_are_one_rand_draw_per_reducing_block_in_order():
    vit = small_vit(seed=4)
    images = torch.randn(2, 1, 16, 16)
    rates = [0.5, 1.0, 0.5]
    got, _ = forward_reduced(vit, images, rates, select="random", generator=torch.Generator().manual_seed(7))
    g = torch.Generator().manual_seed(7)
    n1 = 16
    n2 = math.ceil(0.5 * n1) + 1
    ranks = [torch.rand((2, n1), generator=g), torch.rand((2, n2), generator=g)]
    torch.testing.assert_close(got, hand_evit_forward(vit, images, rates, True, ranks), rtol=1e-4, atol=1e-5)
    by_cls, _ = forward_reduced(vit, images, rates)
    assert not torch.allclose(got, by_cls, atol=1e-4)


def test_token_counts_match_the_forward_and_a_closed_form():
    assert token_counts(48, [1, 0.5, 0.5, 0.5, 1, 1]) == [48, 25, 14, 8, 8, 8]
    assert token_counts(48, [1, 0.5, 0.5, 0.5], fuse=False) == [48, 24, 12, 6]
    assert token_counts(196, [1.0] * 3 + [0.7]) == [196, 196, 196, math.ceil(0.7 * 196) + 1]
    vit = small_vit(seed=5)
    x = tokens(vit, torch.randn(1, 1, 16, 16))
    seen = []
    for block, rate in zip(vit.blocks, [0.7, 0.5, 0.3]):
        x, _ = reduced_block(block, x, rate)
        seen.append(x.shape[1] - 1)
    assert seen == token_counts(16, [0.7, 0.5, 0.3])


def test_bad_input_raises_value_errors_with_the_numbers():
    vit = small_vit()
    images = torch.randn(1, 1, 16, 16)
    with pytest.raises(ValueError, match=r"\(0, 1\], got 0"):
        forward_reduced(vit, images, [1.0, 0.0, 1.0])
    with pytest.raises(ValueError, match=r"got 1.5"):
        evit_select(torch.randn(1, 5, 2), torch.rand(1, 4), 1.5)
    with pytest.raises(ValueError, match=r"3 blocks, got 2"):
        forward_reduced(vit, images, [1.0, 0.5])
    with pytest.raises(ValueError, match="select"):
        forward_reduced(vit, images, [1.0] * 3, select="top")
    with pytest.raises(ValueError, match=r"\(1, 4\), got \(1, 5\)"):
        evit_select(torch.randn(1, 5, 2), torch.rand(1, 5), 0.5)
    with pytest.raises(ValueError, match="rank"):
        evit_select(torch.randn(1, 5, 2), torch.rand(1, 4), 0.5, rank=torch.rand(1, 3))
