"""BESA and its baselines: the soft mask and its straight-through gradient, per-row counts,
Wanda and SparseGPT against slow references, zero counts of a pruned (tiny) Llama, BESA's block
error below Wanda's, and the public API's defaults against the paper and the configs."""
import copy
import inspect

import pytest
import torch
from torch import nn

from common.eval import perplexity
from methods.besa import BesaLinear, magnitude, output_error, overall_sparsity, prune, sparsegpt, wanda


def test_soft_mask_matches_definition_and_straight_through():
    torch.manual_seed(0)
    lin = nn.Linear(10, 4, bias=False)
    layer = BesaLinear(lin, torch.rand(10) + 0.1, candidates=20)
    with torch.no_grad():
        layer.theta.normal_(0, 2)
    beta = torch.softmax(layer.theta.detach(), 1)
    counts = torch.floor(layer.p * 10 + 1e-6)
    m = layer.mask().detach()
    s = layer.row_sparsity().detach()
    for r in range(4):
        n_drop = int(s[r] * 10 + 1e-6)
        ranks = layer.rank_of_col[r]
        for j in range(10):
            k = int(ranks[j])
            p_keep = 1 - float(sum(beta[r, d] for d in range(21) if counts[d] > k))
            assert abs(float(m[r, j]) - (1.0 if k >= n_drop else 0.0)) < 1e-6  # forward: the hard mask
            # backward: d(mask)/dθ is that of the soft keep-probability
            g_m = torch.autograd.grad(layer.mask()[r, j], layer.theta)[0]
            theta = layer.theta.detach().clone().requires_grad_(True)
            b = torch.softmax(theta[r], 0)
            soft = 1 - sum((b[d] for d in range(21) if counts[d] > k), torch.zeros((), requires_grad=True))
            g_p = torch.autograd.grad(soft, theta, allow_unused=True)[0]
            g_p = torch.zeros_like(theta) if g_p is None else g_p
            torch.testing.assert_close(g_m, g_p, atol=1e-6, rtol=1e-5)
            assert abs(p_keep - float(soft.detach())) < 1e-6


def test_hard_masks_hit_per_row_counts():
    torch.manual_seed(1)
    lin = nn.Linear(37, 8, bias=False)
    layer = BesaLinear(lin, torch.rand(37) + 0.1)
    with torch.no_grad():
        layer.theta.normal_(0, 3)
    want = torch.floor(layer.row_sparsity().detach() * 37 + 1e-6)
    out = layer.finish()
    assert torch.equal((out.weight == 0).sum(1).float(), want)


def test_magnitude_and_wanda_against_loops():
    torch.manual_seed(2)
    W, x_norm = torch.randn(6, 11), torch.rand(11) * 3
    for fn, score in ((magnitude, W.abs()), (wanda, W.abs() * x_norm)):
        got = fn(W, 0.5, x_norm=x_norm)
        for r in range(6):
            drop = sorted(range(11), key=lambda j: float(score[r, j]))[:5]
            want = W[r].clone()
            want[drop] = 0
            assert torch.equal(got[r], want)


def slow_sparsegpt(W, H, sparsity, blocksize):
    """The same OBS sweep without lazy batching: every column update hits all later columns."""
    W, H = W.clone().double(), H.clone().double()
    n = W.shape[1]
    H += 0.01 * torch.diag(H).mean() * torch.eye(n, dtype=H.dtype)
    U = torch.linalg.cholesky(torch.linalg.inv(H), upper=True)
    for i1 in range(0, n, blocksize):
        i2 = min(i1 + blocksize, n)
        score = (W[:, i1:i2] ** 2 / torch.diag(U)[i1:i2] ** 2).flatten()
        mask = torch.zeros(score.numel(), dtype=torch.bool)
        mask[score.argsort()[: int(score.numel() * sparsity)]] = True
        mask = mask.view(W.shape[0], i2 - i1)
        for i in range(i1, i2):
            q = W[:, i].clone()
            q[mask[:, i - i1]] = 0
            err = (W[:, i] - q) / U[i, i]
            W[:, i:] -= torch.outer(err, U[i, i:])
            W[:, i] = q
    return W


def test_sparsegpt_matches_slow_reference_and_beats_magnitude():
    torch.manual_seed(3)
    n_in, n_out, tokens = 40, 12, 400
    mix = torch.randn(n_in, n_in) * 0.3 + torch.eye(n_in)
    X = torch.randn(tokens, n_in) @ mix          # correlated input features
    W = torch.randn(n_out, n_in)
    H = 2 * X.t() @ X / tokens
    got = sparsegpt(W, 0.5, hessian=H, blocksize=16)
    want = slow_sparsegpt(W, H, 0.5, 16).float()
    torch.testing.assert_close(got, want, atol=1e-4, rtol=1e-4)
    assert float((got == 0).float().mean()) == pytest.approx(0.5, abs=0.01)
    err = lambda Wp: float(((X @ (W - Wp).t()) ** 2).sum())  # noqa: E731
    assert err(got) < 0.7 * err(magnitude(W, 0.5)) and err(got) < err(wanda(W, 0.5, x_norm=X.norm(dim=0)))


@pytest.fixture(scope="module")
def tiny_llama():
    transformers = pytest.importorskip("transformers")
    cfg = transformers.LlamaConfig(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                   num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64)
    torch.manual_seed(0)
    return transformers.LlamaForCausalLM(cfg)


@pytest.mark.parametrize("method", ["magnitude", "wanda", "sparsegpt", "besa", "random"])
def test_pruned_model_zero_count_equals_reported(tiny_llama, method):
    model = copy.deepcopy(tiny_llama)
    ids = torch.randint(0, 64, (8, 16))
    before = perplexity(model, ids, batch_size=4)
    report = prune(model, ids, 0.5, method, batch_size=4, epochs=2, progress=False)
    layer_sp = {k: v for k, v in report.items() if k not in ("seconds_per_block", "raw_sparsity")}
    assert len(layer_sp) == 2 * 7
    numel = {f"{i}.{n}": m.weight.numel() for i, l in enumerate(model.model.layers)
             for n, m in l.named_modules() if isinstance(m, nn.Linear)}
    weighted = sum(layer_sp[k] * numel[k] for k in numel) / sum(numel.values())
    assert overall_sparsity(model) == pytest.approx(weighted, abs=1e-9)
    assert overall_sparsity(model) == pytest.approx(0.5, abs=0.02)
    if method not in ("besa", "random"):
        assert all(v == pytest.approx(0.5, abs=0.01) for v in layer_sp.values())
    assert perplexity(model, ids, batch_size=4) != before


def test_bad_method_is_a_clear_error(tiny_llama):
    with pytest.raises(ValueError, match="method must be one of"):
        prune(tiny_llama, torch.zeros(2, 4, dtype=torch.long), 0.5, "bogus")


def test_public_api_has_the_papers_defaults_and_the_configs_agree(compose_cfg):
    """D = 100 candidates, λ = 5, one epoch at batch 1 (BESA section 5.1; official main.py:
    --sparsity-step 0.01, --sparsity-beta 5, --epochs 1, --prune-batch-size 1)."""
    defaults = {k: p.default for k, p in inspect.signature(prune).parameters.items()}
    assert defaults["sparsity"] == 0.5 and defaults["method"] == "besa"
    assert (defaults["candidates"], defaults["lam"], defaults["epochs"], defaults["batch_size"]) == (100, 5.0, 1, 1)
    cfg = compose_cfg(["method=besa"])
    assert {k: cfg.method.pruner[k] for k in ("method", "sparsity", "candidates", "lam", "project", "spread")} == {
        k: defaults[k] for k in ("method", "sparsity", "candidates", "lam", "project", "spread")}
    assert defaults["project"] is False      # the paper's BESA: the penalty alone
    assert (cfg.trainer.epochs, cfg.trainer.batch_size) == (defaults["epochs"], defaults["batch_size"])
    assert cfg.trainer.optimizer._target_ == "torch.optim.Adam" and cfg.trainer.optimizer.lr == 0.05


def test_prune_runs_with_its_defaults(tiny_llama):
    model = copy.deepcopy(tiny_llama)
    prune(model, torch.randint(0, 64, (4, 16)), progress=False)   # BESA at 50%, the paper's settings
    assert overall_sparsity(model) == pytest.approx(0.5, abs=0.03)


def test_trainer_optimizer_is_what_besa_trains_with(compose_cfg, tiny_llama):
    """trainer.optimizer (and epochs, batch_size) reach BESA's loop: an lr that is not a no-op."""
    from methods.besa import build_pruner

    cfg = compose_cfg(["method=besa", "trainer.optimizer._target_=torch.optim.SGD", "trainer.optimizer.lr=0.123",
                       "trainer.epochs=2", "trainer.batch_size=3", "trainer.progress=false"])
    pruner = build_pruner(cfg)
    assert {k: pruner.keywords[k] for k in ("epochs", "batch_size", "progress", "lam", "candidates")} == {
        "epochs": 2, "batch_size": 3, "progress": False, "lam": 5.0, "candidates": 100}
    opt = pruner.keywords["optimizer"]([nn.Parameter(torch.zeros(2))])
    assert isinstance(opt, torch.optim.SGD) and opt.param_groups[0]["lr"] == 0.123
    ids = torch.randint(0, 64, (4, 16))
    sparsity = {}
    for lr in (1e-6, 0.5):   # a tiny step leaves every row at its initial 50%; a large one moves them
        model = copy.deepcopy(tiny_llama)
        cfg.trainer.optimizer.lr = lr
        report = build_pruner(cfg)(model, ids)
        sparsity[lr] = sorted(v for k, v in report.items() if k not in ("seconds_per_block", "raw_sparsity"))
    assert sparsity[1e-6] == pytest.approx([0.5] * len(sparsity[1e-6]))
    assert sparsity[0.5] != pytest.approx(sparsity[1e-6], abs=1e-3)


def test_besa_block_error_after_training_is_below_wandas(tiny_llama):
    """The paper's premise (Fig. 1a): block reconstruction with learned row sparsities leaves a
    smaller block output error than Wanda's uniform per-row pruning at the same sparsity. Both start
    from the same ranking (BESA's θ = 0 is exactly Wanda's mask), so the block loss must go down."""
    from methods.besa.prune import _dense_pass, _linears, _run, block_inputs, decoder_layers, train_block

    torch.manual_seed(4)
    model = copy.deepcopy(tiny_llama)
    with torch.no_grad():   # give the block's layers unequal sensitivity, as trained LLMs have
        for i, m in enumerate(_linears(decoder_layers(model)[0]).values()):
            m.weight.mul_(1 + 3 * (i % 3)).add_(0.05 * torch.randn_like(m.weight) * (i % 2))
    ids = torch.randint(0, 64, (16, 16))
    inps, kwargs = block_inputs(model, ids, 4)
    dense = decoder_layers(model)[0]
    refs, stats = _dense_pass(dense, inps, kwargs, need_hessian=False)

    besa_block = copy.deepcopy(dense)
    train_block(besa_block, inps, refs, kwargs, stats, 0.5, candidates=100, lam=5.0, epochs=10,
                optimizer=lambda p: torch.optim.Adam(p, lr=0.05))
    lin = _linears(besa_block)
    achieved = sum(float((m.weight == 0).sum()) for m in lin.values()) / sum(m.weight.numel() for m in lin.values())
    assert achieved == pytest.approx(0.5, abs=0.02)

    wanda_block = copy.deepcopy(dense)   # Wanda at BESA's achieved sparsity (per row ⌊s·cols⌋ ≤ BESA's zeros)
    with torch.no_grad():
        for n, m in _linears(wanda_block).items():
            m.weight.copy_(wanda(m.weight, achieved, x_norm=stats[n]["sq"].sqrt().float()))
    with torch.no_grad():
        def error(block):
            return sum(float(output_error(_run(block, h, kwargs), r)) for h, r in zip(inps, refs))
        besa_err, wanda_err = error(besa_block), error(wanda_block)
    assert besa_err < 0.9 * wanda_err, (besa_err, wanda_err)


class _CountingTokenizer:
    """Token i of the text is i: what `eval_tokens` slices is read off the ids directly."""
    def __call__(self, text, return_tensors="pt"):
        return type("Enc", (), {"input_ids": torch.arange(len(text))[None]})()


def test_validation_span_follows_the_test_span_and_is_disjoint():
    """eval.split=val scores the max_tokens after the test span (tuning never reads the test text)."""
    from omegaconf import OmegaConf

    from common.config import UserError
    from methods.besa import eval_tokens
    tok = _CountingTokenizer()
    ev = OmegaConf.create({"source": "pydoc", "max_tokens": 1000, "split": "test"})
    test = eval_tokens(tok, ev)[:1000]            # consecutive_windows keeps the first max_tokens
    val = eval_tokens(tok, OmegaConf.merge(ev, {"split": "val"}))
    assert torch.equal(test, torch.arange(1000)) and torch.equal(val, torch.arange(1000, 2000))
    with pytest.raises(UserError, match="eval.split must be test or val"):
        eval_tokens(tok, OmegaConf.merge(ev, {"split": "train"}))
    with pytest.raises(UserError, match="too few for a validation span"):
        eval_tokens(tok, OmegaConf.merge(ev, {"split": "val", "max_tokens": 10 ** 9}))
