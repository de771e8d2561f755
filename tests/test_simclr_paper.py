"""SimCLR's paper tier without a GPU or the data: simclr_cifar10 composes, validates and builds at
full size on the meta device, with SimCLR's CIFAR augmentations (Chen et al. 2020, App. B.9: colour
strength 0.5, grey-scale, no blur) in its Augment, which runs on an RGB batch of CIFAR's size."""
import pytest
import torch

from common.config import compose_checked
from common.reproduce.paper import build_on_meta
from common.reproduce.tables import experiments
from common.ssl import Augment, apply, sample_params
from methods.simclr import SimCLR


def test_the_paper_tier_is_simclr_cifar10():
    assert experiments("simclr", "paper") == ["simclr_cifar10"]


def test_simclr_cifar10_has_simclrs_cifar_recipe():
    cfg = compose_checked(["experiment=simclr_cifar10"])   # types and ranges (common.schema) checked here
    model, count = build_on_meta(cfg)
    assert isinstance(model, SimCLR) and count > 11_000_000   # ResNet-18 (CIFAR stem) + projector
    aug = model.augment
    assert isinstance(aug, Augment)
    strength = 0.5   # ColorJitter(0.8 s, 0.8 s, 0.8 s, 0.2 s) with p 0.8, RandomGrayscale(0.2), no blur
    assert aug.brightness == aug.contrast == aug.saturation == pytest.approx(0.8 * strength) == 0.4
    assert aug.hue == pytest.approx(0.2 * strength) == 0.1
    assert aug.jitter_prob == 0.8 and aug.grayscale_prob == 0.2 and aug.min_scale == 0.08 and aug.flip_prob == 0.5
    assert aug.blur_prob == 0 and aug.blur_kernel == 0
    assert (cfg.dataset.name, cfg.dataset.img_size, cfg.dataset.in_chans) == ("cifar10", 32, 3)
    # the recipe's augmentations run on a CPU batch of the dataset's size (RGB, so every op acts)
    x = torch.rand(8, 3, cfg.dataset.img_size, cfg.dataset.img_size, generator=torch.Generator().manual_seed(0))
    p = sample_params(8, aug, generator=torch.Generator().manual_seed(1))
    assert p.saturation is not None and p.hue is not None and p.grayscale is not None and p.blur_sigma is None
    views = apply(x, p)
    assert views.shape == x.shape and 0 <= views.min() and views.max() <= 1
