"""The GPU check (scripts/gpu_check.sh) cannot rot between GPU visits: its synthetic stand-ins
(common/reproduce/synthetic.py) serve the paper's shapes and are undone, every paper config
composes with its smoke overrides, and the whole script runs on the CPU (`--cpu`, TRITON_INTERPRET=1)
for a few cheap methods and writes its JSON."""
from __future__ import annotations

import fnmatch
import json
import os
import subprocess
import sys

import numpy as np
import pytest
import torch

from tests.conftest import ROOT


def test_synthetic_stand_ins_have_the_papers_shapes_and_are_undone():
    import common.data as data
    from common.data import crystals, download, hypergraphs, imagenet, mnist_full, svhn, text, tinyimagenet  # noqa: F401
    from common.data.images import read_idx
    from common.reproduce import synthetic

    before = (dict(data.REGISTRY), hypergraphs.load_hypergraph, download.find_or_fetch, text.load_text,
              crystals.load_jarvis)
    synthetic.install(n_train=64, n_test=16, shrink=True)
    try:
        x, y = data.load("cifar100", "train")
        assert x.shape == (64, 3, 32, 32) and x.dtype == torch.uint8 and int(y.max()) < 100
        x, _ = data.load("stl10", "test")
        assert x.shape == (16, 3, 96, 96)
        assert data.load("tinyimagenet", "train")[0].shape[1:] == (3, 64, 64)
        x, y = data.load("svhn", "test")
        assert x.shape == (16, 3, 32, 32) and x.dtype == torch.uint8 and int(y.max()) < 10
        g = hypergraphs.load_hypergraph("cocitation_cora")
        assert g.features.shape == (2708, 1433) and g.num_classes <= 7
        folder = download.find_or_fetch("mnist", [ROOT / "no-such-folder"], {"t10k-images-idx3-ubyte.gz": None},
                                        "http://unused/", False, "offline")
        assert read_idx(folder / "t10k-images-idx3-ubyte.gz").shape == (16, 28, 28)
        assert (folder / "train-labels-idx1-ubyte.gz").exists()
        folder = download.find_or_fetch("crime", [ROOT / "no-such-folder"], {"train.txt": None, "test.txt": None},
                                        "http://unused/", False, "offline")
        edges = [line.split() for line in (folder / "train.txt").read_text().splitlines()]
        assert edges and all(len(e) >= 2 for e in edges)
        cells = crystals.load_jarvis("dft_3d", "formation", "data", False)
        assert all(c["pos"].shape == (len(c["z"]), 3) and c["lattice"].shape == (3, 3) for c in cells[:5])
        assert len(text.load_text("wikitext2", "test").split()) > 10_000
        assert data.load("digits", "train")[0].shape[0] == 64 and len(data.load("digits", "test")[1]) == 16
        assert torch.bincount(data.load("cifar10", "train")[1]).tolist() == [64 // 10 + (i < 4) for i in range(10)]
        from omegaconf import OmegaConf
        synthetic.configure(OmegaConf.create({"dataset": {"num_features": {"breastw": 9}}}))
        from common.data import adbench
        x, y = adbench.load_adbench("breastw")
        assert x.shape[1] == 9 and set(np.unique(y)) <= {0, 1}
        splits = synthetic.glue_splits("mnli", max_length=128)
        assert splits["train"][0]["input_ids"].shape == (64, 128) and int(splits["train"][1].max()) < 3
        assert "images:cifar100" in synthetic.used() and "crystals" in synthetic.used()
        with pytest.raises(ValueError, match="no offline architecture"):
            synthetic.hf_config("nobody/unknown-model")
    finally:
        synthetic.uninstall()
    assert (dict(data.REGISTRY), hypergraphs.load_hypergraph, download.find_or_fetch, text.load_text,
            crystals.load_jarvis) == before


def test_hub_models_are_built_offline_at_their_architecture():
    transformers = pytest.importorskip("transformers")
    from common.nn.llm import load_causal_lm as real_llm
    from common.reproduce import synthetic

    real_from_pretrained = transformers.AutoModelForSequenceClassification.__dict__.get("from_pretrained")
    synthetic.install(n_train=8, n_test=8, shrink=True)
    try:
        from common.nn import llm
        model, tok = llm.load_causal_lm("huggyllama/llama-7b")
        assert model.config.num_hidden_layers == synthetic.SHRINK["num_hidden_layers"]
        ids = tok("some words here", return_tensors="pt").input_ids
        assert ids.shape == (1, 3) and int(ids.max()) < model.config.vocab_size
        bert = transformers.AutoModelForSequenceClassification.from_pretrained("bert-base-cased", num_labels=3)
        assert bert.config.num_labels == 3
        cfg = synthetic.HF_CONFIGS["huggyllama/llama-13b"][1]
        assert (cfg["hidden_size"], cfg["num_hidden_layers"]) == (5120, 40)   # LLaMA-13B
    finally:
        synthetic.uninstall()
    from common.nn import llm
    assert llm.load_causal_lm is real_llm
    assert transformers.AutoModelForSequenceClassification.__dict__.get("from_pretrained") is real_from_pretrained


def test_every_paper_config_composes_with_its_smoke_overrides():
    """A renamed key in a paper config or in scripts/gpu_check.yaml fails here, not on the GPU."""
    from hydra import compose, initialize_config_dir

    from common.config import CONFIG_DIR
    from common.reproduce.paper import smoke_overrides, smoke_settings
    from scripts.gpu_smoke import all_methods, plan

    settings = smoke_settings()
    configs = plan(all_methods())
    assert sum(len(v) for v in configs.values()) >= 40 and len(configs) >= 18
    cpu_specific = [p for p in settings["cpu"] if p != "*"]
    with initialize_config_dir(str(CONFIG_DIR), version_base="1.3"):
        for names in configs.values():
            for name in names:
                # the CPU's reduced mode on the configs it names, the GPU's on every config
                for cpu in (False, True) if any(fnmatch.fnmatch(name, p) for p in cpu_specific) else (False,):
                    cfg = compose("train", overrides=smoke_overrides(name, 2, cpu, settings))
                    assert cfg.hardware.compile is False
                    assert cfg.hardware.device == ("cpu" if cpu else "cuda")


def test_step_timer_stops_every_fit_after_its_steps():
    from common.reproduce.paper import StepTimer
    from common.trainer import Trainer

    class Fake:
        should_stop = False

    real = Trainer.train_step
    Trainer.train_step = lambda self, batch: {"loss": torch.tensor(0.0)}
    try:
        timer = StepTimer(3).install()
        fake = Fake()
        for _ in range(2):
            Trainer.train_step(fake, None)
        assert not fake.should_stop
        Trainer.train_step(fake, None)
        assert fake.should_stop and timer.summary()["steps_timed"] == 3
        timer.uninstall()
        assert Trainer.train_step is not real    # our stand-in is back, not the timer
    finally:
        Trainer.train_step = real


CHEAP = "lighthgnn,shyre"     # a Trainer method (steps timed) and one with its own loop


@pytest.mark.slow
def test_whole_gpu_check_runs_on_the_cpu(tmp_path):
    """scripts/gpu_check.sh --cpu: parity (a few tests), the benchmark's CPU smoke, two cheap
    methods' paper configs for one step each on synthetic data, the dry run and the summary."""
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"} | {
        "PYTHON": sys.executable, "GPU_CHECK_RESULTS": str(tmp_path), "GPU_CHECK_METHODS": CHEAP,
        "GPU_CHECK_STEPS": "1", "GPU_CHECK_BUDGET_S": "900", "GPU_CHECK_FLOOR_S": "60",
        "GPU_CHECK_PARITY_S": "300", "GPU_CHECK_BENCH_S": "150",
        "GPU_CHECK_PARITY_K": "triton_matches_reference and segment_sum and float32", "OMP_NUM_THREADS": "1"}
    out = subprocess.run(["bash", "scripts/gpu_check.sh", "--cpu"], cwd=ROOT, env=env, capture_output=True, text=True,
                         timeout=1200)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    summary = json.loads((tmp_path / "gpu_check.json").read_text())
    assert summary["mode"] == "cpu"
    assert list(summary["steps"])[:2] == ["kernel_parity", "gpu_kernels"]        # parity and benchmark first
    parity = summary["kernel_parity"]      # (a loaded CPU can take minutes to start pytest: no rc asserted)
    assert parity["passed"] >= 1 and parity["failed"] == 0, summary["steps"]["kernel_parity"]
    assert summary["gpu_kernels"]["errors"] == []
    assert set(summary["methods_with_a_step"]) == set(CHEAP.split(",")), summary["smokes"]
    for method in CHEAP.split(","):
        rows = json.loads((tmp_path / f"gpu_{method}.json").read_text())["configs"]
        ok = [r for r in rows.values() if r["status"] == "ok"]
        assert ok and all(r["peak_rss_gb"] > 0 and r["seconds"] > 0 for r in ok)
    lighthgnn = json.loads((tmp_path / "gpu_lighthgnn.json").read_text())["configs"]["lighthgnn_production"]
    assert lighthgnn["steps_timed"] >= 1 and lighthgnn["step_s"] > 0      # the Trainer's steps, timed
    dry = json.loads((tmp_path / "gpu_dry_run.json").read_text())
    assert not dry["errors"] and {r["experiment"] for r in dry["configs"]} >= {"lighthgnn_production"}
    assert np.isfinite(summary["seconds"])


def test_imagenet_stream_stand_in_shards_like_the_real_stream():
    """The stand-in takes the real stream's arguments; its shards (ranks x workers) partition a pass,
    which is a pure function of (seed, epoch) and changes with either."""
    import common.data as data
    from common.data import imagenet_stream
    from common.reproduce import synthetic

    real = imagenet_stream.ImageNetTrainStream
    synthetic.install(n_train=24, n_test=4, shrink=True)
    try:
        cls = imagenet_stream.ImageNetTrainStream
        assert cls is synthetic.ImageStream
        whole = [(x, y) for x, y in cls(root="nowhere", side=16, seed=3)]
        assert len(whole) == 24 and all(x.shape == (3, 16, 16) and x.dtype == torch.uint8 for x, _ in whole)
        assert sorted(y for _, y in whole) == list(range(24))        # balanced labels: index mod 1000
        parts = [list(cls(side=16, seed=3, rank=r, world_size=3)) for r in range(3)]
        assert sorted(y for p in parts for _, y in p) == sorted(y for _, y in whole) and len(parts[0]) == 8
        again = {y: x for _, (x, y) in enumerate(whole)}
        assert all(torch.equal(again[y], x) for p in parts for x, y in p)   # same image wherever it is drawn
        other = cls(side=16, seed=3)
        other.set_epoch(1)
        assert [y for _, y in other] != [y for _, y in whole]
        assert [y for _, y in cls(side=16, seed=4)] != [y for _, y in whole]
        with pytest.raises(ValueError, match="rank"):
            cls(rank=2, world_size=2)
        assert "stream:imagenet" in synthetic.used()
        assert tuple(data.load("imagenet", "test")[0].shape) == (4, 3, 224, 224)
    finally:
        synthetic.uninstall()
    assert imagenet_stream.ImageNetTrainStream is real


def test_metr_paper_smoke_runs_on_the_stand_ins_and_caches_nothing(tmp_path, monkeypatch):
    """metr_deit_s for one step on the CPU (shrunk sizes, gpu_check.yaml's cpu settings): the streamed
    stand-in trains, the stand-in validation split is scored, and the base stage's cache goes to a
    scratch folder, not to ICLR24_CACHE, where the real run's key would find a random-init base.
    In the fast suite (~20 s): nothing else guards the cache, and the GPU check runs rarely."""
    from common.reproduce.paper import gpu_smoke

    cache = tmp_path / "cache"
    monkeypatch.setenv("ICLR24_CACHE", str(cache))
    lines: list[str] = []
    status = gpu_smoke("metr", 1, [], log=lines.append, only=["metr_deit_s"], cpu=True, results=tmp_path)
    row = json.loads((tmp_path / "gpu_metr.json").read_text())["configs"]["metr_deit_s"]
    assert status == 0 and row["status"] == "ok", row.get("metrics")
    assert row["steps_timed"] >= 1 and "stream:imagenet" in row["synthetic"] and "images:imagenet" in row["synthetic"]
    assert any(s.startswith("random-init:deit_small") for s in row["synthetic"])
    assert {"evit/acc_k100", "metr/acc_k70"} <= set(row["metrics"])     # both fine-tunes scored
    assert not cache.exists() or not any(cache.rglob("*")), sorted(cache.rglob("*"))
    assert os.environ["ICLR24_CACHE"] == str(cache)


def test_relu_paper_smokes_run_on_the_stand_ins(tmp_path):
    """The three ReLU Strikes Back paper configs for one step on the CPU: RefinedWeb, OPT's tokenizer
    and the 7B architectures are stand-ins (shrunk), zero-shot is off; the reader's batches are a pure
    function of the step."""
    from common.reproduce import synthetic
    from common.reproduce.paper import gpu_smoke

    lines: list[str] = []
    assert gpu_smoke("relu_strikes_back", 1, [], log=lines.append, cpu=True, results=tmp_path) == 0, lines
    rows = json.loads((tmp_path / "gpu_relu_strikes_back.json").read_text())["configs"]
    assert set(rows) == {"relu_strikes_back_opt1b3", "relu_strikes_back_llama7b_relufy",
                         "relu_strikes_back_falcon7b_relufy"}
    assert all(r["status"] == "ok" and r["steps_timed"] >= 1 and "text:refinedweb" in r["synthetic"] for r in rows.values())
    assert "tokenizer:facebook/opt-1.3b" in rows["relu_strikes_back_opt1b3"]["synthetic"]
    assert "random-init:tiiuae/falcon-7b" in rows["relu_strikes_back_falcon7b_relufy"]["synthetic"]
    reader = synthetic.TextReader(train_shards=["a"], val_shards=["b"], tokenizer=None)
    tok = synthetic.WordTokenizer(100)
    batches = reader.train_batches(tok, 8, 3)
    assert torch.equal(batches(5), batches(5)) and not torch.equal(batches(5), batches(6))
    assert int(batches(0).max()) < 100 and reader.val_windows(tok, 8, 4).shape == (4, 8)
