"""Intra-Fusion's paper tier without a GPU or CIFAR: the configs compose and build the official CIFAR
networks at full size (parameter counts from a layer-by-layer formula written here), the official
preprocessing and step decay, dense checkpoints, and the run end to end on random CIFAR-shaped data."""
import types

import pytest
import torch

from methods.intra_fusion import ResNet18, VGG, VGG11, build, build_network, crop_flip, standardise
from methods.intra_fusion.recipe import dense_checkpoint, load_dense, use_step_decay

PAPER = {"intra_fusion_cifar10_vgg11bn": "vgg11_bn", "intra_fusion_cifar10_resnet18": "resnet18"}


def vgg_params(widths, classes=10, c=3):
    """Official VGG: per width a 3x3 conv with bias and a BatchNorm (γ, β); one Linear."""
    total = 0
    for w in widths:
        if w != "M":
            total += 9 * c * w + w + 2 * w
            c = w
    return total + c * classes + classes


def resnet18_params(classes=10, width=64):
    """Official CIFAR ResNet18: every conv has a bias; 1x1 conv + BN shortcut where the shape changes."""
    conv_bn = lambda k, cin, cout: k * k * cin * cout + cout + 2 * cout   # noqa: E731
    total, c = conv_bn(3, 3, width), width
    for i, stride in enumerate((1, 2, 2, 2)):
        out = width * 2 ** i
        for s in (stride, 1):
            total += conv_bn(3, c, out) + conv_bn(3, out, out) + (conv_bn(1, c, out) if s != 1 or c != out else 0)
            c = out
    return total + c * classes + classes


@pytest.mark.parametrize("experiment", sorted(PAPER))
def test_paper_config_builds_the_official_network_at_full_size(compose_cfg, experiment):
    from common.schema import validate

    cfg = compose_cfg([f"experiment={experiment}"])
    validate(cfg)
    assert cfg.method.model.name == PAPER[experiment] and list(cfg.method.groups) == [1, 2, 3]
    steps_per_epoch = 50000 // cfg.trainer.batch_size
    assert cfg.trainer.max_steps == 300 * steps_per_epoch == 10 * cfg.method.lr_decay.every_steps
    model = build(cfg)
    want = vgg_params(VGG11) if PAPER[experiment] == "vgg11_bn" else resnet18_params()
    assert sum(p.numel() for p in model.parameters()) == want
    assert abs(want / 1e6 - cfg.paper.params_m) <= 0.01
    assert model.eval()(torch.randn(2, 3, 32, 32)).shape == (2, 10)


def test_module_names_are_the_official_ones():
    vgg, res = VGG().state_dict(), ResNet18().state_dict()
    for key in ("features.0.weight", "features.0.bias", "features.1.running_var", "features.25.weight",
                "features.26.num_batches_tracked", "classifier.weight", "classifier.bias"):
        assert key in vgg
    assert "features.29.weight" not in vgg and isinstance(VGG().features[29], torch.nn.AvgPool2d)
    for key in ("conv1.bias", "bn1.weight", "layer1.0.conv1.bias", "layer2.0.shortcut.0.weight",
                "layer2.0.shortcut.1.running_mean", "layer4.1.bn2.bias", "linear.weight"):
        assert key in res
    assert not any(k.startswith("layer1.0.shortcut") for k in res)


def test_standardise_and_crop_flip_against_their_definitions():
    g = torch.Generator().manual_seed(0)
    images = torch.randint(0, 256, (6, 3, 8, 8), dtype=torch.uint8, generator=g)
    mean, std = [0.485, 0.456, 0.406], [0.229, 0.224, 0.225]
    got = standardise(images, mean, std)
    for c in range(3):
        torch.testing.assert_close(got[:, c], (images[:, c].float() / 255 - mean[c]) / std[c])
    out = crop_flip(images, 2, True, torch.Generator().manual_seed(1))
    padded = torch.nn.functional.pad(images, (2, 2, 2, 2))
    for i in range(6):            # each output is some zero-padded 8x8 window, possibly mirrored
        windows = [padded[i, :, dy:dy + 8, dx:dx + 8] for dy in range(5) for dx in range(5)]
        assert any(torch.equal(out[i], w) or torch.equal(out[i], w.flip(2)) for w in windows)
    assert torch.equal(crop_flip(images, 0, False, g), images)
    again = crop_flip(images, 2, True, torch.Generator().manual_seed(1))
    assert torch.equal(out, again)                        # a pure function of the generator's seed


def test_step_decay_halves_every_n_steps():
    opt = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=0.05, momentum=0.9)
    trainer = types.SimpleNamespace(optimizer=opt, scheduler=torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 1.0))
    use_step_decay(trainer, 0.5, 3, "constant", 0)
    lrs = []
    for _ in range(10):
        lrs.append(opt.param_groups[0]["lr"])
        opt.step()
        trainer.scheduler.step()
    assert lrs == pytest.approx([0.05 * 0.5 ** (s // 3) for s in range(10)])
    with pytest.raises(ValueError, match="cosine"):
        use_step_decay(trainer, 0.5, 3, "cosine", 0)


def test_dense_checkpoint_in_the_official_format_loads(tmp_path):
    model = VGG((8, "M", 8, "M", 16, "M", 16, "M", 16, "M")).eval()
    path = tmp_path / "vgg.checkpoint"
    state = {"module." + k: v for k, v in model.state_dict().items()}
    torch.save({"model_state_dict": state, "test_accuracy": 0.9, "epoch": 300}, path)
    file = dense_checkpoint(str(path), None, None, tmp_path)
    fresh = load_dense(VGG((8, "M", 8, "M", 16, "M", 16, "M", 16, "M")), file)
    x = torch.randn(2, 3, 32, 32)
    torch.testing.assert_close(fresh.eval()(x), model(x))
    with pytest.raises(ValueError, match="missing"):
        load_dense(ResNet18(width=4), path)


@pytest.mark.parametrize("args, word", [
    (dict(path=None, url="https://x/y.pt", sha256_hex=None), "sha256"),
    (dict(path="/nonexistent/vgg.checkpoint", url=None, sha256_hex=None), "/nonexistent/vgg.checkpoint"),
    (dict(path="a", url="https://x/y.pt", sha256_hex="0"), "not both"),
])
def test_bad_dense_checkpoint_is_named(tmp_path, args, word):
    with pytest.raises(ValueError, match=word):
        dense_checkpoint(cache=tmp_path, **args)


def test_bad_paper_network_input_is_named():
    with pytest.raises(ValueError, match="img_size=28"):
        build_network("vgg11_bn", 3, 28, 10)
    with pytest.raises(ValueError, match="does not read width"):
        build_network("resnet18", 3, 32, 10, width=4)
    with pytest.raises(ValueError, match=r"\[0.5, 0.5\]"):
        standardise(torch.zeros(1, 3, 2, 2, dtype=torch.uint8), [0.5, 0.5], [0.2, 0.2, 0.2])
    with pytest.raises(ValueError, match="-1"):
        crop_flip(torch.zeros(1, 3, 2, 2), -1, False, torch.Generator())


def test_paper_tier_run_end_to_end_on_random_cifar_shaped_data(compose_cfg, tmp_path, monkeypatch):
    """The paper config's whole path (crops, flips, ImageNet standardisation, step decay, Taylor on
    calibration batches, per-group cells) with a reduced-width VGG11-BN on random images."""
    import methods.intra_fusion as intra_fusion
    from common import data
    from common.runner import run_method

    g = torch.Generator().manual_seed(0)
    fake = {"train": (torch.randint(0, 256, (64, 3, 32, 32), dtype=torch.uint8, generator=g),
                      torch.randint(0, 10, (64,), generator=g)),
            "test": (torch.randint(0, 256, (32, 3, 32, 32), dtype=torch.uint8, generator=g),
                     torch.randint(0, 10, (32,), generator=g))}
    monkeypatch.setattr(data, "image_splits", lambda ds: fake)
    narrow = (8, "M", 8, "M", 16, 16, "M", 16, 16, "M", 16, 16, "M")       # VGG11's layout at 1/32 width
    monkeypatch.setattr(intra_fusion, "build", lambda cfg: VGG(narrow, cfg.dataset.num_classes))
    cfg = compose_cfg(["experiment=intra_fusion_cifar10_vgg11bn", f"run_dir={tmp_path}", "logger=none",
                       "trainer.max_steps=4", "trainer.batch_size=16", "trainer.ckpt_every=0", "trainer.log_every=1",
                       "method.lr_decay.every_steps=2", "method.groups=[1,2]", "method.sparsities=[0.7]",
                       "method.taylor_sparsities=[0.7]", "method.calibration.batches=2",
                       "method.calibration.batch_size=8"])
    out = run_method(cfg)
    cells = ["prune_l1_70", "fuse_l1_70", "prune_taylor_70", "fuse_taylor_70", "fuse_l1_70_official"]
    for cell in cells:
        per = [out[f"{cell}_g{g}"] for g in (1, 2)]
        assert all(0 <= a <= 100 for a in per) and out[cell] == pytest.approx(sum(per) / 2)
    assert out["groups"] == 2 and 0 <= out["dense_acc"] <= 100
