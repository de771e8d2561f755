"""Lattice-protein sequences (Jacquin, Gilson, Shakhnovich, Cocco & Monasson 2016): 27-site chains
on a 3x3x3 cube, 20 amino acids plus the alignment gap '-', for the Stacked Tempering paper tier
(issue #53). A stacked binary RBM reads them one-hot: v in {0,1}^(27*21) with exactly one 1 per site
(a binary RBM over the one-hot code, not the paper's Potts RBM: a deviation the config states).

The official Stacked Tempering repository (2024stacktemperingrbm/StackedTempering.jl) ships the
sampler only, no data; no public copy of the paper's lattice-protein alignment with a fixed address
was found here (CANDIDATE_URL below is the same lab's alignment, not confirmed to be the paper's).
So URL and SHA256 are unset: `load` reads a local FASTA (or one sequence a line) file
and refuses it unless its sha256 is the one the caller pins (`expected_sha256`), and never
downloads. When an official file is located, set URL to its raw address at a fixed commit and
SHA256 to the hash of that blob, and `load(download=True)` fetches it.

Not imported by any method package (it would move their code fingerprints); the stacked_tempering
branch that uses it imports it inside the function that handles `method.data: lattice_proteins`.
"""
from __future__ import annotations

from pathlib import Path

import torch

from common.data.download import DatasetNotFound, fetch, sha256

ALPHABET = "ACDEFGHIKLMNPQRSTVWY-"          # 20 amino acids, then the gap
LENGTH = 27
URL: str | None = None                      # not found (see the module docstring)
SHA256: str | None = None
# A candidate, NOT confirmed to be the paper's data: the same lab's public lattice-protein alignment
# (Tubiana, Cocco & Monasson 2019; jertubiana/PGM, data/Lattice_Proteins/Lattice_Proteins_MSA.fasta at
# a fixed commit): 46,265 sequences of 27 sites folding to ONE structure, headers '>>S<k>' without a
# mode label. sha256 computed here from the mirrored blob (`git show <commit>:<path> | sha256sum`).
CANDIDATE_URL = ("https://raw.githubusercontent.com/jertubiana/PGM/bb7b6df30dd534b7bb421b161679abb8691b2bb1/"
                 "data/Lattice_Proteins/Lattice_Proteins_MSA.fasta")
CANDIDATE_SHA256 = "f31662132e1893fc82d0e872074aa4790fa914caa1c77d18c23f196795193655"
FILE = "lattice_proteins.fasta"


def parse(text: str, length: int = LENGTH, alphabet: str = ALPHABET) -> torch.Tensor:
    """int64 (n, length) codes (index in `alphabet`) of a FASTA text ('>' headers, a sequence over
    one or more lines) or of one sequence a line. Upper-cases letters; ValueError on a foreign
    letter or a sequence of another length, naming the sequence."""
    seqs, current, header = [], [], None
    lines = [ln.strip() for ln in text.splitlines()]
    fasta = any(ln.startswith(">") for ln in lines)
    for ln in lines:
        if not ln:
            continue
        if ln.startswith(">"):
            if current:
                seqs.append((header, "".join(current)))
            header, current = ln[1:].strip(), []
        elif fasta:
            current.append(ln)
        else:
            seqs.append((f"line {len(seqs) + 1}", ln))
    if current:
        seqs.append((header, "".join(current)))
    if not seqs:
        raise ValueError("no sequence found in the lattice-protein file")
    index = {a: i for i, a in enumerate(alphabet)}
    out = torch.empty(len(seqs), length, dtype=torch.int64)
    for k, (name, seq) in enumerate(seqs):
        seq = seq.upper()
        if len(seq) != length:
            raise ValueError(f"sequence {name!r} has {len(seq)} sites, expected {length}")
        bad = sorted(set(seq) - set(index))
        if bad:
            raise ValueError(f"sequence {name!r} holds {bad}, outside the alphabet {alphabet!r}")
        out[k] = torch.tensor([index[a] for a in seq])
    return out


def header_labels(text: str) -> torch.Tensor:
    """int64 (n,) mode labels from FASTA headers of the form '>name|k' (k a non-negative integer:
    e.g. the structure a sequence was designed to fold into), in file order. ValueError naming the
    first header without one. The label convention is ours (the paper's file was not found)."""
    labels = []
    for ln in text.splitlines():
        ln = ln.strip()
        if not ln.startswith(">"):
            continue
        tail = ln.rsplit("|", 1)[-1].strip() if "|" in ln else ""
        if not tail.isdigit():
            raise ValueError(f"header {ln!r} carries no mode label; expected '>name|k' with k = 0, 1, ...")
        labels.append(int(tail))
    if not labels:
        raise ValueError("no FASTA header found: mode labels need '>name|k' headers")
    return torch.tensor(labels, dtype=torch.int64)


def one_hot(codes: torch.Tensor, q: int = len(ALPHABET)) -> torch.Tensor:
    """float (n, L*q) binary: site i's letter a sets unit i*q + a (the RBM's visible layer)."""
    if codes.dim() != 2 or codes.numel() and (codes.min() < 0 or codes.max() >= q):
        raise ValueError(f"codes must be (n, L) integers in [0, {q}), got shape {tuple(codes.shape)}")
    return torch.nn.functional.one_hot(codes, q).reshape(len(codes), -1).float()


def load(root: str | Path, download: bool = False, expected_sha256: str | None = None,
         filename: str = FILE, labels: bool = False, url: str | None = None):
    """int64 (n, 27) codes of <root>/<filename> (with `labels`: (codes, header_labels)), checked
    against `expected_sha256` (default the module's SHA256). A file whose hash differs, or any file
    when no hash is pinned, is refused. With `download`, a missing file is fetched from `url`
    (default the module's URL) only when a sha256 is pinned, and checked before it is kept."""
    path = Path(root) / filename
    want = expected_sha256 or SHA256
    source = url or URL
    if not path.is_file():
        if download and source is not None and want is not None:
            fetch(source, path, want)
        else:
            raise DatasetNotFound(
                f"{path} not found. No official download of the Stacked Tempering lattice-protein data is "
                f"known (the official repository ships none); put the alignment at {path} and pin its sha256 "
                f"(method.lattice_proteins.sha256).")
    if want is None:
        raise DatasetNotFound(f"{path}: no sha256 pinned for the lattice-protein data; refusing an unchecked file "
                              f"(set method.lattice_proteins.sha256 to the hash of the file you mean to use)")
    got = sha256(path)
    if got != want:
        raise DatasetNotFound(f"{path} has sha256 {got}, expected {want}: not the pinned lattice-protein file. "
                              f"Delete it or fix the pin.")
    text = path.read_text()
    codes = parse(text)
    if not labels:
        return codes
    modes = header_labels(text)
    if len(modes) != len(codes):
        raise ValueError(f"{path}: {len(codes)} sequences but {len(modes)} labelled headers")
    return codes, modes


__all__ = ["ALPHABET", "CANDIDATE_SHA256", "CANDIDATE_URL", "LENGTH", "SHA256", "URL", "header_labels", "load", "one_hot", "parse"]
