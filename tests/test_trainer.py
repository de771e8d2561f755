import pytest
import torch
from omegaconf import OmegaConf

from common.callbacks import SWA
from common.config import UserError
from common.hardware import Hardware
from common.logging import MetricLogger, read_jsonl
from common.trainer import RunInterrupted, Trainer, TrainingDiverged, lr_factor
from tests.trainer_fixtures import TinyRegressor, batch_fn, data, trainer_cfg

HW = Hardware(device=torch.device("cpu"))
JSONL = OmegaConf.create({"kind": "jsonl"})


def make(tmp_path, model, cfg, resume=False, seed=0, **trainer_kw):
    torch.manual_seed(seed)
    x, y = data()
    logger = MetricLogger(tmp_path, JSONL, resume=resume)
    return Trainer(model, cfg, HW, tmp_path, logger, batch_fn(x, y, cfg), **trainer_kw)


def losses(path):
    return [r["loss"] for r in read_jsonl(path / "metrics.jsonl")]


def test_resume_after_sigterm_reproduces_uninterrupted_losses(tmp_path):
    cfg = trainer_cfg()
    torch.manual_seed(0)
    full = make(tmp_path / "full", TinyRegressor(), cfg)
    full.fit()

    torch.manual_seed(0)
    part = make(tmp_path / "part", TinyRegressor(signal_at=6), cfg)
    with pytest.raises(RunInterrupted, match="resume=true"):
        part.fit()
    assert part.step == 6 and (tmp_path / "part" / "checkpoint.pt").exists()
    # a fresh process would rebuild everything from scratch, with another global RNG state
    torch.manual_seed(999)
    resumed = make(tmp_path / "part", TinyRegressor(), cfg, resume=True, seed=999)
    resumed.fit(resume=True)
    assert losses(tmp_path / "part") == losses(tmp_path / "full")
    assert len(losses(tmp_path / "full")) == cfg.max_steps


def test_resume_restores_callback_state_such_as_an_swa_average(tmp_path):
    """An average kept by a callback ends where the uninterrupted one does after a resume."""
    cfg = trainer_cfg()

    def averaged_run(path, model, **kw):
        swa = SWA(model, start_step=0)
        return make(path, model, cfg, callbacks=[swa], **kw), swa

    torch.manual_seed(0)  # the same initial weights for both runs
    full, full_swa = averaged_run(tmp_path / "full", TinyRegressor())
    full.fit()
    torch.manual_seed(0)
    part, _ = averaged_run(tmp_path / "part", TinyRegressor(signal_at=6))
    with pytest.raises(RunInterrupted):
        part.fit()
    resumed, resumed_swa = averaged_run(tmp_path / "part", TinyRegressor(), resume=True, seed=999)
    resumed.fit(resume=True)
    assert int(resumed_swa.averaged.n_averaged) == int(full_swa.averaged.n_averaged) == cfg.max_steps
    for a, b in zip(resumed_swa.module.parameters(), full_swa.module.parameters()):
        torch.testing.assert_close(a, b, rtol=0, atol=0)


def test_nan_guard_names_step_and_last_finite_metrics(tmp_path):
    trainer = make(tmp_path, TinyRegressor(nan_at=4), trainer_cfg())
    with pytest.raises(TrainingDiverged, match=r"at step 3; last finite metrics: \{'loss'"):
        trainer.fit()


def test_grad_accumulation_equals_full_batch(tmp_path):
    # no dropout, no clipping: accumulating 4 micro-batches of 4 = one batch of 16 (per-sample loss)
    cfg1 = trainer_cfg(clip_grad=None, max_steps=5)
    cfg4 = trainer_cfg(clip_grad=None, max_steps=5, grad_accum=4)
    torch.manual_seed(0)
    a = make(tmp_path / "a", TinyRegressor(dropout=0.0), cfg1)
    torch.manual_seed(0)
    b = make(tmp_path / "b", TinyRegressor(dropout=0.0), cfg4)
    a.fit(), b.fit()
    for pa, pb in zip(a.model.parameters(), b.model.parameters()):
        torch.testing.assert_close(pa, pb, rtol=1e-5, atol=1e-6)


def test_corrupt_checkpoint_names_the_file(tmp_path):
    (tmp_path / "checkpoint.pt").write_bytes(b"not a checkpoint")
    trainer = make(tmp_path, TinyRegressor(), trainer_cfg())
    with pytest.raises(UserError, match=r"checkpoint.pt is corrupt"):
        trainer.fit(resume=True)


def test_lr_schedule_warmup_then_cosine_to_zero():
    assert lr_factor(0, 10, "cosine", 2) == 0.5
    assert lr_factor(2, 10, "cosine", 2) == 1.0
    assert lr_factor(10, 10, "cosine", 2) == pytest.approx(0.0, abs=1e-12)
    assert lr_factor(6, 10, "cosine", 2) == pytest.approx(0.5)
    assert lr_factor(7, 10, "constant", 0) == 1.0
    assert lr_factor(0, 10, "inverse_sqrt", 0) == 1.0
    assert lr_factor(12000, 10, "inverse_sqrt", 0, t0=4000) == pytest.approx(0.5)
    assert lr_factor(6, 10, "linear", 2) == pytest.approx(0.5)
    with pytest.raises(UserError, match="cosine"):
        lr_factor(3, 10, "cosin", 0)
