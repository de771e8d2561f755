"""Poly-view tables: negatives per anchor counted against a hand count, the rows of the mini and
supporting tables, the paper-tier ImageNet settings against the paper's batch, views and epochs, and
the paper-tier augmentations against SimCLR's recipe of each dataset."""
import math

import pytest
import torch

from common.config import compose_checked
from common.reproduce.paper import build_on_meta
from common.reproduce.tables import experiments
from common.ssl import Augment, multi_views
from methods.polyview import LOSSES, PolyView, images_per_step, poly_view_loss

IMAGENET_TRAIN = 1_281_167     # ImageNet-1k training images


def negatives_per_anchor(kind: str, n: int, m: int) -> float:
    """K of the loss at a point where every logit is equal (all z the same vector): each anchor's
    term is then -log(e^s / (e^s + K e^s)) = log(1 + K), so K = exp(loss) - 1."""
    z = torch.ones(n, m, 3, dtype=torch.float64)
    return math.exp(poly_view_loss(z, 0.5, kind).item()) - 1


def hand_count(kind: str, n: int, m: int) -> int:
    """Counted from the definitions: PVC (geometric, arithmetic) contrasts a view with every view of
    the N - 1 other samples; multi-crop's pairwise NT-Xent with views a and b of the N - 1 others;
    sufficient statistics with the statistics t_ja of the N - 1 others."""
    return {"geometric": m * (n - 1), "arithmetic": m * (n - 1), "multi_crop": 2 * (n - 1),
            "sufficient_statistics": n - 1}[kind]


@pytest.mark.parametrize("kind", LOSSES)
@pytest.mark.parametrize("n,m", [(2, 2), (5, 3), (32, 8), (128, 2), (64, 4)])
def test_negatives_per_anchor_match_the_hand_count(kind, n, m):
    assert negatives_per_anchor(kind, n, m) == pytest.approx(hand_count(kind, n, m), rel=1e-9)


def test_two_views_give_every_loss_but_sscl_the_nt_xent_negatives():
    """At M = 2 multi-crop and PVC see the same 2(N - 1) negatives (SimCLR's)."""
    assert {hand_count(k, 10, 2) for k in ("geometric", "arithmetic", "multi_crop")} == {18}


def _row(compose_cfg, experiment, overrides):
    cfg = compose_cfg([f"experiment={experiment}", *overrides])
    return cfg.trainer.batch_size, cfg.method.model.views, cfg.method.model.loss, cfg.trainer.max_steps


def test_mini_table_negatives_per_anchor(compose_cfg):
    """polyview_mini: simclr and the M = 8 PVC rows are matched in negatives (254, 248); multicrop_m8
    sees 62, a quarter (README, Deviations); the fixed-N chain sees M(N - 1): 62, 124, 248."""
    base = compose_cfg(["experiment=polyview_mini"])
    got = {}
    for row, overrides in base.table.rows.items():
        n, m, kind, _ = _row(compose_cfg, "polyview_mini", overrides)
        got[row] = round(negatives_per_anchor(kind, n, m))
    assert got == {"simclr": 254, "geometric_m8": 248, "sufficient_statistics_m8": 31, "multicrop_m8": 62,
                   "m2": 62, "m4": 124}


def test_losses_table_rows(compose_cfg):
    """polyview_mini_losses: the three objectives at N x M = 32 x 8 (polyview_mini's geometric_m8),
    then N = 64 with M = 2, 4, 8; every row the same steps; three seeds for its claims."""
    base = compose_cfg(["experiment=polyview_mini_losses"])
    rows = {row: _row(compose_cfg, "polyview_mini_losses", o) for row, o in base.table.rows.items()}
    assert {r[3] for r in rows.values()} == {base.trainer.max_steps}
    for kind in ("geometric", "arithmetic", "sufficient_statistics"):
        assert rows[f"{kind}_m8"][:3] == (images_per_step(256, 8), 8, kind)
    assert [rows[f"n64_m{m}"][:3] for m in (2, 4, 8)] == [(64, m, "geometric") for m in (2, 4, 8)]
    assert len(base.table.seeds) >= 3 and (base.claims or base.known_failures)


def test_imagenet_config_holds_the_papers_batch_views_and_epochs(compose_cfg):
    """The abstract's two runs: Geometric PVC, B = 256, M = 8, 128 epochs; SimCLR, B = 4096,
    M = 2, 1024 epochs; steps = epochs x whole batches per epoch; LARS lr 0.3 x B / 256."""
    base = compose_cfg(["experiment=polyview_imagenet"])
    runs = {}
    for row, overrides in base.table.rows.items():
        cfg = compose_cfg(["experiment=polyview_imagenet", *overrides])
        batch, views = cfg.trainer.batch_size, cfg.method.model.views
        epochs = cfg.trainer.max_steps / (IMAGENET_TRAIN // batch)
        warmup_epochs = cfg.trainer.schedule.warmup_steps / (IMAGENET_TRAIN // batch)
        assert cfg.trainer.optimizer.lr == pytest.approx(0.3 * batch / 256), row
        assert warmup_epochs == pytest.approx(10), row
        runs[row] = (batch, views, cfg.method.model.loss, epochs)
    assert runs == {"geometric_m8": (256, 8, "geometric", 128), "simclr_b4096": (4096, 2, "geometric", 1024)}
    # views encoded per image over training (epochs x M): the poly-view row spends half of SimCLR's
    views_per_image = {row: r[3] * r[1] for row, r in runs.items()}
    assert views_per_image["geometric_m8"] / views_per_image["simclr_b4096"] == pytest.approx(0.5)
    assert base.dataset.name == "imagenet" and base.dataset.num_classes == 1000
    # timm's ResNet-50 with its ImageNet stem (7x7/2 conv + max-pool), not the CIFAR stem
    assert base.method.backbone._target_ == "common.nn.timm_backbone.timm_backbone" and base.method.backbone.name == "resnet50"
    assert list(base.claims) == ["geometric_m8.linear_acc > simclr_b4096.linear_acc"]


# experiment -> (colour strength s, blur): SimCLR's recipes (Chen et al. 2020): ColorJitter(0.8 s, 0.8 s,
# 0.8 s, 0.2 s) with p 0.8 and RandomGrayscale(p 0.2); CIFAR s = 0.5 and no blur, ImageNet s = 1.0 and
# Gaussian blur with p 0.5, kernel 10% of the image side made odd, sigma U(0.1, 2.0)
PAPER_AUGMENT = {"polyview_cifar10": (0.5, False), "polyview_imagenet": (1.0, True)}


def test_the_paper_tier_has_both_augmentation_recipes():
    assert experiments("polyview", "paper") == sorted(PAPER_AUGMENT)


@pytest.mark.parametrize("experiment", sorted(PAPER_AUGMENT))
def test_paper_configs_have_simclrs_augmentations_of_their_dataset(experiment):
    strength, blur = PAPER_AUGMENT[experiment]
    cfg = compose_checked([f"experiment={experiment}"])   # types and ranges (common.schema) checked here
    model, _ = build_on_meta(cfg)
    aug = model.augment
    assert isinstance(model, PolyView) and isinstance(aug, Augment)
    assert aug.brightness == aug.contrast == aug.saturation == pytest.approx(0.8 * strength)
    assert aug.hue == pytest.approx(0.2 * strength)
    assert aug.jitter_prob == 0.8 and aug.grayscale_prob == 0.2 and aug.min_scale == 0.08 and aug.flip_prob == 0.5
    side = cfg.dataset.img_size
    if blur:   # 224 px: int(22.4) = 22 -> 23
        assert aug.blur_kernel == int(0.1 * side) | 1 == 23 and aug.blur_prob == 0.5 and aug.blur_sigma == (0.1, 2.0)
    else:
        assert side == 32 and aug.blur_prob == 0 and aug.blur_kernel == 0
    # the recipe's M views run on a CPU batch of the dataset's size (RGB, so every op acts)
    x = torch.rand(2, 3, side, side, generator=torch.Generator().manual_seed(0))
    views = multi_views(x, 4, aug, generator=torch.Generator().manual_seed(1))
    assert views.shape == (2, 4, 3, side, side) and 0 <= views.min() and views.max() <= 1
