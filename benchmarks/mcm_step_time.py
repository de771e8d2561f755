"""MCM's mask generator (issue #38): the batched generator (one (B, d) x (d, K·d) matmul for the
first layer, one batched matmul over the K nets for each later layer) against the official
per-mask loop (K nn.Sequential, Model/MaskNets.py), the generator ALONE (forward + backward of
the masks' sum), B = 512, K = 15, d in {9, 36, 100}; beside it, one whole training step of MCM
(forward, L_rec + λ·L_div, backward, Adam) with either generator. The achieved GFLOP/s of the
loop says how much room a CPU has left: the generator's arithmetic is the same in both forms.

    python benchmarks/mcm_step_time.py [--quick]  -> tables + benchmarks/results/mcm_step_time.json
"""
import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import torch  # noqa: E402
from torch import nn  # noqa: E402

from benchmarks.common_bench import interleaved, save  # noqa: E402
from methods.mcm import MCM, mcm_loss  # noqa: E402
from methods.mcm.model import MaskGenerator  # noqa: E402


class LoopMaskGenerator(nn.Module):
    """The official Model/MaskNets.py structure: K bias-free MLPs called one after another."""

    def __init__(self, batched: MaskGenerator):
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


def generator_step(gen, x):
    params = list(gen.parameters())

    def step():
        masks, _ = gen(x)
        masks.sum().backward()
        for p in params:
            p.grad = None
    return step


def train_step(model, x):
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)

    def step():
        x_hat, masks = model(x)
        loss, _ = mcm_loss(x, x_hat, masks, 5.0)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
    return step


def measure(dims, k, batch, repeats, hidden, latent):
    rows = []
    for d in dims:
        x = torch.randn(batch, d)
        torch.manual_seed(0)
        gen = MaskGenerator(d, k)
        loop = LoopMaskGenerator(gen)
        assert torch.allclose(gen(x)[0], loop(x)[0], atol=1e-5)       # the same function
        a, b = torch.randn(512, 512), torch.randn(512, 512)
        g = interleaved({"batched": generator_step(gen, x), "loop": generator_step(loop, x),
                         "gemm": lambda: a @ b}, repeats)   # the core's large-matmul rate, same moment
        torch.manual_seed(0)
        batched_model = MCM(d, num_masks=k, hidden_dim=hidden, latent_dim=latent)
        loop_model = MCM(d, num_masks=k, hidden_dim=hidden, latent_dim=latent)
        loop_model.load_state_dict(batched_model.state_dict())
        loop_model.mask_generator = LoopMaskGenerator(batched_model.mask_generator)
        s = interleaved({"batched": train_step(batched_model, x), "loop": train_step(loop_model, x)}, repeats)
        flops = 3 * 2 * 3 * batch * k * d * d     # 3 layers; forward 2·B·K·d² each; backward ≈ 2x forward
        rows.append({"d": d, "K": k, "gen_batched_ms": 1e3 * g["batched"], "gen_loop_ms": 1e3 * g["loop"],
                     "gen_speedup": g["loop"] / g["batched"], "loop_gflops": flops / g["loop"] / 1e9,
                     "batched_gflops": flops / g["batched"] / 1e9, "gemm512_gflops": 2 * 512**3 / g["gemm"] / 1e9,
                     "ceiling_speedup": (2 * 512**3 / g["gemm"]) / (flops / g["loop"]),
                     "step_batched_ms": 1e3 * s["batched"], "step_loop_ms": 1e3 * s["loop"],
                     "step_speedup": s["loop"] / s["batched"]})
    return rows


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true", help="small sizes: checks that the script runs")
    args = parser.parse_args()
    dims, k, batch, repeats, hidden, latent = ((9,), 3, 16, 2, 16, 8) if args.quick else ((9, 36, 100), 15, 512, 11, 256, 128)
    rows = measure(dims, k, batch, repeats, hidden, latent)
    lines = ["| d | K | generator: batched ms | loop ms | loop / batched | loop GFLOP/s | batched GFLOP/s "
             "| 512³ matmul GFLOP/s | ceiling | whole step: batched ms | loop ms | loop / batched |", "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    lines += [f"| {r['d']} | {r['K']} | {r['gen_batched_ms']:.2f} | {r['gen_loop_ms']:.2f} | {r['gen_speedup']:.2f}x "
              f"| {r['loop_gflops']:.1f} | {r['batched_gflops']:.1f} | {r['gemm512_gflops']:.1f} | "
              f"{r['ceiling_speedup']:.1f}x | {r['step_batched_ms']:.1f} | "
              f"{r['step_loop_ms']:.1f} | {r['step_speedup']:.2f}x |" for r in rows]
    lines += ["", f"Generator alone: forward + backward of the K masks, B = {batch}, 3 layers; whole step: forward, "
              f"L_rec + λ·L_div, backward, Adam, hidden {hidden}, latent {latent}. Median of {repeats} interleaved "
              f"repeats, {torch.get_num_threads()} CPU thread(s). GFLOP/s counts 3 x 2·B·K·d² per layer (forward "
              f"and backward), the same arithmetic in both forms; ceiling = the 512³ matmul's rate over the loop's: "
              f"the most any reordering of the same arithmetic could gain on this core."]
    table = "\n".join(lines)
    print(table)
    name = "mcm_step_time"
    payload = {"rows": rows, "batch": batch, "repeats": repeats, "threads": torch.get_num_threads(),
               "hidden": hidden, "latent": latent, "quick": args.quick}
    if args.quick:   # a check run writes its JSON beside the real one and leaves the READMEs alone
        save(name + "_quick", payload)
    else:
        save(name, payload, table)


if __name__ == "__main__":
    main()
