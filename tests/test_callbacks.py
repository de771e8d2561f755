"""Trainer callbacks against hand derivations: EMA warm-up, best-on-validation with early
stopping, masks that stay zero under momentum and weight decay."""
import pytest
import torch

from common.callbacks import EMA, BestOnValidation, KeepMasked
from tests.test_trainer import make
from tests.trainer_fixtures import TinyRegressor, trainer_cfg


def test_ema_follows_the_warmed_up_decay(tmp_path):
    model = TinyRegressor(dropout=0.0)
    ema = EMA(model, decay=0.9)
    expected = [p.detach().clone() for p in model.parameters()]
    trainer = make(tmp_path, model, trainer_cfg(max_steps=5, ckpt_every=0), callbacks=[ema])
    for n in range(5):   # re-derive: the first update copies; then avg <- avg + (1 - d_n)(w - avg)
        trainer.train_step(trainer.batch_fn(n))
        trainer.step += 1
        ema.after_step(trainer)
        d = min(0.9, (1 + n) / (10 + n)) if n else 0.0
        expected = [a + (1 - d) * (p.detach() - a) for a, p in zip(expected, model.parameters())]
    for a, b in zip(ema.module.parameters(), expected):
        torch.testing.assert_close(a, b)


def test_best_on_validation_restores_the_best_and_stops_after_patience(tmp_path):
    scores = iter([0.1, 0.5, 0.3, 0.2, 0.4, 0.9])
    model = TinyRegressor()
    best = BestOnValidation(model, "acc", mode="max", patience=3)
    snapshots = {}

    def evaluate(m, step):
        snapshots[step] = {k: v.clone() for k, v in m.state_dict().items()}
        return {"acc": next(scores)}

    trainer = make(tmp_path, model, trainer_cfg(max_steps=10, eval_every=1, ckpt_every=0), eval_fn=evaluate,
                   callbacks=[best])
    trainer.fit()
    assert trainer.step == 5 and best.best_step == 2 and best.best == 0.5   # 3 evals without a gain
    for k, v in model.state_dict().items():
        torch.testing.assert_close(v, snapshots[2][k])
    with pytest.raises(KeyError, match="loss"):
        BestOnValidation(model, "loss").on_eval(trainer, {"acc": 1.0})


def test_masked_weights_stay_zero_under_momentum_and_weight_decay(tmp_path):
    model = TinyRegressor(dropout=0.0)
    weight = model.net[0].weight
    mask = torch.rand(weight.shape, generator=torch.Generator().manual_seed(0)) > 0.5
    keep = KeepMasked(model, {"net.0.weight": mask})
    cfg = trainer_cfg(max_steps=8, ckpt_every=0,
                      optimizer={"_target_": "torch.optim.SGD", "lr": 0.1, "momentum": 0.9, "weight_decay": 0.1})
    make(tmp_path, model, cfg, callbacks=[keep]).fit()
    assert torch.all(weight[~mask] == 0) and torch.all(weight[mask] != 0)
    with pytest.raises(ValueError, match="shape"):
        KeepMasked(model, {"net.0.weight": mask[:1]})
