"""The 38 "Classical" tables of ADBench (Han et al., NeurIPS 2022; BSD 2-Clause), among them the
ODDS tables that tabular anomaly-detection papers report on, and a one-class split with a
validation part carved from the training side.

Each table is `<id>_<Name>.npz` with arrays `X` (rows x features) and `y` (1 = anomaly), read with
`numpy.load(allow_pickle=False)`. Search order: the shared offline copy
(../shared/data/adbench/Classical beside the project), <data root>/adbench/Classical, then (with
download=True) the canonical file at ADBench's pinned commit into the data root. Every file is
checked against its sha256 (the shared folder's SHA256SUMS) wherever it was found.

Self-contained: importing this module registers nothing in common/data/__init__.py (whose
REGISTRY holds image datasets); callers import `load_adbench` by its full path.
"""
from __future__ import annotations

import functools
from pathlib import Path

import numpy as np

from common.config import UserError
from common.data.download import DatasetNotFound, fetch, sha256

SHARED = Path(__file__).resolve().parents[2].parent / "shared" / "data" / "adbench" / "Classical"
URL = ("https://raw.githubusercontent.com/Minqi824/ADBench/3dac8221081e190f157d78e93bfa8867f90d0965/"
       "adbench/datasets/Classical/")
# name -> (file, sha256); names are the file names lower-cased, '.' and '-' as '_'
TABLES = {
    "annthyroid": ("2_annthyroid.npz", "e738f7c58a8740d2c4aac4c71ff49ce5e1d1aa16f44178135fc9c09df05fad1b"),
    "breastw": ("4_breastw.npz", "4f37ce07dbc25ddad8178fdc6d664ab46d2d0000ee28c2787c3c7ff3c03ef9f6"),
    "campaign": ("5_campaign.npz", "74dd4d0072d6c6f1aabab63bc102f9633454f32bb936fa9bcfbd38f9f2386bcd"),
    "cardio": ("6_cardio.npz", "bc5009bde6930b4d298b594f31b34485a9a17210cff0e8fb00a8c3068b885a2d"),
    "cardiotocography": ("7_Cardiotocography.npz", "5ae84910430f05923e11b6f537243263977c9136949dabd891e3570aeec51e29"),
    "fault": ("12_fault.npz", "ec27301f9a4cf7c5d8b22c360cf37ddb043b7fb062465723dfd8b34e2771e5dd"),
    "glass": ("14_glass.npz", "aa7a8db1d475ba01a10488af454bc15220a3d5951b010b03b7020567d8152cdc"),
    "hepatitis": ("15_Hepatitis.npz", "4a87a2f7d8013e5bfde63294fae61ec7a612322de72f338a7f9491749025ad98"),
    "internetads": ("17_InternetAds.npz", "bdd8ad5cf5bf2cb96cba53dde30d522d0f6a279083a8e2bc7efbac5981b04385"),
    "ionosphere": ("18_Ionosphere.npz", "bca46cb0cfd1bf9ddef6cde5ad2215d54fb0189508d0d4c4eb98e788cad69001"),
    "landsat": ("19_landsat.npz", "ba17e2158c07469597b89db49d3982c874c6b713ff6670721ddc88969da77987"),
    "letter": ("20_letter.npz", "f986d3da80cf1fa2aea83a5ebe73b7d4800e0d4c01fdd1ae074b58d20f10d039"),
    "lymphography": ("21_Lymphography.npz", "dad977b04f4ea65b78ccd0e9f76b45175bad605165b37e63f3cc177845e67037"),
    "magic_gamma": ("22_magic.gamma.npz", "0be375984d7af9ea7a63b12206c240840d8b7daa3607021c5fb8756407dd86f1"),
    "mammography": ("23_mammography.npz", "a0308ac9712d78321073b1c2dc98dc37665c0f35c1cc33019416fe8f8d7de7ea"),
    "mnist": ("24_mnist.npz", "be7706272325fdd3592c1be555ae1a82f916a2f8545f4f8cbaa548ab102cc44c"),
    "musk": ("25_musk.npz", "2ed3f4392197b76a1e59116ff880c7720a4b026cf4842073a53b56fdea265017"),
    "optdigits": ("26_optdigits.npz", "60de17a375a278ba220a7849727d998aa02b5e2f9fd17732a004bba28de4656e"),
    "pageblocks": ("27_PageBlocks.npz", "10a9b4d5bb5d3b9083caab4c4062f665610eada703c3d927bf7c34b1f2d0d223"),
    "pendigits": ("28_pendigits.npz", "c4936b89dcdad59d303020e492f763a0f54170080d787c77497609acbb9c2d79"),
    "pima": ("29_Pima.npz", "215454bb263a2f040945c9ea7bd7f06f1e89a61a3143bdb6f196e3887e801a7d"),
    "satellite": ("30_satellite.npz", "1f048f5686f1b8c16a227fdfa3c81a62cd9a92715714a6b24c69b1c5ad96b46e"),
    "satimage_2": ("31_satimage-2.npz", "1b056e357f801b8b20c3f380a30224a3c4088d7ed764ec5a24828dc9b1918d6f"),
    "shuttle": ("32_shuttle.npz", "26900b0f6be45d9ddb7a402c9b2f956ceda42d23a8ca4cf4406b8bc1352823d1"),
    "skin": ("33_skin.npz", "d02aa01ffc1b6bf2b8b1ac250c90e8a8eacd0cefc962940ed5cc4bf5deac9c95"),
    "smtp": ("34_smtp.npz", "d2569fc9bc12115419e3f5b37d19921e10e6c26e5ad1e61064cfb0fbc402dfdd"),
    "spambase": ("35_SpamBase.npz", "d0c46c7928e43f6496bcd06e09de0b70f6bc8143792dfa0a43f450263d254e9b"),
    "stamps": ("37_Stamps.npz", "99fe739447284f613fa54bf2dccdb51c5120175ce6260adec6dad77576c42509"),
    "thyroid": ("38_thyroid.npz", "8de161b3f235b7647bb0b39a836d983ff61d67bf234edac461da2d71e889cb87"),
    "vertebral": ("39_vertebral.npz", "0816286f92b96fe6867664a41a031ac7228dcfbf1a5feefe50ca3883b2e9073d"),
    "vowels": ("40_vowels.npz", "4bfc4244d1c882773bbbc50d4a5db5e52276e53506e46b2d45e02d074cfcb1b6"),
    "waveform": ("41_Waveform.npz", "6c9d867337ad1a2f8372c1d27f4c032f0401237e2041b7c45f00de8d319ff30f"),
    "wbc": ("42_WBC.npz", "650f9dcb129248f67a291be0974f533ef259fcbde50fce5c8ad2a1cb2652d03b"),
    "wdbc": ("43_WDBC.npz", "78d4606a1ab516f5b60b00c196497f3bbd6bd5e4548fd04cf5f2475209b34b85"),
    "wilt": ("44_Wilt.npz", "c70b72aa611ec87b20efb400943ef3ce4f8bf7aa58fcef825fbd28cc5cee3cc9"),
    "wine": ("45_wine.npz", "d5ad8965d92cc57122fe1e6572bb301adbaf795b3e166d187ae00a704d8f6e20"),
    "wpbc": ("46_WPBC.npz", "68a6d67242643855713bcdad07d89ecc472bd00000dccc17ba87916eb2693d19"),
    "yeast": ("47_yeast.npz", "bbb15c873d78a4f6a589f46d0f75814595e2282d2ae7ce7779c750f276c3770d"),
}
HOW = "rerun with dataset.download=true on a machine with internet, or put the .npz files in <data root>/adbench/Classical"


def table_file(name: str, root: str | Path = "data", download: bool = False) -> Path:
    """The checked path of table `name`: shared copy, then data root, then a download."""
    if name not in TABLES:
        raise UserError(f"unknown ADBench table '{name}'. Available: {', '.join(sorted(TABLES))}.", exit_code=2)
    file, digest = TABLES[name]
    local = Path(root) / "adbench" / "Classical"
    for folder in (SHARED, local):
        if (folder / file).is_file():
            if sha256(folder / file) != digest:
                raise UserError(f"{folder / file} does not match its sha256 {digest}; the copy is corrupt or "
                                f"altered. Delete it and download again.", exit_code=2)
            return folder / file
    if not download:
        raise DatasetNotFound(f"ADBench table '{name}' ({file}) is not on this machine (looked in: {SHARED}, "
                              f"{local}). Get it with: {HOW}")
    return fetch(URL + file, local / file, digest)


def load_adbench(name: str, root: str | Path = "data", download: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """(x float64 (N, d), y int64 (N,), 1 = anomaly) of ADBench table `name` (a fresh copy)."""
    x, y = _read(table_file(name, root, download))
    return x.copy(), y.copy()


@functools.lru_cache(maxsize=None)
def _read(path: Path) -> tuple[np.ndarray, np.ndarray]:
    with np.load(path, allow_pickle=False) as z:
        x, y = np.asarray(z["X"], dtype=np.float64), np.asarray(z["y"]).astype(np.int64)
    if x.ndim != 2 or len(x) != len(y) or not np.isin(y, (0, 1)).all():
        raise UserError(f"{path} is not an ADBench table: X {x.shape}, y {y.shape}, labels {np.unique(y)[:5]}",
                        exit_code=2)
    return x, y


def one_class_splits(x: np.ndarray, y: np.ndarray, seed: int = 0, val_share: float = 0.2) -> dict[str, tuple]:
    """The one-class protocol with a validation part, drawn with `seed`:
    a random half (floor(n/2)) of the normal rows is the training side; `val_share` of it (rounded
    down) and `val_share` of the anomalies (rounded down) form the validation set, the rest of the
    training side is fitted; the other normal half and the remaining anomalies are the test set.
    Returns {'fit': x, 'val': (x, y), 'test': (x, y)}; rows keep their file order within each part.
    Validation and test share no row, so a choice made on 'val' never reads 'test'."""
    y = np.asarray(y)
    if len(x) != len(y):
        raise ValueError(f"x has {len(x)} rows but y has {len(y)} labels.")
    if not np.isin(y, (0, 1)).all():
        raise ValueError(f"y must hold 0 (normal) and 1 (anomaly) only, got values {np.unique(y).tolist()}.")
    if not 0 <= val_share < 1:
        raise ValueError(f"val_share must be in [0, 1), got {val_share}.")
    rng = np.random.default_rng(seed)
    normal, anomaly = rng.permutation(np.flatnonzero(y == 0)), rng.permutation(np.flatnonzero(y == 1))
    side = normal[: len(normal) // 2]
    n_val, a_val = int(len(side) * val_share), int(len(anomaly) * val_share)
    fit, val = np.sort(side[n_val:]), np.sort(np.concatenate([side[:n_val], anomaly[:a_val]]))
    test = np.sort(np.concatenate([normal[len(normal) // 2:], anomaly[a_val:]]))
    return {"fit": x[fit], "val": (x[val], y[val]), "test": (x[test], y[test])}


__all__ = ["TABLES", "load_adbench", "one_class_splits", "table_file"]
