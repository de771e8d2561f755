"""common.data.imagenet on tiny synthetic archives in the official layout: sha256 checks, the
download path (a file:// URL), the devkit's label mapping, DeiT's evaluation transform."""
import io
import tarfile

import numpy as np
import pytest
import torch
from PIL import Image

from common.data import REGISTRY, DatasetNotFound
from common.data import imagenet as inet
from common.data.download import sha256

# ILSVRC2012_IDs 1..3 are leaves (meta.mat lists them first, in WNID order in the real file; here
# out of order, so that a label is visibly the WNID's sorted rank, not the ID); 4 is an inner synset
WNIDS = {1: "n03000000", 2: "n01000000", 3: "n02000000"}
TRUTH = [3, 1, 2, 2]               # the validation images' ILSVRC2012_IDs, in file order
SIZES = [(40, 30), (12, 20), (9, 9), (31, 17)]


def _jpeg(w: int, h: int, seed: int, mode: str = "RGB") -> bytes:
    rng = np.random.default_rng(seed)
    shape = (h, w, 3) if mode == "RGB" else (h, w)
    buf = io.BytesIO()
    Image.fromarray(rng.integers(0, 255, shape, dtype=np.uint8), mode).save(buf, "JPEG")
    return buf.getvalue()


def _add(tar: tarfile.TarFile, name: str, data: bytes) -> None:
    info = tarfile.TarInfo(name)
    info.size = len(data)
    tar.addfile(info, io.BytesIO(data))


def _devkit(path):
    from scipy.io import savemat

    synsets = np.zeros(4, dtype=[("ILSVRC2012_ID", "O"), ("WNID", "O"), ("num_children", "O")])
    for i, (sid, wnid, kids) in enumerate([(1, WNIDS[1], 0), (2, WNIDS[2], 0), (3, WNIDS[3], 0), (4, "n09999999", 3)]):
        synsets[i] = (sid, wnid, kids)
    mat = io.BytesIO()
    savemat(mat, {"synsets": synsets})
    with tarfile.open(path, "w:gz") as tar:
        _add(tar, inet.GROUND_TRUTH, "".join(f"{t}\n" for t in TRUTH).encode())
        _add(tar, inet.META, mat.getvalue())


def _val(path):
    with tarfile.open(path, "w") as tar:   # stored out of order: the loader sorts by file name
        for i in reversed(range(len(TRUTH))):
            _add(tar, f"ILSVRC2012_val_{i + 1:08d}.JPEG", _jpeg(*SIZES[i], seed=i, mode="L" if i == 1 else "RGB"))


def _train(path):
    with tarfile.open(path, "w") as tar:
        for k, wnid in enumerate(sorted(WNIDS.values(), reverse=True)):
            inner = io.BytesIO()
            with tarfile.open(fileobj=inner, mode="w") as t:
                for j in range(2):
                    _add(t, f"{wnid}_{j}.JPEG", _jpeg(20, 16, seed=10 * k + j))
            _add(tar, f"{wnid}.tar", inner.getvalue())


@pytest.fixture
def official(tmp_path, monkeypatch):
    """Synthetic archives under src/, pinned by their own sha256, served at a file:// URL."""
    src = tmp_path / "src"
    src.mkdir()
    _devkit(src / inet.DEVKIT)
    _val(src / inet.ARCHIVES["test"])
    _train(src / inet.ARCHIVES["train"])
    monkeypatch.setattr(inet, "SHA256", {n: sha256(src / n) for n in inet.SHA256})
    monkeypatch.setattr(inet, "BASE_URL", src.as_uri() + "/")
    monkeypatch.setattr(inet, "SHARED", tmp_path / "no_shared")
    return src


def test_registered_and_pinned():
    assert REGISTRY["imagenet"] is inet.load
    assert all(len(h) == 64 and int(h, 16) >= 0 for h in inet.SHA256.values())


def test_download_checks_and_labels(official, tmp_path):
    root = tmp_path / "data"
    with pytest.raises(DatasetNotFound, match="dataset.download=true"):
        inet.load_split("test", root, download=False)
    x, y = inet.load_split("test", root, download=True, side=8)
    assert (root / inet.DEVKIT).is_file() and (root / inet.ARCHIVES["test"]).is_file()
    rank = {w: i for i, w in enumerate(sorted(WNIDS.values()))}
    assert y.tolist() == [rank[WNIDS[t]] for t in TRUTH] == [1, 2, 0, 0]
    assert x.shape == (4, 3, 8, 8) and x.dtype == torch.uint8 and len(x) == 4
    grey = x[1]
    assert grey.shape == (3, 8, 8) and torch.equal(grey[0], grey[1]) and torch.equal(grey[1], grey[2])   # -> RGB
    x2, y2 = inet.load_split("test", root, download=False, side=8, limit=2)   # now local
    assert torch.equal(x2[:], x[:2]) and torch.equal(y2, y[:2])


def test_validation_is_read_lazily(official, tmp_path, monkeypatch):
    """No JPEG is decoded by load_split; each index decodes exactly the file-name-ordered member,
    the same pixels as decoding that JPEG's bytes; every index form agrees."""
    decoded = []
    real = inet.decode
    monkeypatch.setattr(inet, "decode", lambda data, side: decoded.append(data) or real(data, side))
    x, y = inet.load_split("test", tmp_path / "data", download=True, side=8)
    assert decoded == []
    want = [_jpeg(*SIZES[i], seed=i, mode="L" if i == 1 else "RGB") for i in range(len(TRUTH))]
    for i in range(len(TRUTH)):
        assert x.read(i) == want[i]
        np.testing.assert_array_equal(x[i].permute(1, 2, 0).numpy(), real(want[i], 8))
    assert len(decoded) == len(TRUTH)
    full = x[:]
    assert full.shape == (4, 3, 8, 8)
    assert torch.equal(x[torch.tensor([3, 0])], full[[3, 0]]) and torch.equal(x[[2]], full[2:3])
    assert torch.equal(x[-1], full[3]) and torch.equal(x[torch.tensor(1)], full[1]) and x[2:2].shape == (0, 3, 8, 8)
    with pytest.raises(IndexError, match="image 4 of 4"):
        x[4]


def test_transform_is_torchvision_eval():
    tv = pytest.importorskip("torchvision.transforms")
    for i, (w, h) in enumerate(SIZES):
        data = _jpeg(w, h, seed=i)
        with Image.open(io.BytesIO(data)) as img:
            want = tv.Compose([tv.Resize(int(8 / 0.875), interpolation=tv.InterpolationMode.BICUBIC),
                               tv.CenterCrop(8)])(img.convert("RGB"))
        np.testing.assert_array_equal(inet.decode(data, 8), np.asarray(want))


def test_train_split(official, tmp_path):
    x, y = inet.load_split("train", tmp_path / "data", download=True, side=8, limit=1)
    assert x.shape == (3, 3, 8, 8) and y.tolist() == [0, 1, 2]


def test_altered_archive_refused(official, tmp_path):
    root = tmp_path / "data"
    root.mkdir()
    (root / inet.DEVKIT).write_bytes((official / inet.DEVKIT).read_bytes() + b"x")
    with pytest.raises(DatasetNotFound, match="sha256"):
        inet.load_split("test", root, download=True)


def test_bad_input():
    with pytest.raises(ValueError, match="split"):
        inet.load_split("val", ".", False)
    with pytest.raises(ValueError, match="side"):
        inet.load_split("test", ".", False, side=0)
    with pytest.raises(ValueError, match="unknown ImageNet archive"):
        inet.archive("x.tar", ".", False)
