"""The tiny-LM floor (issue #46): common/nn/gpt.py against HF GPT-2, FLOPs, hooks, generate, perplexity."""
import math

import pytest
import torch
import torch.nn.functional as F

from common.eval.language import perplexity
from common.nn.gpt import (ACTIVATIONS, GPT, GPTConfig, activation_module, ffn_activation_modules, flops_per_token,
                           forward_flops, generate, load_hf_gpt2_state_dict, record_ffn)

transformers = pytest.importorskip("transformers")

SMALL = dict(vocab_size=61, n_positions=24, n_embd=32, n_layer=2, n_head=4)


def hf_twin(act, seed=0, **kw):
    """An HF GPT2LMHeadModel with random weights AND biases (LN too), and ours loaded from it."""
    cfg = {**SMALL, **kw}
    hf = transformers.GPT2LMHeadModel(transformers.GPT2Config(
        activation_function=act, resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0, **cfg)).eval()
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in hf.parameters():
            p.copy_(torch.randn(p.shape, generator=gen) * 0.2 + (1.0 if p.dim() == 1 and p.shape[0] == cfg["n_embd"] else 0.0))
    ours = load_hf_gpt2_state_dict(GPT(GPTConfig(activation_function=act, **cfg)), hf.state_dict()).eval()
    return hf, ours


@pytest.mark.parametrize("act", ["relu", "gelu", "gelu_new", "silu"])
def test_logits_and_loss_equal_hf_gpt2(act):
    hf, ours = hf_twin(act)
    x = torch.randint(0, SMALL["vocab_size"], (3, 20), generator=torch.Generator().manual_seed(1))
    labels = x.clone()
    labels[0, 5:9] = -100
    with torch.no_grad():
        ref, out = hf(x, labels=labels), ours(x, labels=labels)
    assert torch.allclose(out.logits, ref.logits, atol=1e-4, rtol=1e-4)
    assert torch.allclose(out.loss, ref.loss, atol=1e-5)
    # the loss is the shifted CE written out
    lp = F.log_softmax(out.logits[:, :-1], -1)
    tgt, keep = labels[:, 1:], labels[:, 1:] != -100
    nll = -lp.gather(-1, tgt.clamp(min=0)[..., None])[..., 0][keep].mean()
    assert torch.allclose(out.loss, nll, atol=1e-5)


def test_state_dict_keys_and_tying():
    hf, ours = hf_twin("gelu_new")
    hf_keys = {k for k in hf.state_dict() if not k.endswith((".attn.bias", ".attn.masked_bias"))}
    assert set(ours.state_dict()) == hf_keys
    assert ours.lm_head.weight is ours.transformer.wte.weight
    assert torch.equal(ours.transformer.h[1].attn.c_attn.weight, hf.transformer.h[1].attn.c_attn.weight.t())
    untied = GPT(GPTConfig(tie_word_embeddings=False, **SMALL))
    assert untied.lm_head.weight is not untied.transformer.wte.weight
    d, v, L = SMALL["n_embd"], SMALL["vocab_size"], SMALL["n_layer"]
    per_block = 4 * d + (3 * d * d + 3 * d) + (d * d + d) + (4 * d * d + 4 * d) + (4 * d * d + d)
    emb = v * d + SMALL["n_positions"] * d
    assert ours.num_parameters() == emb + L * per_block + 2 * d
    assert ours.num_parameters(exclude_embeddings=True) == L * per_block + 2 * d
    assert untied.num_parameters() == ours.num_parameters() + v * d
    assert sum(p.numel() for p in hf.parameters()) == ours.num_parameters()


def test_load_rejects_bad_state_dicts():
    hf, ours = hf_twin("relu")
    sd = hf.state_dict()
    with pytest.raises(ValueError, match="missing"):
        load_hf_gpt2_state_dict(ours, {k: v for k, v in sd.items() if "ln_f" not in k})
    with pytest.raises(ValueError, match="unexpected"):
        load_hf_gpt2_state_dict(ours, {**sd, "transformer.h.9.ln_1.weight": torch.zeros(32)})
    with pytest.raises(ValueError, match="shape"):
        load_hf_gpt2_state_dict(ours, {**sd, "transformer.wpe.weight": torch.zeros(5, 32)})
    no_head = {k: v for k, v in sd.items() if k != "lm_head.weight"}   # tied: the head is optional
    load_hf_gpt2_state_dict(ours, no_head)


def test_load_drops_hf_causal_mask_buffers():
    """Older transformers emitted `attn.bias` (the causal mask) and `attn.masked_bias` per block;
    the installed one does not, so they are injected here."""
    hf, _ = hf_twin("gelu_new", seed=2)
    sd = dict(hf.state_dict())
    t = SMALL["n_positions"]
    for i in range(SMALL["n_layer"]):
        sd[f"transformer.h.{i}.attn.bias"] = torch.tril(torch.ones(t, t, dtype=torch.bool)).view(1, 1, t, t)
        sd[f"transformer.h.{i}.attn.masked_bias"] = torch.tensor(-1e4)
    ours = load_hf_gpt2_state_dict(GPT(GPTConfig(activation_function="gelu_new", **SMALL)), sd).eval()
    assert not any(k.endswith((".attn.bias", ".attn.masked_bias")) for k in ours.state_dict())
    x = torch.randint(0, SMALL["vocab_size"], (2, 9), generator=torch.Generator().manual_seed(4))
    with torch.no_grad():
        assert torch.allclose(ours(x).logits, hf(x).logits, atol=1e-4, rtol=1e-4)
    # the two mask names are skipped, nothing else: a truly unexpected key still fails
    with pytest.raises(ValueError, match="unexpected key 'transformer.h.0.attn.weight'"):
        load_hf_gpt2_state_dict(ours, {**sd, "transformer.h.0.attn.weight": torch.zeros(3)})
    with pytest.raises(ValueError, match="unexpected"):
        load_hf_gpt2_state_dict(ours, {**sd, "transformer.h.0.mlp.bias": torch.zeros(3)})


def test_load_tied_replaces_supplied_head_with_wte():
    """Pinned behaviour: with tied weights a supplied `lm_head.weight` that differs from wte is
    NOT loaded; the head is wte (one tensor). Untied, the supplied head is loaded as is."""
    hf, _ = hf_twin("relu", seed=3)
    sd = dict(hf.state_dict())
    head = torch.randn(sd["transformer.wte.weight"].shape, generator=torch.Generator().manual_seed(5))
    sd["lm_head.weight"] = head
    tied = load_hf_gpt2_state_dict(GPT(GPTConfig(activation_function="relu", **SMALL)), sd)
    assert tied.lm_head.weight is tied.transformer.wte.weight
    assert torch.equal(tied.lm_head.weight, sd["transformer.wte.weight"])
    assert not torch.allclose(tied.lm_head.weight, head)
    untied = load_hf_gpt2_state_dict(GPT(GPTConfig(activation_function="relu", tie_word_embeddings=False,
                                                   **SMALL)), sd)
    assert torch.equal(untied.lm_head.weight, head)
    assert torch.equal(untied.transformer.wte.weight, sd["transformer.wte.weight"])


def test_load_transposes_conv1d_by_name_even_when_square():
    """Pinned limitation: Conv1D weights are transposed by name, so a square one (attn.c_proj)
    already in nn.Linear (out, in) order loads transposed with no error; HF (in, out) is expected."""
    hf, _ = hf_twin("gelu", seed=6)
    sd = dict(hf.state_dict())
    key = "transformer.h.0.attn.c_proj.weight"
    w = sd[key]
    assert w.shape[0] == w.shape[1] and not torch.equal(w, w.t())
    ours = load_hf_gpt2_state_dict(GPT(GPTConfig(activation_function="gelu", **SMALL)), {**sd, key: w.t()})
    assert torch.equal(ours.transformer.h[0].attn.c_proj.weight, w)   # i.e. not what was meant
    with pytest.raises(ValueError, match="shape"):   # a non-square one in (out, in) order is caught
        k2 = "transformer.h.0.mlp.c_fc.weight"
        load_hf_gpt2_state_dict(ours, {**sd, k2: sd[k2].t()})


def test_init_stds():
    torch.manual_seed(0)
    cfg = GPTConfig(vocab_size=400, n_positions=256, n_embd=128, n_layer=4, n_head=4)
    m = GPT(cfg)
    blk = m.transformer.h[2]
    for w in (blk.attn.c_attn.weight, blk.mlp.c_fc.weight, m.transformer.wte.weight, m.transformer.wpe.weight):
        assert abs(float(w.detach().std()) / 0.02 - 1) < 0.05
    for w in (blk.attn.c_proj.weight, blk.mlp.c_proj.weight):
        assert abs(float(w.detach().std()) / (0.02 / math.sqrt(8)) - 1) < 0.05
    assert all(float(b.detach().abs().max()) == 0 for n, b in m.named_parameters() if n.endswith(".bias"))
    assert torch.equal(blk.ln_1.weight, torch.ones(128)) and torch.equal(m.transformer.ln_f.bias, torch.zeros(128))
    assert cfg.inner == 512 and GPTConfig(n_inner=77).inner == 77


def test_config_and_input_errors():
    with pytest.raises(ValueError, match="divisible"):
        GPTConfig(n_embd=30, n_head=4)
    with pytest.raises(ValueError, match=">= 1"):
        GPTConfig(n_layer=0)
    with pytest.raises(ValueError, match="unknown activation"):
        GPTConfig(activation_function="tanh")
    with pytest.raises(ValueError, match="unknown activation"):
        activation_module("swish")
    for key in ("resid_pdrop", "embd_pdrop", "attn_pdrop"):
        for bad in (-0.1, 1.0):
            with pytest.raises(ValueError, match=key):
                GPTConfig(**{key: bad})
    with pytest.raises(ValueError, match="n_inner"):
        GPTConfig(n_inner=0)
    with pytest.raises(ValueError, match="GPTConfig"):
        GPT(dict(SMALL))
    m = GPT(GPTConfig(**SMALL))
    with pytest.raises(ValueError, match="n_positions"):
        m(torch.zeros(1, SMALL["n_positions"] + 1, dtype=torch.long))
    for shape in ((5,), (1, 5, 1)):
        with pytest.raises(ValueError, match=r"\(batch, seq\)"):
            m(torch.zeros(shape, dtype=torch.long))


def test_use_cache_is_accepted_and_ignored():
    torch.manual_seed(0)
    m = GPT(GPTConfig(**SMALL)).eval()
    x = torch.randint(0, SMALL["vocab_size"], (2, 10))
    with torch.no_grad():
        a, b = m(x, labels=x, use_cache=True), m(x, labels=x, use_cache=False)
    assert torch.equal(a.logits, b.logits) and torch.equal(a.loss, b.loss)
    assert a._fields == ("loss", "logits")   # no past_key_values returned either way


def test_activations():
    x = torch.linspace(-4, 4, 101)
    assert torch.allclose(activation_module("gelu")(x), 0.5 * x * (1 + torch.erf(x / math.sqrt(2))), atol=1e-6)
    tanh = 0.5 * x * (1 + torch.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x ** 3)))
    assert torch.allclose(activation_module("gelu_new")(x), tanh, atol=1e-6)
    assert torch.equal(activation_module("relu")(x), x.clamp(min=0))
    assert torch.allclose(activation_module("silu")(x), x * torch.sigmoid(x))
    assert torch.equal(activation_module("identity")(x), x)
    assert len(ACTIVATIONS) == 5


def test_causality():
    torch.manual_seed(0)
    m = GPT(GPTConfig(**SMALL)).eval()
    x = torch.randint(0, SMALL["vocab_size"], (2, 16))
    y = x.clone()
    y[:, 9] = (y[:, 9] + 1) % SMALL["vocab_size"]
    with torch.no_grad():
        a, b = m(x).logits, m(y).logits
    assert torch.allclose(a[:, :9], b[:, :9], atol=1e-6)
    assert not torch.allclose(a[:, 9:], b[:, 9:], atol=1e-4)


@pytest.mark.parametrize("t", [1, 7, 16])
def test_forward_flops_formula_and_flop_counter(t):
    from torch.nn.attention import SDPBackend, sdpa_kernel
    from torch.utils.flop_counter import FlopCounterMode
    cfg = GPTConfig(vocab_size=50, n_positions=16, n_embd=24, n_layer=3, n_head=3, n_inner=40)
    m = GPT(cfg).eval()
    d, L, i, v = 24, 3, 40, 50
    by_hand = 0
    for _ in range(L):   # each product 2·m·n·k written out
        by_hand += 2 * t * d * (3 * d) + 2 * t * t * (d // 3) * 3 * 2 + 2 * t * d * d + 2 * t * d * i + 2 * t * i * d
    by_hand += 2 * t * d * v
    assert forward_flops(cfg, t) == by_hand
    counter = FlopCounterMode(display=False)
    with torch.no_grad(), sdpa_kernel(SDPBackend.MATH), counter:
        m(torch.zeros(1, t, dtype=torch.long))
    assert counter.get_total_flops() == forward_flops(cfg, t)
    assert flops_per_token(cfg, t) * t == forward_flops(cfg, t)
    assert flops_per_token(cfg, t, training=True) == 3 * flops_per_token(cfg, t)


def test_record_ffn_equals_hooks_on_hf_twin():
    hf, ours = hf_twin("gelu")
    x = torch.randint(0, SMALL["vocab_size"], (2, 11))
    seen = [[] for _ in range(SMALL["n_layer"])]
    handles = [blk.mlp.act.register_forward_hook(lambda _m, _i, o, s=s: s.append(o.clone()))
               for blk, s in zip(hf.transformer.h, seen)]
    with torch.no_grad():
        hf(x)
        hf(x[:1])
    for h in handles:
        h.remove()
    assert len(ffn_activation_modules(ours)) == len(ffn_activation_modules(hf)) == SMALL["n_layer"]
    with record_ffn(ours) as recs, torch.no_grad():
        ours(x)
        ours(x[:1])
    assert [len(r) for r in recs] == [2, 2]
    for rec, ref in zip(recs, seen):
        assert rec[0].shape == (2, 11, 4 * SMALL["n_embd"]) and not rec[0].requires_grad
        assert torch.allclose(rec[0], ref[0], atol=1e-4)
        assert rec[1].shape == (1, 11, 4 * SMALL["n_embd"])    # the second forward recorded too
        assert torch.allclose(rec[1], ref[1], atol=1e-4)
    with torch.no_grad():
        ours(x)
    assert [len(r) for r in recs] == [2, 2]     # hooks removed on exit
    with pytest.raises(ValueError, match="FFN activation"):
        with record_ffn(torch.nn.Linear(2, 2)):
            pass


def test_generate_greedy_batched_and_modes():
    torch.manual_seed(0)
    m = GPT(GPTConfig(**SMALL))
    m.train()
    x = torch.randint(0, SMALL["vocab_size"], (3, 20))
    out = generate(m, x, 10, temperature=0)
    assert m.training and out.shape == (3, 30) and torch.equal(out[:, :20], x)
    ids = x.clone()   # the argmax loop with the context cropped to n_positions
    m.eval()
    with torch.no_grad():
        for _ in range(10):
            ids = torch.cat([ids, m(ids[:, -SMALL["n_positions"]:]).logits[:, -1].argmax(-1, keepdim=True)], 1)
    assert torch.equal(out, ids)
    for r in range(3):
        assert torch.equal(generate(m, x[r:r + 1], 10, temperature=0), out[r:r + 1])
    assert torch.equal(generate(m, x, 10, temperature=1.0, top_k=1), out)
    a = generate(m, x, 5, generator=torch.Generator().manual_seed(3))
    b = generate(m, x, 5, generator=torch.Generator().manual_seed(3))
    assert torch.equal(a, b)
    with pytest.raises(ValueError, match="temperature"):
        generate(m, x, 5, temperature=-1)
    with pytest.raises(ValueError, match="max_new_tokens"):
        generate(m, x, -1)
    with pytest.raises(ValueError, match="top_k"):
        generate(m, x, 5, top_k=0)
    with pytest.raises(ValueError, match=r"\(batch, seq\)"):
        generate(m, x[0], 5)
    assert torch.equal(generate(m, x, 0), x)


@pytest.mark.parametrize("batch_size", [1, 4])
def test_perplexity_on_gpt_by_loop(batch_size):
    torch.manual_seed(0)
    m = GPT(GPTConfig(**SMALL))
    ids = torch.randint(0, SMALL["vocab_size"], (5, 12))
    nll, n = 0.0, 0
    with torch.no_grad():
        for w in ids:
            logits = m(w[None]).logits[0]
            for j in range(len(w) - 1):
                nll -= float(F.log_softmax(logits[j].double(), -1)[w[j + 1]])
                n += 1
    assert perplexity(m, ids, batch_size=batch_size) == pytest.approx(math.exp(nll / n), rel=1e-5)
