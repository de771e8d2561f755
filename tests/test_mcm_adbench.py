"""MCM on ADBench: the loader (shared copy, data root, sha256), the one-class split with its
validation part (drawn with the run seed; val and test disjoint), the rank summary (average rank;
the Wilcoxon p-value against an exact enumeration written here), the trivial scorer, and a run
that scores several detectors at once (sub-rows and ranks)."""
import itertools

import numpy as np
import pytest

from common.config import UserError
from common.data import adbench
from common.data.adbench import load_adbench, one_class_splits, table_file
from common.eval.ranks import average_ranks, wilcoxon_p

needs_adbench = pytest.mark.skipif(not (adbench.SHARED / adbench.TABLES["cardio"][0]).exists(),
                                   reason="ADBench Classical tables not in ../shared/data (dataset.download=true fetches them)")


@needs_adbench
def test_loader_reads_the_shared_copy_with_shapes_and_labels():
    x, y = load_adbench("cardio")
    assert x.shape == (1831, 21) and x.dtype == np.float64 and int(y.sum()) == 176
    x2, _ = load_adbench("cardio")
    x2[0, 0] = 1e9                                  # a fresh copy: the cache is not aliased
    assert load_adbench("cardio")[0][0, 0] != 1e9


def test_loader_checks_sha256_and_says_where_it_looked(tmp_path, monkeypatch):
    monkeypatch.setattr(adbench, "SHARED", tmp_path / "nowhere")
    folder = tmp_path / "adbench" / "Classical"
    folder.mkdir(parents=True)
    (folder / adbench.TABLES["wine"][0]).write_bytes(b"not the file")
    with pytest.raises(UserError, match="sha256"):
        table_file("wine", tmp_path)
    with pytest.raises(UserError, match="not on this machine"):
        table_file("glass", tmp_path)
    with pytest.raises(UserError, match="unknown ADBench table"):
        table_file("nope", tmp_path)


def test_split_parts_partition_the_table_and_follow_the_seed():
    rng = np.random.default_rng(0)
    y = np.r_[np.zeros(101, int), np.ones(23, int)]
    x = np.c_[np.arange(len(y)), rng.normal(size=len(y))]     # column 0: the row id
    parts = one_class_splits(x, y, seed=5, val_share=0.2)
    fit, (xv, yv), (xt, yt) = parts["fit"], parts["val"], parts["test"]
    ids = [set(a[:, 0].astype(int)) for a in (fit, xv, xt)]
    assert sum(map(len, ids)) == len(y) and set.union(*ids) == set(range(len(y)))     # a partition
    assert not (ids[1] & ids[2])                                                       # val never tests
    assert (y[fit[:, 0].astype(int)] == 0).all()                                       # fit: normals only
    side = 101 // 2
    assert len(fit) == side - int(side * 0.2) and int(yv.sum()) == int(23 * 0.2)
    assert int(yt.sum()) == 23 - int(23 * 0.2) and (yt == 0).sum() == 101 - side
    np.testing.assert_array_equal(one_class_splits(x, y, seed=5)["fit"], fit)          # deterministic
    assert not np.array_equal(one_class_splits(x, y, seed=6)["fit"], fit)              # drawn with the seed
    assert list(xt[:, 0]) == sorted(xt[:, 0])                                          # file order kept
    with pytest.raises(ValueError, match="val_share"):
        one_class_splits(x, y, val_share=1.0)


def test_average_ranks_by_hand_with_ties():
    ranks = average_ranks({"a": [0.9, 0.5, 0.7], "b": [0.8, 0.5, 0.9], "c": [0.1, 0.6, 0.2]})
    # dataset 1: a 1, b 2, c 3; dataset 2: c 1, a and b tie for 2-3 -> 2.5; dataset 3: b 1, a 2, c 3
    assert ranks == pytest.approx({"a": (1 + 2.5 + 2) / 3, "b": (2 + 2.5 + 1) / 3, "c": (3 + 1 + 3) / 3})
    assert sum(ranks.values()) == pytest.approx(6)
    with pytest.raises(ValueError):
        average_ranks({"a": [0.1], "b": [float("nan")]})


def exact_signed_rank_p(diff):
    """P(W+ >= observed) under H0 by enumerating all 2^n sign flips (no ties, no zeros)."""
    order = np.argsort(np.abs(diff))
    ranks = np.empty(len(diff))
    ranks[order] = np.arange(1, len(diff) + 1)
    observed = ranks[diff > 0].sum()
    sums = [sum(r for r, s in zip(ranks, signs) if s) for signs in itertools.product([0, 1], repeat=len(diff))]
    return np.mean(np.asarray(sums) >= observed - 1e-12)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_wilcoxon_matches_an_exact_enumeration(seed):
    rng = np.random.default_rng(seed)
    b = rng.uniform(size=9)
    a = b + rng.normal(0.05, 0.1, size=9)
    assert wilcoxon_p(a, b, "greater") == pytest.approx(exact_signed_rank_p(a - b), abs=1e-12)
    assert wilcoxon_p(list(range(1, 7)), [0] * 6) == pytest.approx(1 / 64)     # every one of 6 ahead
    assert wilcoxon_p(a, a) == 1.0


def test_mean_distance_is_the_standardised_norm():
    from methods.mcm.baselines import MeanDistance
    rng = np.random.default_rng(0)
    train, test = rng.normal(3, 2, size=(50, 4)), rng.normal(size=(7, 4))
    want = np.linalg.norm((test - train.mean(0)) / train.std(0), axis=1)
    np.testing.assert_allclose(MeanDistance().fit(train).decision_function(test), want, rtol=1e-6)


def test_untrained_row_scores_the_initial_model():
    from methods.mcm import MCMDetector
    x = np.random.default_rng(0).normal(size=(40, 5))
    det = MCMDetector(num_masks=3, epochs=0, hidden_dim=8, latent_dim=4).fit(x)
    assert det.history == [] and det.decision_function(x).shape == (40,)
    with pytest.raises(ValueError, match="epochs"):
        MCMDetector(epochs=-1)


@needs_adbench
def test_a_run_scores_several_detectors_with_ranks(compose_cfg, tmp_path):
    from types import SimpleNamespace

    from methods.mcm import run
    cfg = compose_cfg(["experiment=mcm_smoke", "dataset.tables=[wine,glass,breastw]",
                       "method.detectors=[mcm,mean_distance,iforest]", "trainer.epochs=1"])
    out = run(cfg, SimpleNamespace(seed=3, device="cpu", log=lambda row, step=None: None))
    for det in ("mcm", "mean_distance", "iforest"):
        assert 0 <= out[f"{det}/auprc_mean"] <= 1 and 1 <= out[f"{det}/rank_auprc"] <= 3
    assert sum(out[f"{d}/rank_auprc"] for d in ("mcm", "mean_distance", "iforest")) == pytest.approx(6)
    assert set(k for k in out if "wilcoxon" in k) == {f"{a}/wilcoxon_p_{b}" for a in ("mcm", "mean_distance", "iforest")
                                                      for b in ("mcm", "mean_distance", "iforest") if a != b}
    again = run(cfg, SimpleNamespace(seed=3, device="cpu", log=lambda row, step=None: None))
    assert again == out                                       # the seed fixes split and models
    cfg.method.detectors = ["mcm", "mcm"]
    with pytest.raises(UserError, match="twice"):
        run(cfg, SimpleNamespace(seed=3, device="cpu", log=lambda row, step=None: None))
