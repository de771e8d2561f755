"""VCAS's fused timm block (methods/vcas/block.py): the whole block backward on the kept rows,
against the generic per-linear path, plain autograd, and unbiasedness."""
import pytest
import torch
from timm.models.vision_transformer import Block
from torch import nn

from common.nn import ViTClassifier
from methods.vcas.flops import counter
from tests.test_vcas import Probe, assert_unbiased, grads_of, sampled_copy, tiny_blocks


def timm_blocks(dim=16, depth=2):
    """timm blocks with a qkv bias and timm's LayerNorm subclass, as the ViTs build them (the
    blocks of `tiny_blocks` have no qkv bias: both take the fused path)."""
    torch.manual_seed(0)
    return ViTClassifier(img_size=8, in_chans=1, num_classes=3, patch_size=4, dim=dim, depth=depth, heads=2).blocks


def test_timm_blocks_take_the_fused_path_and_others_do_not():
    from methods.vcas.block import fusable
    assert all(fusable(b) for b in (*timm_blocks(), *tiny_blocks()))
    assert not fusable(nn.Linear(3, 3)) and not fusable(Probe([]))
    noisy = Block(16, num_heads=2, proj_drop=0.1)
    assert not fusable(noisy), "dropout would make the hand-written backward wrong"


@pytest.mark.parametrize("rho,nu", [(1.0, 1.0), (0.5, 0.6), (0.3, 1.0)])
def test_fused_backward_equals_the_generic_path_and_autograd(rho, nu):
    """Same draws (same generator, same order: SampleA, then fc2, fc1, proj, qkv) give the same
    gradient as the generic per-linear path; at rho = nu = 1 both equal plain autograd."""
    blocks = timm_blocks()
    x = torch.randn(10, 6, 16)
    x[:3] *= 4
    target = torch.randn(10, 6, 16)
    exact = grads_of(blocks, x, target)
    out = {}
    for fuse in (True, False):
        model, state = sampled_copy(blocks, [rho * 0.8, rho] if rho < 1 else [1.0, 1.0], nu)
        state.fuse, state.generator = fuse, torch.Generator().manual_seed(3)
        with counter() as ran:
            out[fuse] = grads_of(model, x, target), state.skipped_flops, ran.get_total_flops()
    (g_fused, skip_fused, ran_fused), (g_generic, skip_generic, ran_generic) = out[True], out[False]
    torch.testing.assert_close(g_fused, g_generic, rtol=1e-5, atol=1e-6)
    # the tally: what ran plus what was skipped is exact training's backward, on both paths
    assert ran_fused + skip_fused == pytest.approx(ran_generic + skip_generic, rel=1e-12)
    if rho < 1:
        assert skip_fused > skip_generic, "the fused path also skips the dropped samples' attention backward"
    else:
        torch.testing.assert_close(g_fused, exact, rtol=1e-5, atol=1e-6)


def test_fused_sampled_gradient_is_unbiased():
    blocks = timm_blocks()
    model, _ = sampled_copy(blocks, [0.4, 0.6], 0.5)
    assert_unbiased(blocks, model)


def test_fused_block_runs_the_forward_once_and_zeroes_dropped_samples():
    blocks = timm_blocks(depth=1)
    model, state = sampled_copy(blocks, [0.25], 1.0)
    calls = []
    model[0].block.attn.register_forward_hook(lambda *a: calls.append(1))   # the generic path's forward
    x = torch.randn(64, 4, 16, requires_grad=True)
    model(x).sum().backward()
    assert calls == [], "the fused path computes the block itself, once"
    kept = int((x.grad.abs().sum(dim=(1, 2)) > 0).sum())
    assert kept == len(state.kept) and kept < 40
