"""Locating data on disk, downloading with sha256 checks, and the offline error."""
from __future__ import annotations

import hashlib
import urllib.request
from pathlib import Path

from common.config import UserError


class DatasetNotFound(UserError):
    pass


def sha256(path: str | Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def fetch(url: str, dest: Path, expected_sha256: str | None) -> Path:
    """Download `url` to `dest` (via a temporary name) and verify its sha256."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = dest.with_suffix(dest.suffix + ".part")
    try:
        urllib.request.urlretrieve(url, tmp)  # noqa: S310 - fixed https URLs from the registry
    except OSError as err:
        tmp.unlink(missing_ok=True)
        raise DatasetNotFound(f"download of {url} failed ({err}); this machine may be offline.")
    if expected_sha256 and sha256(tmp) != expected_sha256:
        tmp.unlink(missing_ok=True)
        raise DatasetNotFound(f"{url} downloaded but its sha256 does not match {expected_sha256}; "
                              f"refusing to use it.")
    tmp.replace(dest)
    return dest


def first_existing(candidates: list[Path], required: list[str]) -> Path | None:
    """The first folder among `candidates` that holds every file in `required`."""
    for folder in candidates:
        if all((folder / name).exists() for name in required):
            return folder
    return None


def not_found(name: str, looked: list[Path], how: str) -> DatasetNotFound:
    where = ", ".join(str(p) for p in looked)
    return DatasetNotFound(f"dataset '{name}' is not on this machine (looked in: {where}). "
                           f"Get it with: {how}")


def find_or_fetch(name: str, candidates: list[Path], files: dict[str, str], url: str, download: bool,
                  how: str, verify_found: bool = True) -> Path:
    """The folder holding every file of `files` (name -> sha256): the first of `candidates`
    that has them all, else a download into `candidates[0]` when allowed. Downloads are always
    checked; copies found on disk too unless `verify_found` is off."""
    folder = first_existing(candidates, list(files))
    if folder is None:
        if not download:
            raise not_found(name, candidates, how)
        for file, digest in files.items():
            fetch(url + file, candidates[0] / file, digest)
        return candidates[0]
    if verify_found:
        for file, digest in files.items():
            if sha256(folder / file) != digest:
                raise UserError(f"{folder / file} does not match its sha256; the copy is corrupt or "
                                f"altered. Delete it and download again.")
    return folder
