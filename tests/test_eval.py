"""The evaluation harness against independent derivations: brute force, scikit-learn's own
estimators, hand-computed cases."""
import itertools

import numpy as np
import pytest
import torch

from common import eval as E


def test_knn_matches_scikit_learn_weighted_cosine_vote():
    from sklearn.neighbors import KNeighborsClassifier

    g = torch.Generator().manual_seed(0)
    tr_x, te_x = torch.randn(300, 8, generator=g), torch.randn(100, 8, generator=g)
    tr_y = (tr_x[:, 0] > 0).long() + (tr_x[:, 1] > 0).long()
    te_y = (te_x[:, 0] > 0).long() + (te_x[:, 1] > 0).long()
    temperature = 0.07
    clf = KNeighborsClassifier(n_neighbors=10, metric="cosine", algorithm="brute",
                               weights=lambda d: np.exp(-d / temperature)).fit(tr_x.numpy(), tr_y.numpy())
    expected = 100 * np.mean(clf.predict(te_x.numpy()) == te_y.numpy())
    assert E.knn_accuracy(tr_x, tr_y, te_x, te_y, k=10, temperature=temperature) == pytest.approx(expected)
    with pytest.raises(ValueError, match="k must be"):
        E.knn_accuracy(tr_x, tr_y, te_x, te_y, k=0, temperature=0.1)


def test_linear_probe_separable_and_refuses_negative_seed():
    x = torch.cat([torch.randn(50, 3) + 5, torch.randn(50, 3) - 5])
    y = torch.arange(2).repeat_interleave(50)
    assert E.linear_probe(x, y, x, y, max_iter=100, C=1.0, seed=0) == 100.0
    with pytest.raises(ValueError, match="seed"):
        E.linear_probe(x, y, x, y, max_iter=100, C=1.0, seed=-3)


def brute_force_matched_accuracy(pred, target, k):
    best = 0
    for perm in itertools.permutations(range(k)):
        best = max(best, sum(perm[p] == t for p, t in zip(pred, target)))
    return 100 * best / len(target)


def test_cluster_accuracy_is_the_best_permutation():
    rng = np.random.default_rng(0)
    for _ in range(5):
        target = rng.integers(0, 4, 40)
        pred = np.where(rng.random(40) < 0.6, (target + 1) % 4, rng.integers(0, 4, 40))
        assert E.cluster_accuracy(pred, target, 4) == pytest.approx(brute_force_matched_accuracy(pred, target, 4))


def test_cluster_metrics_by_hand():
    pred, target = [1, 1, 0, 0, 0, 2], [0, 0, 1, 1, 2, 2]  # cluster 1->class 0, 0->1, 2->2
    m = E.cluster_metrics(pred, target, 3)
    assert m["acc"] == pytest.approx(100 * 5 / 6)
    assert m["macc"] == pytest.approx(100 * (1 + 1 + 0.5) / 3)      # per-class recall after matching
    f1 = [1.0, 2 * (2 / 3 * 1) / (2 / 3 + 1), 2 * 0.5 / 1.5]       # class 0, 1, 2
    assert m["f1"] == pytest.approx(100 * np.mean(f1))
    assert E.nmi([0, 0, 1, 1], [1, 1, 0, 0]) == pytest.approx(100.0)
    assert E.ari([0, 0, 1, 1], [1, 1, 0, 0]) == pytest.approx(100.0)


def test_auroc_and_auprc_by_hand():
    scores, labels = [0.1, 0.4, 0.35, 0.8], [0, 0, 1, 1]
    assert E.auroc(scores, labels) == pytest.approx(0.75)            # 3 of 4 pairs ordered
    assert E.auprc(scores, labels) == pytest.approx((1.0 + 2 / 3) / 2)  # precision at each positive
    with pytest.raises(ValueError, match="NaN"):
        E.auroc([np.nan, 1.0], [0, 1])
    with pytest.raises(ValueError, match="both"):
        E.auprc([0.1, 0.2], [1, 1])


def test_set_scores_and_jaccard():
    s = E.set_scores([[1, 2], [2, 3], (3, 4, 5)], [{2, 1}, {5, 4, 3}, {7, 8}])
    assert s == pytest.approx({"precision": 2 / 3, "recall": 2 / 3, "f1": 2 / 3, "jaccard": 2 / 4})
    assert E.jaccard([], []) == 1.0 and E.jaccard([[1, 2]], []) == 0.0


def test_accuracy_mae_nll_perplexity():
    logits = torch.tensor([[2.0, 0.0], [0.0, 1.0], [3.0, 1.0]])
    assert E.accuracy(logits, torch.tensor([0, 1, 1])) == pytest.approx(200 / 3)
    assert E.mae(torch.tensor([1.0, 2.0]), torch.tensor([2.0, 4.0])) == pytest.approx(1.5)
    assert E.mean_nll(torch.tensor([-1.0, -3.0])) == pytest.approx(2.0)

    class Uniform(torch.nn.Module):   # every next token equally likely over V: perplexity V
        def forward(self, x, use_cache=False):
            return type("Out", (), {"logits": torch.zeros(*x.shape, 7)})()

    assert E.perplexity(Uniform(), torch.randint(0, 7, (40,)), batch_size=3, seq_len=8) == pytest.approx(7.0)


def test_model_accuracy_restores_training_mode():
    model = torch.nn.Sequential(torch.nn.Dropout(0.5), torch.nn.Linear(2, 2)).train()
    E.model_accuracy(model, (torch.randn(5, 2), torch.zeros(5, dtype=torch.long)), 2, "cpu")
    assert model.training
