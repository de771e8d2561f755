"""LRR's run path, `stages.pruning_experiment` (what the reproduce table runs), on the smoke config:
its sign experiment is `rounds.sign_experiment` itself (called once, with the final masks, θ_rw,
the final weights' signs and round R's batches), the round-0 sign flips against a count from the
captured weights, and the round lengths of `method.round_epochs` read from the trainers it builds."""
import copy

import pytest
import torch

import methods.lrr.stages as stages
from common.runner import RunContext, run_method
from methods.lrr import prunable_weights, round_steps
from methods.lrr import rounds
from tests.conftest import needs_fashion

pytestmark = needs_fashion


def smoke(compose_cfg, tmp_path, *overrides):
    return compose_cfg(["experiment=lrr_smoke", f"run_dir={tmp_path}", "logger=none", *overrides])


def test_the_run_path_imports_the_one_sign_experiment():
    assert stages.sign_rounds is rounds.sign_experiment


@pytest.mark.parametrize("procedure", ["lrr", "imp"])
def test_pruning_experiment_calls_rounds_sign_experiment_with_the_final_masks_and_signs(
        compose_cfg, tmp_path, monkeypatch, procedure):
    calls, captured = [], {}
    real_pruning = stages.iterative_pruning

    def spy_pruning(model, train_fn, num_rounds, *args, **kwargs):
        history = real_pruning(model, train_fn, num_rounds, *args, **kwargs)
        captured["final"] = {n: w.detach().clone() for n, w in prunable_weights(model).items()}
        captured["masks"] = history[-1]["masks"]
        return history

    def spy_sign(model, train_fn, rewind_state, masks, signs, round_index):
        out = rounds.sign_experiment(model, train_fn, rewind_state, masks, signs, round_index)
        calls.append({"rewind": copy.deepcopy(rewind_state), "masks": masks, "signs": signs,
                      "round": round_index, "out": out})
        return out

    monkeypatch.setattr(stages, "iterative_pruning", spy_pruning)
    monkeypatch.setattr(stages, "sign_rounds", spy_sign)
    cfg = smoke(compose_cfg, tmp_path, f"method.procedure={procedure}")
    metrics = run_method(cfg)
    assert len(calls) == 1
    call = calls[0]
    assert call["round"] == cfg.method.num_rounds                     # round R's batches
    assert all(torch.equal(call["masks"][n], captured["masks"][n]) for n in captured["masks"])
    assert all(torch.equal(call["signs"][n], captured["final"][n]) for n in captured["final"])
    assert set(call["rewind"]) >= {f"{n}.weight" for n in captured["final"]}  # θ_rw, a full state_dict
    assert metrics["acc_sign_a"] == call["out"]["a"]["acc"] and metrics["acc_sign_b"] == call["out"]["b"]["acc"]


def test_no_sign_experiment_when_switched_off(compose_cfg, tmp_path, monkeypatch):
    monkeypatch.setattr(stages, "sign_rounds", lambda *a, **k: pytest.fail("sign experiment ran"))
    metrics = run_method(smoke(compose_cfg, tmp_path, "method.sign_experiment=false"))
    assert "acc_sign_a" not in metrics and "flips_r0" in metrics


@pytest.mark.parametrize("procedure", ["lrr", "imp"])
def test_round0_flips_count_the_signs_each_procedure_carries_into_round_1(compose_cfg, tmp_path, monkeypatch,
                                                                          procedure):
    seen = {}
    real_weights, real_pruning = stages.weight_signs, stages.iterative_pruning

    def spy_weights(model):
        out = real_weights(model)
        seen.setdefault("init", out)                                   # the first call: θ_0
        return out

    def spy_pruning(model, train_fn, num_rounds, rate, method, rewind_state=None, **kwargs):
        dense = {n: w.detach().clone() for n, w in prunable_weights(model).items()}
        seen["start"] = ({n: rewind_state[f"{n}.weight"].clone() for n in dense} if method == "imp" else dense)
        history = real_pruning(model, train_fn, num_rounds, rate, method, rewind_state=rewind_state, **kwargs)
        seen["mask1"] = history[0]["masks"]
        return history

    monkeypatch.setattr(stages, "weight_signs", spy_weights)
    monkeypatch.setattr(stages, "iterative_pruning", spy_pruning)
    metrics = run_method(smoke(compose_cfg, tmp_path, f"method.procedure={procedure}", "method.rewind_steps=1",
                               "trainer.optimizer.lr=0.5"))
    init, start, mask = seen["init"], seen["start"], seen["mask1"]
    flips = sum(int(((init[n] > 0) & (start[n] < 0) | (init[n] < 0) & (start[n] > 0))[mask[n]].sum()) for n in mask)
    kept = sum(int(mask[n].sum()) for n in mask)
    assert flips > 0                                                   # the check can tell 0 from the count
    assert metrics["flips_r0"] == pytest.approx(flips / kept, rel=1e-12)


def test_round_steps():
    assert [round_steps(10, k, "fixed") for k in range(4)] == [10, 10, 10, 10]
    assert [round_steps(10, k, "cumulative") for k in range(4)] == [10, 20, 30, 40]
    with pytest.raises(ValueError, match="round_epochs"):
        round_steps(10, 1, "sum")


def test_cumulative_rounds_train_k_plus_1_times_as_long(compose_cfg, tmp_path, monkeypatch):
    lengths = {}
    real = RunContext.trainer

    def spy(self, model, batch_fn, eval_fn=None, callbacks=(), stage=None, trainer_cfg=None):
        lengths[stage] = int((trainer_cfg or self.cfg.trainer).max_steps)
        return real(self, model, batch_fn, eval_fn=eval_fn, callbacks=callbacks, stage=stage, trainer_cfg=trainer_cfg)

    monkeypatch.setattr(RunContext, "trainer", spy)
    cfg = smoke(compose_cfg, tmp_path, "method.procedure=imp", "method.round_epochs=cumulative")
    run_method(cfg)
    base = cfg.trainer.max_steps
    assert lengths == {"round00": base, "round01": 2 * base, "round02": 3 * base,
                       "sign_a": base, "sign_b": base}                  # the sign rounds stay one round long
