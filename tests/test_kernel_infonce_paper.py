"""Kernel-InfoNCE's paper tier without a GPU or the data: every paper config and every one of its
rows composes, validates and builds at full size on the meta device (parameter count against a
layer-by-layer formula written here), with the official recipe's schedule and jitter per dataset."""
import pytest
import torch
from hydra import compose, initialize_config_dir

from common.config import CONFIG_DIR, compose_checked
from common.reproduce.paper import build_on_meta, dry_run
from common.reproduce.tables import experiments
from common.ssl import Augment, apply, sample_params
from methods.kernel_infonce import KernelInfoNCE

# experiment -> (training images, epochs, colour-jitter strength, blur kernel (0 = none), ImageNet stem),
# as the official cli_main sets them per dataset
PAPER = {"kernel_infonce_cifar10": (50000, 400, 0.5, 0, False), "kernel_infonce_cifar100": (50000, 400, 0.5, 0, False),
         "kernel_infonce_tinyimagenet": (100000, 800, 1.0, 7, True)}
ROWS = {"simclr": "gaussian", "laplacian": "laplacian", "exponential_0p5": "exponential",
        "simple_sum": "simple_sum", "concat_sum": "concat_sum"}   # Table 1's five rows


def resnet18_params(stem_kernel=3, width=64, in_chans=3):
    """timm ResNet-18 without its classifier (CIFAR stem 3x3, ImageNet stem 7x7; the max-pool has no
    parameters): bias-free convs, BatchNorm (γ, β) after each, a 1x1 conv + BN shortcut where the
    shape changes."""
    conv_bn = lambda k, cin, cout: k * k * cin * cout + 2 * cout   # noqa: E731
    total, c = conv_bn(stem_kernel, in_chans, width), width
    for i, stride in enumerate((1, 2, 2, 2)):
        out = width * 2 ** i
        for s in (stride, 1):
            total += conv_bn(3, c, out) + conv_bn(3, out, out) + (conv_bn(1, c, out) if s != 1 or c != out else 0)
            c = out
    return total


def projector_params(in_dim, hidden, out):
    """common.ssl.Projector: Linear without bias, BatchNorm, ReLU, Linear with bias."""
    return in_dim * hidden + 2 * hidden + hidden * out + out


def test_the_paper_tier_has_every_dataset_of_table_1():
    assert experiments("kernel_infonce", "paper") == sorted(PAPER)


@pytest.mark.parametrize("experiment", sorted(PAPER))
def test_every_row_composes_validates_and_builds_at_full_size(experiment):
    n_train, epochs, strength, blur_kernel, imagenet_stem = PAPER[experiment]
    cfg = compose_checked([f"experiment={experiment}"])   # types and ranges (common.schema) checked here
    assert dict(cfg.table.rows).keys() == ROWS.keys()
    steps_per_epoch = n_train // cfg.trainer.batch_size
    assert cfg.trainer.batch_size == 256 and cfg.trainer.max_steps == epochs * steps_per_epoch
    assert cfg.trainer.schedule.warmup_steps == 10 * steps_per_epoch
    aug = cfg.method.model.augment   # ColorJitter(0.8 s, 0.8 s, 0.8 s, 0.2 s) with p 0.8, RandomGrayscale(0.2)
    assert aug.brightness == aug.contrast == aug.saturation == pytest.approx(0.8 * strength)
    assert aug.hue == pytest.approx(0.2 * strength) and aug.jitter_prob == 0.8 and aug.grayscale_prob == 0.2
    assert aug.min_scale == 0.08 and aug.get("blur_kernel", 0) == blur_kernel
    if blur_kernel:   # kernel int(0.1 * input_height), made odd, applied with p 0.5, sigma U(0.1, 2)
        assert blur_kernel == int(0.1 * cfg.dataset.img_size) | 1 and aug.blur_prob == 0.5
        assert list(aug.blur_sigma) == [0.1, 2.0]
    assert cfg.method.backbone.name == ("resnet18" if imagenet_stem else "resnet18_cifar")
    assert cfg.paper.metric == "linear_acc" and set(cfg.paper.get("rows") or {}) <= set(ROWS)
    # each row's overrides: composed in one Hydra context (compose_checked costs ~1 s a call) and built;
    # build() turns a kernel setting the row's kernel does not read into a config error
    with initialize_config_dir(str(CONFIG_DIR), version_base="1.3"):
        for row, overrides in cfg.table.rows.items():
            model, count = build_on_meta(compose("train", overrides=[f"experiment={experiment}", *overrides]))
            assert isinstance(model, KernelInfoNCE) and model.kernel == ROWS[row]
            assert model.guarded is True   # the official code's 1e-6 guards, as Table 1 was computed
            proj_dim = 256 if row == "concat_sum" else 128   # concat_sum: two halves of 128
            assert count == resnet18_params(7 if imagenet_stem else 3) + projector_params(512, 2048, proj_dim)
    # the recipe's augmentations run on a CPU batch of the dataset's size (RGB, so every op acts)
    assert isinstance(model.augment, Augment) and model.augment.blur_kernel == blur_kernel
    x = torch.rand(8, 3, cfg.dataset.img_size, cfg.dataset.img_size, generator=torch.Generator().manual_seed(0))
    views = apply(x, sample_params(8, model.augment, generator=torch.Generator().manual_seed(1)))
    assert views.shape == x.shape and 0 <= views.min() and views.max() <= 1
    if experiment.endswith("tinyimagenet"):
        assert (cfg.dataset.name, cfg.dataset.img_size, cfg.dataset.num_classes) == ("tinyimagenet", 64, 200)


def test_dry_run_builds_every_paper_config():
    lines = []
    assert dry_run("kernel_infonce", [], log=lines.append) == 0
    assert [line.split(":")[0] for line in lines] == sorted(PAPER)
