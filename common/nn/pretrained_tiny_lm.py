"""A pretrained stage for relufication (issue #47, relu_strikes_back_mini_relufy): the tiny LM of
methods/relu_strikes_back trained from scratch with a dense activation (GELU) for `pretrain.steps`,
returned as the `method.model` a row then relufies (`method.relufy.stage`) and trains on.

It lives here, not in the method's package, so that adding it leaves the fingerprint of that
package's other tables unchanged (a `_target_` names it: the relufy table's runtime hash covers it).
The stage is trained by the plain loop below with the shared Trainer's recipe (the configured
AdamW, `common.trainer.lr_factor`'s warm-up + cosine, gradient clipping by global norm) and cached
in this process by its settings and seed, so the rows of one seed share one stage."""
from __future__ import annotations

import copy
import json

import torch
from hydra.utils import instantiate
from omegaconf import DictConfig, OmegaConf

from common.data.sampler import StepSampler
from common.trainer import lr_factor

_STAGES: dict[str, dict[str, torch.Tensor]] = {}   # settings + seed -> the stage's state dict (this process)
BATCH_SEED_OFFSET = 10_000   # the stage's batches come from seed + this, never the fine-tune's order


def _plain(x):
    return OmegaConf.to_container(x, resolve=True) if isinstance(x, DictConfig) else copy.deepcopy(x)


def pretrain_lm(model: torch.nn.Module, train_ids: torch.Tensor, seq_len: int, seed: int, spec: dict) -> list[float]:
    """Train `model` in place for `spec['steps']` steps of next-token loss on random windows of
    `train_ids` (StepSampler, seed `seed` + BATCH_SEED_OFFSET); returns the loss of every step."""
    steps, batch = int(spec["steps"]), int(spec["batch_size"])
    if steps < 0 or batch < 1:
        raise ValueError(f"pretrain needs steps >= 0 and batch_size >= 1, got {steps} and {batch}")
    if len(train_ids) <= seq_len + batch:
        raise ValueError(f"{len(train_ids)} training tokens are too few for windows of {seq_len}")
    opt = instantiate(_plain(spec["optimizer"]), params=list(model.parameters()))
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: lr_factor(s, steps, str(spec.get("schedule", "cosine")), int(spec.get("warmup_steps", 0))))
    sampler = StepSampler(len(train_ids) - seq_len, batch, seed + BATCH_SEED_OFFSET)
    span, clip, losses = torch.arange(seq_len), float(spec.get("clip_grad", 0.0)), []
    model.train()
    for step in range(steps):
        x = train_ids[sampler(step)[:, None] + span]
        loss = model(x, labels=x).loss
        opt.zero_grad(set_to_none=True)
        loss.backward()
        if clip:
            torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
        opt.step()
        sched.step()
        losses.append(float(loss.detach()))
    return losses


def pretrained_tiny_lm(vocab_size: int, seed: int, net, corpus, pretrain, n_positions: int = 64, n_embd: int = 128,
                       n_layer: int = 4, n_head: int = 4, n_inner: int | None = 512,
                       activation_function: str = "gelu"):
    """`net` (a `_target_` block: the method's LM class, here methods.relu_strikes_back.TinyLM) built
    with these arguments under `seed` and trained for `pretrain.steps` on the training stream of
    `corpus` (a `_target_` block returning (tokenizer, train ids, val ids): the method's corpus, same
    split and tokenizer). Both come by `_target_`, so common/ imports no method. The process's random
    state is left as it was, whether the stage is trained here or found in the cache, so every row
    of a seed starts from the same weights and the same state."""
    net, corpus, spec = _plain(net), _plain(corpus), _plain(pretrain)
    arch = dict(vocab_size=int(vocab_size), n_positions=int(n_positions), n_embd=int(n_embd), n_layer=int(n_layer),
                n_head=int(n_head), n_inner=n_inner, activation_function=str(activation_function))
    key = json.dumps({"net": net, "arch": arch, "corpus": corpus, "pretrain": spec, "seed": int(seed)},
                     sort_keys=True, default=str)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(int(seed))
        model = instantiate(net, **arch)
        if key not in _STAGES:
            tok, train_ids, _ = instantiate(corpus)
            if tok.vocab_size != arch["vocab_size"]:
                raise ValueError(f"vocab_size {vocab_size} is not the corpus tokenizer's ({tok.vocab_size})")
            pretrain_lm(model, train_ids, int(n_positions), int(seed), spec)
            _STAGES[key] = {k: v.detach().clone() for k, v in model.state_dict().items()}
    model.load_state_dict(_STAGES[key])
    return model
