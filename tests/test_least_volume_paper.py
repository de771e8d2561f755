"""Least Volume, paper tier and the reviewer's fixes: the MNIST / CIFAR-10 configs build the
official nets at full size (parameter count against a closed form from the official JSON
configs), the image loaders (sha256, offline error), a few CPU steps of the conv path through
`run`, BCE under bf16 autocast, and two decoder forwards before one backward."""
import gzip
import hashlib

import pytest
import torch
import torch.nn.functional as F

from common.config import UserError
from common.reproduce.paper import build_on_meta
from methods.least_volume import (ConvLeastVolumeAE, PenalizedAutoencoder, bce_reconstruction, build, evaluate,
                                  image_splits, l2_loss, mnist)
from methods.least_volume import data as lv_data
from tests.conftest import needs_fashion

GRID = [3e-2, 1e-2, 3e-3, 1e-3, 3e-4]


def official_param_count(in_ch, conv_channels, latent, deconv_channels, side=32):
    """Written out from the official DCDiscriminator (conv k4 s2 p1 per entry of conv_channels,
    flatten, Linear to n_critics) and TrueSNDCGenerator (dense_layers=[]: Linear to
    channels[0] x s x s, then ConvTranspose k4 s2 p1 between consecutive channels)."""
    enc, prev = 0, in_ch
    for c in conv_channels:
        enc += prev * c * 16 + c
        prev = c
    s_enc = side // 2 ** len(conv_channels)
    enc += prev * s_enc * s_enc * latent + latent
    s_dec = side // 2 ** (len(deconv_channels) - 1)
    dec = latent * deconv_channels[0] * s_dec ** 2 + deconv_channels[0] * s_dec ** 2
    for a, b in zip(deconv_channels[:-1], deconv_channels[1:]):
        dec += a * b * 16 + b
    return enc + dec


OFFICIAL = {  # src/configs/<name>_vol.json: encoder conv_channels, n_critics, decoder channels; epochs, N
    "least_volume_mnist": dict(in_ch=1, conv=[32, 64, 128, 256], latent=128, deconv=[128, 64, 32, 1],
                               epochs=400, n_train=60000),
    "least_volume_cifar10": dict(in_ch=3, conv=[128, 256, 512, 1024], latent=2048, deconv=[512, 256, 128, 3],
                                 epochs=1000, n_train=50000),
}


@pytest.mark.parametrize("experiment", sorted(OFFICIAL))
def test_paper_config_builds_the_official_net_at_full_size(compose_cfg, experiment):
    o = OFFICIAL[experiment]
    cfg = compose_cfg([f"experiment={experiment}"])
    model, count = build_on_meta(cfg)
    assert isinstance(model, ConvLeastVolumeAE)
    assert count == official_param_count(o["in_ch"], o["conv"], o["latent"], o["deconv"])
    x = torch.empty(2, o["in_ch"], 32, 32, device="meta")
    x_hat, z = model(x)
    assert z.shape == (2, o["latent"]) and x_hat.shape == (2, o["in_ch"], 32, 32)
    # the official recipe: BCE, Adam 1e-4 (0.9, 0.99), batch 100, the paper's epochs, η = 1, λ grid rows
    m, t = cfg.method, cfg.trainer
    assert (m.reconstruction, m.eta, m.penalty, m.model.lipschitz, m.model.out_activation) == \
        ("bce", 1.0, "volume", True, "sigmoid")
    assert t.optimizer.lr == 1e-4 and list(t.optimizer.betas) == [0.9, 0.99] and t.batch_size == 100
    assert t.max_steps == o["epochs"] * o["n_train"] // 100
    vol = {k: v for k, v in cfg.table.rows.items() if k.startswith("vol_")}
    weights = sorted(float(v[0].split("=")[1]) for v in vol.values())
    assert weights == sorted(GRID)
    assert set(cfg.paper.rows) == set(cfg.table.rows) and cfg.paper.metric == "knn_acc"


def test_paper_numbers_are_the_issue_and_notebook_ones(compose_cfg):
    mnist_cfg = compose_cfg(["experiment=least_volume_mnist"])
    cifar = compose_cfg(["experiment=least_volume_cifar10"])
    assert mnist_cfg.paper.rows["vol_3e-3"] == 0.9743
    assert cifar.paper.rows["vol_3e-3"] == 0.4108 and cifar.paper.rows["l1_3e-3"] == 0.3440
    vol = {k: v for k, v in cifar.paper.rows.items() if k.startswith("vol_")}
    assert max(vol, key=vol.get) == "vol_3e-4" and vol["vol_3e-4"] == 0.4407   # README item 23


def test_full_size_mnist_net_runs_on_cpu_and_is_one_lipschitz():
    torch.manual_seed(0)
    o = OFFICIAL["least_volume_mnist"]
    model = ConvLeastVolumeAE(1, 128, 32, tuple(o["conv"]), tuple(o["deconv"][:-1])).eval()
    x = torch.rand(3, 1, 32, 32)
    x_hat, z = model(x)
    assert x_hat.shape == x.shape and z.shape == (3, 128)
    z2 = z + torch.randn_like(z)
    ratio = (model.decoder(z2) - model.decoder(z)).flatten(1).norm(dim=1) / (z2 - z).norm(dim=1)
    assert ratio.max() <= 1.0 + 1e-3


# ---------------------------------------------------------------- image data

def _idx(path, array, magic_dims):
    header = bytes([0, 0, 8, magic_dims]) + b"".join(int(d).to_bytes(4, "big") for d in array.shape)
    with gzip.open(path, "wb") as f:
        f.write(header + array.astype("uint8").tobytes())


def test_mnist_loader_checks_sha256_and_names_the_command_when_absent(tmp_path, monkeypatch):
    with pytest.raises(UserError, match=r"dataset 'mnist'.*MNIST/raw.*dataset.download=true"):
        mnist("train", tmp_path)
    raw = tmp_path / "MNIST" / "raw"
    raw.mkdir(parents=True)
    images = torch.randint(0, 256, (5, 28, 28), generator=torch.Generator().manual_seed(0)).numpy()
    labels = torch.arange(5).numpy()
    for prefix in ("train", "t10k"):
        _idx(raw / f"{prefix}-images-idx3-ubyte.gz", images, 3)
        _idx(raw / f"{prefix}-labels-idx1-ubyte.gz", labels, 1)
    with pytest.raises(UserError, match="sha256"):   # the real hashes: these fake files are refused
        mnist("train", tmp_path)
    fake = {f: hashlib.sha256((raw / f).read_bytes()).hexdigest() for f in lv_data.MNIST_FILES}
    monkeypatch.setattr(lv_data, "MNIST_FILES", fake)
    x, y = mnist("test", tmp_path)
    assert x.shape == (5, 1, 28, 28) and x.dtype == torch.uint8 and torch.equal(x[:, 0], torch.from_numpy(images))
    assert y.tolist() == list(range(5))
    splits = image_splits("mnist", tmp_path, size=32)
    assert set(splits) == {"train", "test"} and splits["train"][0].shape == (5, 1, 32, 32)
    assert splits["train"][0].min() >= 0 and splits["train"][0].max() <= 1


def test_to_unit_images_resizes_bilinearly_and_keeps_32_as_is():
    img = torch.randint(0, 256, (2, 3, 32, 32), dtype=torch.uint8)
    torch.testing.assert_close(lv_data.to_unit_images(img), img.float() / 255)
    flat = torch.full((1, 1, 28, 28), 51, dtype=torch.uint8)   # a constant image stays constant
    torch.testing.assert_close(lv_data.to_unit_images(flat), torch.full((1, 1, 32, 32), 0.2))
    with pytest.raises(ValueError, match="val_share"):
        image_splits("cifar10", val_share=1.0)


# ---------------------------------------------------------------- the conv path on CPU

TINY = ["method.model.latent_dim=6", "method.model.encoder_channels=[4,8]",
        "method.model.decoder_channels=[8,4]", "trainer.max_steps=4", "trainer.batch_size=16",
        "trainer.log_every=1", "trainer.ckpt_every=0", "eval.chunk=3", "eval.keep=[2]"]


def test_conv_path_trains_and_evaluates_on_random_images():
    torch.manual_seed(0)
    ae = ConvLeastVolumeAE(3, 6, 32, encoder_channels=(4, 8), decoder_channels=(8, 4))
    model = PenalizedAutoencoder(ae, "volume", weight=1e-2)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3, betas=(0.9, 0.99))
    x = torch.rand(24, 3, 32, 32)
    for _ in range(3):
        loss, _ = model.training_step(x[:12])
        opt.zero_grad()
        loss.backward()
        opt.step()
    ae.eval()
    with torch.no_grad():
        out = evaluate(ae.encode, ae.decode, x, keep=(2,), rel_tol=0.01, loss_fn=l2_loss,
                       knn_train=(x, torch.arange(24) % 3), y=torch.arange(24) % 3, neighbours=1, chunk=2)
        whole = evaluate(ae.encode, ae.decode, x, keep=(2,), rel_tol=0.01, loss_fn=l2_loss)
    assert out["knn_acc"] == 1.0 and 0 <= out["latent_dim"] <= 6
    for k in ("rec", "rec_at_2", "latent_dim", "importance_corr"):   # chunking changes nothing
        assert out[k] == pytest.approx(whole[k], rel=1e-5)


@needs_fashion
def test_run_on_fashion_mnist_32px_through_the_runner(compose_cfg, tmp_path):
    from common.runner import run_method

    cfg = compose_cfg(["experiment=least_volume_mnist", "dataset=fashion_mnist", "dataset.train_size=64",
                       "dataset.test_size=32", f"run_dir={tmp_path}", *TINY])
    metrics = run_method(cfg)
    assert {"rec", "rec_at_2", "latent_dim", "importance_corr", "knn_acc", "train_loss"} <= set(metrics)
    assert 0 <= metrics["knn_acc"] <= 1 and metrics["rec"] > 0 and 0 <= metrics["latent_dim"] <= 6


def test_images_need_the_conv_model(compose_cfg):
    from methods.least_volume import splits

    cfg = compose_cfg(["method=least_volume", "dataset=cifar10"])
    with pytest.raises(UserError, match="conv autoencoder"):
        splits(cfg)
    cfg = compose_cfg(["experiment=least_volume_mnist"])
    assert build(cfg).encoder.net[0].in_channels == 1


# ---------------------------------------------------------------- reviewer's fixes

def test_bce_under_bf16_autocast_runs_and_matches_fp32():
    """CUDA autocast refuses F.binary_cross_entropy; the loss computes it in fp32 with autocast
    off. On the CPU the same context must run and agree with fp32 within bf16 rounding."""
    torch.manual_seed(0)
    ae = ConvLeastVolumeAE(1, 8, 32, encoder_channels=(4, 8), decoder_channels=(8, 4))
    x = torch.rand(6, 1, 32, 32)
    with torch.no_grad():
        x_hat, _ = ae(x)
        fp32 = F.binary_cross_entropy(x_hat, x).item()
        with torch.autocast("cpu", dtype=torch.bfloat16):
            x_hat_bf16, _ = ae(x)
            loss = bce_reconstruction(x_hat_bf16, x)
            step_loss, _ = PenalizedAutoencoder(ae, "volume", weight=1e-2).training_step(x)
    assert x_hat_bf16.dtype == torch.bfloat16   # autocast did act on the net
    assert torch.isfinite(loss) and torch.isfinite(step_loss)
    assert loss.item() == pytest.approx(fp32, rel=2e-2)   # bf16 keeps 8 mantissa bits
    assert bce_reconstruction(x_hat, x).dtype == torch.float32
    assert bce_reconstruction(x_hat, x).item() == pytest.approx(fp32, rel=1e-6)


def test_two_training_forwards_before_one_backward():
    """The power iteration updates u, v in place on every training forward; sigma() must use
    clones (as torch's spectral_norm) so a graph through two forwards still backpropagates."""
    torch.manual_seed(0)
    ae = ConvLeastVolumeAE(1, 8, 32, encoder_channels=(4, 8), decoder_channels=(8, 4)).train()
    z = torch.randn(4, 8)
    loss = ae.decoder(z).square().mean() + ae.decoder(z + 1).square().mean()
    loss.backward()
    grads = [p.grad for p in ae.decoder.parameters()]
    assert all(g is not None and torch.isfinite(g).all() for g in grads)
