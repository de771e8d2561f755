"""Inference latency of the HGNN teacher vs the distilled MLP on synthetic hypergraphs of
5k, 20k and 55k vertices (the paper: over 100x at 55k), and the time to train each student.

    python benchmarks/lighthgnn_inference.py  -> table + benchmarks/results/lighthgnn_inference.json
"""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

from benchmarks.common_bench import interleaved, save, timed  # noqa: E402
from common.data.hypergraphs import synthetic_hypergraph  # noqa: E402
from methods.lighthgnn import HGNN, HGNNSmoothing, MLPStudent, lighthgnn_loss  # noqa: E402

SIZES, FEATURES, CLASSES, REPEATS = (5_000, 20_000, 55_000), 256, 10, 7


def main():
    rows = {}
    for n in SIZES:
        hg = synthetic_hypergraph(n, CLASSES, FEATURES, edges_per_vertex=1.0, seed=0)
        x = hg.features
        build = timed(lambda: HGNNSmoothing(hg.edges, n), 1)[0]   # building the operator, once
        smoothing = HGNNSmoothing(hg.edges, n)
        hgnn = HGNN(FEATURES, 32, CLASSES, 0.5, smoothing).eval()
        mlp = MLPStudent(FEATURES, CLASSES).eval()
        with torch.no_grad():
            t = interleaved({"hgnn": lambda: hgnn(x), "mlp": lambda: mlp(x)}, REPEATS)
            teacher_logits = hgnn(x)
        student = MLPStudent(FEATURES, CLASSES)
        opt = torch.optim.Adam(student.parameters(), lr=0.01)
        idx = torch.arange(0, n, 50)

        def epoch():
            loss = lighthgnn_loss(student(x), teacher_logits, hg.labels, idx, 0.5, 1.0)
            opt.zero_grad()
            loss.backward()
            opt.step()

        def teacher_epoch():
            hgnn.train()
            loss = F.cross_entropy(hgnn(x)[idx], hg.labels[idx])
            loss.backward()
        train = interleaved({"student": epoch, "teacher": teacher_epoch}, 3)
        rows[n] = {"hgnn_ms": 1e3 * t["hgnn"], "mlp_ms": 1e3 * t["mlp"], "speedup": t["hgnn"] / t["mlp"],
                   "operator_build_s": build, "student_epoch_ms": 1e3 * train["student"],
                   "teacher_epoch_ms": 1e3 * train["teacher"], "hyperedges": len(hg.edges)}
    lines = ["| vertices | hyperedges | HGNN ms | MLP ms | HGNN / MLP | student epoch ms | teacher epoch ms |",
             "|---|---|---|---|---|---|---|"]
    lines += [f"| {n} | {r['hyperedges']} | {r['hgnn_ms']:.1f} | {r['mlp_ms']:.2f} | {r['speedup']:.1f}x | "
              f"{r['student_epoch_ms']:.1f} | {r['teacher_epoch_ms']:.1f} |" for n, r in rows.items()]
    lines += ["", f"Full-graph inference on synthetic hypergraphs, {FEATURES} features, median of {REPEATS}, "
              f"{torch.get_num_threads()} CPU threads; HGNN time excludes building its sparse operator "
              "(operator_build_s in the JSON). Paper: over 100x at 55k vertices (GPU)."]
    table = "\n".join(lines)
    print(table)
    save("lighthgnn_inference", {"rows": rows, "features": FEATURES, "classes": CLASSES, "repeats": REPEATS,
                                 "threads": torch.get_num_threads()}, table)


if __name__ == "__main__":
    main()
