"""twinsight: the data split and a 2-round run through the federated floor."""
import pytest
import torch

from common import checkpoint
from common.runner import run_method
from tests.conftest import needs_fashion
from methods.twinsight.data import few_label_clients
from methods.twinsight.train import censored_rounds_to_target, majority_row


def test_few_label_clients_partial_split():
    g = torch.Generator().manual_seed(0)
    labels = torch.randint(0, 10, (600,), generator=g)
    images = torch.rand(600, 1, 4, 4, generator=g)
    d = few_label_clients(images, labels, images[:10], labels[:10], num_clients=10, num_labeled=4, alpha=0.5,
                          min_size=10, val_fraction=0.1, seed=3)
    assert len(d.labeled) == 4
    seen = torch.cat(d.clients + [d.val])
    assert len(seen) == 600 and len(set(seen.tolist())) == 600     # every image once: train or held out
    assert set(d.val.tolist()) <= set(torch.cat([d.clients[k] for k in d.labeled] + [d.val]).tolist())
    for bad in (0, 10):
        with pytest.raises(ValueError):
            few_label_clients(images, labels, images, labels, 10, bad, 0.5, 10, 0.1, 3)


@needs_fashion
def test_two_round_run_checkpoints_both_twins(compose_cfg, tmp_path):
    cfg = compose_cfg(["experiment=twinsight_smoke", f"run_dir={tmp_path}", "method.rows=[twinsight]"])
    metrics = run_method(cfg)
    assert 0 <= metrics["twinsight/acc"] <= 100
    # the smoke evaluates after its last round only: round 2 if the target was reached, else 3
    reached = metrics["twinsight/acc"] >= float(cfg.method.target_acc)
    assert metrics["twinsight/rounds_to_target"] == (2.0 if reached else 3.0)
    state = checkpoint.load(next(tmp_path.rglob("federated.pt")))
    assert set(state["models"]) == {"sup", "unsup"} and state["step"] == 2
    assert any(k.startswith("projector") for k in state["models"]["unsup"])


def test_rounds_to_target_censored_and_majority():
    # first evaluated round at or above the target; a curve that never reaches it scores rounds + 1
    assert censored_rounds_to_target([1, 2, 3], [10.0, 40.0, 55.0], 40.0, 3) == 2.0
    assert censored_rounds_to_target([5, 10, 15, 20], [30.0, 39.9, 20.0, 39.0], 40.0, 20) == 21.0
    assert censored_rounds_to_target([], [], 40.0, 20) == 21.0
    with pytest.raises(ValueError):
        censored_rounds_to_target([2, 1], [1.0, 2.0], 40.0, 3)
    # majority: 3 of 4 evaluation images are class 1, the labeled client's majority class
    labels = torch.tensor([1, 1, 0, 2])
    d = few_label_clients(torch.rand(4, 1, 2, 2), labels, None, None, num_clients=2, num_labeled=1, alpha=100.0,
                          min_size=0, val_fraction=0.0, seed=0)
    d.clients = [torch.tensor([0, 1, 2]), torch.tensor([3])]
    d.labeled = [0]
    eval_y = torch.tensor([1, 1, 1, 0])
    assert majority_row(d, eval_y, 3, 70.0, 20)["rounds_to_target"] == 1.0
    assert majority_row(d, eval_y, 3, 80.0, 20)["rounds_to_target"] == 21.0
