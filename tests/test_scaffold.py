"""scripts/new_method.py lays out a package whose smoke run passes through scripts/train.py."""
import json
import shutil
import subprocess
import sys

from tests.conftest import ROOT


def test_new_method_scaffold_runs_its_smoke_and_its_tests(tmp_path):
    for part in ("scripts", "configs", "common"):
        shutil.copytree(ROOT / part, tmp_path / part, ignore=shutil.ignore_patterns("__pycache__"))
    (tmp_path / "methods").mkdir()
    shutil.copy(ROOT / "methods/__init__.py", tmp_path / "methods/__init__.py")
    made = subprocess.run([sys.executable, "scripts/new_method.py", "zz_demo", "--root", str(tmp_path)],
                          cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert made.returncode == 0, made.stderr
    for rel in ("methods/zz_demo/README.md", "methods/zz_demo/loss.py", "configs/experiment/zz_demo_mini.yaml",
                "tests/test_zz_demo.py"):
        assert (tmp_path / rel).exists(), rel
    assert "| equation | function |" in (tmp_path / "methods/zz_demo/README.md").read_text()
    again = subprocess.run([sys.executable, "scripts/new_method.py", "zz_demo", "--root", str(tmp_path)],
                           cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert again.returncode != 0 and "exists already" in again.stderr
    smoke = subprocess.run([sys.executable, "scripts/train.py", "experiment=zz_demo_smoke", f"run_dir={tmp_path / 'run'}"],
                           cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert smoke.returncode == 0, smoke.stderr[-2000:]
    assert set(json.loads(smoke.stdout.strip().splitlines()[-1])) == {"test_acc", "train_loss"}
    tests = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests/test_zz_demo.py"],
                           cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert tests.returncode == 0, tests.stdout[-2000:]
