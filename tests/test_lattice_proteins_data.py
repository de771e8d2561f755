"""common/data/lattice_proteins.py: parsing a tiny fixture, the one-hot code, the sha256 pin."""
import hashlib

import pytest
import torch

from common.data import lattice_proteins as lp
from common.data.download import DatasetNotFound

SEQ_A = "ACDEFGHIKLMNPQRSTVWY-ACDEFG"   # 27 sites
SEQ_B = "W" * 26 + "-"


def _write(tmp_path, text):
    path = tmp_path / lp.FILE
    path.write_text(text)
    return path, hashlib.sha256(text.encode()).hexdigest()


def test_parse_fasta_and_plain_agree():
    fasta = f">s1\n{SEQ_A[:10]}\n{SEQ_A[10:]}\n>s2\n{SEQ_B.lower()}\n"
    plain = f"{SEQ_A}\n\n{SEQ_B}\n"
    codes = lp.parse(fasta)
    assert torch.equal(codes, lp.parse(plain))
    assert codes.shape == (2, 27)
    assert codes[0].tolist() == [lp.ALPHABET.index(a) for a in SEQ_A]
    assert codes[1, 0] == lp.ALPHABET.index("W") and codes[1, -1] == len(lp.ALPHABET) - 1


def test_one_hot_layout():
    codes = lp.parse(SEQ_A + "\n" + SEQ_B)
    v = lp.one_hot(codes)
    q = len(lp.ALPHABET)
    assert v.shape == (2, 27 * q)
    assert torch.equal(v.reshape(2, 27, q).sum(-1), torch.ones(2, 27))     # one letter per site
    for n in range(2):
        for i in range(27):
            assert v[n, i * q + codes[n, i]] == 1


def test_bad_sequences_raise():
    with pytest.raises(ValueError, match="26 sites"):
        lp.parse(SEQ_A[:-1])
    with pytest.raises(ValueError, match="outside the alphabet"):
        lp.parse("B" + SEQ_A[1:])
    with pytest.raises(ValueError, match="no sequence"):
        lp.parse("\n\n")


def test_load_checks_the_pinned_sha256(tmp_path):
    path, digest = _write(tmp_path, f">a\n{SEQ_A}\n>b\n{SEQ_B}\n")
    assert torch.equal(lp.load(tmp_path, expected_sha256=digest), lp.parse(path.read_text()))
    with pytest.raises(DatasetNotFound, match="expected"):
        lp.load(tmp_path, expected_sha256="0" * 64)                 # a wrong file is refused
    with pytest.raises(DatasetNotFound, match="no sha256 pinned"):
        lp.load(tmp_path)                                          # an unpinned file is refused too


def test_missing_file_without_download_raises(tmp_path):
    with pytest.raises(DatasetNotFound, match="not found"):
        lp.load(tmp_path, download=True, expected_sha256="0" * 64)


def test_header_labels(tmp_path):
    text = f">a|0\n{SEQ_A}\n>b|1\n{SEQ_B}\n"
    assert lp.header_labels(text).tolist() == [0, 1]
    _, digest = _write(tmp_path, text)
    codes, modes = lp.load(tmp_path, expected_sha256=digest, labels=True)
    assert codes.shape == (2, 27) and modes.tolist() == [0, 1]
    with pytest.raises(ValueError, match="no mode label"):
        lp.header_labels(f">a\n{SEQ_A}\n")


def test_download_keeps_only_a_file_with_the_pinned_sha256(tmp_path):
    src = tmp_path / "src"
    src.mkdir()
    source, digest = _write(src, f">a|0\n{SEQ_A}\n")
    dest = tmp_path / "data"
    with pytest.raises(DatasetNotFound, match="does not match"):
        lp.load(dest, download=True, expected_sha256="0" * 64, url=source.as_uri())
    assert not (dest / lp.FILE).exists()                           # the wrong file is not kept
    assert lp.load(dest, download=True, expected_sha256=digest, url=source.as_uri()).shape == (1, 27)


def test_stacked_tempering_reads_lattice_proteins(tmp_path):
    from omegaconf import OmegaConf

    from methods.stacked_tempering import load_data

    _, digest = _write(tmp_path, f">a|0\n{SEQ_A}\n>b|1\n{SEQ_B}\n")
    cfg = OmegaConf.create({"method": {"data": "lattice_proteins", "lattice_proteins": {
        "root": str(tmp_path), "filename": lp.FILE, "sha256": digest}}})
    x, modes = load_data(cfg)
    assert x.shape == (2, 27 * 21) and modes.tolist() == [0, 1]
    assert torch.equal(x, lp.one_hot(lp.parse(f"{SEQ_A}\n{SEQ_B}")))
