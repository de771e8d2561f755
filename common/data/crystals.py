"""Periodic crystals as plain arrays: atomic numbers, Cartesian positions, lattice, target.

Offline: ionic crystals generated from pymatgen's AFLOW prototype library (288 prototypes) by
charge-balanced element substitution and a random lattice strain, labelled with their Ewald
electrostatic energy per atom (`pymatgen.analysis.ewald.EwaldSummation`): a long-range,
periodic quantity no cutoff model captures exactly. Also ase's `dcdft.json` (71 elemental
crystals with bulk moduli). Online (paper tier): JARVIS-DFT 3D and the Materials
Project 2018.6.1 snapshot (the MEGNet set Matformer and PotNet use) from figshare.
"""
from __future__ import annotations

import itertools
import json
import pickle
import warnings
import zipfile
from pathlib import Path

import numpy as np

from common.data import safe_pickle
from common.data.download import DatasetNotFound, fetch, sha256

# cations and anions by |oxidation state|, chosen to have Shannon radii in pymatgen
CATIONS = {1: ("Li", "Na", "K", "Rb", "Cs", "Ag"), 2: ("Mg", "Ca", "Sr", "Ba", "Zn", "Cd"),
           3: ("Al", "Ga", "In", "Y", "Sc", "La"), 4: ("Ti", "Zr", "Hf", "Sn")}
ANIONS = {1: ("F", "Cl", "Br", "I"), 2: ("O", "S", "Se", "Te"), 3: ("N",)}


def charge_assignments(counts: list[int]) -> list[tuple[int, ...]]:
    """Every oxidation state per element group (cations +1..+4, anions −1..−3, at least one
    of each) with zero total charge Σ count·q."""
    out = []
    for qs in itertools.product((1, 2, 3, 4, -1, -2, -3), repeat=len(counts)):
        if any(q > 0 for q in qs) and any(q < 0 for q in qs) and sum(c * q for c, q in zip(counts, qs)) == 0:
            out.append(qs)
    return out


def _prototypes(max_atoms: int):
    from pymatgen.analysis.prototypes import AFLOW_PROTOTYPE_LIBRARY
    protos = []
    for entry in AFLOW_PROTOTYPE_LIBRARY:
        s = entry["snl"].structure
        elements = sorted(s.composition.elements, key=lambda e: e.symbol)
        if len(s) > max_atoms or not 2 <= len(elements) <= 3:
            continue
        counts = [int(s.composition[e]) for e in elements]
        charges = charge_assignments(counts)
        if charges:
            protos.append((s, elements, charges))
    return protos


def _one(rng, proto, strain: float):
    from pymatgen.analysis.ewald import EwaldSummation
    from pymatgen.core import Lattice, Species

    s, elements, charges = proto
    qs = charges[rng.integers(len(charges))]
    used, mapping, radii = set(), {}, {}
    for el, q in zip(elements, qs):
        pool = [x for x in (CATIONS if q > 0 else ANIONS)[abs(q)] if x not in used]
        if not pool:
            return None
        sym = pool[rng.integers(len(pool))]
        used.add(sym)
        mapping[el] = Species(sym, q)
        radii[q > 0] = radii.get(q > 0, []) + [float(mapping[el].ionic_radius)]
    s = s.copy()
    s.replace_species(mapping)
    eps = rng.uniform(-strain, strain, (3, 3))
    s.lattice = Lattice(s.lattice.matrix @ (np.eye(3) + (eps + eps.T) / 2))
    # scale so the closest pair sits at a typical cation-anion distance (± 5%)
    d = s.distance_matrix + np.eye(len(s)) * 1e9
    d0 = (np.mean(radii[True]) + np.mean(radii[False])) * rng.uniform(0.95, 1.05)
    s.scale_lattice(s.volume * (d0 / d.min()) ** 3)
    energy = EwaldSummation(s).total_energy / len(s)
    return {"z": np.array([sp.specie.Z for sp in s], dtype=np.int64), "pos": s.cart_coords.astype(np.float64),
            "lattice": s.lattice.matrix.astype(np.float64), "target": float(energy),
            "formula": s.composition.reduced_formula}


def generate_ewald(n: int, seed: int, max_atoms: int = 16, strain: float = 0.05) -> list[dict]:
    """`n` substituted, strained prototypes with their Ewald energy per atom (eV/atom)."""
    rng = np.random.default_rng(seed)
    protos = _prototypes(max_atoms)
    out = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")   # pymatgen warns about partial occupancies it does not see here
        while len(out) < n:
            c = _one(rng, protos[rng.integers(len(protos))], strain)
            if c is not None and np.isfinite(c["target"]):
                out.append(c)
    return out


def load_ewald(n: int, seed: int, root: str | Path, max_atoms: int = 16) -> list[dict]:
    """The generated set, cached on disk keyed by its seed, size and atom limit."""
    path = Path(root) / "crystals" / f"ewald_seed{seed}_n{n}_max{max_atoms}.pkl"
    if path.exists():   # read back through the numpy-only unpickler: no code runs from a data file
        return safe_pickle.load(path)
    crystals = generate_ewald(n, seed, max_atoms)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".part")
    tmp.write_bytes(pickle.dumps(crystals))
    tmp.replace(path)
    return crystals


def load_dcdft(target: str = "wien2k_B") -> list[dict]:
    """ase's 71 elemental crystals (Delta-test set) with their bulk modulus (GPa)."""
    from ase.collections import dcdft
    out = []
    for name in dcdft.names:
        if target not in dcdft.data[name]:
            continue
        atoms = dcdft[name]
        out.append({"z": atoms.numbers.astype(np.int64), "pos": atoms.positions.astype(np.float64),
                    "lattice": np.array(atoms.cell, dtype=np.float64), "target": float(dcdft.data[name][target]),
                    "formula": name})
    return out


# JARVIS figshare files: (url, json name inside the zip). Pin the sha256 after the first
# verified download: `expected` stays None until someone with the network records it.
JARVIS = {"dft_3d": ("https://ndownloader.figshare.com/files/26808914", "d3-3-12-2021.json", None),
          "megnet": ("https://ndownloader.figshare.com/files/26724977", "megnet.json", None)}


def load_jarvis(name: str, target: str, root: str | Path, download: bool) -> list[dict]:
    """JARVIS-DFT 3D (`dft_3d`) or the MP 2018.6.1 snapshot (`megnet`), entries without the
    target dropped. The sha256 of the first download is written next to it and checked later."""
    if name not in JARVIS:
        raise ValueError(f"unknown crystal dataset '{name}'; choose {sorted(JARVIS)}")
    url, member, expected = JARVIS[name]
    path = Path(root) / "jarvis" / f"{member}.zip"
    stamp = path.with_suffix(".sha256")
    if not path.exists():
        if not download:
            raise DatasetNotFound(f"dataset '{name}' is not at {path}. Get it with dataset.download=true "
                                  f"(downloads {url}) or copy the zip there.")
        fetch(url, path, expected)
        stamp.write_text(sha256(path))
    elif stamp.exists() and sha256(path) != stamp.read_text().strip():
        raise DatasetNotFound(f"{path} no longer matches the sha256 recorded at download; delete it and download again")
    from pymatgen.core import Element

    rows = json.loads(zipfile.ZipFile(path).read(member))
    out = []
    for r in rows:
        y = r.get(target)
        if y in (None, "na") or (isinstance(y, float) and not np.isfinite(y)):
            continue
        a = r["atoms"]
        lattice = np.array(a["lattice_mat"], dtype=np.float64)
        coords = np.array(a["coords"], dtype=np.float64)
        pos = coords if a.get("cartesian") else coords @ lattice
        out.append({"z": np.array([Element(e).Z for e in a["elements"]], dtype=np.int64), "pos": pos,
                    "lattice": lattice, "target": float(y), "formula": r.get("formula", "")})
    return out
