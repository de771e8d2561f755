"""ReLU Strikes Back's paper tier without a GPU: every paper config builds from the config alone at the
paper's size, zero-shot accuracy is lm-eval's on our model (log-likelihoods checked by hand, a whole
multiple-choice task scored offline from a local file). (A missing model's exit 2: test_relu_strikes_back_stage2.)"""
from __future__ import annotations

import json

import pytest
import torch
from omegaconf import OmegaConf

from methods.relu_strikes_back import TinyLM, build, reader_vocab
from methods.relu_strikes_back.zero_shot import continuation_logprob, encode, zero_shot, zero_shot_metrics


class Chars:
    """A character tokenizer (the floor's shape: `encode`, no special tokens), with an EOS id."""
    eos_token_id = 0

    def encode(self, text: str) -> list[int]:
        return [1 + (ord(c) % 60) for c in text]


def tiny(seed: int = 0) -> TinyLM:
    torch.manual_seed(seed)
    return TinyLM(vocab_size=64, n_positions=32, n_embd=16, n_layer=1, n_head=2, n_inner=32).eval()


@torch.no_grad()
def by_hand(model, ids: list[int], n: int) -> float:
    """Σ log p(ids[i] | ids[:i]) over the last n tokens, one forward per token."""
    total = 0.0
    for i in range(len(ids) - n, len(ids)):
        logits = model(torch.tensor([ids[:i]])).logits[0, -1]
        total += float(torch.log_softmax(logits.double(), -1)[ids[i]])
    return total


def test_continuation_logprob_is_the_sum_of_next_token_logprobs():
    model = tiny()
    ctx, cont = [5, 9, 2, 7], [3, 11, 4]
    got, greedy = continuation_logprob(model, ctx, cont, max_length=32)
    assert got == pytest.approx(by_hand(model, ctx + cont, 3), abs=1e-4)
    logits = model(torch.tensor([ctx + cont[:-1]])).logits[0, -3:]
    assert greedy == bool((logits.argmax(-1) == torch.tensor(cont)).all())
    own = list(ctx)                    # the model's own argmax continuation is greedy
    for _ in range(3):
        own.append(int(model(torch.tensor([own])).logits[0, -1].argmax()))
    got, greedy = continuation_logprob(model, ctx, own[len(ctx):], max_length=32)
    assert greedy and got == pytest.approx(by_hand(model, own, 3), abs=1e-4)
    long = list(range(1, 40))         # left-truncated to max_length + 1 tokens
    got, _ = continuation_logprob(model, long[:-2], long[-2:], max_length=8)
    assert got == pytest.approx(by_hand(model, long[-9:], 2), abs=1e-4)
    with pytest.raises(ValueError, match="empty continuation"):
        continuation_logprob(model, ctx, [], max_length=32)
    with pytest.raises(ValueError, match="context token"):
        continuation_logprob(model, [], cont, max_length=32)


def test_tiny_lm_adapter_answers_lm_eval_requests():
    pytest.importorskip("lm_eval")
    from lm_eval.api.instance import Instance
    from methods.relu_strikes_back.zero_shot import tiny_lm_eval

    model, tok = tiny(), Chars()
    lm = tiny_lm_eval(model, tok, max_length=32)
    reqs = [Instance("loglikelihood", {}, ("the cat", " sat"), 0), Instance("loglikelihood", {}, ("a", "b"), 1),
            Instance("loglikelihood", {}, ("", "xy"), 2), Instance("loglikelihood", {}, ("so ", "on"), 3)]
    out = lm.loglikelihood(reqs)
    assert out[0][0] == pytest.approx(by_hand(model, tok.encode("the cat sat"), 4), abs=1e-4)
    assert out[1][0] == pytest.approx(by_hand(model, tok.encode("ab"), 1), abs=1e-4)
    assert out[2][0] == pytest.approx(by_hand(model, [0] + tok.encode("xy"), 2), abs=1e-4)   # EOS as the context
    assert out[3][0] == pytest.approx(by_hand(model, tok.encode("so on"), 3), abs=1e-4)      # the space moves over
    text = "x" * 70                    # three windows of 32 after the EOS prefix
    ids = [0] + tok.encode(text)
    rolled = lm.loglikelihood_rolling([Instance("loglikelihood_rolling", {}, (text,), 0)])[0]
    # disjoint windows of 32 predictions: ids[1:33] on ids[0:32], ids[33:65] on ids[32:64], the last 6 on
    # the 32 tokens before them
    windows = by_hand(model, ids[0:33], 32) + by_hand(model, ids[32:65], 32) + by_hand(model, ids[38:71], 6)
    assert rolled == pytest.approx(windows, abs=1e-3)
    with pytest.raises(NotImplementedError):
        lm.generate_until([])


def test_zero_shot_scores_a_local_multiple_choice_task_as_the_argmax_of_likelihoods(tmp_path, monkeypatch):
    """A whole lm-eval task from a local file: its accuracy is the share of documents whose label has
    the largest log p(" " + choice | question) (the harness's target delimiter), choices of equal
    length so that no length bias decides; the run's random streams and training mode are untouched."""
    pytest.importorskip("lm_eval")
    import random

    import numpy as np
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    from lm_eval.tasks import TaskManager

    rng = np.random.default_rng(0)
    letters = "abcdefghijklmnopqrstuvwxyz"
    docs = [{"q": f"q{i} is", "choices": ["".join(rng.choice(list(letters), 3)) for _ in range(3)], "label": i % 3}
            for i in range(12)]
    (tmp_path / "test.jsonl").write_text("".join(json.dumps(d) + "\n" for d in docs))
    (tmp_path / "tiny_mc.yaml").write_text(
        "task: tiny_mc\ndataset_path: json\n"
        f"dataset_kwargs:\n  data_files:\n    test: {tmp_path / 'test.jsonl'}\n"
        "test_split: test\noutput_type: multiple_choice\ndoc_to_text: '{{q}}'\ndoc_to_choice: '{{choices}}'\n"
        "doc_to_target: '{{label}}'\nmetric_list:\n  - metric: acc\n")
    model, tok = tiny(3), Chars()
    preds = [max(range(3), key=lambda c: continuation_logprob(model, tok.encode(d["q"]), tok.encode(" " + d["choices"][c]),
                                                              32)[0]) for d in docs]
    assert len(set(preds)) > 1                          # the scores, not a fixed position, decide
    model.train()
    torch.manual_seed(5), random.seed(5), np.random.seed(5)
    got = zero_shot(model, tok, ["tiny_mc"], max_length=32, task_manager=TaskManager(include_path=str(tmp_path)))
    after = torch.rand(1), random.random(), np.random.rand()
    torch.manual_seed(5), random.seed(5), np.random.seed(5)
    assert after == (torch.rand(1), random.random(), np.random.rand())   # the harness reseeded nothing of ours
    assert model.training
    want = 100.0 * sum(p == d["label"] for p, d in zip(preds, docs)) / len(docs)
    assert got["zs_tiny_mc"] == pytest.approx(want) and 0 < want < 100
    assert got["zs_avg"] == got["zs_tiny_mc"]
    cfg = OmegaConf.create({"method": {"zero_shot": None}})
    assert zero_shot_metrics(cfg, model, tok, 32, "cpu") == {}       # off: nothing scored, nothing imported
    with pytest.raises(ValueError, match="no task"):
        zero_shot(model, tok, [], max_length=32)


def test_encode_takes_either_tokenizer_kind():
    class HF:
        def encode(self, text, add_special_tokens=True):
            return [9] * add_special_tokens + [len(text)]
    assert encode(HF(), "abc") == [3] and encode(Chars(), "ab") == Chars().encode("ab")


def test_every_paper_config_builds_from_the_config_alone_at_the_papers_size():
    from common.reproduce.paper import dry_run

    rows: list[dict] = []
    assert dry_run("relu_strikes_back", [], log=lambda line: None, rows=rows) == 0, rows
    got = {r["experiment"]: r["params_m"] for r in rows}
    assert got["relu_strikes_back_opt1b3"] == pytest.approx(1315.75, abs=0.01)          # OPT-1.3B's shape
    assert got["relu_strikes_back_llama7b_relufy"] == pytest.approx(6738.42, abs=0.01)
    assert got["relu_strikes_back_falcon7b_relufy"] == pytest.approx(6921.72, abs=0.01)


def test_reader_vocab_is_the_config_or_the_tokenizer():
    class Tok:
        def __len__(self):
            return 50265
    cfg = OmegaConf.create({"method": {"data": {"vocab_size": 50272, "reader": {"tokenizer": None}}}})
    assert reader_vocab(cfg, Tok()) == 50272 and reader_vocab(cfg) == 50272
    cfg.method.data.vocab_size = None
    assert reader_vocab(cfg, Tok()) == 50265
    cfg.method.data.vocab_size = 50000
    with pytest.raises(ValueError, match="smaller than the tokenizer"):
        reader_vocab(cfg, Tok())
    cfg = OmegaConf.create({"method": {"model": {"_target_": "methods.relu_strikes_back.TinyLM", "n_positions": 8,
                                                 "n_embd": 8, "n_layer": 1, "n_head": 1, "n_inner": 16},
                                       "data": {"vocab_size": 77, "reader": {"tokenizer": None}}}})
    assert build(cfg).transformer.wte.num_embeddings == 77
