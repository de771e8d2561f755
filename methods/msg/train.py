"""MSG's own training loop (growth swaps model and optimizer), forked from common/trainer.py:
AdamW from `trainer.optimizer`, linear warm-up + the named schedule over all steps
(`common.trainer.lr_factor`), rewound at the first two growths when `method.msg.lr_rewind` says so
(`lr_scale`; official get_scheduler_ex), gradient clipping, batches a pure function of the step.
Rows (`method.msg.mode`):

    msg              start small; width (n_embd, n_head, n_inner) at s1, layers at s2; masks ramp
                     0 -> 1 over `ramp` steps, then a plain GPT remains (end_grow)
    no_mask          MSG's operators and init with μ = 1 at once
    net2net          the Net2Net operators at the same steps
    scratch          the target model from step 0, the same steps
    scratch_matched  the target model for as many steps as msg's training FLOPs allow
    small_only       the start model, the same steps
"""
from __future__ import annotations

import dataclasses
import math

import torch
from hydra.utils import instantiate
from omegaconf import OmegaConf

from common.config import UserError
from common.nn.gpt import GPT, flops_per_token
from common.trainer import lr_factor
from methods.msg.grow import (copy_adam_state, finish_growth, grow, in_growth, mask_value, net2net_grow,
                              set_growth_mask)
from methods.msg.model import MSGGPT

MODES = ("msg", "no_mask", "net2net", "scratch", "scratch_matched", "small_only")
REWINDS = ("none", "shift", "reanneal")
WIDTH = ("n_embd", "n_head", "n_inner")


@torch.no_grad()
def loss_jump(before: torch.nn.Module, after: torch.nn.Module, input_ids: torch.Tensor) -> float:
    """after's loss minus before's on input_ids (labels = inputs), both in eval mode."""
    out = []
    for m in (before, after):
        was = m.training
        m.eval()
        out.append(float(m(input_ids, labels=input_ids).loss))
        m.train(was)
    return out[1] - out[0]


def train_flops(stages) -> int:
    """Σ steps·batch·t·flops_per_token(config, t, training=True) over (config, steps, batch, t)."""
    total = 0
    for config, steps, batch, t in stages:
        if steps < 0 or batch < 1 or t < 1:
            raise ValueError(f"a stage needs steps >= 0, batch >= 1, t >= 1; got {steps}, {batch}, {t}")
        total += int(steps) * int(batch) * int(t) * flops_per_token(config, int(t), training=True)
    return total


def lr_scale(step: int, n: int, name: str, warmup: int, growth_steps=(), rewind: str = "none") -> float:
    """The base LR's multiplier at `step` of `n`. `none`: the floor's warm-up + named schedule over
    all n steps (`lr_factor`). At the first two growths g (official get_scheduler_ex rewinds at the
    first two): `shift` (the official rule) rewinds the schedule to its peak, base(step - g + warmup),
    so the tail ends un-annealed; `reanneal` returns to the peak and runs the schedule anew from g to
    n, annealed by n. Rows without growths get `none` whatever `rewind` says."""
    if rewind not in REWINDS:
        raise UserError(f"method.msg.lr_rewind must be one of {', '.join(REWINDS)}, got '{rewind}'", exit_code=2)
    done = [g for g in sorted(growth_steps)[:2] if g <= step]
    if rewind == "none" or not done or (warmup and step < warmup):
        return lr_factor(step, n, name, warmup)
    g = done[-1]
    if rewind == "shift":
        return lr_factor(step - g + warmup, n, name, warmup)
    return lr_factor(step - g, n - g, name, 0)


def schedule(cfg) -> list[tuple[int, dict]]:
    """The growths [(step, sizes)]: `method.msg.growths` (a list of {at: step, <size>: value}, e.g. the
    official five-stage BERT schedule) or, when null, width (n_embd, n_head, n_inner of
    `method.target`) at s1 and n_layer at s2. Exit 2 unless each growth starts after the previous
    ramp ends (at >= previous + ramp, first > 0) and the last ramp ends by max_steps."""
    m, target, n = cfg.method.msg, cfg.method.target, int(cfg.trainer.max_steps)
    ramp = int(m.ramp)
    if ramp < 1:
        raise UserError(f"method.msg.ramp must be >= 1, got {ramp}", exit_code=2)
    if m.get("growths"):
        growths = []
        for g in m.growths:
            sizes = {k: int(v) for k, v in g.items() if k != "at"}
            if not sizes or set(sizes) - {*WIDTH, "n_layer"}:
                raise UserError(f"method.msg.growths: each entry is {{at, n_embd|n_head|n_inner|n_layer}}, got {dict(g)}",
                                exit_code=2)
            growths.append((int(g["at"]), sizes))
    else:
        growths = [(int(m.s1), {k: int(target[k]) for k in WIDTH}), (int(m.s2), {"n_layer": int(target.n_layer)})]
    prev = None
    for at, _ in growths:
        if (prev is None and at <= 0) or (prev is not None and at < prev + ramp):
            raise UserError(f"method.msg: each growth must start after the previous ramp (s2 >= s1 + ramp), first > 0; "
                            f"got growth steps {[a for a, _ in growths]} with ramp {ramp}", exit_code=2)
        prev = at
    if prev + ramp > n:
        raise UserError(f"method.msg: the last ramp ({prev} + {ramp}) ends after trainer.max_steps={n}", exit_code=2)
    return growths


def _optimizer(cfg, model: torch.nn.Module, old_model=None, old_opt=None):
    """AdamW over model's parameters; with an old model/optimizer, each parameter of the same name
    inherits its state by copy_adam_state (transfer_states); new blocks start without state."""
    opt = instantiate(OmegaConf.to_container(cfg.trainer.optimizer), params=list(model.parameters()))
    if old_opt is not None:
        old = dict(old_model.named_parameters())
        for name, p in model.named_parameters():
            q = old.get(name)
            if q is not None and q in old_opt.state and old_opt.state[q]:
                opt.state[p] = copy_adam_state(old_opt.state[q], p.detach(), qkv=name.endswith(("c_attn.weight",
                                                                                                 "c_attn.bias")))
    return opt


def train(cfg, ctx, start: GPT, batches, val_batch: torch.Tensor, log=None, on_step=None) -> tuple[GPT, dict]:
    """Run the row's loop; (final plain GPT, metrics: train_flops, steps, loss_jump (max |jump| over the
    growths) and, for msg, the sub-rows' jumps: no_mask, net2net, zero_no_mask). `on_step(model,
    steps_done)` after each update."""
    m, tr = cfg.method.msg, cfg.trainer
    mode = str(m.mode)
    if mode not in MODES:
        raise UserError(f"method.msg.mode must be one of {', '.join(MODES)}, got '{mode}'", exit_code=2)
    n, batch, t = int(tr.max_steps), int(tr.batch_size), int(cfg.method.model.n_positions)
    growths = schedule(cfg)
    ramp = int(m.ramp)
    target_cfg = _msg_stage_steps(cfg, start)[-1][0]
    stages = [(c, k, batch, t) for c, k in _msg_stage_steps(cfg, start)]
    steps = n
    if mode == "scratch_matched":   # the target trained for msg's FLOPs (rounded down to whole steps)
        steps = max(1, train_flops(stages) // train_flops([(target_cfg, 1, batch, t)]))
    if mode.startswith("scratch"):
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(ctx.seed)
            model = GPT(target_cfg)
        stages = [(target_cfg, steps, batch, t)]
    else:
        model = start
        if mode == "small_only":
            stages = [(start.config, n, batch, t)]
    model = model.to(ctx.device)
    gen = torch.Generator().manual_seed(int(ctx.seed) + 7919)
    opt = _optimizer(cfg, model)
    base_lr = float(tr.optimizer.lr)
    sched = tr.schedule
    jumps: dict[str, list[float]] = {"": [], "no_mask/": [], "net2net/": [], "zero_no_mask/": []}
    grow_at = {s: sizes for s, sizes in growths} if mode in ("msg", "no_mask", "net2net") else {}
    current = None   # (grow step) of the growth in flight
    rewind, rewind_at = str(m.get("lr_rewind", "none")), str(m.get("lr_rewind_at", "growths"))
    lr_scale(0, steps, sched.name, int(sched.warmup_steps), (), rewind)   # a bad name exits before training
    if rewind_at not in ("growths", "schedule"):
        raise UserError(f"method.msg.lr_rewind_at must be growths or schedule, got '{rewind_at}'", exit_code=2)
    # `schedule`: rewind at the schedule's growth steps in a row that does not grow (scratch, small_only
    # with msg's LR profile: the control that separates the LR rule from the growth)
    lr_at = grow_at if rewind_at == "growths" else [s for s, _ in growths]
    for step in range(steps):
        if step in grow_at:
            sizes = grow_at[step]
            state = gen.get_state()
            if mode == "net2net":
                new = net2net_grow(model, **sizes, generator=gen)
            else:
                new = grow(model, **sizes, init=str(m.init), generator=gen)
                if mode == "no_mask":
                    new = finish_growth(set_growth_mask(new, 1.0))
                else:
                    current = step
            jumps[""].append(loss_jump(model, new, val_batch))
            if mode == "msg":   # the baselines' operators on the same checkpoint (sub-rows)
                g2 = torch.Generator().manual_seed(0)
                g2.set_state(state)
                nm = finish_growth(set_growth_mask(grow(model, **sizes, init=str(m.init), generator=g2), 1.0))
                jumps["no_mask/"].append(loss_jump(model, nm, val_batch))
                jumps["net2net/"].append(loss_jump(model, net2net_grow(model, **sizes, generator=g2), val_batch))
                # zero-initialised new weights without masks: preserving except through the LayerNorm
                # statistics of the new hidden dims (the sharper control of the masks' exactness)
                z = grow(model, **sizes, init="zero", generator=torch.Generator().manual_seed(0))
                jumps["zero_no_mask/"].append(loss_jump(model, finish_growth(set_growth_mask(z, 1.0)), val_batch))
            opt = _optimizer(cfg, new, model, opt)
            model = new
        if current is not None:
            mu = mask_value(step, current, ramp)
            if mu >= 1.0:
                new = finish_growth(set_growth_mask(model, 1.0))
                opt = _optimizer(cfg, new, model, opt)
                model, current = new, None
            else:
                set_growth_mask(model, mu)
        for g in opt.param_groups:
            g["lr"] = base_lr * lr_scale(step, steps, sched.name, int(sched.warmup_steps), lr_at, rewind)
        model.train()
        ids = batches(step)
        loss = model(ids, labels=ids).loss
        if not math.isfinite(float(loss.detach())):
            raise UserError(f"loss became {float(loss.detach())} at step {step}; lower the learning rate", exit_code=1)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        if tr.clip_grad:
            torch.nn.utils.clip_grad_norm_(model.parameters(), float(tr.clip_grad))
        opt.step()
        if on_step is not None:
            on_step(model, step + 1)
        if log is not None and ((step + 1) % int(tr.log_every) == 0 or step + 1 == steps):
            log({"loss": float(loss.detach()), "lr": opt.param_groups[0]["lr"]}, step + 1)
    if isinstance(model, MSGGPT):
        if in_growth(model):
            raise UserError("training ended with a growth in flight", exit_code=2)
        model = finish_growth(model)
    metrics = {"train_flops": float(train_flops(stages)), "steps": float(steps)}
    for prefix, vals in jumps.items():
        if vals:
            metrics[f"{prefix}loss_jump"] = max(abs(v) for v in vals)
    return model, metrics


def _grown_config(config, sizes: dict):
    return dataclasses.replace(config, **sizes)


def _msg_stage_steps(cfg, start: GPT) -> list[tuple]:
    """(config, steps) of msg's stages: start until s1, width-grown until s2, target to the end."""
    growths, n = schedule(cfg), int(cfg.trainer.max_steps)
    cfgs = [start.config]
    for _, sizes in growths:
        cfgs.append(_grown_config(cfgs[-1], sizes))
    bounds = [0] + [s for s, _ in growths] + [n]
    return [(c, bounds[i + 1] - bounds[i]) for i, c in enumerate(cfgs)]
