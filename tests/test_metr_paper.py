"""METR's paper tier without a GPU or ImageNet: the three configs compose, validate and build at
full size on meta with what they need named (the ImageNet stream, DeiT's normalisation, the
released weights, the off-the-shelf row); the whole ImageNet path of `run` (the training archive
streamed, the validation archive read lazily through workers) runs end to end on tiny synthetic
archives in the official layout; the new pieces of METRViT and the batches against references."""
import io
import tarfile

import numpy as np
import pytest
import torch
from PIL import Image

from common.config import compose_checked
from common.data import imagenet as inet
from common.data.download import sha256
from common.reproduce.paper import build_on_meta
from common.reproduce.tables import experiments
from methods.metr import METRViT, _test_batches, stream_batches
from methods.metr.loss import KeepSchedule

PAPER = {"metr_deit_s": (384, 6, "deit_small_patch16_224.fb_in1k"), "metr_deit_b": (768, 12, "deit_base_patch16_224.fb_in1k"),
         "metr_mae_b": (768, 12, "vit_base_patch16_224.mae")}


def test_paper_configs_compose_build_and_name_what_they_need():
    assert sorted(experiments("metr", "paper")) == sorted(PAPER)
    for name, (dim, heads, ckpt) in PAPER.items():
        cfg = compose_checked([f"experiment={name}"])
        model, count = build_on_meta(cfg)
        assert isinstance(model, METRViT) and model.normalize == "imagenet"
        assert (model.vit.embed_dim, len(model.vit.blocks), model.vit.blocks[0].attn.num_heads) == (dim, 12, heads)
        assert model.exit_blocks == model.drop_blocks == (3, 6, 9) and model.vit.patch_embed.num_patches == 196
        m = cfg.method
        assert m.train_stream._target_ == "common.data.imagenet_stream.ImageNetTrainStream" and m.train_stream.side == 224
        assert m.init_from == ckpt and m.canvas is None and m.val_size == 0 and m.pretrain.max_steps == 0
        assert (cfg.dataset.name, cfg.dataset.num_classes, cfg.dataset.test_size) == ("imagenet", 1000, None)
        assert (cfg.trainer.batch_size, cfg.trainer.optimizer.lr, cfg.trainer.max_steps) == (2048, 2e-5, 18765)
        rows = cfg.table.rows
        assert set(rows) == {"k70", "k60", "k50", "offshelf"} and m.train_keep.base_keep_rate == 0.7
        assert "method.train_keep.base_keep_rate=1.0" in rows.offshelf
        text = open(f"configs/experiment/{name}.yaml").read()
        for needed in ("GPU", inet.DEVKIT, inet.ARCHIVES["test"], inet.ARCHIVES["train"], "sha256", ckpt):
            assert needed in text, (name, needed)


def test_released_deit_weights_load_into_metrvit():
    """method.init_from loads timm's DeiT-S state dict into METRViT.vit key for key (the
    architecture only, no download) and the ViT computes what timm's does."""
    timm = pytest.importorskip("timm")
    torch.manual_seed(0)
    src = timm.create_model("deit_small_patch16_224", pretrained=False, num_classes=1000).eval()
    model = METRViT(224, 3, 1000, 16, 384, 12, 6).eval()
    model.vit.load_state_dict(src.state_dict())          # strict: every key, every shape
    x = torch.rand(1, 3, 224, 224)
    with torch.no_grad():
        torch.testing.assert_close(model.vit(x), src(x))


def test_imagenet_normalisation_is_timms():
    timm_data = pytest.importorskip("timm.data")
    model = METRViT(32, 3, 5, patch_size=16, dim=16, depth=2, heads=2, exit_blocks=(0,), drop_blocks=(0,),
                    normalize="imagenet")
    x = torch.randint(0, 256, (2, 3, 32, 32), dtype=torch.uint8)
    mean = torch.tensor(timm_data.IMAGENET_DEFAULT_MEAN).view(1, 3, 1, 1)
    std = torch.tensor(timm_data.IMAGENET_DEFAULT_STD).view(1, 3, 1, 1)
    torch.testing.assert_close(model.prepare(x), (x.float() / 255 - mean) / std)
    signed = METRViT(32, 3, 5, patch_size=16, dim=16, depth=2, heads=2, exit_blocks=(0,), drop_blocks=(0,))
    torch.testing.assert_close(signed.prepare(x), x.float() / 127.5 - 1)
    with pytest.raises(ValueError, match="normalize must be one of"):
        METRViT(32, 3, 5, patch_size=16, dim=16, depth=2, heads=2, exit_blocks=(0,), drop_blocks=(0,), normalize="x")
    with pytest.raises(ValueError, match="3 channels"):
        METRViT(32, 1, 5, patch_size=16, dim=16, depth=2, heads=2, exit_blocks=(0,), drop_blocks=(0,), normalize="imagenet")


class _Counting(torch.utils.data.IterableDataset):
    """0, 1, ..., n-1 as (image, label) pairs; counts its passes (set_epoch)."""

    def __init__(self, n):
        self.n, self.epochs = n, []

    def set_epoch(self, e):
        self.epochs.append(e)

    def __iter__(self):
        for i in range(self.n):
            yield torch.full((1, 2, 2), i, dtype=torch.uint8), i


def test_stream_batches_roll_over_passes():
    s = _Counting(5)
    batch = stream_batches(s, 2, 0, KeepSchedule(0.5, 0, 0))
    got = [batch(step) for step in range(4)]
    # drop_last: 5 items give batches (0, 1), (2, 3); then the next pass
    assert [b[1].tolist() for b in got] == [[0, 1], [2, 3], [0, 1], [2, 3]] and s.epochs == [0, 1]
    assert all(b[2] == 0.5 for b in got) and got[0][0].shape == (2, 1, 2, 2)
    with pytest.raises(ValueError, match="no batch of 8"):
        stream_batches(_Counting(5), 8, 0, None)(0)


def test_test_batches_lazy_equals_tensor():
    x = torch.arange(7 * 3 * 2 * 2, dtype=torch.uint8).view(7, 3, 2, 2)
    y = torch.arange(7)

    class Lazy:
        def __len__(self):
            return 7

        def __getitem__(self, i):
            return x[i]
    eager = list(_test_batches((x, y), 3, 0))
    lazy = list(_test_batches((Lazy(), y), 3, 2))
    assert len(eager) == len(lazy) == 3
    for (a, b), (c, d) in zip(eager, lazy):
        assert torch.equal(a, c) and torch.equal(b, d)


def _add(tar, name, data):
    info = tarfile.TarInfo(name)
    info.size = len(data)
    tar.addfile(info, io.BytesIO(data))


def _jpeg(seed, w=40, h=30):
    buf = io.BytesIO()
    Image.fromarray(np.random.default_rng(seed).integers(0, 255, (h, w, 3), dtype=np.uint8)).save(buf, "JPEG")
    return buf.getvalue()


@pytest.fixture
def imagenet_root(tmp_path, monkeypatch):
    """Devkit, validation and training archives in the official layout: 3 classes, 6 validation
    images, 4 training images a class."""
    from scipy.io import savemat

    root = tmp_path / "imagenet"
    root.mkdir()
    wnids = {1: "n01000000", 2: "n02000000", 3: "n03000000"}
    synsets = np.zeros(3, dtype=[("ILSVRC2012_ID", "O"), ("WNID", "O"), ("num_children", "O")])
    for i, (sid, w) in enumerate(wnids.items()):
        synsets[i] = (sid, w, 0)
    mat = io.BytesIO()
    savemat(mat, {"synsets": synsets})
    truth = [1, 2, 3, 3, 2, 1]
    with tarfile.open(root / inet.DEVKIT, "w:gz") as tar:
        _add(tar, inet.GROUND_TRUTH, "".join(f"{t}\n" for t in truth).encode())
        _add(tar, inet.META, mat.getvalue())
    with tarfile.open(root / inet.ARCHIVES["test"], "w") as tar:
        for i in range(len(truth)):
            _add(tar, f"ILSVRC2012_val_{i + 1:08d}.JPEG", _jpeg(100 + i))
    with tarfile.open(root / inet.ARCHIVES["train"], "w") as tar:
        for k, w in enumerate(wnids.values()):
            inner = io.BytesIO()
            with tarfile.open(fileobj=inner, mode="w") as t:
                for j in range(4):
                    _add(t, f"{w}_{j}.JPEG", _jpeg(10 * k + j))
            _add(tar, f"{w}.tar", inner.getvalue())
    monkeypatch.setattr(inet, "SHA256", {n: sha256(root / n) for n in inet.SHA256})
    monkeypatch.setattr(inet, "SHARED", tmp_path / "no_shared")
    return root


@pytest.mark.slow   # ~15 s: DataLoader workers, 196 tokens
def test_paper_tier_runs_on_synthetic_imagenet(imagenet_root, tmp_path):
    """The DeiT-S config's ImageNet path at a tiny width: the base (no checkpoint), both fine-tunes
    on the streamed training archive (2 DataLoader workers), scored on the lazily read validation
    archive at every rate; numbers are chance here, the path is what is tested."""
    from common.runner import run_method

    cfg = compose_checked([
        "experiment=metr_deit_s", "hardware=cpu", "logger=none", f"run_dir={tmp_path / 'run'}",
        f"dataset.root={imagenet_root}", "method.init_from=null", f"method.cache_dir={tmp_path / 'cache'}",
        "method.model.dim=16", "method.model.depth=4", "method.model.heads=2",
        "method.model.exit_blocks=[1,2]", "method.model.drop_blocks=[1,2]",
        "method.train_stream.shuffle_buffer=4", "method.train_stream.interleave=2", "method.loader.workers=2",
        "trainer.max_steps=2", "trainer.batch_size=4", "trainer.ckpt_every=0", "trainer.log_every=1",
        "trainer.progress=false", "hardware.precision=fp32", "eval.batch_size=4",
        "method.eval_keep_rates=[1.0,0.5]"])
    metrics = run_method(cfg)
    for row in ("base", "evit", "metr"):
        assert 0 <= metrics[f"{row}/acc_k100"] <= 100 and 0 <= metrics[f"{row}/acc_k50"] <= 100
    assert {"metr/exit_acc_b1", "metr/exit_acc_b2", "evit_random/acc_k50"} <= set(metrics)
    # accuracies over the 6 validation images: multiples of 100 / 6
    assert all(abs(v * 6 / 100 - round(v * 6 / 100)) < 1e-6 for k, v in metrics.items() if "acc" in k)
    bad = compose_checked(["experiment=metr_deit_s", "dataset.test_size=100"])
    from common.config import UserError
    from methods.metr import _splits
    with pytest.raises(UserError, match="train_stream scores the whole test split"):
        _splits(bad)
