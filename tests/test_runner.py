"""The runner owns the run: one place opens and closes it, samplers shard by rank, process-wide
state does not leak between runs, task templates train and evaluate."""
import json
import subprocess
import sys

import pytest
import torch
from omegaconf import OmegaConf

from common.hardware import Hardware
from common.logging import MetricLogger
from common.runner import RunContext, open_run, run_method
from common.tasks import classify
from tests.conftest import ROOT, needs_fashion
from tests.trainer_fixtures import trainer_cfg


def context(tmp_path, rank=0, world=1, **trainer_kw):
    cfg = OmegaConf.create({"seed": 0, "resume": False, "trainer": trainer_cfg(**trainer_kw), "logger": {"kind": "jsonl"}})
    hw = Hardware(device=torch.device("cpu"), rank=rank, world_size=world)
    return RunContext(cfg, hw, tmp_path, MetricLogger(tmp_path, cfg.logger))


def test_two_ranks_see_disjoint_shards_of_every_global_batch(tmp_path):
    ranks = [context(tmp_path, rank=r, world=2).sampler(100) for r in range(2)]
    single = context(tmp_path).sampler(100)
    for step in range(12):
        a, b = ranks[0](step), ranks[1](step)
        assert not set(a.tolist()) & set(b.tolist())
        assert torch.equal(torch.cat([a, b]), single(step))


def test_open_run_closes_and_restores_process_state_when_the_run_raises(compose_cfg, tmp_path):
    cfg = compose_cfg(["experiment=simclr_smoke", f"run_dir={tmp_path}", "hardware.threads=1"])
    dtype, threads = torch.get_default_dtype(), torch.get_num_threads()
    closed = []
    with pytest.raises(RuntimeError, match="boom"):
        with open_run(cfg) as ctx:
            ctx.logger.close = lambda: closed.append(True)
            torch.set_default_dtype(torch.float64)
            raise RuntimeError("boom")
    assert closed == [True]
    assert torch.get_default_dtype() == dtype and torch.get_num_threads() == threads


class Tiny(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.net = torch.nn.Linear(4, 3)

    def forward(self, x):
        return self.net(x)

    def training_step(self, batch):
        x, y = batch
        return torch.nn.functional.cross_entropy(self(x), y), {}


def test_classify_template_trains_and_reports_test_accuracy(tmp_path):
    g = torch.Generator().manual_seed(0)
    x = torch.randn(96, 4, generator=g)
    y = x[:, :3].argmax(1)
    torch.manual_seed(0)
    ctx = context(tmp_path, max_steps=60, optimizer={"_target_": "torch.optim.Adam", "lr": 0.1})
    metrics = classify(ctx, Tiny(), (x, y), (x, y), eval_batch_size=32)
    assert metrics["test_acc"] > 90 and metrics["train_loss"] < 0.5
    assert ctx.last_step == 60


@needs_fashion
def test_a_run_in_a_process_that_ran_another_method_reports_what_a_fresh_process_does(tmp_path, compose_cfg):
    """No global state leaks: RFM switches to float64 inside its run; SimCLR after it in the same
    process must report exactly what SimCLR reports alone."""
    from common.data.manifold_data import EARTH_SHARED

    first = "rfm_smoke" if (EARTH_SHARED / "volerup.csv").exists() else "soft_moe_smoke"
    run_method(compose_cfg([f"experiment={first}", f"run_dir={tmp_path / 'a'}", "logger=none"]))
    after = run_method(compose_cfg(["experiment=simclr_smoke", f"run_dir={tmp_path / 'b'}", "logger=none"]))
    proc = subprocess.run([sys.executable, "scripts/train.py", "experiment=simclr_smoke", f"run_dir={tmp_path / 'c'}",
                           "logger=none"], cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert after == json.loads(proc.stdout.strip().splitlines()[-1])


def test_validation_evaluation_never_touches_test():
    from common.tasks import evaluation_splits

    x, y = torch.arange(10).view(10, 1), torch.arange(10)
    splits = {"eval_train": (x, y), "test": (x + 100, y)}
    fit, score = evaluation_splits(splits, OmegaConf.create({"on": "val", "val_size": 3}))
    assert fit[0].flatten().tolist() == list(range(7)) and score[0].flatten().tolist() == [7, 8, 9]
    fit, score = evaluation_splits(splits, OmegaConf.create({"on": "test", "val_size": 3}))
    assert score[0].min() == 100
    with pytest.raises(ValueError, match="val_size"):
        evaluation_splits(splits, OmegaConf.create({"on": "val", "val_size": 10}))
