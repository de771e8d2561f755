"""ReLU Strikes Back (issue #47): dead neurons, live-neuron sparsity, the token-matched shuffle, the LLM sub-rows."""
import numpy as np
import pytest
import torch
from torch import nn

from methods.relu_strikes_back import (CausalLMStep, ShiftedReLU, aggregated_sparsity, dead_fraction, live_sparsity,
                                       matched_shuffled_aggregated_sparsity, shuffled_aggregated_sparsity)
from methods.relu_strikes_back.llm import encode_stream
from methods.relu_strikes_back.metrics import token_position_keys


def test_dead_fraction_and_live_sparsity_against_numpy():
    g = torch.Generator().manual_seed(0)
    a = torch.randn(3, 5, 8, generator=g, dtype=torch.float64) * (torch.rand(3, 5, 8, generator=g) > 0.6)
    a[..., [1, 6]] = 0.0                                   # two dead neurons
    flat = a.reshape(-1, 8).numpy()
    live = (flat != 0).any(axis=0)
    assert dead_fraction(a) == pytest.approx(float(np.mean(~live)))
    assert dead_fraction(a) >= 2 / 8
    assert live_sparsity(a) == pytest.approx(float(np.mean(flat[:, live] == 0)))
    # dead neurons raise the overall sparsity but not the live-neuron sparsity
    padded = torch.cat([a, torch.zeros(3, 5, 24, dtype=a.dtype)], dim=-1)
    assert float((padded == 0).double().mean()) > float((a == 0).double().mean())
    assert live_sparsity(padded) == pytest.approx(live_sparsity(a))
    assert dead_fraction(padded) == pytest.approx((8 * dead_fraction(a) + 24) / 32)
    assert live_sparsity(torch.zeros(2, 3, 4)) == 0.0 and dead_fraction(torch.zeros(2, 3, 4)) == 1.0
    with pytest.raises(ValueError):
        dead_fraction(torch.zeros(0, 4))


def test_matched_shuffle_equals_an_explicit_groupwise_permutation():
    g = torch.Generator().manual_seed(1)
    a = torch.randn(4, 6, 10, generator=g) * (torch.rand(4, 6, 10, generator=g) > 0.7)
    keys = torch.randint(0, 3, (4, 6), generator=g)
    flat, src = keys.reshape(-1), torch.arange(24)
    gen = torch.Generator().manual_seed(5)
    for key in sorted(set(flat.tolist())):                # loop form of the documented rule
        rows = [i for i in range(24) if int(flat[i]) == key]
        perm = torch.randperm(len(rows), generator=gen).tolist()
        for i, j in zip(rows, perm):
            src[i] = rows[j]
    assert sorted(src.tolist()) == list(range(24))
    assert all(int(flat[i]) == int(flat[int(src[i])]) for i in range(24))   # rows stay within their key
    explicit = a.reshape(24, 10)[src].reshape(4, 6, 10)
    assert torch.equal(matched_shuffled_aggregated_sparsity(a, keys, seed=5), aggregated_sparsity(explicit))
    with pytest.raises(ValueError, match="keys"):
        matched_shuffled_aggregated_sparsity(a, keys[:, :5])


def test_a_featurizer_of_the_key_alone_cannot_pass_the_matched_control():
    """A lookup of (token, position) repeats rows within a sequence: the plain shuffle calls that reuse,
    the matched shuffle leaves it exactly unchanged. Context-driven reuse survives the plain shuffle and
    is broken by the matched one."""
    g = torch.Generator().manual_seed(2)
    pairs = torch.randint(0, 20, (32, 2), generator=g)               # each window repeats its own two tokens
    ids = pairs.gather(1, torch.randint(0, 2, (32, 16), generator=g))
    keys = token_position_keys(ids)
    table = torch.relu(torch.randn(20 * 16, 64, generator=g) - 1.0)  # a random ReLU lookup of the key
    lookup = table[keys]
    assert torch.equal(matched_shuffled_aggregated_sparsity(lookup, keys, seed=0), aggregated_sparsity(lookup))
    token_only = torch.relu(torch.randn(20, 64, generator=g) - 1.0)[ids]
    assert float(aggregated_sparsity(token_only)[-1]) > float(shuffled_aggregated_sparsity(token_only, 0)[-1])
    # context reuse: each sequence draws from its own subset of neurons, whatever its tokens
    context = torch.zeros(32, 16, 64)
    for b in range(32):
        subset = torch.randperm(64, generator=g)[:12]
        on = torch.rand(16, 12, generator=g) > 0.5
        context[b][:, subset] = on.float()
    assert float(aggregated_sparsity(context)[-1]) > float(matched_shuffled_aggregated_sparsity(context, keys, 0)[-1]) + 0.2


def test_token_position_keys_are_unique_per_pair():
    ids = torch.tensor([[3, 3, 1], [1, 3, 3]])
    k = token_position_keys(ids)
    assert k[0, 0] != k[0, 1] and k[0, 1] == k[1, 1] and k[0, 2] != k[1, 2] and k[1, 0] != k[0, 2]


def test_causal_lm_step_is_the_next_token_loss():
    transformers = pytest.importorskip("transformers")
    cfg = transformers.LlamaConfig(vocab_size=30, hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                                   num_attention_heads=2, num_key_value_heads=2, max_position_embeddings=16)
    torch.manual_seed(0)
    lm = transformers.LlamaForCausalLM(cfg)
    x = torch.randint(0, 30, (2, 8))
    loss, logs = CausalLMStep(lm).training_step(x)
    logits = lm(x).logits[:, :-1]
    ref = nn.functional.cross_entropy(logits.reshape(-1, 30), x[:, 1:].reshape(-1))
    assert torch.allclose(loss, ref, atol=1e-6) and logs == {}


def test_encode_stream_joins_documents_without_special_tokens():
    class Tok:
        def __call__(self, text, add_special_tokens=True):
            assert add_special_tokens is False
            return {"input_ids": [ord(c) for c in text]}
    assert encode_stream(["ab", "c"], Tok()).tolist() == [97, 98, 10, 10, 99]
    with pytest.raises(ValueError):
        encode_stream([], Tok())


def test_run_llm_reports_the_four_sub_rows(tmp_path, monkeypatch):
    """The SmolLM2 path end to end on a tiny random Llama (no download): four sub-rows, the swap makes
    zeros, both trainings ran on the same budget."""
    transformers = pytest.importorskip("transformers")
    from common.config import compose_checked
    from common.runner import run_method
    from methods.relu_strikes_back import llm

    cfg_llama = transformers.LlamaConfig(vocab_size=64, hidden_size=16, intermediate_size=32, num_hidden_layers=2,
                                         num_attention_heads=2, num_key_value_heads=2, max_position_embeddings=32)
    torch.manual_seed(0)
    tiny = transformers.LlamaForCausalLM(cfg_llama).eval()

    class Tok:
        def __call__(self, text, add_special_tokens=True):
            return {"input_ids": [ord(c) % 64 for c in text[:20000]]}

    monkeypatch.setattr(llm, "_llm", lambda name, dtype="float32": (tiny, Tok()))
    cfg = compose_checked(["experiment=relu_strikes_back_mini_smollm2", "seed=0", f"run_dir={tmp_path}",
                           "method.llm.seq_len=16", "method.llm.eval_windows=4", "method.agg_t=8",
                           "trainer.max_steps=2", "trainer.schedule.warmup_steps=1", "trainer.log_every=1"])
    out = run_method(cfg)
    for sub in llm.SUB_ROWS:
        assert {f"{sub}/val_ppl", f"{sub}/ffn_sparsity", f"{sub}/dead_fraction", f"{sub}/agg_sparsity_matched"} <= set(out)
    assert out["smollm2/ffn_sparsity"] == 0.0 and out["smollm2_tuned/ffn_sparsity"] == 0.0
    assert out["swap_only/ffn_sparsity"] > 0.2 and out["relufied/ffn_sparsity"] > 0.2
    assert "relufied/train_loss" in out and "smollm2_tuned/train_loss" in out
    assert out["smollm2/val_ppl"] != out["smollm2_tuned/val_ppl"]          # the tuning changed the model
    assert not any(isinstance(m.mlp.act_fn, ShiftedReLU) for m in tiny.model.layers)   # the cached load is untouched
