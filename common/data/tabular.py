"""ODDS-style anomaly-detection tables, rebuilt offline, and the one-class split.

Six tables come from the UCI copies in R's `mlbench` package as Debian ships it
(r-cran-mlbench 2.1-3-1; .rda files read with `rdata`, which parses R's serialisation and
runs no code), two from scikit-learn. Each rebuild matches the ODDS table's shape and
anomaly count (y = 1 for an anomaly):

| name | source | rows × features | anomalies |
|---|---|---|---|
| breastw | BreastCancer, Id dropped, rows with NA dropped | 683 × 9 | 239 malignant |
| pima | PimaIndiansDiabetes | 768 × 8 | 268 diabetic |
| ionosphere | Ionosphere, constant V2 dropped | 351 × 33 | 126 bad |
| glass | Glass | 214 × 9 | 9 (type 6, tableware) |
| satellite | Satellite | 6435 × 36 | 2036 (cotton, damp grey soil, stubble) |
| shuttle | Shuttle, class High dropped | 49097 × 9 | 3511 (not Rad.Flow) |
| wbc | sklearn breast_cancer: 357 benign + 21 malignant drawn with default_rng(0) | 378 × 30 | 21 |
| wine | sklearn wine: classes 1, 2 + 10 rows of class 0 drawn with default_rng(0) | 129 × 13 | 10 |

Search order for the .rda files: <root>/mlbench, the `dpkg-deb -x` layout under <root>, the
system copy of the Debian package; then, with download=True, the .deb itself from
deb.debian.org (sha256 from Debian's signed package list), unpacked in Python.
"""
from __future__ import annotations

import functools
import io
import lzma
import tarfile
from pathlib import Path

import numpy as np

from common.config import UserError
from common.data.download import DatasetNotFound, fetch, first_existing, sha256

SYSTEM = Path("/usr/lib/R/site-library/mlbench/data")
DEB_NAME = "r-cran-mlbench_2.1-3-1_amd64.deb"
DEB_URL = "https://deb.debian.org/debian/pool/main/r/r-cran-mlbench/" + DEB_NAME
DEB_SHA256 = "2f1127f7b5e7d08703b13b52ef1976a0c355a7660d6ac575e29b87b13921bc06"
DEB_MEMBER = "usr/lib/R/site-library/mlbench/data/"
RDA_SHA256 = {  # as installed from DEB_NAME (Debian re-saves the .rda files, so CRAN's differ)
    "BreastCancer.rda": "1fcf1b82128c287b2777005a93a2b76fdb4d6749ed6df05231f85953f1fc7c2b",
    "PimaIndiansDiabetes.rda": "fc134e041577d3ff2b784e1610b6fbbe165f815abc83652ba77a28f4bccb89ec",
    "Ionosphere.rda": "1e72974db40749e025434dbb45c815c826d3cce7c1b324fd07ee89aee44e08b7",
    "Glass.rda": "dd6d25227d9b49c30a4de04566bec1a2877e790b7690544ad848d847144f32b7",
    "Satellite.rda": "29f8cf9bb1bc51b769d694c9caf740fd1c36ed6a7c87603edf5985962e330f64",
    "Shuttle.rda": "5b1db218b76a47c83f575f1ff38d7a7d36e569b0e27d8bf4aa92eae6c0bcb826",
}
HOW = ("sudo apt-get install r-cran-mlbench   (without root: apt-get download r-cran-mlbench && "
       "dpkg-deb -x r-cran-mlbench_*.deb <data root>; or rerun with dataset.download=true)")


def _as_float(column) -> np.ndarray:
    """R numeric columns as they are; R factors of numbers ('1'..'10') by their labels."""
    if hasattr(column, "cat"):
        return column.astype(str).astype(np.float64).to_numpy()
    return column.to_numpy(dtype=np.float64)


def _frame(df, drop: list[str]) -> np.ndarray:
    return np.stack([_as_float(df[c]) for c in df.columns if c not in drop], axis=1)


def _breastw(df):
    df = df.dropna()
    return _frame(df, ["Id", "Class"]), (df["Class"] == "malignant").to_numpy()


def _pima(df):
    return _frame(df, ["diabetes"]), (df["diabetes"] == "pos").to_numpy()


def _ionosphere(df):
    return _frame(df, ["V2", "Class"]), (df["Class"] == "bad").to_numpy()


def _glass(df):
    return _frame(df, ["Type"]), (df["Type"] == "6").to_numpy()


def _satellite(df):
    return _frame(df, ["classes"]), df["classes"].isin(["cotton crop", "damp grey soil", "vegetation stubble"]).to_numpy()


def _shuttle(df):
    df = df[df["Class"] != "High"]
    return _frame(df, ["Class"]), (df["Class"] != "Rad.Flow").to_numpy()


MLBENCH = {"breastw": ("BreastCancer.rda", _breastw), "pima": ("PimaIndiansDiabetes.rda", _pima),
           "ionosphere": ("Ionosphere.rda", _ionosphere), "glass": ("Glass.rda", _glass),
           "satellite": ("Satellite.rda", _satellite), "shuttle": ("Shuttle.rda", _shuttle)}


def _subsample_class(x, labels, normal_classes, anomaly_class, num_anomalies: int):
    """All rows of `normal_classes` plus `num_anomalies` rows of `anomaly_class` drawn with
    default_rng(0), in the original row order."""
    normal = np.flatnonzero(np.isin(labels, normal_classes))
    drawn = np.random.default_rng(0).choice(np.flatnonzero(labels == anomaly_class), num_anomalies, replace=False)
    keep = np.sort(np.concatenate([normal, drawn]))
    return x[keep], labels[keep] == anomaly_class


def _wbc():
    from sklearn.datasets import load_breast_cancer

    data = load_breast_cancer()   # target 0 = malignant, 1 = benign
    return _subsample_class(data.data, data.target, [1], 0, 21)


def _wine():
    from sklearn.datasets import load_wine

    data = load_wine()
    return _subsample_class(data.data, data.target, [1, 2], 0, 10)


SKLEARN = {"wbc": _wbc, "wine": _wine}
NAMES = tuple(MLBENCH) + tuple(SKLEARN)


def _extract_from_deb(deb: Path, files: list[str], dest: Path) -> None:
    """Copy data/<files> out of a .deb (an `ar` archive holding data.tar.xz) without dpkg."""
    blob = deb.read_bytes()
    if not blob.startswith(b"!<arch>\n"):
        raise DatasetNotFound(f"{deb} is not a Debian package; delete it and download again.")
    pos, payload = 8, None
    while pos + 60 <= len(blob):
        name, size = blob[pos:pos + 16].decode().strip().rstrip("/"), int(blob[pos + 48:pos + 58])
        if name.startswith("data.tar"):
            payload = blob[pos + 60:pos + 60 + size]
            if name.endswith(".xz"):
                payload = lzma.decompress(payload)
            break
        pos += 60 + size + size % 2
    if payload is None:
        raise DatasetNotFound(f"{deb} holds no data.tar member; delete it and download again.")
    dest.mkdir(parents=True, exist_ok=True)
    with tarfile.open(fileobj=io.BytesIO(payload)) as tar:
        for file in files:
            member = tar.extractfile("./" + DEB_MEMBER + file)
            (dest / file).write_bytes(member.read())


def mlbench_folder(root: Path, files: list[str], download: bool) -> Path:
    """The folder that holds `files` (checked against their sha256); see the module docstring."""
    candidates = [root / "mlbench", root / DEB_MEMBER, SYSTEM]
    folder = first_existing(candidates, files)
    if folder is None:
        if not download:
            raise DatasetNotFound(f"dataset files {', '.join(files)} from r-cran-mlbench are not on this machine "
                                  f"(looked in: {', '.join(map(str, candidates))}). Get them with: {HOW}")
        deb = fetch(DEB_URL, root / DEB_NAME, DEB_SHA256)
        folder = candidates[0]
        _extract_from_deb(deb, files, folder)
    for file in files:
        if sha256(folder / file) != RDA_SHA256[file]:
            raise UserError(f"{folder / file} does not match the sha256 of {DEB_NAME}; the copy is corrupt or "
                            f"from another version. Delete it, or install r-cran-mlbench 2.1-3.")
    return folder


def load_tabular(name: str, root: str | Path = "data", download: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """(x float64 (N, d), y int64 (N,), 1 = anomaly) of the ODDS-style table `name`. Tables are
    kept in memory once read (rdata parses Shuttle's 58k string row names in seconds)."""
    x, y = _read_table(name, Path(root), download)
    return x.copy(), y.copy()


@functools.lru_cache(maxsize=None)
def _read_table(name: str, root: Path, download: bool) -> tuple[np.ndarray, np.ndarray]:
    if name in SKLEARN:
        x, y = SKLEARN[name]()
    elif name in MLBENCH:
        import rdata

        file, build = MLBENCH[name]
        folder = mlbench_folder(root, [file], download)
        (df,) = rdata.read_rda(folder / file, default_encoding="ASCII").values()
        x, y = build(df)
    else:
        raise UserError(f"unknown tabular dataset '{name}'. Available: {', '.join(NAMES)}.", exit_code=2)
    return np.ascontiguousarray(x, dtype=np.float64), np.asarray(y, dtype=np.int64)


def one_class_split(x: np.ndarray, y: np.ndarray, seed: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(x_train, x_test, y_test): a random half (⌊n/2⌋) of the normal rows for training; the
    other normal rows and every anomaly for testing, in the original row order."""
    y = np.asarray(y)
    if len(x) != len(y):
        raise ValueError(f"x has {len(x)} rows but y has {len(y)} labels.")
    if not np.isin(y, (0, 1)).all():
        raise ValueError(f"y must hold 0 (normal) and 1 (anomaly) only, got values {np.unique(y).tolist()}.")
    normal = np.flatnonzero(y == 0)
    train = np.sort(np.random.default_rng(seed).permutation(normal)[: len(normal) // 2])
    test = np.setdiff1d(np.arange(len(y)), train)
    return x[train], x[test], y[test]


__all__ = ["NAMES", "load_tabular", "one_class_split"]
