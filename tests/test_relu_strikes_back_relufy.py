"""ReLU Strikes Back (issue #47): the pretrained GELU stage of relu_strikes_back_mini_relufy
(common/nn/pretrained_tiny_lm.py) against a loop with the schedule written out."""
import math

import pytest
import torch

from common.nn.pretrained_tiny_lm import BATCH_SEED_OFFSET, pretrain_lm, pretrained_tiny_lm
from methods.relu_strikes_back import TinyLM, corpus, relufy
from methods.relu_strikes_back.sparsity import ShiftedReLU

ARCH = dict(n_positions=16, n_embd=16, n_layer=1, n_head=2, n_inner=32)
DATA = dict(source="fortunes", tokenizer="char", val_fraction=0.1, split_seed=0, bpe_vocab=512)
NET = {"_target_": "methods.relu_strikes_back.TinyLM"}
CORPUS = {"_target_": "methods.relu_strikes_back.corpus", **DATA}
OPT = {"_target_": "torch.optim.AdamW", "lr": 1e-2, "betas": [0.9, 0.95], "weight_decay": 0.1}


def _spec(steps=4, warmup=2, clip=0.5):
    return dict(steps=steps, batch_size=3, clip_grad=clip, optimizer=OPT, schedule="cosine", warmup_steps=warmup)


def test_pretrain_matches_a_loop_with_the_schedule_written_out():
    ids = torch.randint(0, 20, (500,), generator=torch.Generator().manual_seed(0))
    torch.manual_seed(0)
    a = TinyLM(20, activation_function="gelu", **ARCH)
    b = TinyLM(20, activation_function="gelu", **ARCH)
    b.load_state_dict(a.state_dict())
    n, w, seed = 4, 2, 3
    losses = pretrain_lm(a, ids, 16, seed, _spec(n, w))
    # reference: linear warm-up (s+1)/w, then 0.5 (1 + cos(pi (s - w) / (n - w))); clip by global norm 0.5;
    # batches: the documented sampler order (a fresh permutation of window starts, seed + offset)
    opt = torch.optim.AdamW(b.parameters(), lr=1e-2, betas=(0.9, 0.95), weight_decay=0.1)
    perm = torch.randperm(500 - 16, generator=torch.Generator().manual_seed((seed + BATCH_SEED_OFFSET) * 100_003))
    ref = []
    for s in range(n):
        lr = 1e-2 * ((s + 1) / w if s < w else 0.5 * (1 + math.cos(math.pi * (s - w) / (n - w))))
        for group in opt.param_groups:
            group["lr"] = lr
        x = torch.stack([ids[i:i + 16] for i in perm[3 * s:3 * s + 3].tolist()])
        loss = b(x, labels=x).loss
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(b.parameters(), 0.5)
        opt.step()
        ref.append(float(loss.detach()))
    assert losses == pytest.approx(ref, rel=1e-5)
    for (k, pa), pb in zip(a.state_dict().items(), b.state_dict().values()):
        assert torch.allclose(pa, pb, atol=1e-6), k


def test_stage_is_seeded_cached_and_leaves_the_random_state_alone():
    vocab = corpus(**DATA)[0].vocab_size
    torch.manual_seed(123)
    before = torch.random.get_rng_state()
    first = pretrained_tiny_lm(vocab, seed=7, net=NET, corpus=CORPUS, pretrain=_spec(), activation_function="gelu", **ARCH)
    assert torch.equal(torch.random.get_rng_state(), before)
    again = pretrained_tiny_lm(vocab, seed=7, net=NET, corpus=CORPUS, pretrain=_spec(), activation_function="gelu", **ARCH)
    assert torch.equal(torch.random.get_rng_state(), before)
    assert all(torch.equal(x, y) for x, y in zip(first.state_dict().values(), again.state_dict().values()))
    assert first is not again   # a fresh module each call: relufy works in place
    torch.manual_seed(7)
    untrained = TinyLM(vocab, activation_function="gelu", **ARCH)
    assert not torch.equal(untrained.lm_head.weight, first.lm_head.weight)   # trained, from the seed's init
    other = pretrained_tiny_lm(vocab, seed=8, net=NET, corpus=CORPUS, pretrain=_spec(), activation_function="gelu", **ARCH)
    assert not torch.equal(other.lm_head.weight, first.lm_head.weight)
    relufy(again, stage=1)
    assert isinstance(again.transformer.h[0].mlp.act, ShiftedReLU)
    assert not isinstance(first.transformer.h[0].mlp.act, ShiftedReLU)   # the cached stage is untouched


def test_bad_input():
    vocab = corpus(**DATA)[0].vocab_size
    with pytest.raises(ValueError, match="vocab_size"):
        pretrained_tiny_lm(vocab + 1, seed=0, net=NET, corpus=CORPUS, pretrain=_spec(), **ARCH)
    with pytest.raises(ValueError, match="steps"):
        pretrain_lm(TinyLM(20, **ARCH), torch.arange(100) % 20, 16, 0, _spec(steps=-1))
    with pytest.raises(ValueError, match="too few"):
        pretrain_lm(TinyLM(20, **ARCH), torch.arange(10) % 20, 16, 0, _spec())
