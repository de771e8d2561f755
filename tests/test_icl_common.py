"""common/icl, the in-context floor (issue #49): the model moved from mixreg_transformer builds the
same weights under one seed, the token layout, hidden states that are causal and end in the
read-out, ridge and OLS against per-prefix numpy solves, the prompt streams, bad input."""
import numpy as np
import pytest
import torch

from common.icl import (ICLTransformer, fixed_prompt_batches, fresh_prompt_batches, interleave, ols_predictions,
                        ridge_predictions, seen_prompts, stream_seed)
from methods.mixreg_transformer import MixRegTransformer


def test_mixreg_transformer_is_icl_transformer_and_builds_the_same_weights():
    assert MixRegTransformer is ICLTransformer
    torch.manual_seed(7)
    a = ICLTransformer(3, width=16, depth=2, heads=2, max_len=8)
    torch.manual_seed(7)
    b = MixRegTransformer(3, width=16, depth=2, heads=2, max_len=8)
    sa, sb = a.state_dict(), b.state_dict()
    assert list(sa) == list(sb) and list(sa)[:2] == ["read_in.weight", "read_in.bias"]   # parameter order
    assert all(torch.equal(sa[k], sb[k]) for k in sa)


def test_interleave_layout():
    xs = torch.arange(2 * 3 * 4, dtype=torch.float32).reshape(2, 3, 4)
    ys = -torch.arange(1, 7, dtype=torch.float32).reshape(2, 3)
    tokens = interleave(xs, ys)
    assert tokens.shape == (2, 6, 4)
    for i in range(3):
        assert torch.equal(tokens[:, 2 * i], xs[:, i])
        assert torch.equal(tokens[:, 2 * i + 1, 0], ys[:, i])
        assert torch.equal(tokens[:, 2 * i + 1, 1:], torch.zeros(2, 3))


@pytest.fixture(scope="module")
def model():
    torch.manual_seed(0)
    return ICLTransformer(3, width=16, depth=3, heads=2, max_len=8).eval()


def test_hidden_states_count_shape_and_end_in_the_read_out(model):
    xs, ys = torch.randn(4, 6, 3), torch.randn(4, 6)
    with torch.no_grad():
        states = model.hidden_states(xs, ys)
        assert len(states) == 3 + 1 and all(s.shape == (4, 12, 16) for s in states)
        torch.testing.assert_close(model.read_out(states[-1])[:, ::2, 0], model(xs, ys), rtol=0, atol=1e-6)
        # the first state is the read-in plus the learned positions
        emb = model.read_in(interleave(xs, ys)) + model.backbone.wpe.weight[:12]
        torch.testing.assert_close(states[0], emb)
        # the last is after the final LayerNorm: unit variance over the width before its affine map
        ln = model.backbone.ln_f
        raw = (states[-1] - ln.bias) / ln.weight
        torch.testing.assert_close(raw.var(-1, unbiased=False), torch.ones(4, 12), atol=1e-3, rtol=0)


def test_hidden_states_are_causal(model):
    xs, ys = torch.randn(2, 6, 3), torch.randn(2, 6)
    t = 3
    moved = ys.clone()
    moved[:, t] += 5.0                                  # token 2t + 1
    with torch.no_grad():
        before, after = model.hidden_states(xs, ys), model.hidden_states(xs, moved)
    for a, b in zip(before[1:], after[1:]):
        torch.testing.assert_close(a[:, :2 * t + 1], b[:, :2 * t + 1])     # tokens before y_t unchanged
        assert (a[:, 2 * t + 1:] - b[:, 2 * t + 1:]).abs().amax() > 1e-4


def _numpy_ridge(f, y, lam):
    out = np.zeros(y.shape)
    for b in range(f.shape[0]):
        for i in range(1, f.shape[1]):
            F, Y = f[b, :i], y[b, :i]
            if lam == 0:
                w = np.linalg.pinv(F) @ Y
            else:
                w = np.linalg.solve(F.T @ F + lam * np.eye(f.shape[2]), F.T @ Y)
            out[b, i] = f[b, i] @ w
    return out


@pytest.mark.parametrize("lam", [0.0, 0.3, 5.0])
def test_ridge_and_ols_against_per_prefix_numpy_solves(lam):
    gen = torch.Generator().manual_seed(1)
    f, y = torch.randn(3, 9, 4, generator=gen, dtype=torch.float64), torch.randn(3, 9, generator=gen, dtype=torch.float64)
    expected = _numpy_ridge(f.numpy(), y.numpy(), lam)
    np.testing.assert_allclose(ridge_predictions(f, y, lam).numpy(), expected, rtol=1e-8, atol=1e-9)
    assert ridge_predictions(f, y, lam)[:, 0].abs().max() == 0
    if lam == 0:
        np.testing.assert_allclose(ols_predictions(f, y).numpy(), expected, rtol=1e-8, atol=1e-9)


def test_ridge_returns_the_dtype_of_ys_and_refuses_bad_input():
    f, y = torch.randn(2, 5, 3), torch.randn(2, 5)
    assert ridge_predictions(f, y, 0.1).dtype == torch.float32
    with pytest.raises(ValueError, match="lam must be >= 0, got -1"):
        ridge_predictions(f, y, -1.0)
    with pytest.raises(ValueError, match=r"\(2, 5, 3\) and \(2, 4\)"):
        ridge_predictions(f, y[:, :4], 0.1)


def test_model_bad_input():
    with pytest.raises(ValueError, match="width 10 is not divisible by heads 4"):
        ICLTransformer(3, width=10, depth=1, heads=4)
    m = ICLTransformer(3, width=8, depth=1, heads=2, max_len=4)
    with pytest.raises(ValueError, match="prompt length 5 exceeds the model's max_len 4"):
        m(torch.randn(1, 5, 3), torch.randn(1, 5))
    with pytest.raises(ValueError, match="x of width 3, got width 2"):
        m.hidden_states(torch.randn(1, 4, 2), torch.randn(1, 4))


def _sample(batch, length, generator):
    xs = torch.randn(batch, length, 2, generator=generator)
    return xs, xs.sum(-1), "extra"


def test_prompt_streams_are_pure_functions_of_seed_and_step():
    fn = fresh_prompt_batches(_sample, 6, 4, seed=3)
    a, b = fn(5), fn(5)
    assert torch.equal(a[0], b[0]) and not torch.equal(fn(6)[0], a[0])
    gen = torch.Generator().manual_seed(stream_seed(3, 1, 5))                    # (seed, TRAIN_STREAM, step)
    assert torch.equal(a[0], _sample(6, 4, gen)[0])
    shards = [fresh_prompt_batches(_sample, 6, 4, seed=3, rank=r, world_size=2)(5)[0] for r in range(2)]
    assert torch.equal(torch.cat(shards).sort(0).values, a[0].sort(0).values)
    seen_x, seen_y = seen_prompts(fn, 10)
    assert torch.equal(seen_x[:6], fn(0)[0]) and torch.equal(seen_x[6:], fn(1)[0][:4])
    fixed = fixed_prompt_batches(seen_x, seen_y, 5, seed=0)
    assert fixed(0)[0].shape == (5, 4, 2)
    with pytest.raises(ValueError, match="batch 5 is not divisible by the 2 ranks"):
        fresh_prompt_batches(_sample, 5, 4, seed=0, world_size=2)
