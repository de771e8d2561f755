"""msg: the growth operators against independent derivations (float64)."""
import math

import pytest
import torch
import torch.nn.functional as F

from common.nn.gpt import GPT, GPTConfig, flops_per_token
from methods.msg import (MSGGPT, copy_adam_state, embed_old, finish_growth, grow, loss_jump, mask_value,
                         masked_layer_norm, net2net_grow, set_growth_mask, stack_indices, train_flops)

SMALL = dict(vocab_size=11, n_positions=8, n_embd=8, n_layer=2, n_head=2, n_inner=12, activation_function="gelu")
GROWTHS = {"n_embd/n_head": dict(n_embd=16, n_head=4), "n_inner": dict(n_inner=20), "n_layer": dict(n_layer=5),
           "all": dict(n_embd=12, n_head=3, n_inner=24, n_layer=3)}


def small(seed=0):
    torch.manual_seed(seed)
    model = GPT(GPTConfig(**SMALL)).double()
    with torch.no_grad():   # trained-looking LayerNorms and biases, not the (1, 0) init
        for name, p in model.named_parameters():
            if "ln_" in name or name.endswith("bias"):
                p.add_(0.3 * torch.randn_like(p))
    return model


def ids(seed=1, b=3, t=8):
    return torch.randint(11, (b, t), generator=torch.Generator().manual_seed(seed))


def new_entry_masks(old, new):
    """name -> bool mask of the entries of `new` that do not come from `old` (leading slices)."""
    olds = dict(old.named_parameters())
    out = {}
    for name, p in new.named_parameters():
        q = olds.get(name)
        mask = torch.ones_like(p, dtype=torch.bool)
        if q is not None:
            mask = ~embed_old(torch.ones_like(q), p, qkv="c_attn" in name).bool()
        out[name] = mask
    return out


def test_masked_layer_norm_is_layer_norm_on_the_kept_dims_and_the_weighted_formula():
    g = torch.Generator().manual_seed(0)
    x = torch.randn(4, 10, generator=g, dtype=torch.float64)
    w, b = (torch.randn(10, generator=g, dtype=torch.float64) for _ in range(2))
    mask = torch.tensor([1.0] * 6 + [0.0] * 4, dtype=torch.float64)
    got = masked_layer_norm(x, mask, w, b)
    ref = F.layer_norm(x[:, :6], (6,), w[:6], b[:6], 1e-5)
    torch.testing.assert_close(got[:, :6], ref)
    mu = torch.rand(10, generator=g, dtype=torch.float64)          # fractional mask: the formula written out
    for row in range(4):
        xs = x[row].tolist()
        s = sum(mu.tolist())
        mean = sum(m * v for m, v in zip(mu.tolist(), xs)) / s
        var = sum(m * (v - mean) ** 2 for m, v in zip(mu.tolist(), xs)) / s
        want = [(v - mean) / math.sqrt(var + 1e-5) * float(w[i]) + float(b[i]) for i, v in enumerate(xs)]
        torch.testing.assert_close(masked_layer_norm(x, mu, w, b)[row], torch.tensor(want, dtype=torch.float64))


def test_msggpt_with_masks_one_is_the_plain_gpt():
    model = small()
    m = MSGGPT(model.config).double()
    m.load_state_dict(model.state_dict(), strict=False)
    torch.testing.assert_close(m(ids()).logits, model(ids()).logits)


@pytest.mark.parametrize("init", ["stack", "random", "zero"])
@pytest.mark.parametrize("which", list(GROWTHS))
def test_growth_at_mask_zero_is_the_small_model_even_with_wild_new_entries(which, init):
    old = small()
    new = grow(old, **GROWTHS[which], init=init, generator=torch.Generator().manual_seed(3))
    assert new.transformer.wte.weight.dtype == torch.float64
    want = old(ids()).logits
    torch.testing.assert_close(new(ids()).logits, want, rtol=0, atol=1e-10)
    g = torch.Generator().manual_seed(4)
    fresh_entries = new_entry_masks(old, new)
    with torch.no_grad():   # every new entry N(0, 9): the masks alone must preserve the function
        for name, p in new.named_parameters():
            fresh = torch.randn(p.shape, generator=g, dtype=p.dtype) * 3.0
            p.copy_(torch.where(fresh_entries[name], fresh, p))
    torch.testing.assert_close(new(ids()).logits, want, rtol=0, atol=1e-10)
    assert abs(loss_jump(old, new, ids())) < 1e-10
    set_growth_mask(new, 0.5)
    assert (new(ids()).logits - want).abs().max() > 1e-3   # the new parts do act once μ > 0


def test_old_weights_in_leading_slices_and_qkv_blocks():
    old = small()
    new = grow(old, n_embd=16, n_head=4, generator=torch.Generator().manual_seed(0))
    w_old, w_new = old.transformer.h[0].attn.c_attn.weight, new.transformer.h[0].attn.c_attn.weight
    for j in range(3):   # q, k, v: old rows of block j sit at the top of new block j
        torch.testing.assert_close(w_new[16 * j:16 * j + 8, :8], w_old[8 * j:8 * (j + 1)])
    b_old, b_new = old.transformer.h[1].attn.c_attn.bias, new.transformer.h[1].attn.c_attn.bias
    torch.testing.assert_close(b_new[[16, 17, 32]], b_old[[8, 9, 16]])
    assert (b_new[[8, 24, 40]] == 0).all()   # new biases 0
    torch.testing.assert_close(new.transformer.wte.weight[:, :8], old.transformer.wte.weight)
    assert new.lm_head.weight is new.transformer.wte.weight
    assert (new.transformer.ln_f.weight[8:] == 1).all() and (new.transformer.ln_f.bias[8:] == 0).all()
    assert new.head_mask.tolist() == [1.0] * 8 + [0.0] * 8 and new.hidden_mask.tolist() == new.head_mask.tolist()


def test_stack_indices_and_stacked_blocks():
    assert stack_indices(2, 4) == [0, 1]
    assert stack_indices(3, 6) == [0, 1, 2]
    assert stack_indices(3, 8) == [0, 1, 2, 1, 2]     # official: base * (n // L − 1) + top n mod L
    assert stack_indices(4, 6) == [2, 3]
    assert stack_indices(2, 2) == []
    old = small()
    new = grow(old, n_layer=5, init="stack")
    for i, src in zip(range(2, 5), [0, 1, 1]):
        torch.testing.assert_close(new.transformer.h[i].mlp.c_fc.weight, old.transformer.h[src].mlp.c_fc.weight)
    assert new.layer_mask.tolist() == [1, 1, 0, 0, 0]


def test_ffn_mask_acts_on_the_pre_activation():
    new = grow(small(), n_inner=20)
    set_growth_mask(new, 0.25)
    with torch.no_grad():
        new.transformer.h[0].mlp.c_fc.weight.mul_(100.0)   # pre-activations of order 1: GELU is curved there
    mlp, seen = new.transformer.h[0].mlp, {}
    hooks = [mlp.c_fc.register_forward_hook(lambda m, i, o: seen.update(pre=o)),
             mlp.act.register_forward_hook(lambda m, i, o: seen.update(inp=i[0], out=o)),
             mlp.c_proj.register_forward_hook(lambda m, i, o: seen.update(proj_in=i[0]))]
    new(ids())
    for h in hooks:
        h.remove()
    scale = torch.tensor([1.0] * 12 + [0.25] * 8, dtype=torch.float64)
    torch.testing.assert_close(seen["inp"], seen["pre"] * scale)              # act(μ ⊙ (W₁x + b₁))
    torch.testing.assert_close(seen["proj_in"], F.gelu(seen["pre"] * scale))  # not μ ⊙ act(W₁x + b₁)
    assert (F.gelu(seen["pre"] * scale) - F.gelu(seen["pre"]) * scale).abs().max() > 1e-3


def test_mask_value_ramp_and_finish_growth():
    assert [mask_value(s, 10, 4) for s in (9, 10, 11, 13, 14, 20)] == [0.0, 0.0, 0.25, 0.75, 1.0, 1.0]
    old = small()
    new = grow(old, n_embd=12, n_head=3, n_inner=16, n_layer=3)
    with pytest.raises(ValueError, match="before the masks reach 1"):
        finish_growth(new)
    set_growth_mask(new, 1.0)
    plain = finish_growth(new)
    assert type(plain) is GPT and plain.transformer.wte.weight.dtype == torch.float64
    torch.testing.assert_close(plain(ids()).logits, new(ids()).logits)
    grow(plain, n_layer=4)   # a finished model grows again


def test_embed_old_and_copy_adam_state():
    old, new = torch.arange(6.0).view(2, 3), torch.empty(3, 5)
    want = torch.zeros(3, 5)
    want[:2, :3] = old
    torch.testing.assert_close(embed_old(old, new), want)
    q = torch.arange(6.0)   # q/k/v blocks of 2 into blocks of 3
    torch.testing.assert_close(embed_old(q, torch.empty(9), qkv=True), torch.tensor([0., 1, 0, 2, 3, 0, 4, 5, 0]))
    p = torch.nn.Parameter(torch.randn(2, 3))
    opt = torch.optim.AdamW([p])
    p.grad = torch.randn(2, 3)
    opt.step()
    opt.step()
    st = copy_adam_state(opt.state[p], torch.empty(4, 3))
    assert float(st["step"]) == 2.0
    torch.testing.assert_close(st["exp_avg"][:2], opt.state[p]["exp_avg"])
    assert (st["exp_avg_sq"][2:] == 0).all()


def test_net2net_is_exact_on_the_ffn_only():
    old = small()
    want = old(ids()).logits
    g = torch.Generator().manual_seed(0)
    ffn = net2net_grow(old, n_inner=30, generator=g)
    torch.testing.assert_close(ffn(ids()).logits, want, rtol=0, atol=1e-10)
    for sizes in (dict(n_embd=16, n_head=4), dict(n_layer=3)):
        assert (net2net_grow(old, **sizes, generator=g)(ids()).logits - want).abs().max() > 1e-3


def test_net2net_head_copy_is_exact_inside_attention():
    old = small()   # a copied hidden dim changes the LN statistics: check the FFN units are copies
    new = net2net_grow(old, n_inner=16, generator=torch.Generator().manual_seed(1))
    w, w0 = new.transformer.h[0].mlp.c_fc.weight, old.transformer.h[0].mlp.c_fc.weight
    for j in range(12, 16):
        assert any(torch.equal(w[j], w0[k]) for k in range(12))


def test_train_flops():
    a, b = GPTConfig(**SMALL), GPTConfig(**{**SMALL, "n_layer": 4})
    got = train_flops([(a, 10, 4, 8), (b, 5, 2, 8)])
    assert got == 10 * 4 * 8 * flops_per_token(a, 8, training=True) + 5 * 2 * 8 * flops_per_token(b, 8, training=True)
    d, v, L, inner, t = 8, 11, 2, 12, 8   # forward written out: 3·(L·(8td² + 4t²d + 4t·d·inner) + 2tdv) per sequence
    assert train_flops([(a, 1, 1, 8)]) == 3 * (L * (8 * t * d * d + 4 * t * t * d + 4 * t * d * inner) + 2 * t * d * v)


def test_bad_input():
    old = small()
    with pytest.raises(ValueError, match="shrinks"):
        grow(old, n_inner=4)
    with pytest.raises(ValueError, match="head size"):
        grow(old, n_embd=16)
    with pytest.raises(ValueError, match="unknown init"):
        grow(old, n_layer=3, init="zeros")
    new = grow(old, n_layer=3)
    with pytest.raises(ValueError, match="in flight"):
        grow(new, n_layer=4)
    with pytest.raises(ValueError, match=r"\[0, 1\]"):
        set_growth_mask(new, 1.5)
    with pytest.raises(ValueError, match="ramp_steps"):
        mask_value(3, 0, 0)
    with pytest.raises(ValueError, match="shrinks"):
        embed_old(torch.zeros(3), torch.zeros(2))
    with pytest.raises(ValueError, match="Adam"):
        copy_adam_state({"step": 1}, torch.zeros(2))
    with pytest.raises(ValueError, match="shrinks"):
        net2net_grow(old, n_layer=1)


def test_schedule_rejects_second_growth_inside_the_first_ramp():
    from omegaconf import OmegaConf

    from common.config import UserError
    from methods.msg.train import schedule
    cfg = OmegaConf.create({"method": {"msg": {"s1": 10, "s2": 25, "ramp": 20},
                                       "target": {"n_embd": 16, "n_head": 2, "n_inner": 32, "n_layer": 4}},
                            "trainer": {"max_steps": 100}})
    with pytest.raises(UserError) as err:
        schedule(cfg)
    assert err.value.exit_code == 2
    cfg.method.msg.s2 = 30
    assert schedule(cfg) == [(10, {"n_embd": 16, "n_head": 2, "n_inner": 32}), (30, {"n_layer": 4})]
    cfg.method.msg.ramp = 0
    with pytest.raises(UserError):
        schedule(cfg)


@pytest.mark.parametrize("exp", ["msg_mini", "msg_mini_sweep", "msg_paper_bert_large"])
def test_configured_schedules_are_valid_and_end_at_the_target(exp):
    from common.config import compose_checked
    from methods.msg.train import _msg_stage_steps, schedule
    cfg = compose_checked([f"experiment={exp}"])
    growths = schedule(cfg)
    start = GPT(GPTConfig(vocab_size=5, **{k: cfg.method.model[k] for k in ("n_positions", "n_embd", "n_layer",
                                                                             "n_head", "n_inner")}))
    final = _msg_stage_steps(cfg, start)[-1][0]
    assert {k: getattr(final, k) for k in ("n_embd", "n_head", "n_inner", "n_layer")} == dict(cfg.method.target)
    assert growths[-1][0] + int(cfg.method.msg.ramp) <= int(cfg.trainer.max_steps)


def test_zero_init_growth_has_zero_new_weights_and_dead_new_ffn_units():
    """init="zero" (the degenerate control): every new weight 0, so new FFN units get no gradient."""
    old = small()
    new = grow(old, n_inner=20, n_layer=3, init="zero", generator=torch.Generator().manual_seed(3))
    fresh = new_entry_masks(old, new)
    for name, p in new.named_parameters():
        if ".ln_" not in name and not name.startswith("transformer.ln_f"):
            assert p[fresh[name]].abs().max() == 0 if fresh[name].any() else True, name
    set_growth_mask(new, 0.5)
    new(ids(), labels=ids()).loss.backward()
    h0 = new.transformer.h[0].mlp
    assert h0.c_fc.weight.grad[12:].abs().max() == 0 and h0.c_proj.weight.grad[:, 12:].abs().max() == 0
    assert h0.c_fc.weight.grad[:12].abs().max() > 0


def _official_rewind(step, n, w, r1, r2):
    """get_scheduler_ex (cofe-ai/MSG model_ex/utils_ex_v2.py) with rewind_bool=True, written out."""
    if step < w:
        return step / max(1, w)
    if step < r1:
        return max(0.0, (n - step) / max(1, n - w))
    if r2 is None or step < r2:
        return max(0.0, (n - step + r1 - w) / max(1, n - w))
    return max(0.0, (n - step + r2 - w) / max(1, n - w))


def test_lr_scale_shift_is_the_official_rewind_and_reanneal_anneals_by_n():
    from common.config import UserError
    from common.trainer import lr_factor
    from methods.msg.train import lr_scale
    n, w, growths = 100, 10, (30, 60)
    for step in range(w, n):   # the floor's warm-up is (step + 1)/w, the official step/w: compared after it
        assert lr_scale(step, n, "linear", w, growths, "shift") == pytest.approx(_official_rewind(step, n, w, 30, 60))
        assert lr_scale(step, n, "cosine", w, growths, "none") == lr_factor(step, n, "cosine", w)
        assert lr_scale(step, n, "cosine", w, (), "reanneal") == lr_factor(step, n, "cosine", w)   # no growth
    for step in range(60, n):   # cosine from the last growth's peak down to 0 at n
        want = 0.5 * (1 + math.cos(math.pi * (step - 60) / (n - 60)))
        assert lr_scale(step, n, "cosine", w, growths, "reanneal") == pytest.approx(want)
    assert lr_scale(45, n, "cosine", w, growths, "reanneal") == pytest.approx(0.5 * (1 + math.cos(math.pi * 15 / 70)))
    assert lr_scale(95, n, "cosine", w, (30, 60, 90), "reanneal") == lr_scale(95, n, "cosine", w, growths, "reanneal")
    with pytest.raises(UserError) as err:   # the official rule rewinds at the first two growths only
        lr_scale(0, n, "cosine", w, growths, "bogus")
    assert err.value.exit_code == 2


def test_the_loop_sets_the_rewound_lr(rewind="reanneal"):
    from common.config import compose_checked
    from methods.msg.train import lr_scale
    cfg = compose_checked(["experiment=msg_smoke", f"method.msg.lr_rewind={rewind}"])
    start = GPT(GPTConfig(vocab_size=11, **{k: cfg.method.model[k] for k in ("n_positions", "n_embd", "n_layer",
                                                                              "n_head", "n_inner")}))
    seen = {}

    class Ctx:
        seed, device = 0, "cpu"

    gen = torch.Generator().manual_seed(0)
    data = torch.randint(11, (8, 4, 16), generator=gen)
    from methods.msg.train import train
    train(cfg, Ctx(), start, lambda step: data[step], data[0], log=lambda d, step: seen.__setitem__(step - 1, d["lr"]))
    sched, lr = cfg.trainer.schedule, cfg.trainer.optimizer.lr
    want = {s: lr * lr_scale(s, 8, sched.name, sched.warmup_steps, (2, 5), rewind) for s in range(8)}
    assert seen == pytest.approx(want)
    assert seen[5] == pytest.approx(lr) and seen[2] == pytest.approx(lr)   # back at the peak at both growths
    assert seen[4] < lr and seen[7] < seen[5]


def _reference_forward(model, input_ids):
    """MSGGPT's forward written out from the issue's equations: explicit causal softmax attention per
    head, the weighted LayerNorm statistics summed by hand, every mask where the spec puts it."""
    tr, mh, ma, mf, lam = (model.transformer, model.hidden_mask, model.head_mask, model.ffn_mask,
                           model.layer_mask)
    b, t = input_ids.shape
    d, nh = model.config.n_embd, model.config.n_head
    hd = d // nh

    def ln(z, mod):
        s = mh.sum()
        mean = (mh * z).sum(-1, keepdim=True) / s
        var = (mh * (z - mean) ** 2).sum(-1, keepdim=True) / s
        return ((z - mean) / torch.sqrt(var + mod.eps) * mod.weight + mod.bias) * mh

    x = (tr.wte.weight[input_ids] + tr.wpe.weight[:t]) * mh
    causal = torch.ones(t, t, dtype=torch.bool).tril()
    for i, blk in enumerate(tr.h):
        a = ln(x, blk.ln_1) @ blk.attn.c_attn.weight.T + blk.attn.c_attn.bias
        q, k, v = a[..., :d] * ma, a[..., d:2 * d] * ma, a[..., 2 * d:] * ma
        y = torch.zeros_like(q)
        for h in range(nh):
            sl = slice(h * hd, (h + 1) * hd)
            scores = (q[..., sl] @ k[..., sl].transpose(-1, -2)) / math.sqrt(hd)
            att = torch.softmax(scores.masked_fill(~causal, float("-inf")), dim=-1)
            y[..., sl] = att @ v[..., sl]
        x1 = x + (y @ blk.attn.c_proj.weight.T + blk.attn.c_proj.bias) * mh
        pre = (ln(x1, blk.ln_2) @ blk.mlp.c_fc.weight.T + blk.mlp.c_fc.bias) * mf
        x2 = x1 + (F.gelu(pre) @ blk.mlp.c_proj.weight.T + blk.mlp.c_proj.bias) * mh
        x = lam[i] * x2 + (1 - lam[i]) * x
    return ln(x, tr.ln_f) @ tr.wte.weight.T


@pytest.mark.parametrize("mu", [0.3, "random"])
def test_fractional_masks_match_the_equations_written_out(mu):
    """Mid-ramp (0 < μ < 1) for the hidden, head, FFN and layer masks at once, against the forward
    written out by hand; "random": every mask entry its own value in (0, 1]."""
    new = grow(small(), n_embd=12, n_head=3, n_inner=24, n_layer=3, generator=torch.Generator().manual_seed(2))
    new.eval()
    if mu == "random":
        g = torch.Generator().manual_seed(5)
        with torch.no_grad():
            for m in new.masks.values():
                m.copy_(0.05 + 0.95 * torch.rand(m.shape, generator=g, dtype=m.dtype))
    else:
        set_growth_mask(new, mu)
    with torch.no_grad():
        torch.testing.assert_close(new(ids()).logits, _reference_forward(new, ids()))


def test_loop_optimizer_transfers_adam_state_by_name_per_qkv_block():
    """train._optimizer (transfer_states): every grown tensor inherits its Adam moments by name, q/k/v
    blocks of c_attn each in their leading slice, step kept; appended blocks start without state."""
    from omegaconf import OmegaConf

    from methods.msg.train import _optimizer
    cfg = OmegaConf.create({"trainer": {"optimizer": {"_target_": "torch.optim.AdamW", "lr": 1e-3}}})
    old = small()
    opt = _optimizer(cfg, old)
    for _ in range(2):
        opt.zero_grad()
        old(ids(), labels=ids()).loss.backward()
        opt.step()
    new = grow(old, n_embd=12, n_head=3, n_layer=3, generator=torch.Generator().manual_seed(0))
    opt2 = _optimizer(cfg, new, old, opt)
    olds = dict(old.named_parameters())
    for name, p in new.named_parameters():
        if name.startswith("transformer.h.2."):
            assert p not in opt2.state or not opt2.state[p], name
            continue
        src, st = opt.state[olds[name]], opt2.state[p]
        assert float(st["step"]) == 2.0, name
        for key in ("exp_avg", "exp_avg_sq"):
            want = torch.zeros_like(p)
            o = src[key]
            if "c_attn" in name:   # (3·8, ...) into (3·12, ...): block j's 8 rows at 12·j
                for j in range(3):
                    want[(slice(12 * j, 12 * j + 8),) + tuple(slice(0, s) for s in o.shape[1:])] = o[8 * j:8 * (j + 1)]
            else:
                want[tuple(slice(0, s) for s in o.shape)] = o
            torch.testing.assert_close(st[key], want, rtol=0, atol=0, msg=f"{name} {key}")
