"""CARE's CIFAR paper configs without a GPU or the data: they compose, validate and build at full size
on the meta device with the official augmentations (Sharut/CARE cifar10_cifar100_stl10/dataset.py:
ColorJitter(0.4, 0.4, 0.4, 0.1) with p 0.8, RandomGrayscale(0.2), Gaussian blur with p 0.5, kernel
int(0.1 x 32) = 3, sigma U(0.1, 2)); the hue jitter is CARE's own rotation (`model.hue`), and the
equivariance metrics draw from the training ranges. CARE's views run on an RGB batch of CIFAR's size."""
import pytest
import torch
from hydra.utils import instantiate

from common.config import compose_checked
from common.reproduce.paper import build_on_meta
from common.ssl import Augment
from methods.care import CARE
from methods.care.model import augment_images

CIFAR = {"care_cifar10": ("cifar10", 16), "care_cifar100": ("cifar100", 4)}   # dataset, K


@pytest.mark.parametrize("experiment", sorted(CIFAR))
def test_care_cifar_config_has_the_official_augmentations(experiment):
    cfg = compose_checked([f"experiment={experiment}"])   # types and ranges (common.schema) checked here
    model, count = build_on_meta(cfg)
    assert isinstance(model, CARE) and count > 23_000_000   # ResNet-50 (CIFAR stem) + projector
    assert (cfg.dataset.name, cfg.dataset.img_size, cfg.dataset.in_chans) == (CIFAR[experiment][0], 32, 3)
    assert model.chunks == CIFAR[experiment][1]
    aug = model.augment
    assert isinstance(aug, Augment)
    # ColorJitter(0.4, 0.4, 0.4, 0.1) with p 0.8: brightness, contrast, saturation in Augment ...
    assert (aug.brightness, aug.contrast, aug.saturation) == (0.4, 0.4, 0.4) and aug.jitter_prob == 0.8
    # ... the hue as CARE's rotation, once (Augment's HSV hue off, or the hue would shift twice)
    assert model.hue == 0.1 and aug.hue == 0.0
    assert aug.grayscale_prob == 0.2 and aug.min_scale == 0.08 and aug.flip_prob == 0.5
    # blur: kernel int(0.1 x input side), odd, with p 0.5 and sigma U(0.1, 2.0), as the official code
    assert aug.blur_kernel == int(0.1 * cfg.dataset.img_size) | 1 == 3 and aug.blur_prob == 0.5
    assert aug.blur_sigma == (0.1, 2.0)
    # the equivariance metrics are drawn from the training ranges
    assert instantiate(cfg.method.metrics.augment) == aug and cfg.method.metrics.hue == model.hue
    # CARE's views (hue rotation, then common.ssl.apply) run on a CPU batch of the dataset's size
    x = torch.rand(8, 3, cfg.dataset.img_size, cfg.dataset.img_size, generator=torch.Generator().manual_seed(0))
    v = model.sample_views(8, generator=torch.Generator().manual_seed(1))
    assert v.aug.saturation is not None and v.aug.grayscale is not None and v.aug.blur_sigma is not None
    assert v.aug.hue is None and bool(v.hue.any())
    views = augment_images(x, v)
    assert views.shape == x.shape and 0 <= views.min() and views.max() <= 1
