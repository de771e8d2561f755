"""The cluster path, exercised: hardware=slurm's submitit launcher code, run locally by
hydra-submitit-launcher's submitit_local with a -m sweep over two seeds."""
import json
import subprocess
import sys

import pytest

from tests.conftest import ROOT, needs_fashion


@needs_fashion
def test_slurm_config_runs_a_seed_sweep_through_submitit_local(tmp_path):
    pytest.importorskip("hydra_plugins.hydra_submitit_launcher")
    cpu = ["hardware.device=cpu", "hardware.precision=fp32", "hardware.compile=false", "hardware.ddp=false",
           "hardware.kernels=reference", "hydra.launcher.gpus_per_node=0"]
    proc = subprocess.run([sys.executable, "scripts/train.py", "-m", "experiment=simclr_smoke", "hardware=slurm",
                           "hydra/launcher=submitit_local", *cpu, "seed=0,1", f"run_dir={tmp_path}/seed${{seed}}",
                           f"hydra.sweep.dir={tmp_path}/sweep"], cwd=ROOT, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    metrics = [json.loads((tmp_path / f"seed{s}" / "metrics.json").read_text()) for s in (0, 1)]
    assert all(set(m) == {"linear_acc", "knn_acc", "train_loss"} for m in metrics)
    assert metrics[0]["train_loss"] != metrics[1]["train_loss"]   # two seeds, two runs
