"""common.data.imagenet_stream on a tiny synthetic ILSVRC2012_img_train.tar in the official nested
layout (one <wnid>.tar per class): every image once a pass over ranks and workers, labels by sorted
WNID, shuffles by (seed, epoch), the streaming mode, DeiT's crop against torchvision."""
import io
import tarfile

import numpy as np
import pytest
import torch
from PIL import Image

from common.data import DatasetNotFound
from common.data import imagenet as inet
from common.data.download import sha256
from common.data.imagenet_stream import DeiTTrainCrop, ImageNetTrainStream, resized_crop_params

WNIDS = {1: "n03000000", 2: "n01000000", 3: "n02000000", 4: "n04000000"}   # ILSVRC2012_ID -> WNID (leaves)
PER_CLASS = {"n03000000": 5, "n01000000": 3, "n02000000": 4, "n04000000": 2}


def _add(tar, name, data):
    info = tarfile.TarInfo(name)
    info.size = len(data)
    tar.addfile(info, io.BytesIO(data))


def _jpeg(w, h, seed):
    buf = io.BytesIO()
    Image.fromarray(np.random.default_rng(seed).integers(0, 255, (h, w, 3), dtype=np.uint8)).save(buf, "JPEG")
    return buf.getvalue()


def _sizes():
    """A distinct (width, height) per image, so that a yielded image names itself."""
    out, k = {}, 0
    for wnid in sorted(PER_CLASS):
        for j in range(PER_CLASS[wnid]):
            out[(wnid, j)] = (9 + k, 7 + 2 * k)
            k += 1
    return out


@pytest.fixture
def archive(tmp_path, monkeypatch):
    from scipy.io import savemat

    root = tmp_path / "data"
    root.mkdir()
    synsets = np.zeros(len(WNIDS), dtype=[("ILSVRC2012_ID", "O"), ("WNID", "O"), ("num_children", "O")])
    for i, (sid, wnid) in enumerate(WNIDS.items()):
        synsets[i] = (sid, wnid, 0)
    mat = io.BytesIO()
    savemat(mat, {"synsets": synsets})
    with tarfile.open(root / inet.DEVKIT, "w:gz") as tar:
        _add(tar, inet.GROUND_TRUTH, b"1\n")
        _add(tar, inet.META, mat.getvalue())
    sizes = _sizes()
    with tarfile.open(root / inet.ARCHIVES["train"], "w") as tar:   # classes stored out of name order
        for wnid in sorted(PER_CLASS, reverse=True):
            inner = io.BytesIO()
            with tarfile.open(fileobj=inner, mode="w") as t:
                for j in range(PER_CLASS[wnid]):
                    _add(t, f"{wnid}_{j}.JPEG", _jpeg(*sizes[(wnid, j)], seed=j))
            _add(tar, f"{wnid}.tar", inner.getvalue())
    monkeypatch.setattr(inet, "SHA256", {n: sha256(root / n) if (root / n).exists() else "0" * 64 for n in inet.SHA256})
    monkeypatch.setattr(inet, "SHARED", tmp_path / "no_shared")
    return root


def _who(img, rng):
    """A transform that names the image (its size), so the tests can follow it."""
    return torch.tensor(img.size)


def _names(items):
    by_size = {v: k for k, v in _sizes().items()}
    rank = {w: i for i, w in enumerate(sorted(PER_CLASS))}
    out = []
    for x, label in items:
        wnid, j = by_size[tuple(int(v) for v in x)]
        assert int(label) == rank[wnid]               # the label is the WNID's sorted rank
        out.append((wnid, j))
    return out


def test_every_image_once_per_pass_over_ranks(archive):
    everything = sorted(_sizes())
    for world in (1, 2, 3):
        seen = []
        for rank in range(world):
            s = ImageNetTrainStream(archive, side=8, shuffle_buffer=3, interleave=2, seed=5, rank=rank,
                                    world_size=world, transform=_who)
            seen += _names(s)
        assert sorted(seen) == everything, world


def test_dataloader_workers_shard(archive):
    s = ImageNetTrainStream(archive, side=8, shuffle_buffer=4, interleave=2, seed=1, rank=1, world_size=2,
                            transform=_who)
    loader = torch.utils.data.DataLoader(s, batch_size=None, num_workers=2)
    got = _names(loader)
    # rank 1 of 2 with 2 workers: shards 2 and 3 of 4, one class each
    order = np.random.default_rng([1, 0]).permutation(4)
    classes = sorted(PER_CLASS)
    want = [(classes[i], j) for i in order[2::4].tolist() + order[3::4].tolist() for j in range(PER_CLASS[classes[i]])]
    assert sorted(got) == sorted(want)
    with pytest.raises(ValueError, match="5 shards"):
        list(torch.utils.data.DataLoader(
            ImageNetTrainStream(archive, side=8, world_size=5, rank=4, transform=_who), batch_size=None))


def test_shuffles_by_seed_and_epoch(archive):
    def order(seed, epoch, **kw):
        s = ImageNetTrainStream(archive, side=8, seed=seed, transform=_who, **kw)
        s.set_epoch(epoch)
        return _names(s)

    a = order(0, 0, shuffle_buffer=4, interleave=2)
    assert a == order(0, 0, shuffle_buffer=4, interleave=2)          # a pure function of (seed, epoch)
    assert a != order(0, 1, shuffle_buffer=4, interleave=2) and a != order(1, 0, shuffle_buffer=4, interleave=2)
    assert sorted(a) == sorted(order(0, 1, shuffle_buffer=4, interleave=2))
    # buffer 1 and one class at a time: the pass's class permutation, each class in its tar's order
    plain = order(3, 2, shuffle_buffer=1, interleave=1)
    classes = sorted(PER_CLASS)
    perm = np.random.default_rng([3, 2]).permutation(4)
    assert plain == [(classes[i], j) for i in perm for j in range(PER_CLASS[classes[i]])]


def test_streaming_mode_reads_archive_order(archive):
    s = ImageNetTrainStream(archive, side=8, shuffle_buffer=1, interleave=1, stream=True, transform=_who)
    archive_order = sorted(PER_CLASS, reverse=True)
    assert _names(s) == [(w, j) for w in archive_order for j in range(PER_CLASS[w])]
    seen = []
    for rank in range(3):
        seen += _names(ImageNetTrainStream(archive, side=8, shuffle_buffer=2, interleave=1, stream=True, rank=rank,
                                           world_size=3, transform=_who))
    assert sorted(seen) == sorted(_sizes())


def test_default_transform_is_deit_crop(archive):
    s = ImageNetTrainStream(archive, side=8, shuffle_buffer=2)
    items = list(s)
    assert len(items) == sum(PER_CLASS.values())
    assert all(x.shape == (3, 8, 8) and x.dtype == torch.uint8 for x, _ in items)


def test_crop_is_torchvision_resized_crop_and_flip():
    F = pytest.importorskip("torchvision.transforms.functional")
    from torchvision.transforms import InterpolationMode

    img = Image.fromarray(np.random.default_rng(0).integers(0, 255, (37, 53, 3), dtype=np.uint8))
    for seed in range(6):
        crop = DeiTTrainCrop(side=16, hflip=0.5)
        rng, twin = np.random.default_rng(seed), np.random.default_rng(seed)
        out = crop(img, rng)
        top, left, h, w = resized_crop_params(53, 37, twin, crop.scale, crop.ratio)
        want = F.resized_crop(img, top, left, h, w, [16, 16], interpolation=InterpolationMode.BICUBIC)
        if twin.random() < 0.5:
            want = F.hflip(want)
        np.testing.assert_array_equal(out.permute(1, 2, 0).numpy(), np.asarray(want))


def test_crop_params():
    rng = np.random.default_rng(0)
    for _ in range(300):
        W, H = int(rng.integers(20, 400)), int(rng.integers(20, 400))
        top, left, h, w = resized_crop_params(W, H, rng)
        assert 0 <= top and top + h <= H and 0 <= left and left + w <= W and h > 0 and w > 0
    # a tall strip: no try fits, the centre crop with the ratio clamped to 3/4
    class Never:
        def uniform(self, lo, hi):
            return hi                        # area share 1 at ratio 4/3: wider than the image
        integers = random = None
    assert resized_crop_params(30, 100, Never()) == ((100 - 40) // 2, 0, 40, 30)
    assert resized_crop_params(100, 30, Never(), ratio=(3 / 4, 4 / 3)) == (0, (100 - 40) // 2, 30, 40)


def test_crop_params_distribution_is_torchvisions():
    """Area shares and aspect ratios as torchvision's RandomResizedCrop.get_params draws them
    (other generators: means within ~4 standard errors), on a non-square image."""
    T = pytest.importorskip("torchvision.transforms")
    img = Image.new("RGB", (300, 200))
    torch.manual_seed(0)
    rng = np.random.default_rng(0)
    ours, theirs = [], []
    for _ in range(3000):
        top, left, h, w = resized_crop_params(300, 200, rng)
        ours.append((h * w / 6e4, np.log(w / h)))
        i, j, h, w = T.RandomResizedCrop.get_params(img, scale=(0.08, 1.0), ratio=(3 / 4, 4 / 3))
        theirs.append((h * w / 6e4, np.log(w / h)))
    ours, theirs = np.array(ours), np.array(theirs)
    assert ours[:, 0].min() > 0.07 and ours[:, 0].max() <= 1.0 and np.abs(ours[:, 1]).max() < np.log(4 / 3) + 0.05
    se = np.sqrt(ours.var(0) / len(ours) + theirs.var(0) / len(theirs))
    assert np.all(np.abs(ours.mean(0) - theirs.mean(0)) < 4 * se), (ours.mean(0), theirs.mean(0), se)


def test_bad_input(archive, tmp_path):
    with pytest.raises(ValueError, match="shuffle_buffer"):
        ImageNetTrainStream(archive, shuffle_buffer=0)
    with pytest.raises(ValueError, match="rank"):
        ImageNetTrainStream(archive, rank=2, world_size=2)
    with pytest.raises(ValueError, match="interleave must be 1"):
        ImageNetTrainStream(archive, stream=True, interleave=4)
    with pytest.raises(ValueError, match="scale"):
        DeiTTrainCrop(8, scale=(0.5, 0.2))
    with pytest.raises(ValueError, match="ratio"):
        DeiTTrainCrop(8, ratio=(0, 1))
    with pytest.raises(ValueError, match="hflip"):
        DeiTTrainCrop(8, hflip=2)
    with pytest.raises(DatasetNotFound, match="dataset.download=true"):
        ImageNetTrainStream(tmp_path / "empty")


def test_foreign_member_refused(archive, monkeypatch):
    path = archive / inet.ARCHIVES["train"]
    with tarfile.open(path, "a") as tar:
        _add(tar, "README.txt", b"not a class")
    monkeypatch.setitem(inet.SHA256, inet.ARCHIVES["train"], sha256(path))
    with pytest.raises(DatasetNotFound, match="class tars"):
        list(ImageNetTrainStream(archive, transform=_who))
    with pytest.raises(DatasetNotFound, match="README.txt"):
        list(ImageNetTrainStream(archive, transform=_who, stream=True, interleave=1))


def test_altered_archive_refused(archive):
    path = archive / inet.ARCHIVES["train"]
    path.write_bytes(path.read_bytes() + b"\0" * 512)
    with pytest.raises(DatasetNotFound, match="sha256"):
        ImageNetTrainStream(archive)

