"""FedWaD through the framework: the parts' run on small settings, the federated template
(resume, its config check), and the benchmark's small run."""
import json
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from omegaconf import OmegaConf

from common.config import UserError
from common.logging import MetricLogger
from common.runner import run_method
from common.tasks.federated import check_federated, federated
from tests.conftest import needs_fashion


def test_gaussian_part_reports_every_row(compose_cfg, tmp_path):
    cfg = compose_cfg(["method=fedwad", f"run_dir={tmp_path}", "method.gaussians.n_s=40", "method.gaussians.n_t=20",
                       "method.gaussians.dims=[2,5]", "method.estimator.n_iter=5"])
    m = run_method(cfg)
    rows = ("fedwad", "fixed_t", "small_supp", "iter0", "bures")
    assert set(m) == {f"{r}/rel_err_d{d}" for r in rows for d in (2, 5)}
    assert all(np.isfinite(v) and v >= 0 for v in m.values())
    curve = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert sum("curve/rel_err_d2" in r for r in curve) == 6   # iterations 0..4 and the final estimate


@needs_fashion
def test_otdd_part_small(compose_cfg, tmp_path):
    cfg = compose_cfg(["method=fedwad", "method.part=otdd", f"run_dir={tmp_path}", "method.otdd.num_images=150",
                       "method.federated.num_clients=3", "method.federated.clients_per_round=3",
                       "method.federated.min_size=20", "method.estimator.n_iter=4"])
    m = run_method(cfg)
    assert set(m) == {f"{r}/{k}" for r in ("fedwad", "fixed_t", "small_supp")
                      for k in ("rel_err_median", "rel_err_max", "spearman")}
    assert m["fedwad/rel_err_median"] <= m["fedwad/rel_err_max"]


@pytest.mark.parametrize("key, value, match", [
    ("clients_per_round", 20, "exceeds"), ("weighting", "median", "weighting"), ("alpha", 0.0, "alpha"),
    ("rounds", -1, "rounds"), ("num_clients", 2.5, "num_clients"),
])
def test_federated_knobs_are_checked(compose_cfg, key, value, match):
    fed = OmegaConf.to_container(compose_cfg(["method=fedwad"]).method.federated)
    fed[key] = value
    with pytest.raises(UserError, match=match):
        check_federated(fed)
    fed.pop(key)
    with pytest.raises(UserError, match="missing"):
        check_federated(fed)


def _ctx(run_dir, resume):
    logger = MetricLogger(run_dir, OmegaConf.create({"kind": "jsonl"}), enabled=True, resume=resume)
    return SimpleNamespace(run_dir=run_dir, logger=logger, hw=SimpleNamespace(is_main=True), seed=4,
                           resume=resume, last_step=0)


def _template_run(run_dir, rounds, resume):
    torch.manual_seed(0)
    net = torch.nn.Linear(3, 2)
    x, y = torch.randn(30, 3), torch.randint(0, 2, (30,))
    parts = [torch.arange(0, 10), torch.arange(10, 30)]

    def local(k, r, copies):
        m = copies["model"]
        opt = torch.optim.SGD(m.parameters(), lr=0.5)
        loss = torch.nn.functional.cross_entropy(m(x[parts[k]]), y[parts[k]])
        opt.zero_grad()
        loss.backward()
        opt.step()
        return {"loss": float(loss.detach())}

    fed = OmegaConf.create({"num_clients": 2, "clients_per_round": 2, "rounds": rounds, "local_epochs": 1,
                            "local_batch_size": 4, "alpha": 0.5, "min_size": 0, "weighting": "samples",
                            "eval_every": 1, "ckpt_every": 1})
    ctx = _ctx(run_dir, resume)
    out = federated(ctx, {"model": net}, [10, 20], local,
                    lambda ms, r: {"acc": float((ms["model"](x).argmax(1) == y).float().mean())}, fed, stage="s")
    ctx.logger.close()
    return out, net.weight.detach().clone()


def test_template_resume_equals_the_uninterrupted_run(tmp_path):
    full, w_full = _template_run(tmp_path / "a", 4, False)
    _template_run(tmp_path / "b", 2, False)
    resumed, w_res = _template_run(tmp_path / "b", 4, True)
    assert resumed == full and torch.equal(w_full, w_res)
    assert set(full) == {"acc", "train_loss"}
    curve = [json.loads(line) for line in (tmp_path / "b" / "s" / "metrics.jsonl").read_text().splitlines()]
    assert [r["round"] for r in curve] == [1, 2, 3, 4]      # the curve reads as one run


def test_speed_benchmark_rows():
    from benchmarks.fedwad_speed import row

    r = row(40, repeats=1)
    assert r["small"]["floats_sent"] == 10 * 50 and r["full"]["floats_kept"] == 40 * 50
    assert all(r[k]["rel_err"] >= -1e-9 for k in ("small", "full", "small_random_t", "full_random_t"))   # upper bounds
