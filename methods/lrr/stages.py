"""The stages of a run, called in order from `run(cfg, ctx)`: the pruning experiment (dense
round, then R rounds of IMP or LRR with magnitude or random masks, then the sign experiment)
and the single-neuron experiment of Section 2. Each training round is one stage of the shared
Trainer (a new optimizer and the full learning-rate schedule: the "learning rate rewinding")."""
from __future__ import annotations

import copy

import torch
from omegaconf import OmegaConf
from torch import nn

from common.callbacks import Callback
from common.eval import model_accuracy
from methods.lrr.pruning import prunable_weights, sign_flip_fraction
from methods.lrr.rounds import iterative_pruning, sign_experiment as sign_rounds
from methods.lrr.theory import single_neuron_compare


def standardize(train: tuple, test: tuple) -> tuple[tuple, tuple]:
    """uint8 images (N, C, H, W) -> floats standardised per channel with the training split's
    mean and std; labels unchanged."""
    x = train[0].float().div(255.0)
    mean = x.mean(dim=(0, 2, 3), keepdim=True)                   # (1, C, 1, 1)
    std = x.std(dim=(0, 2, 3), keepdim=True)
    return ((x - mean) / std, train[1]), ((test[0].float().div(255.0) - mean) / std, test[1])


class Snapshot(Callback):
    """A copy of the model's state_dict after `step` optimiser steps (IMP's rewind point θ_rw)."""

    def __init__(self, model: nn.Module, step: int):
        self.model, self.step = model, step
        self.state = copy.deepcopy(model.state_dict()) if step == 0 else None

    def after_step(self, trainer) -> None:
        if trainer.step == self.step:
            self.state = copy.deepcopy(self.model.state_dict())


ROUND_EPOCHS = ("fixed", "cumulative")


def round_steps(base_steps: int, round_index: int, round_epochs: str) -> int:
    """Steps of round `round_index`: `base_steps` for every round ('fixed'), or (k + 1)·base_steps
    for pruning round k ('cumulative': round k trains as long as LRR's weights have trained in
    total by the end of round k, the dense round included; round 0 is base_steps either way)."""
    if round_epochs not in ROUND_EPOCHS:
        raise ValueError(f"round_epochs must be one of {ROUND_EPOCHS}, got '{round_epochs}'")
    return base_steps * (round_index + 1 if round_epochs == "cumulative" and round_index > 0 else 1)


def round_trainer(ctx, inputs: torch.Tensor, labels: torch.Tensor, round_epochs: str = "fixed"):
    """train(model, stage, round_index, callbacks, steps=None): `round_steps(trainer.max_steps, k,
    round_epochs)` steps of the shared loop (or `steps`), a new optimizer and a full cosine schedule
    each call; round k reads the seeded batch order from step k·trainer.max_steps on (the sign
    experiment re-reads the last round's)."""
    sampler = ctx.sampler(len(labels))
    base = int(ctx.cfg.trainer.max_steps)

    def train(model: nn.Module, stage: str, round_index: int, callbacks=(), steps: int | None = None) -> dict:
        n = round_steps(base, round_index, round_epochs) if steps is None else int(steps)

        def batches(step: int):
            idx = sampler(round_index * base + step)
            return inputs[idx].to(ctx.device), labels[idx].to(ctx.device)
        cfg = ctx.cfg.trainer if n == base else OmegaConf.merge(ctx.cfg.trainer, {"max_steps": n})
        trainer = ctx.trainer(model, batches, callbacks=callbacks, stage=stage, trainer_cfg=cfg)
        last = trainer.fit(resume=False)       # rounds are short and keep no checkpoint
        ctx.last_step += trainer.step
        return {"train_loss": float(last["loss"])} if "loss" in last else {}
    return train


def weight_signs(model: nn.Module) -> dict[str, torch.Tensor]:
    """A detached copy of every prunable weight (module name -> tensor)."""
    return {n: w.detach().clone() for n, w in prunable_weights(model).items()}


def state_weights(model: nn.Module, state: dict) -> dict[str, torch.Tensor]:
    """The prunable weights held in a state_dict (module name -> tensor)."""
    return {n: state[f"{n}.weight"] for n in prunable_weights(model)}


def pruning_experiment(ctx, model: nn.Module, train: tuple, test: tuple, *, procedure: str, mask_fn: str,
                       num_rounds: int, prune_fraction: float, rewind_steps: int, sign_experiment: bool,
                       eval_batch_size: int, round_epochs: str = "fixed") -> dict[str, float]:
    """Dense round 0 (θ_rw snapshot after `rewind_steps` steps), then rounds 1..R of `procedure`
    ('imp' | 'lrr') with `mask_fn` masks, each `round_steps(...)` long; test accuracy after every
    round (acc_dense, acc_r1..R, acc_final); sign flips: flips_r0 (the share of round 1's kept
    weights whose sign at the start of round 1, θ_dense for LRR and θ_rw for IMP, differs from
    the init θ_0: the dense round's flips the procedure keeps), flips_early / flips_late (mean over
    the first / last min(3, R) rounds of each round's flips from its start to its end); the
    measured sparsity. With `sign_experiment`: `rounds.sign_experiment` with the final masks,
    θ_rw and the final weights' signs, one round of trainer.max_steps on round R's batches:
    (a) θ_rw ⊙ m -> acc_sign_a, (b) |θ_rw| ⊙ sign(θ_final) ⊙ m -> acc_sign_b."""
    fit = round_trainer(ctx, *train, round_epochs=round_epochs)
    model = model.to(ctx.device)

    def acc(m: nn.Module) -> float:
        return model_accuracy(m, test, eval_batch_size, ctx.device)

    init = weight_signs(model)
    snap = Snapshot(model, rewind_steps)
    fit(model, "round00", 0, [snap])
    if snap.state is None:
        raise ValueError(f"method.rewind_steps={rewind_steps} is past the dense round's "
                         f"{ctx.cfg.trainer.max_steps} steps")
    out = {"acc_dense": acc(model)}
    dense = weight_signs(model)
    gen = torch.Generator().manual_seed(ctx.seed)

    def train_fn(m: nn.Module, k: int) -> dict:
        metrics = fit(m, f"round{k:02d}", k)
        metrics["acc"] = acc(m)
        return metrics

    history = iterative_pruning(model, train_fn, num_rounds, prune_fraction, procedure,
                                rewind_state=snap.state if procedure == "imp" else None,
                                mask_fn=mask_fn, generator=gen)
    for rec in history:
        ctx.log({"acc": rec["acc"], "sparsity": rec["sparsity"], "sign_flips": rec["sign_flips"]}, rec["round"])
        out[f"acc_r{rec['round']}"] = rec["acc"]
    start = state_weights(model, snap.state) if procedure == "imp" else dense
    window = min(3, num_rounds)
    flips = [rec["sign_flips"] for rec in history]
    out.update(acc_final=history[-1]["acc"], sparsity=history[-1]["sparsity"],
               flips_r0=sign_flip_fraction(init, start, history[0]["masks"]),
               flips_early=sum(flips[:window]) / window, flips_late=sum(flips[-window:]) / window)
    if sign_experiment:
        stages = iter(("sign_a", "sign_b"))

        def sign_fn(m: nn.Module, k: int) -> dict:
            fit(m, next(stages), k, steps=ctx.cfg.trainer.max_steps)
            return {"acc": acc(m)}
        result = sign_rounds(model, sign_fn, snap.state, history[-1]["masks"], weight_signs(model), num_rounds)
        out.update(acc_sign_a=result["a"]["acc"], acc_sign_b=result["b"]["acc"])
    return out


INIT_STREAM = 1_000_003   # offset of the init generator's seed from the data's


def single_neuron_experiment(seed: int, procedure: str, *, dim: int, num_inits: int, steps: int, lr: float,
                             num_samples: int) -> dict[str, float]:
    """Section 2 over `num_inits` random inits (a₀ ~ N(0, 1), w₀ ~ N(0, I/d)), batched, restarted
    by `procedure` ('imp' | 'lrr'): the share of inits that learn the target (`success`), the
    share whose dense run's largest weight is w₁ (`mask_correct`), the median final loss."""
    # the inits get their own stream: seeded like the data (theory.single_neuron_data), a₀ and √d·w₀
    # would be the first entries of x, not independent of the samples
    gen = torch.Generator().manual_seed(seed + INIT_STREAM)
    a0 = torch.randn(num_inits, generator=gen, dtype=torch.float64)
    w0 = torch.randn(num_inits, dim, generator=gen, dtype=torch.float64) / dim ** 0.5
    r = single_neuron_compare(a0, w0, (procedure,), steps, lr, num_samples, seed)[procedure]
    return {"success": float(r["success"].double().mean()), "mask_correct": float(r["mask_correct"].double().mean()),
            "final_loss": float(r["loss"].median())}
