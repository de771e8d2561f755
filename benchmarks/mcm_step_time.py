"""MCM's batched mask generator (one einsum per layer for all K nets) against the official
per-mask loop (K nn.Sequential), one full training step each, K ∈ {1, 5, 15, 30}, d ∈ {9, 36};
then fit + score time of MCM against IForest and DeepSVDD on satellite (2,000 training rows).

    python benchmarks/mcm_step_time.py [--quick]  -> tables + benchmarks/results/mcm_step_time.json
"""
import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import torch  # noqa: E402
from torch import nn  # noqa: E402

from benchmarks.common_bench import interleaved, save  # noqa: E402
from methods.mcm import MCM, make_detector, mcm_loss, score_detector, table_split  # noqa: E402


class LoopMaskGenerator(nn.Module):
    """The official Model/MaskNets.py structure: K bias-free MLPs called one after another."""

    def __init__(self, batched):
        super().__init__()
        k, layers = batched.num_masks, len(batched.weights)
        d = batched.weights[0].shape[-1]
        self.nets = nn.ModuleList()
        for j in range(k):
            linears = [nn.Linear(d, d, bias=False) for _ in range(layers)]
            with torch.no_grad():
                for lin, w in zip(linears, batched.weights):
                    lin.weight.copy_(w[j])
            seq = [m for i, lin in enumerate(linears) for m in ([lin] + ([nn.ReLU()] if i < layers - 1 else []))]
            self.nets.append(nn.Sequential(*seq))

    def forward(self, x):
        logits = torch.stack([net(x) for net in self.nets], dim=1)   # (B, K, d)
        return torch.sigmoid(logits), logits


def train_step(model, x):
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    lam = 5.0 if model.num_masks >= 3 else 0.0

    def step():
        x_hat, masks = model(x)
        loss, _ = mcm_loss(x, x_hat, masks, lam)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
    return step


def step_times(ks, dims, batch, repeats):
    rows = []
    for d in dims:
        x = torch.randn(batch, d)
        for k in ks:
            torch.manual_seed(0)
            batched = MCM(d, num_masks=k)
            loop = MCM(d, num_masks=k)
            loop.load_state_dict(batched.state_dict())
            loop.mask_generator = LoopMaskGenerator(batched.mask_generator)
            t = interleaved({"batched": train_step(batched, x), "loop": train_step(loop, x)}, repeats)
            rows.append({"d": d, "K": k, "batched_ms": 1e3 * t["batched"], "loop_ms": 1e3 * t["loop"],
                         "speedup": t["loop"] / t["batched"]})
    return rows


def satellite_times(epochs, max_train):
    split = table_split("satellite", max_train=max_train)
    out = {}
    for row, kw in (("mcm", dict(hidden_dim=128, latent_dim=64, epochs=epochs)), ("iforest", {}), ("deepsvdd", {})):
        t0 = time.perf_counter()
        metrics = score_detector(make_detector(row, 0, **kw), *split)
        out[row] = {"fit_score_s": time.perf_counter() - t0, **metrics}
    for row in ("iforest", "deepsvdd"):
        out[row]["mcm_over_this"] = out["mcm"]["fit_score_s"] / out[row]["fit_score_s"]
    return out


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true", help="small sizes: checks that the script runs")
    args = parser.parse_args()
    ks, dims, batch, repeats, epochs = ((1, 5), (9,), 64, 2, 2) if args.quick else ((1, 5, 15, 30), (9, 36), 512, 7, 100)
    steps = step_times(ks, dims, batch, repeats)
    sat = satellite_times(epochs, 2000)
    lines = ["| d | K | batched ms | loop ms | loop / batched |", "|---|---|---|---|---|"]
    lines += [f"| {r['d']} | {r['K']} | {r['batched_ms']:.1f} | {r['loop_ms']:.1f} | {r['speedup']:.2f}x |" for r in steps]
    lines += ["", "| satellite (2,000 training rows) | fit + score s | AUC-PR | AUROC |", "|---|---|---|---|"]
    lines += [f"| {row} | {r['fit_score_s']:.1f} | {r['auprc']:.3f} | {r['auroc']:.3f} |" for row, r in sat.items()]
    lines += ["", f"One training step (forward, L_rec + λ·L_div, backward, Adam) on a batch of {batch}, hidden 256, "
              f"latent 128, median of {repeats}, {torch.get_num_threads()} CPU threads. Satellite: MCM at the mini "
              f"sizes (hidden 128, latent 64, {epochs} epochs); pyod defaults."]
    table = "\n".join(lines)
    print(table)
    name = "mcm_step_time"
    payload = {"steps": steps, "satellite": sat, "batch": batch, "repeats": repeats, "epochs": epochs,
               "threads": torch.get_num_threads(), "quick": args.quick}
    if args.quick:   # a check run writes its JSON beside the real one and leaves the READMEs alone
        save(name + "_quick", payload)
    else:
        save(name, payload, table)


if __name__ == "__main__":
    main()
