"""Zero-shot accuracy (the paper's Table 1 column) with EleutherAI's lm-evaluation-harness (`lm_eval`,
the `llm` extra): a Hugging Face model through the harness's own `HFLM`, the floor GPT (`TinyLM`,
trained from scratch in the OPT-1.3B config) through `TinyLMEval`, the harness's `LM` interface
scoring log-likelihoods with our model. Multiple-choice tasks only (ARC, HellaSwag, PIQA, ...): each
answer is scored by log p(continuation | context), which is all `loglikelihood` serves.

Task data come from the Hugging Face Hub on first use (the harness's `datasets`), so zero-shot runs
where the Hub is reachable (the paper tier; `method.zero_shot: null` turns it off, as the mini tables
and the offline GPU smoke do)."""
from __future__ import annotations

import math
import random

import numpy as np
import torch
import torch.nn.functional as F


def encode(tokenizer, text: str) -> list[int]:
    """Token ids of `text` without special tokens: a Hugging Face tokenizer or the floor's (`encode`)."""
    try:
        return list(tokenizer.encode(text, add_special_tokens=False))
    except TypeError:      # the floor's CharTokenizer / BPETokenizer add none
        return list(tokenizer.encode(text))


@torch.no_grad()
def continuation_logprob(model, context: list[int], continuation: list[int], max_length: int,
                         device="cpu") -> tuple[float, bool]:
    """(Σ log p(continuation_i | context, continuation_<i), whether every continuation token is the
    greedy argmax), the context left-truncated so that context + continuation fit `max_length` + 1
    tokens (the last token is only predicted). `model(ids).logits`: (1, T, vocab)."""
    if not continuation:
        raise ValueError("an empty continuation has no likelihood to score")
    ids = (list(context) + list(continuation))[-(max_length + 1):]
    n = min(len(continuation), len(ids) - 1)
    if n < len(continuation) or not context:
        raise ValueError(f"a continuation of {len(continuation)} tokens needs a context token and at most "
                         f"{max_length} tokens in all")
    inp = torch.tensor(ids[:-1], dtype=torch.long, device=device)[None]
    target = torch.tensor(ids[-n:], dtype=torch.long, device=device)
    logp = F.log_softmax(model(inp).logits[0, -n:].float(), dim=-1)
    return float(logp.gather(1, target[:, None]).sum()), bool((logp.argmax(-1) == target).all())


def tiny_lm_eval(model, tokenizer, max_length: int, device="cpu"):
    """An lm_eval `TemplateLM` around a causal LM with `.logits` (the floor GPT): the harness encodes
    each (context, continuation) pair as its HFLM does (the context's trailing spaces moved into the
    continuation, the whole string encoded and split; an empty context becomes the EOS token) and we
    score the tokens. Built on demand, so that importing this module needs no lm_eval."""
    from lm_eval.api.model import TemplateLM

    eos = getattr(tokenizer, "eos_token_id", None)
    if eos is None:
        raise ValueError("zero-shot scoring needs a tokenizer with an eos_token_id (the harness's prefix token)")

    class TinyLMEval(TemplateLM):
        @property
        def eot_token_id(self) -> int:
            return int(eos)

        def tok_encode(self, string: str, **kwargs) -> list[int]:
            return encode(tokenizer, string)

        def _loglikelihood_tokens(self, requests, disable_tqdm: bool = False, **kwargs):
            # one forward per request (no batching: the paper tier's cost, README)
            return [continuation_logprob(model, ctx, cont, max_length, device) for _, ctx, cont in requests]

        def loglikelihood_rolling(self, requests, disable_tqdm: bool = False):
            """A document's log-likelihood over disjoint windows (the harness's own windowing, as HFLM)."""
            from lm_eval.utils import get_rolling_token_windows, make_disjoint_window

            out = []
            for r in requests:
                windows = get_rolling_token_windows(token_list=encode(tokenizer, r.args[0]), prefix_token=int(eos),
                                                    max_seq_len=max_length, context_len=1)
                out.append(math.fsum(continuation_logprob(model, ctx, cont, max_length, device)[0]
                                     for ctx, cont in map(make_disjoint_window, windows)))
            return out

        def generate_until(self, requests, disable_tqdm: bool = False):
            raise NotImplementedError("TinyLMEval scores multiple-choice tasks only (loglikelihood)")

    return TinyLMEval()


def zero_shot(model, tokenizer, tasks, max_length: int, device="cpu", limit: int | None = None, hf: bool = False,
              batch_size: int = 8, task_manager=None) -> dict[str, float]:
    """`zs_<task>` accuracy (%, the harness's `acc`) of each task at 0 shots and `zs_avg`, their mean.
    `hf`: `model` is a transformers causal LM (the harness's HFLM); else a model with `.logits`."""
    try:
        import lm_eval
    except ImportError as err:
        raise ImportError("zero-shot evaluation needs lm-eval: pip install -e '.[llm]'") from err
    tasks = list(tasks)
    if not tasks:
        raise ValueError("method.zero_shot.tasks names no task")
    was_training = model.training      # read first: HFLM's constructor puts the model in eval mode
    state = random.getstate(), np.random.get_state()
    try:
        # the harness must not touch the run's random streams (it reseeds them unless told not to; the
        # fork and the saved states also cover any draw of its own), so later sub-rows train as without it
        with torch.random.fork_rng(devices=[torch.device(device)] if torch.device(device).type == "cuda" else []):
            if hf:
                from lm_eval.models.huggingface import HFLM
                lm = HFLM(pretrained=model, tokenizer=tokenizer, batch_size=batch_size, max_length=max_length)
            else:
                lm = tiny_lm_eval(model, tokenizer, max_length, device)
            model.eval()
            res = lm_eval.simple_evaluate(model=lm, tasks=tasks, num_fewshot=0, limit=limit, task_manager=task_manager,
                                          log_samples=False, bootstrap_iters=0, random_seed=None,
                                          numpy_random_seed=None, torch_random_seed=None)
    finally:
        model.train(was_training)
        random.setstate(state[0])
        np.random.set_state(state[1])
    out = {f"zs_{t}": 100.0 * float(res["results"][t]["acc,none"]) for t in tasks}
    out["zs_avg"] = math.fsum(out.values()) / len(out)
    # acc_norm (length-normalised), which HellaSwag and ARC-Challenge are usually quoted by, beside acc
    out |= {f"zs_{t}_norm": 100.0 * float(res["results"][t]["acc_norm,none"]) for t in tasks
            if "acc_norm,none" in res["results"][t]}
    return out


def zero_shot_metrics(cfg, model, tokenizer, max_length: int, device, hf: bool = False) -> dict[str, float]:
    """`method.zero_shot` ({tasks, limit, batch_size}) scored by `zero_shot`; {} when it is null."""
    zs = cfg.method.get("zero_shot")
    if zs is None:
        return {}
    return zero_shot(model, tokenizer, list(zs.tasks), max_length, device, limit=zs.get("limit"), hf=hf,
                     batch_size=int(zs.get("batch_size", 8)))
