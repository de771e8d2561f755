"""Where a run's training and query hypergraphs come from.

- `hypergraphs` (mini tier): one hypergraph (a shared HyperGCN hypergraph, or the synthetic
  generator of common/data/hypergraphs.py), its unique hyperedges split per seed.
- `official` (the mini tier's headline table and the paper tier): the official repository's
  fixed pair data/<name>/{train,test}.txt (one hyperedge per line, vertex ids separated by
  spaces), sha256-checked; found under the data root, then in the shared offline copy
  (../shared/data/hypergraph_reconstruction beside the project), else downloaded.
"""
from __future__ import annotations

from pathlib import Path

from common.config import UserError
from common.data.download import find_or_fetch
from common.data.hypergraphs import load_hypergraph, synthetic_hypergraph
from methods.shyre.hypergraph import split_hyperedges

COMMIT = "250a00ff7a5173f46917b7b51c927796405ce5aa"
SHARED = Path(__file__).resolve().parents[2].parent / "shared" / "data" / "hypergraph_reconstruction"
URL = f"https://raw.githubusercontent.com/Abel0828/supervised_hypergraph_reconstruction/{COMMIT}/data/"
# name -> (train.txt, test.txt) sha256, computed from the repository's git objects at COMMIT
SHA256 = {
    "crime": ("e16b49105be062f64106eb567e2242a99d680a6679f0f0a850d51f62aae242af",
              "f822b35ef72001a09bc1ad4e3c4cd987bcb359d66e106017856e6c44954a6b9b"),
    "dblp": ("a6d497f02faa3c6ff1721397f8c4a897546cfb73573047b6ffd2d1707669c30b",
             "de58be6c9b6cd400ca8942c30b675432116ecd99e84a23de6ace99b3202c5f52"),
    "directors": ("fed2da020af9e0b9eaa4f4cc54e310bf47fe4ad4f0fecb97adf159fae82c40b2",
                  "b27667eda7f24446dcbf24ff911a2374a60163651f7f998423419bbeabae9de2"),
    "enron": ("e31e67fa00bd425e195e5308c10bb7b4e1f18f2f240fe1dd38cd2585f8f8fcbc",
              "9ab581e697017950e3cd3a2a3e59cbedbd8758f904e6c66f65a58c38168ec355"),
    "foursquare": ("514fdc7588d99bbfc83c067df2df313a51fb8c51dd1f282fce760ef479bee01c",
                   "c654e26cf0827c49658ab770b1802365c43bf3835daea809e490220d9e72015c"),
    "hosts": ("98a00a98b646130d69e638296a33f1af258238de3a7d78b74d3afded27bb9c1e",
              "033ae8058b6f49152abaedc2dbf1e0e03343bcbc013b5c45fd7b894a8d018472"),
    "school": ("a9c3a2bc328990a26c016be445e5eca84c3ecdc5dfa097649298324cb500b1ab",
               "a5bcc6010657427f9f890ae945787ab06667a97150800dd96408d2e6a620ae50"),
    "school2": ("e9a09aac4dc24c627525d7ff631933b97374623031741476fcaf56c1fedeba8a",
                "85479b21b5ab9f98819b411df803ec0ed257dcc5c34d3bac5a20acb9c3a422cd"),
}


def read_hyperedges(path: str | Path) -> list[frozenset]:
    """One hyperedge per non-empty line: integer vertex ids separated by whitespace."""
    return [frozenset(int(v) for v in line.split()) for line in Path(path).read_text().splitlines() if line.strip()]


def official_pair(name: str, root: str | Path = "data", download: bool = False) -> tuple[list, list]:
    """(training, query) hyperedges of an official dataset: <root>/hypergraph_reconstruction/<name>,
    else the shared offline copy SHARED/<name>, else the download (when allowed)."""
    if name not in SHA256:
        raise UserError(f"unknown reconstruction dataset '{name}'. Available: {', '.join(sorted(SHA256))}.",
                        exit_code=2)
    files = dict(zip(("train.txt", "test.txt"), SHA256[name]))
    folder = find_or_fetch(name, [Path(root) / "hypergraph_reconstruction" / name, SHARED / name], files, f"{URL}{name}/",
                           download, f"python scripts/train.py ... dataset.download=true (fetches {URL}{name}/)")
    return read_hyperedges(folder / "train.txt"), read_hyperedges(folder / "test.txt")


def hypergraph_pair(ds, seed: int, train_fraction: float) -> tuple[list, list]:
    """The run's (training, query) hypergraphs from its `dataset` config."""
    if ds.get("source") == "official":
        return official_pair(ds.name, ds.root, ds.download)
    if ds.name == "synthetic":
        edges = synthetic_hypergraph(ds.num_vertices, ds.num_classes, edges_per_vertex=ds.edges_per_vertex,
                                     intra_class=ds.intra_class, seed=ds.generator_seed).edges
    else:
        edges = load_hypergraph(ds.name, ds.root, ds.download).edges
    return split_hyperedges(edges, train_fraction, seed)
