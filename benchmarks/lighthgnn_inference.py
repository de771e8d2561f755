"""Inference time of the HGNN teacher vs the distilled MLP on synthetic hypergraphs of 5k, 20k
and 55k vertices (the paper: LightHGNNs run 100x faster than HGNNs at 5.5w = 55k vertices),
split into the parts a timing can include, all measured in one process:

  load     reading the inputs from disk (page cache warm): features (both) + hyperedge list (HGNN)
  build    the HGNN operator from the hyperedge list: ours (two incidence products,
           `HGNNSmoothing`) and DHG's (the |V| x |V| L_HGNN that `Hypergraph.smoothing_with_HGNN`
           builds on the first forward of a new hypergraph and caches; the paper's HGNN is DHG's)
  forward  the whole-graph forward pass (HGNN with either operator; the MLP)

    python benchmarks/lighthgnn_inference.py  -> table + benchmarks/results/lighthgnn_inference.json
"""
import pickle
import sys
import tempfile
import warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import numpy as np  # noqa: E402
import torch  # noqa: E402

from benchmarks.common_bench import interleaved, save  # noqa: E402
from common.data.hypergraphs import synthetic_hypergraph  # noqa: E402
from methods.lighthgnn import HGNN, HGNNSmoothing, MLPStudent  # noqa: E402
from methods.lighthgnn.model import incidence, with_self_loops  # noqa: E402

SIZES, FEATURES, CLASSES, REPEATS = (5_000, 20_000, 55_000), 256, 10, 5


class DHGOperator(torch.nn.Module):
    """DHG's L_HGNN = D_v^-1/2 H W_e D_e^-1 Hᵀ D_v^-1/2 as one sparse |V| x |V| matrix, built by the
    same chain of sparse products as `dhg.Hypergraph.L_HGNN`; forward is `L.mm(X)`."""

    def __init__(self, edges: list[list[int]], n: int):
        super().__init__()
        H = incidence(with_self_loops(edges, n), n)
        dv, de = torch.sparse.sum(H, 1).to_dense(), torch.sparse.sum(H, 0).to_dense()

        def diag(v):
            i = torch.arange(len(v))
            return torch.sparse_coo_tensor(torch.stack([i, i]), v, (len(v), len(v)), check_invariants=False)
        chain = [diag(dv.rsqrt()), H, diag(torch.ones(len(de))), diag(1 / de), H.t().coalesce(), diag(dv.rsqrt())]
        L = chain[0]
        with warnings.catch_warnings():   # torch goes through CSR for sparse x sparse and says it is beta
            warnings.filterwarnings("ignore", message="Sparse CSR tensor support is in beta")
            for factor in chain[1:]:
                L = torch.sparse.mm(L, factor)
        self.L = L.coalesce()

    def forward(self, x):
        return torch.sparse.mm(self.L, x)


def main():
    torch.manual_seed(0)
    rows = {}
    with tempfile.TemporaryDirectory() as tmp:
        for n in SIZES:
            hg = synthetic_hypergraph(n, CLASSES, FEATURES, edges_per_vertex=1.0, seed=0)
            feats, edge_file = Path(tmp) / f"x{n}.npy", Path(tmp) / f"e{n}.pickle"
            np.save(feats, hg.features.numpy())
            edge_file.write_bytes(pickle.dumps(hg.edges))
            x = hg.features
            ours, dhg = HGNNSmoothing(hg.edges, n), DHGOperator(hg.edges, n)
            hgnn, mlp = HGNN(FEATURES, CLASSES).eval(), MLPStudent(FEATURES, CLASSES).eval()
            with torch.no_grad():
                t = interleaved({
                    "load_features": lambda: torch.from_numpy(np.load(feats)),
                    "load_edges": lambda: pickle.loads(edge_file.read_bytes()),
                    "build_ours": lambda: HGNNSmoothing(hg.edges, n),
                    "build_dhg": lambda: DHGOperator(hg.edges, n),
                    "hgnn_ours": lambda: hgnn(x, ours),
                    "hgnn_dhg": lambda: hgnn(x, dhg),
                    "mlp": lambda: mlp(x)}, REPEATS)
            ms = {k: 1e3 * v for k, v in t.items()}
            mlp_all = ms["load_features"] + ms["mlp"]
            rows[n] = {**{f"{k}_ms": v for k, v in ms.items()}, "hyperedges": len(hg.edges),
                       "dhg_operator_nnz": int(dhg.L._nnz()), "incidence_nnz": int(ours.left._nnz()),
                       "forward_ratio_ours": ms["hgnn_ours"] / ms["mlp"],
                       "forward_ratio_dhg": ms["hgnn_dhg"] / ms["mlp"],
                       "build_forward_ratio_dhg": (ms["build_dhg"] + ms["hgnn_dhg"]) / ms["mlp"],
                       "end_to_end_ratio_ours": (ms["load_features"] + ms["load_edges"] + ms["build_ours"]
                                                 + ms["hgnn_ours"]) / mlp_all,
                       "end_to_end_ratio_dhg": (ms["load_features"] + ms["load_edges"] + ms["build_dhg"]
                                                + ms["hgnn_dhg"]) / mlp_all}
    lines = ["| vertices | MLP fwd ms | HGNN fwd ms (ours / DHG op.) | build ms (ours / DHG op.) | load ms (X / edges) "
             "| fwd ratio (ours / DHG) | DHG build+fwd / MLP fwd | load+build+fwd ratio (ours / DHG) |",
             "|---|---|---|---|---|---|---|---|"]
    lines += [f"| {n} | {r['mlp_ms']:.1f} | {r['hgnn_ours_ms']:.1f} / {r['hgnn_dhg_ms']:.1f} | "
              f"{r['build_ours_ms']:.0f} / {r['build_dhg_ms']:.0f} | {r['load_features_ms']:.1f} / {r['load_edges_ms']:.1f} | "
              f"{r['forward_ratio_ours']:.1f}x / {r['forward_ratio_dhg']:.1f}x | {r['build_forward_ratio_dhg']:.0f}x | "
              f"{r['end_to_end_ratio_ours']:.1f}x / {r['end_to_end_ratio_dhg']:.1f}x |" for n, r in rows.items()]
    lines += ["", f"Synthetic hypergraphs (|E| = |V|, 3-8 vertices each), {FEATURES} features, {CLASSES} classes, "
              f"HGNN hidden 32, MLP hidden 128; median of {REPEATS} interleaved repeats, {torch.get_num_threads()} "
              "CPU thread(s), one process. Ratios are HGNN time / MLP time for the same part; the MLP's load is the "
              "features only. The paper reports over 100x at 55k vertices on a GPU."]
    table = "\n".join(lines)
    print(table)
    save("lighthgnn_inference", {"rows": rows, "features": FEATURES, "classes": CLASSES, "repeats": REPEATS,
                                 "threads": torch.get_num_threads()}, table)


if __name__ == "__main__":
    main()
