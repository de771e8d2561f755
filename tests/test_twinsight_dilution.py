"""Why the twins' classifier learns slowly in a partial-client run (README, "Why twinsight is
below labeled_only"): as in the official code, an unlabeled client's loss never reaches the
supervised twin's classifier, so FedAvg (weights n_k) returns it unchanged from those clients and
the global classifier moves by the labeled clients' share of the sampled data times their update
(`common.federated.curves.subset_share`), where labeled_only averages labeled clients only."""
import torch

from common.federated import fedavg
from common.federated.curves import subset_share
from methods.twinsight.model import TinyCNN, TwinModel
from methods.twinsight.train import make_step

LOSS = {"insdis": 0.5, "sim": 1.0, "ulb_weight": 0.0, "threshold": 0.95, "temperature": 0.07, "normalizer": "square"}


def _twin(seed=0):
    torch.manual_seed(seed)
    return TwinModel(TinyCNN(1, 16, 8, final_relu=False), TinyCNN(1, 16, 8, final_relu=False), feat_dim=8,
                     num_classes=3, proj_hidden=8, proj_dim=4)


def test_unlabeled_loss_never_reaches_the_classifier():
    twin = _twin()
    models = {"sup": twin.sup, "unsup": twin.unsup}
    x = torch.rand(6, 1, 16, 16)
    for row in ("twinsight", "no_np"):
        twin.zero_grad(set_to_none=True)
        loss, _ = make_step(row, LOSS, 1.0)(models, x, x.flip(-1), None)
        loss.backward()
        assert all(p.grad is None or not p.grad.any() for p in twin.sup.head.parameters())
        enc = [p.grad for p in twin.sup.encoder.parameters()]
        # L_np moves the supervised encoder on unlabeled clients; without it nothing does
        assert any(g is not None and g.any() for g in enc) == (row == "twinsight")
    twin.zero_grad(set_to_none=True)
    loss, _ = make_step("twinsight", LOSS, 1.0)(models, x, x.flip(-1), torch.tensor([0, 1, 2, 0, 1, 2]))
    loss.backward()
    assert all(p.grad is not None and p.grad.any() for p in twin.sup.head.parameters())


def test_fedavg_moves_the_classifier_by_the_labeled_share():
    head = _twin().sup.head
    old = {k: v.clone() for k, v in head.state_dict().items()}
    moved = {k: v + torch.randn_like(v) for k, v in old.items()}       # one labeled client's local update
    sizes = [30, 70, 50]                                                # client 0 labeled, 1 and 2 not
    new = fedavg([moved, old, old], sizes)
    share = subset_share(sizes, [0], 1, 3, seed=0)[0]                   # all three sampled: 30 / 150
    assert share == 30 / 150
    for k in old:                                                       # delta = share * labeled delta
        torch.testing.assert_close(new[k] - old[k], share * (moved[k] - old[k]), rtol=1e-5, atol=1e-6)
