"""Kernel-InfoNCE's paper tier without a GPU or the data: every paper config and every one of its
rows composes, validates and builds at full size on the meta device (parameter count against a
layer-by-layer formula written here), with the official recipe's schedule and jitter per dataset."""
import pytest
from hydra import compose, initialize_config_dir

from common.config import CONFIG_DIR, compose_checked
from common.reproduce.paper import build_on_meta, dry_run
from common.reproduce.tables import experiments
from methods.kernel_infonce import KernelInfoNCE

# experiment -> (training images, epochs, colour-jitter strength of the official cli_main)
PAPER = {"kernel_infonce_cifar10": (50000, 400, 0.5), "kernel_infonce_cifar100": (50000, 400, 0.5),
         "kernel_infonce_tinyimagenet": (100000, 800, 1.0)}
ROWS = {"simclr": "gaussian", "laplacian": "laplacian", "exponential_0p5": "exponential",
        "simple_sum": "simple_sum", "concat_sum": "concat_sum"}   # Table 1's five rows


def resnet18_cifar_params(width=64, in_chans=3):
    """timm ResNet-18 without its classifier, CIFAR stem: bias-free convs, BatchNorm (γ, β) after each,
    a 1x1 conv + BN shortcut where the shape changes."""
    conv_bn = lambda k, cin, cout: k * k * cin * cout + 2 * cout   # noqa: E731
    total, c = conv_bn(3, in_chans, width), width
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
    n_train, epochs, strength = PAPER[experiment]
    cfg = compose_checked([f"experiment={experiment}"])   # types and ranges (common.schema) checked here
    assert dict(cfg.table.rows).keys() == ROWS.keys()
    steps_per_epoch = n_train // cfg.trainer.batch_size
    assert cfg.trainer.batch_size == 256 and cfg.trainer.max_steps == epochs * steps_per_epoch
    assert cfg.trainer.schedule.warmup_steps == 10 * steps_per_epoch
    aug = cfg.method.model.augment   # ColorJitter(0.8 s, 0.8 s, ...): brightness and contrast are 0.8 s
    assert aug.brightness == aug.contrast == pytest.approx(0.8 * strength) and aug.min_scale == 0.08
    assert cfg.paper.metric == "linear_acc" and set(cfg.paper.get("rows") or {}) <= set(ROWS)
    # each row's overrides: composed in one Hydra context (compose_checked costs ~1 s a call) and built;
    # build() turns a kernel setting the row's kernel does not read into a config error
    with initialize_config_dir(str(CONFIG_DIR), version_base="1.3"):
        for row, overrides in cfg.table.rows.items():
            model, count = build_on_meta(compose("train", overrides=[f"experiment={experiment}", *overrides]))
            assert isinstance(model, KernelInfoNCE) and model.kernel == ROWS[row]
            proj_dim = 256 if row == "concat_sum" else 128   # concat_sum: two halves of 128
            assert count == resnet18_cifar_params() + projector_params(512, 2048, proj_dim)
    if experiment.endswith("tinyimagenet"):
        assert (cfg.dataset.name, cfg.dataset.img_size, cfg.dataset.num_classes) == ("tinyimagenet", 64, 200)


def test_dry_run_builds_every_paper_config():
    lines = []
    assert dry_run("kernel_infonce", [], log=lines.append) == 0
    assert [line.split(":")[0] for line in lines] == sorted(PAPER)
