"""P²OT around the solver (test_p2ot_solver.py): the rho schedule, the long-tailed subset, the
cluster metrics against brute force, the swapped-label loss, the cosine head, the logits memory,
and smoke runs of the head training and evaluation stages."""
import itertools
import math
from functools import partial

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn

from methods.p2ot import (ClusterHead, CosineHead, LogitsMemory, cluster_metrics, evaluate_clusters,
                          kmeans_clusters, long_tailed_counts, long_tailed_indices, predict_clusters,
                          pseudo_labels, rho_schedule, swapped_label_loss, train_head, view_features)
from tests.conftest import needs_fashion


# ---------------------------------------------------------------- schedule, data, metrics

def test_rho_schedule_values():
    assert rho_schedule(0, 100, 0.1, 1.0) == pytest.approx(0.1 + 0.9 * math.exp(-5))
    assert rho_schedule(50, 100, 0.1, 1.0) == pytest.approx(0.1 + 0.9 * math.exp(-1.25))
    assert rho_schedule(100, 100, 0.1, 1.0) == pytest.approx(1.0)
    assert rho_schedule(250, 100, 0.1, 1.0) == pytest.approx(1.0)           # clipped
    assert rho_schedule(-5, 100, 0.1, 1.0) == rho_schedule(0, 100, 0.1, 1.0)
    assert rho_schedule(30, 100, 0.2, 0.8, kind="linear") == pytest.approx(0.2 + 0.6 * 0.3)
    assert rho_schedule(3, 0, 0.1, 0.9) == 0.9
    values = [rho_schedule(t, 40, 0.1, 1.0) for t in range(41)]
    assert all(b > a for a, b in zip(values, values[1:]))
    with pytest.raises(ValueError, match="kind"):
        rho_schedule(1, 10, 0.1, 1.0, kind="cosine")
    with pytest.raises(ValueError, match="rho_start"):
        rho_schedule(1, 10, 0.0, 1.0)


def test_long_tailed_counts_and_indices():
    assert long_tailed_counts(10, 100, 2000) == [int(2000 * 100 ** (-c / 9)) for c in range(10)]
    assert long_tailed_counts(10, 100, 2000)[0] == 2000 and long_tailed_counts(10, 100, 2000)[-1] == 20
    labels = torch.arange(10).repeat_interleave(2100)[torch.randperm(21000, generator=torch.Generator().manual_seed(0))]
    idx = long_tailed_indices(labels, 100, 2000, seed=3)
    assert idx.dtype == torch.long and len(idx) == sum(long_tailed_counts(10, 100, 2000)) == 4958
    assert idx.unique().numel() == len(idx)                                 # without replacement
    assert torch.bincount(labels[idx], minlength=10).tolist() == long_tailed_counts(10, 100, 2000)
    assert torch.equal(idx, long_tailed_indices(labels, 100, 2000, seed=3))
    assert not torch.equal(idx, long_tailed_indices(labels, 100, 2000, seed=4))


def test_long_tailed_bad_input():
    labels = torch.arange(3).repeat_interleave(50)
    with pytest.raises(ValueError, match="class 0 has 50 images, fewer than the 60"):
        long_tailed_indices(labels, 10, 60, seed=0)
    with pytest.raises(ValueError, match="imbalance_ratio"):
        long_tailed_indices(labels, 0.5, 10, seed=0)


def brute_force_metrics(pred, target, k):
    """acc over all k! matchings; macc and f1 of the best one, by hand."""
    best = max(itertools.permutations(range(k)), key=lambda p: sum(p[a] == b for a, b in zip(pred, target)))
    matched = [best[a] for a in pred]
    classes = sorted(set(target))
    recall = [np.mean([m == c for m, t in zip(matched, target) if t == c]) for c in classes]
    f1s = []
    for c in sorted(set(target) | set(matched)):
        tp = sum(m == c and t == c for m, t in zip(matched, target))
        fp = sum(m == c and t != c for m, t in zip(matched, target))
        fn = sum(m != c and t == c for m, t in zip(matched, target))
        f1s.append(0.0 if tp == 0 else 2 * tp / (2 * tp + fp + fn))
    return 100 * np.mean(np.array(matched) == np.array(target)), 100 * np.mean(recall), 100 * np.mean(f1s)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_cluster_metrics_match_brute_force(seed):
    rng = np.random.default_rng(seed)
    k = 5
    target = rng.choice(k, size=60, p=[0.4, 0.25, 0.2, 0.1, 0.05])
    pred = np.where(rng.random(60) < 0.6, (target + 2) % k, rng.integers(0, k, 60))
    acc, macc, f1 = brute_force_metrics(pred.tolist(), target.tolist(), k)
    m = cluster_metrics(torch.from_numpy(pred), torch.from_numpy(target), k)
    assert m["acc"] == pytest.approx(acc) and m["macc"] == pytest.approx(macc) and m["f1"] == pytest.approx(f1)
    # NMI: I(T;P) / mean(H(T), H(P)) from the joint counts
    joint = np.histogram2d(target, pred, bins=[k, k], range=[[0, k], [0, k]])[0] / 60
    pt, pp = joint.sum(1), joint.sum(0)
    nz = joint > 0
    mi = (joint[nz] * np.log(joint[nz] / np.outer(pt, pp)[nz])).sum()
    h = lambda p: -(p[p > 0] * np.log(p[p > 0])).sum()  # noqa: E731
    assert m["nmi"] == pytest.approx(100 * mi / ((h(pt) + h(pp)) / 2))


def test_cluster_metrics_perfect_up_to_renaming_and_bad_input():
    target = torch.tensor([0, 0, 0, 1, 1, 2, 3, 3])
    m = cluster_metrics((target + 1) % 4, target, 4)
    assert all(v == pytest.approx(100.0) for v in m.values())
    with pytest.raises(ValueError, match=r"train_pred must be 1-D with values in \[0, 4\), got shape \(2,\) and values in \[0, 5\]"):
        evaluate_clusters(torch.tensor([0, 5]), torch.tensor([0, 1]), torch.tensor([0]), torch.tensor([0]), 4)


# ---------------------------------------------------------------- loss, head, memory

def test_swapped_label_loss_matches_torch_soft_cross_entropy():
    gen = torch.Generator().manual_seed(11)
    lg = [torch.randn(8, 5, generator=gen) for _ in range(3)]
    ys = [torch.rand(8, 5, generator=gen) * 0.2 for _ in range(3)]            # rows sum below 1
    ref = sum(F.cross_entropy(lg[a], ys[b]) for a in range(3) for b in range(3) if a != b)
    torch.testing.assert_close(swapped_label_loss(lg, ys), ref)
    with pytest.raises(ValueError, match="same number"):
        swapped_label_loss(lg, ys[:2])


def test_cosine_head_equals_weight_normalised_linear_with_unit_gain():
    head = CosineHead(6, 4, logit_scale=10.0)
    lin = nn.Linear(6, 4, bias=False)
    lin.weight.data.copy_(head.prototypes.data)
    lin = nn.utils.parametrizations.weight_norm(lin)
    lin.parametrizations.weight.original0.data.fill_(1.0)                    # the gain g
    x = torch.randn(9, 6)
    torch.testing.assert_close(head(x), 10.0 * lin(F.normalize(x, dim=1)))
    torch.testing.assert_close(head(3.0 * x), head(x))
    assert head(x).abs().max() <= 10.0 + 1e-5
    assert ClusterHead(6, 4, hidden_dim=16, out_dim=8)(x).shape == (9, 4)


def test_logits_memory_is_a_ring_and_checkpointed():
    mem = LogitsMemory(3, 5)
    rows = mem.push(torch.ones(2, 3))
    assert rows.tolist() == [0, 1] and len(mem.contents()) == 2
    mem.overwrite(rows, 2 * torch.ones(2, 3))
    rows = mem.push(3 * torch.ones(4, 3))
    assert rows.tolist() == [2, 3, 4, 0] and len(mem.contents()) == 5
    assert mem.contents()[:, 0].tolist() == [3, 2, 3, 3, 3]
    state = mem.state_dict()
    assert {"logits", "next_row", "filled"} <= set(state) and int(state["next_row"]) == 1
    with pytest.raises(ValueError, match="does not fit"):
        mem.push(torch.ones(6, 3))


# ---------------------------------------------------------------- stages (smoke)

def blobs(n_per=(120, 60, 20), views=3, dim=8, seed=0):
    """Imbalanced, well separated Gaussian blobs, `views` noisy copies of each point."""
    gen = torch.Generator().manual_seed(seed)
    centres = 4.0 * torch.eye(len(n_per), dim)
    y = torch.cat([torch.full((m,), c) for c, m in enumerate(n_per)])
    base = centres[y] + 0.5 * torch.randn(len(y), dim, generator=gen)
    return base + 0.2 * torch.randn(views, len(y), dim, generator=gen), base, y


def test_train_head_smoke_on_imbalanced_blobs():
    feats, base, y = blobs()
    torch.manual_seed(0)
    head, hist = train_head(feats, ClusterHead(8, 3, hidden_dim=16, out_dim=8), epochs=4, batch_size=50,
                            optimizer=partial(torch.optim.Adam, lr=5e-3, weight_decay=0.0),
                            memory_batches=2, seed=0, tol=1e-4)
    assert len(hist["loss"]) == 4 * 4 and all(math.isfinite(v) for v in hist["loss"])
    assert hist["rho"][0] == pytest.approx(0.1 + 0.9 * math.exp(-5)) and hist["rho"] == sorted(hist["rho"])
    # over the batch alone (first epoch) the labels' mean row mass is the step's transported mass
    np.testing.assert_allclose(hist["label_mass"][:4], hist["rho"][:4], rtol=1e-3)
    assert cluster_metrics(predict_clusters(head, base), y, 3)["macc"] > 60.0       # chance: 33


def test_memory_labels_are_the_batch_rows_of_the_memory_solve_warm_or_cold():
    from methods.p2ot.stages import batch_labels

    gen = torch.Generator().manual_seed(13)
    mem_cold, mem_warm = LogitsMemory(4, 12), LogitsMemory(4, 12)
    old = 5 * torch.randn(8, 4, generator=gen)
    mem_cold.push(old), mem_warm.push(old)
    views = [5 * torch.randn(4, 4, generator=gen) for _ in range(2)]
    solve = dict(epsilon=0.1, kl_weight=1.0, max_iter=20_000, tol=1e-10, warn=False)
    cold, _, _, _ = batch_labels(views, mem_cold, 0.5, solve)
    warm, _, iters, scaling = batch_labels(views, mem_warm, 0.5, solve, torch.ones(5), warm_start=True)
    for v in range(2):
        torch.testing.assert_close(warm[v], cold[v], rtol=1e-6, atol=1e-7)
    # view 2's labels: rows 8..11 of the solve over [old; view 2] (view 1 overwritten)
    ref = pseudo_labels(torch.cat([old, views[1]]), 0.5, 0.1, 1.0, max_iter=20_000, tol=1e-10)[8:]
    torch.testing.assert_close(cold[1], ref, rtol=1e-6, atol=1e-7)
    assert scaling.shape == (5,) and len(iters) == 2


def test_view_features_kmeans_and_evaluation_shapes():
    from common.ssl import Augment

    aug = Augment(min_scale=0.5, flip_prob=0.5, jitter_prob=0.5, brightness=0.2, contrast=0.2)
    images = torch.randint(0, 256, (10, 1, 8, 8), dtype=torch.uint8)
    enc = nn.Sequential(nn.Flatten(), nn.Linear(64, 4))
    v = view_features(enc, images, 3, aug, seed=1, batch_size=4)
    assert v.shape == (3, 10, 4) and not torch.equal(v[0], v[1])
    torch.testing.assert_close(v, view_features(enc, images, 3, aug, seed=1, batch_size=4))
    _, base, y = blobs()
    train, test = kmeans_clusters(base, base[:30], 3, seed=0, n_init=2)
    m = evaluate_clusters(train, y, test, y[:30], 3)
    assert set(m) == {"acc", "macc", "nmi", "ari", "f1", "test_acc", "test_macc", "test_nmi", "test_ari", "test_f1"}
    assert m["nmi"] > 90.0


def test_the_head_optimiser_comes_from_the_config_and_its_lr_is_the_cosine_base():
    """`method.clustering.optimizer` is what trains the head (no hard-coded Adam)."""
    feats, _, _ = blobs()
    seen = {}

    class Recording(torch.optim.SGD):
        def __init__(self, params, **kw):
            super().__init__(params, **kw)
            seen["lr"] = kw["lr"]

        def step(self, closure=None):
            seen.setdefault("first_step_lr", self.param_groups[0]["lr"])
            return super().step(closure)

    torch.manual_seed(0)
    train_head(feats, ClusterHead(8, 3, hidden_dim=16, out_dim=8), epochs=2, batch_size=50,
               optimizer=partial(Recording, lr=0.3), memory_batches=2, seed=0, tol=1e-4)
    assert seen == {"lr": 0.3, "first_step_lr": pytest.approx(0.3)}   # epoch 0 of the cosine: the base lr


# ---------------------------------------------------------------- protocol: memory cap, tuning pool, cached encoder

def test_memory_holds_at_most_the_images_one_epoch_visits():
    """10 batches of 50 would be 500 rows for 200 images (duplicates); capped at 4 batches = 200."""
    feats, _, _ = blobs(n_per=(120, 60, 20))
    torch.manual_seed(0)
    _, hist = train_head(feats, ClusterHead(8, 3, hidden_dim=16, out_dim=8), epochs=2, batch_size=50,
                         memory_batches=10, seed=0, tol=1e-4)
    assert hist["memory_rows"] == 4 * 50 <= feats.shape[1]
    _, hist = train_head(feats, ClusterHead(8, 3, hidden_dim=16, out_dim=8), epochs=2, batch_size=50,
                         memory_batches=2, seed=0, tol=1e-4)
    assert hist["memory_rows"] == 100


def test_clustered_pool_splits_train_into_disjoint_tuning_and_report_parts():
    from methods.p2ot import clustered_pool

    val, train = clustered_pool(1000, "val", 120), clustered_pool(1000, "train", 120)
    assert len(val) == 120 and len(train) == 880
    assert torch.equal(torch.cat([val, train]).sort().values, torch.arange(1000))
    assert torch.equal(val, clustered_pool(1000, "val", 120))               # fixed, not the run seed
    with pytest.raises(ValueError, match="cluster_split"):
        clustered_pool(1000, "test", 120)
    with pytest.raises(ValueError, match="val_size"):
        clustered_pool(1000, "val", 1000)
    assert torch.equal(clustered_pool(1000, "train", 0), torch.arange(1000))     # the paper tier: all of train
    with pytest.raises(ValueError, match="val_size"):
        clustered_pool(1000, "val", 0)


def test_cache_key_changes_with_any_setting():
    from omegaconf import OmegaConf

    from methods.p2ot.encoder import cache_key

    a = OmegaConf.create({"max_steps": 10, "optimizer": {"lr": 1e-3}})
    assert cache_key(a, "fashion_mnist", 0) == cache_key(OmegaConf.create({"optimizer": {"lr": 1e-3}, "max_steps": 10}),
                                                          "fashion_mnist", 0)
    assert cache_key(a, "fashion_mnist", 0) != cache_key(a, "fashion_mnist", 1)
    assert cache_key(a, "fashion_mnist", 0) != cache_key(OmegaConf.create({"max_steps": 11, "optimizer": {"lr": 1e-3}}),
                                                          "fashion_mnist", 0)


@needs_fashion
def test_encoder_is_pretrained_once_and_later_runs_load_it(compose_cfg, tmp_path):
    """Two seeds sharing a cache dir: the second loads the first's encoder (same kNN accuracy, the
    same weights), trains nothing, and still clusters its own long-tailed draw."""
    from common.runner import run_method

    base = ["experiment=p2ot_smoke", f"method.encoder_cache.dir={tmp_path / 'cache'}",
            "method.rules={p2ot: {rho_start: 0.1, rho_end: 1.0, kl_weight: 1.0}}"]
    first = run_method(compose_cfg([*base, f"run_dir={tmp_path / 'a'}", "seed=0"]))
    cached = sorted((tmp_path / "cache").glob("encoder-*.pt"))
    assert len(cached) == 1 and (tmp_path / "a" / "encoder").exists()
    second = run_method(compose_cfg([*base, f"run_dir={tmp_path / 'b'}", "seed=1"]))
    assert not (tmp_path / "b" / "encoder").exists()                       # no training stage ran
    assert second["encoder/knn_acc"] == first["encoder/knn_acc"]
    assert sorted((tmp_path / "cache").glob("encoder-*.pt")) == cached
    again = run_method(compose_cfg([*base, f"run_dir={tmp_path / 'c'}", "seed=0"]))
    assert again == first                                                  # loaded weights = trained weights


def test_check_features_bad_input():
    from methods.p2ot import check_features

    check_features("simclr", 0)
    check_features("supervised", 10)
    with pytest.raises(ValueError, match="method.features must be one of"):
        check_features("dino", 10)
    with pytest.raises(ValueError, match="reference.steps must be > 0"):
        check_features("supervised", 0)


@needs_fashion
def test_supervised_features_cluster_the_cached_reference(compose_cfg, tmp_path):
    """`method.features=supervised`: k-means runs on the cached supervised reference's features (k-means
    re-done here on that model's features of the same long-tailed draw gives the same metrics), the
    SimCLR encoder and the reference are the same cached models as in a `simclr` run, and the kmeans
    row differs from the `simclr` run's."""
    from common import data as datasets
    from common.instantiate import instantiate
    from common.runner import run_method
    from methods.p2ot import SupervisedNet, clustered_pool, plain_features

    base = ["experiment=p2ot_smoke", f"method.encoder_cache.dir={tmp_path / 'cache'}", "method.reference.steps=3",
            "method.rules={p2ot: {rho_start: 0.1, rho_end: 1.0, kl_weight: 1.0}}", "seed=0"]
    simclr = run_method(compose_cfg([*base, f"run_dir={tmp_path / 'a'}"]))
    cfg = compose_cfg([*base, f"run_dir={tmp_path / 'b'}", "method.features=supervised"])
    sup = run_method(cfg)
    assert sup["encoder/knn_acc"] == simclr["encoder/knn_acc"]
    assert sup["supervised/knn_acc"] == simclr["supervised/knn_acc"]
    assert sup["kmeans/nmi"] != simclr["kmeans/nmi"]
    (path,) = sorted((tmp_path / "cache").glob("supervised-*.pt"))
    m = cfg.method
    encoder, feat_dim = instantiate(m.backbone, in_chans=cfg.dataset.in_chans, img_size=cfg.dataset.img_size)
    net = SupervisedNet(encoder, feat_dim, int(cfg.dataset.num_classes))
    net.load_state_dict(torch.load(path, weights_only=True)["model"])
    net.eval()
    train_x, train_y = datasets.load(cfg.dataset.name, "train", cfg.dataset.root, cfg.dataset.download)
    test_x, test_y = datasets.image_splits(cfg.dataset)["test"]
    pool = clustered_pool(len(train_y), m.cluster_split, m.val_size)
    lt = pool[long_tailed_indices(train_y[pool], m.imbalance_ratio, m.max_per_class, 0)]
    with torch.no_grad():
        feats = [plain_features(net.features, x, m.feature_batch_size) for x in (train_x[lt], test_x)]
    km_train, km_test = kmeans_clusters(*feats, 10, 0, m.kmeans_n_init)
    km = evaluate_clusters(km_train, train_y[lt], km_test, test_y, 10)
    assert km["nmi"] == pytest.approx(sup["kmeans/nmi"], abs=1e-9)
    assert km["macc"] == pytest.approx(sup["kmeans/macc"], abs=1e-9)


# ---------------------------------------------------------------- the cached models depend on the cache seed only

def _cache_ctx(compose_cfg, tmp_path, name, run_seed):
    from common.hardware import Hardware
    from common.logging import MetricLogger
    from common.runner import RunContext

    # the run's config seed differs per run and from the cache seed (3): a cache that read `ctx.seed`
    # or `cfg.seed` anywhere (sampler, cached_model's fork) would differ between the runs
    cfg = compose_cfg(["experiment=p2ot_smoke", f"method.encoder_cache.dir={tmp_path / name / 'cache'}",
                       f"run_dir={tmp_path / name}", "method.reference.steps=2", "trainer.max_steps=2",
                       "trainer.batch_size=16", f"seed={run_seed}", "method.encoder_cache.seed=3"])
    (tmp_path / name).mkdir()
    hw = Hardware(device=torch.device("cpu"), rank=0, world_size=1)
    return cfg, RunContext(cfg, hw, tmp_path / name, MetricLogger(tmp_path / name, cfg.logger))


def test_cached_weights_do_not_depend_on_the_run_that_builds_them(compose_cfg, tmp_path):
    """Issue #35: a cache rebuilt by another run moved the tables (the encoder was initialised under the
    building run's RNG). Runs whose global RNG differs (two run seeds), building into empty cache dirs,
    save bit-identical encoder and reference weights, also when the reference is built in a run that
    loaded the encoder (its RNG then never saw the encoder's training); and the run's own RNG stream
    afterwards is the same whether the cache was built or loaded."""
    from methods.p2ot import pretrain_encoder, supervised_reference
    from methods.p2ot.encoder import CACHE_VERSION

    gen = torch.Generator().manual_seed(0)
    images = torch.randint(0, 256, (48, 1, 28, 28), dtype=torch.uint8, generator=gen)
    labels = torch.arange(48) % 10
    knn = ((images[:24], labels[:24]), (images[24:], labels[24:]))
    states = {}
    for name, run_seed, encoder_first in (("a", 0, True), ("b", 7, True), ("c", 123, False)):
        cfg, ctx = _cache_ctx(compose_cfg, tmp_path, name, run_seed)
        torch.manual_seed(run_seed)            # what the runner does with the run's seed
        if encoder_first:
            enc, info = pretrain_encoder(cfg, ctx, images, knn)
            assert not info["cached"]
            states[name, "encoder"] = {k: v.clone() for k, v in enc.state_dict().items()}
        ref, info = supervised_reference(cfg, ctx, images, labels, knn)
        assert not info["cached"]
        states[name, "supervised"] = {k: v.clone() for k, v in ref.state_dict().items()}
        after_build = torch.rand(3)
        if name == "a":                        # the same run again, loading both: the same RNG stream after
            torch.manual_seed(run_seed)
            assert pretrain_encoder(cfg, ctx, images, knn)[1]["cached"]
            assert supervised_reference(cfg, ctx, images, labels, knn)[1]["cached"]
            assert torch.equal(torch.rand(3), after_build)
    for stage, others in (("encoder", "b"), ("supervised", "bc")):
        for other in others:
            a, b = states["a", stage], states[other, stage]
            assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a), (stage, other)
    # the key carries the cache version: a cache written before the fix (no version) is never loaded
    assert CACHE_VERSION >= 2
    keys = {p.name for p in (tmp_path / "a" / "cache").glob("*.pt")}
    import methods.p2ot.encoder as enc_mod
    from omegaconf import OmegaConf
    old = OmegaConf.create({"x": 1})
    with pytest.MonkeyPatch.context() as mp:
        k2 = enc_mod.cache_key(old)
        mp.setattr(enc_mod, "CACHE_VERSION", 1)
        assert enc_mod.cache_key(old) != k2
    assert len(keys) == 2
