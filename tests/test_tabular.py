"""Tabular anomaly tables: every table's shape and anomaly count, the one-class split, the
search order, the offline error, sha256 checks, and unpacking the Debian package."""
import io
import lzma
import shutil
import tarfile

import numpy as np
import pytest

from common.config import UserError
from common.data import tabular
from common.data.download import DatasetNotFound, sha256
from common.data.tabular import load_tabular, one_class_split

needs_mlbench = pytest.mark.skipif(not (tabular.SYSTEM / "Glass.rda").exists(),
                                   reason="r-cran-mlbench not installed (sudo apt-get install r-cran-mlbench)")

# name: (rows, features, anomalies), the ODDS tables' sizes
SIZES = {"breastw": (683, 9, 239), "pima": (768, 8, 268), "ionosphere": (351, 33, 126), "glass": (214, 9, 9),
         "satellite": (6435, 36, 2036), "shuttle": (49097, 9, 3511), "wbc": (378, 30, 21), "wine": (129, 13, 10)}


@pytest.mark.parametrize("name", [pytest.param(n, marks=pytest.mark.slow) if n == "shuttle" else n for n in SIZES])
def test_table_shape_and_anomaly_count(name):
    if name in tabular.MLBENCH and not (tabular.SYSTEM / "Glass.rda").exists():
        pytest.skip("r-cran-mlbench not installed")
    x, y = load_tabular(name)
    rows, features, anomalies = SIZES[name]
    assert x.shape == (rows, features) and y.shape == (rows,)
    assert x.dtype == np.float64 and np.isfinite(x).all()
    assert int(y.sum()) == anomalies and set(np.unique(y)) == {0, 1}
    assert (x.std(0) > 0).all()     # no constant column (ionosphere's V2 is dropped)


@needs_mlbench
def test_rebuilt_values_match_uci_rows():
    x, y = load_tabular("glass")     # UCI glass row 1: RI 1.52101, Na 13.64, ..., type 1
    np.testing.assert_allclose(x[0], [1.52101, 13.64, 4.49, 1.10, 71.78, 0.06, 8.75, 0.0, 0.0])
    x, _ = load_tabular("breastw")   # BreastCancer id 1000025: 5,1,1,1,2,1,3,1,1
    np.testing.assert_array_equal(x[0], [5, 1, 1, 1, 2, 1, 3, 1, 1])


def test_sklearn_subsamples_are_fixed():
    from sklearn.datasets import load_wine

    x, y = load_tabular("wine")
    x2, y2 = load_tabular("wine")
    np.testing.assert_array_equal(x, x2)
    wine = load_wine()
    normal = wine.data[wine.target > 0]
    np.testing.assert_array_equal(x[y == 0], normal)      # classes 1 and 2 kept whole, in order
    class0 = {tuple(r) for r in wine.data[wine.target == 0]}
    assert all(tuple(r) in class0 for r in x[y == 1])


def test_one_class_split():
    rng = np.random.default_rng(0)
    y = (rng.random(101) < 0.3).astype(int)
    x = np.arange(101, dtype=float)[:, None]                 # a row's value is its index
    x_train, x_test, y_test = one_class_split(x, y, seed=0)
    normal = np.flatnonzero(y == 0)
    train, test = x_train[:, 0].astype(int), x_test[:, 0].astype(int)
    assert len(train) == len(normal) // 2 and set(train) <= set(normal)
    assert set(train).isdisjoint(test) and set(train) | set(test) == set(range(101))
    np.testing.assert_array_equal(y_test, y[test])
    assert y_test.sum() == y.sum() and (np.diff(test) > 0).all()
    again = one_class_split(x, y, seed=0)[0]
    other = one_class_split(x, y, seed=1)[0]
    np.testing.assert_array_equal(x_train, again)
    assert not np.array_equal(x_train, other)
    with pytest.raises(ValueError, match="0 \\(normal\\) and 1"):
        one_class_split(x, y * 2)


def test_missing_table_names_places_and_package(tmp_path, monkeypatch):
    monkeypatch.setattr(tabular, "SYSTEM", tmp_path / "nowhere")
    with pytest.raises(DatasetNotFound, match="r-cran-mlbench") as err:
        load_tabular("pima", root=tmp_path)
    assert str(tmp_path / "nowhere") in str(err.value) and "apt-get" in str(err.value)
    with pytest.raises(UserError, match="breastw"):
        load_tabular("thyroid")


@needs_mlbench
def test_data_root_first_and_sha256_checked(tmp_path):
    (tmp_path / "mlbench").mkdir()
    shutil.copy(tabular.SYSTEM / "Glass.rda", tmp_path / "mlbench" / "Glass.rda")
    assert load_tabular("glass", root=tmp_path)[0].shape == (214, 9)
    (tmp_path / "mlbench" / "Glass.rda").write_bytes(b"not an rda")
    tabular._read_table.cache_clear()           # tables read once stay in memory
    with pytest.raises(UserError, match="does not match the sha256"):
        load_tabular("glass", root=tmp_path)


def fake_deb(path, files):
    """An `ar` archive like a .deb: debian-binary, control.tar.xz, data.tar.xz holding `files`."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for file in files:
            tar.add(tabular.SYSTEM / file, arcname="./" + tabular.DEB_MEMBER + file)
    members = [("debian-binary", b"2.0\n"), ("control.tar.xz", lzma.compress(b"")),
               ("data.tar.xz", lzma.compress(buf.getvalue()))]
    out = b"!<arch>\n"
    for name, data in members:
        out += f"{name:<16}{0:<12}{0:<6}{0:<6}{100644:<8}{len(data):<10}`\n".encode() + data + b"\n" * (len(data) % 2)
    path.write_bytes(out)


@needs_mlbench
def test_download_unpacks_the_debian_package(tmp_path, monkeypatch):
    deb = tmp_path / "src.deb"
    fake_deb(deb, ["Glass.rda"])
    monkeypatch.setattr(tabular, "SYSTEM", tmp_path / "nowhere")
    monkeypatch.setattr(tabular, "DEB_URL", deb.as_uri())
    monkeypatch.setattr(tabular, "DEB_SHA256", sha256(deb))
    root = tmp_path / "data"
    x, y = load_tabular("glass", root=root, download=True)
    assert x.shape == (214, 9) and y.sum() == 9
    assert sha256(root / "mlbench" / "Glass.rda") == tabular.RDA_SHA256["Glass.rda"]
