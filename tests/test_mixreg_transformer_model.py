"""mixreg_transformer's transformer and training stages: it reads x_t but not y_t at position t,
its rows are independent, it learns a fixed batch; the prompt streams are pure functions of the
step, the metrics and plot, and the trainer resumes exactly."""
import numpy as np
import pytest
import torch

from methods.mixreg_transformer import MixRegTransformer, MixtureOfRegressions
from methods.mixreg_transformer import stages
from methods.mixreg_transformer.plots import nmse_vs_position
from tests.test_mixreg_transformer import D, M, SIGMA, prompts


# --- the transformer ----------------------------------------------------------------------------

@pytest.fixture(scope="module")
def tiny_model():
    torch.manual_seed(0)
    return MixRegTransformer(D, width=16, depth=2, heads=2, max_len=8).eval()


def test_transformer_sees_x_t_but_not_y_t_at_position_t(tiny_model):
    _, xs, ys, _ = prompts(batch=3, length=8, dtype=torch.float32)
    t = 4
    with torch.no_grad():
        base = tiny_model(xs, ys)
        y_moved = ys.clone()
        y_moved[:, t] += 3.0
        after_y = tiny_model(xs, y_moved)
        x_moved = xs.clone()
        x_moved[:, t] += 3.0
        after_x = tiny_model(x_moved, ys)
    assert base.shape == (3, 8)
    torch.testing.assert_close(after_y[:, :t + 1], base[:, :t + 1])          # y_t unseen at t
    assert (after_y[:, t + 1:] - base[:, t + 1:]).abs().amin() > 1e-6
    torch.testing.assert_close(after_x[:, :t], base[:, :t])                  # x_t unseen before t
    assert (after_x[:, t] - base[:, t]).abs().amin() > 1e-6                   # ... and seen at t


def test_transformer_rows_are_independent(tiny_model):
    _, xs, ys, _ = prompts(batch=4, length=6, dtype=torch.float32)
    with torch.no_grad():
        together = tiny_model(xs, ys)
        alone = torch.cat([tiny_model(xs[i:i + 1], ys[i:i + 1]) for i in range(4)])
        changed = ys.clone()
        changed[0] += 10.0
        others = tiny_model(xs, changed)[1:]
    torch.testing.assert_close(together, alone, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(others, together[1:], rtol=1e-5, atol=1e-6)


def test_transformer_rejects_long_prompts_and_wrong_width(tiny_model):
    _, xs, ys, _ = prompts(batch=2, length=9, dtype=torch.float32)
    with pytest.raises(ValueError, match="max_len 8"):
        tiny_model(xs, ys)
    with pytest.raises(ValueError, match="width 4"):
        tiny_model(torch.zeros(2, 3, D + 1), torch.zeros(2, 3))


def test_training_step_learns_a_fixed_batch():
    torch.manual_seed(0)
    model = MixRegTransformer(D, width=16, depth=2, heads=2, max_len=8)
    _, xs, ys, _ = prompts(batch=32, length=8, dtype=torch.float32)
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    losses = []
    for _ in range(30):
        loss, logs = model.training_step((xs, ys))
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    assert np.isfinite(losses).all() and "nmse_last" in logs
    assert losses[-1] < 0.7 * losses[0]


# --- the run's stages -----------------------------------------------------------------------------

def test_prompt_streams_are_pure_and_distinct():
    mix = MixtureOfRegressions(D, M, SIGMA, seed=0)
    batch_fn = stages.fresh_prompt_batches(mix.sample, 8, 5, seed=0)
    a, b = batch_fn(3), batch_fn(3)
    assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1])
    assert not torch.equal(batch_fn(4)[0], a[0])
    assert not torch.equal(stages.fresh_prompt_batches(mix.sample, 8, 5, seed=1)(3)[0], a[0])
    test_xs = stages.test_prompts(mix, 8, 5, seed=0)[0]
    assert not any(torch.equal(test_xs, batch_fn(s)[0]) for s in range(3))
    seen_xs, _ = stages.seen_prompts(batch_fn, 20)
    assert seen_xs.shape == (20, 5, D) and torch.equal(seen_xs[8:16], batch_fn(1)[0])
    fixed = stages.fixed_prompt_batches(seen_xs, seen_xs[..., 0], 4, seed=0)
    assert torch.equal(fixed(2)[0], fixed(2)[0]) and fixed(2)[0].shape == (4, 5, D)


def test_procedure_metrics_and_plot(tmp_path, tiny_model):
    mix = MixtureOfRegressions(D, M, SIGMA, seed=0)
    xs, ys, _ = stages.test_prompts(mix, 50, 8, seed=0)
    preds = stages.all_predictions(xs, ys, mix.components, SIGMA, model=tiny_model, em_components=mix.components)
    metrics = stages.procedure_metrics(preds, ys, D)
    assert list(metrics) == ["transformer", "posterior_mean", "argmin", "ridge", "ols", "zero", "em"]
    assert metrics["posterior_mean"]["dist_pm"] == 0 and metrics["ols"]["dist_ols"] == 0
    # EM given the true components is the posterior mean
    assert metrics["em"]["dist_pm"] == pytest.approx(0, abs=1e-10)
    by_hand = ((preds["argmin"].double() - ys.double()) ** 2)[:, 1:].mean().item() / D
    assert metrics["argmin"]["nmse"] == pytest.approx(by_hand, rel=1e-9)
    assert metrics["argmin"]["nmse_last"] == pytest.approx(((preds["argmin"] - ys) ** 2)[:, -1].mean().item() / D, rel=1e-5)
    curves = stages.nmse_curves(preds, ys, D)
    assert nmse_vs_position(curves, tmp_path / "nmse.png", "test", noise_floor=SIGMA ** 2 / D).stat().st_size > 1000


def test_trainer_drives_the_model_on_fresh_prompts_and_resumes_exactly(tmp_path):
    """The run's training stage: common/trainer.py's Trainer with `training_step` and the pure
    prompt stream; a run stopped by SIGTERM and resumed gives the uninterrupted run's losses."""
    import os
    import signal

    from omegaconf import OmegaConf

    from common.hardware import Hardware
    from common.logging import MetricLogger, read_jsonl
    from common.trainer import RunInterrupted, Trainer

    mix = MixtureOfRegressions(D, M, SIGMA, seed=0)
    cfg = OmegaConf.create(dict(max_steps=6, batch_size=8, grad_accum=1, clip_grad=1.0, log_every=1, eval_every=0,
                                ckpt_every=0, progress=False, schedule={"name": "cosine", "warmup_steps": 2},
                                optimizer={"_target_": "torch.optim.AdamW", "lr": 1e-3, "weight_decay": 0.0}))
    prompts_fn = stages.fresh_prompt_batches(mix.sample, 8, 6, seed=0)

    def trainer(run_dir, stop_at=None, resume=False):
        torch.manual_seed(1 if resume else 0)   # a resumed process starts from another RNG state

        def batch_fn(step):
            if step == stop_at:
                os.kill(os.getpid(), signal.SIGTERM)
            return prompts_fn(step)
        model = MixRegTransformer(D, width=16, depth=2, heads=2, max_len=8)
        return Trainer(model, cfg, Hardware(device=torch.device("cpu")), run_dir,
                       MetricLogger(run_dir, OmegaConf.create({"kind": "jsonl"}), resume=resume), batch_fn)

    trainer(tmp_path / "full").fit()
    with pytest.raises(RunInterrupted):
        trainer(tmp_path / "part", stop_at=3).fit()
    trainer(tmp_path / "part", resume=True).fit(resume=True)
    full_losses = [r["loss"] for r in read_jsonl(tmp_path / "full" / "metrics.jsonl")]
    part_losses = [r["loss"] for r in read_jsonl(tmp_path / "part" / "metrics.jsonl")]
    assert len(full_losses) == 6 and np.isfinite(full_losses).all()
    np.testing.assert_allclose(part_losses, full_losses, rtol=1e-6)
