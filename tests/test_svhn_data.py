"""common.data.svhn on tiny synthetic .mat files (the real files are never downloaded here):
the official layout read back (labels 10 -> 0, NCHW), the sha256 check on found and downloaded
copies, the download path through a file:// URL, and the offline error."""
import hashlib

import numpy as np
import pytest
import torch
from scipy.io import savemat

from common.config import UserError
from common.data import svhn
from common.data.download import DatasetNotFound


def _write(path, n=7, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.integers(0, 256, size=(32, 32, 3, n), dtype=np.uint8)
    y = (np.arange(n) % 10 + 1).reshape(n, 1).astype(np.uint8)   # 1..10, 10 is the digit 0
    savemat(str(path), {"X": x, "y": y})
    return x, y.reshape(-1)


def _sha(path):
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture
def tiny(tmp_path, monkeypatch):
    src = tmp_path / "src"
    src.mkdir()
    x, y = _write(src / "train_32x32.mat")
    monkeypatch.setattr(svhn, "FILES", {"train": ("train_32x32.mat", _sha(src / "train_32x32.mat")),
                                        "test": ("test_32x32.mat", "0" * 64)})
    monkeypatch.setattr(svhn, "SHARED", tmp_path / "no_shared")
    monkeypatch.setattr(svhn, "URL", src.as_uri() + "/")
    return src, x, y


def test_read_mat_layout(tiny):
    src, x, y = tiny
    images, labels = svhn.read_mat(src / "train_32x32.mat")
    assert images.dtype == torch.uint8 and images.shape == (7, 3, 32, 32)
    # pixel (n, c, h, w) is X[h, w, c, n] of the official file, written out with a loop
    for n in range(7):
        for c in range(3):
            assert np.array_equal(images[n, c].numpy(), x[:, :, c, n])
    expected = [0 if v == 10 else int(v) for v in y]
    assert labels.dtype == torch.int64 and labels.tolist() == expected


def test_download_checks_sha_and_registers(tiny, tmp_path):
    import common.data as data

    root = tmp_path / "root"
    images, labels = data.load("svhn", "train", root, download=True)   # file:// through the real fetch
    assert (root / "svhn" / "train_32x32.mat").exists() and images.shape == (7, 3, 32, 32)
    images2, _ = data.load("svhn", "train", root, download=False)     # found on disk, checked again
    assert torch.equal(images, images2)


def test_download_with_wrong_sha_is_refused(tiny, tmp_path):
    root = tmp_path / "root"
    with pytest.raises(DatasetNotFound, match="failed"):
        svhn.load("test", root, download=True)   # no such file at the URL: the fetch itself fails
    src = tiny[0]
    _write(src / "test_32x32.mat", n=3, seed=1)  # now present, but its sha256 is not the pinned one
    with pytest.raises(DatasetNotFound, match="sha256 does not match"):
        svhn.load("test", root, download=True)
    assert not (root / "svhn" / "test_32x32.mat").exists()


def test_found_copy_with_wrong_sha_is_refused(tiny, tmp_path):
    root = tmp_path / "root"
    (root / "svhn").mkdir(parents=True)
    _write(root / "svhn" / "train_32x32.mat", n=3, seed=2)
    with pytest.raises(UserError, match="does not match its sha256"):
        svhn.load("train", root, download=False)


def test_offline_error_and_bad_split(tiny, tmp_path):
    with pytest.raises(DatasetNotFound, match="dataset.download=true"):
        svhn.load("train", tmp_path / "empty", download=False)
    with pytest.raises(ValueError, match="split"):
        svhn.load("extra", tmp_path, download=False)


def test_not_svhn_file(tmp_path):
    savemat(str(tmp_path / "a.mat"), {"X": np.zeros((28, 28, 1, 2), np.uint8), "y": np.ones((2, 1))})
    with pytest.raises(DatasetNotFound, match="not \\(32, 32, 3, N\\)"):
        svhn.read_mat(tmp_path / "a.mat")
    savemat(str(tmp_path / "b.mat"), {"X": np.zeros((32, 32, 3, 2), np.uint8), "y": np.zeros((2, 1))})
    with pytest.raises(DatasetNotFound, match="labels span"):
        svhn.read_mat(tmp_path / "b.mat")
