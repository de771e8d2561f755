"""twinsight: the data split and a 2-round run through the federated floor."""
import pytest
import torch

from common import checkpoint
from common.runner import run_method
from tests.conftest import needs_fashion
from methods.twinsight.data import few_label_clients


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
    state = checkpoint.load(next(tmp_path.rglob("federated.pt")))
    assert set(state["models"]) == {"sup", "unsup"} and state["step"] == 2
    assert any(k.startswith("projector") for k in state["models"]["unsup"])
