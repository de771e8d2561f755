"""fit_and_evaluate: the run skeleton every template shares (sampler -> Trainer -> fit ->
evaluate), written once."""
from __future__ import annotations

from typing import Callable

import torch


def fit_and_evaluate(ctx, model: torch.nn.Module, batches: Callable[[int], object],
                     evaluate: Callable[[torch.nn.Module], dict], *, eval_fn=None, callbacks=(),
                     final: Callable[[], torch.nn.Module] | None = None, stage: str | None = None,
                     trainer_cfg=None) -> dict[str, float]:
    """Train `model` (its `training_step(batch) -> (loss, logs)`) on `batches(step)`, a pure
    function of the step, then return `evaluate(final_model)` computed in eval mode without
    gradients, plus `train_loss` (the last logged training loss) when there was training.

    eval_fn(model, step) -> metrics runs every `trainer.eval_every` steps (validation; the
    callbacks see its metrics); `final()` picks the model to evaluate (an SWA/EMA average)."""
    trainer = ctx.trainer(model, batches, eval_fn=eval_fn, callbacks=callbacks, stage=stage,
                          trainer_cfg=trainer_cfg)
    last = trainer.fit(resume=ctx.resume)
    ctx.last_step = max(ctx.last_step, trainer.step)
    chosen = final() if final is not None else model
    was = chosen.training
    chosen.eval()
    with torch.no_grad():
        metrics = dict(evaluate(chosen))
    chosen.train(was)
    if "loss" in last:  # a row with max_steps=0 (a reference) has no training loss
        metrics.setdefault("train_loss", float(last["loss"]))
    return metrics
