"""ReLU Strikes Back (issue #47, §5): the aggregated-sparsity curves s_agg(t) of a trained ReLU tiny
GPT (the mini table's recipe: 300 steps, AdamW 3e-3, warm-up 20, cosine, clip 1; trained by
common/nn/pretrained_tiny_lm.py, seed 0, so its batches are not the table run's) beside the same net
at step 0, with the three controls: rows shuffled across sequences, rows shuffled among the same
input id at the same position (matched), and the uniform closed form. Layer mean over the first 64
validation windows of t = 64. Not a table: a figure for the README (~1 CPU-min at one thread).

    OMP_NUM_THREADS=1 python benchmarks/relu_strikes_back_agg_curves.py
        -> benchmarks/results/relu_strikes_back_agg_curves.{json,png}
"""
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import torch  # noqa: E402

from common.data.text import consecutive_windows  # noqa: E402
from common.nn.gpt import record_ffn  # noqa: E402
from common.nn.pretrained_tiny_lm import pretrained_tiny_lm  # noqa: E402
from methods.relu_strikes_back import (aggregated_sparsity, corpus, matched_shuffled_aggregated_sparsity,  # noqa: E402
                                       shuffled_aggregated_sparsity, uniform_aggregated_sparsity)
from methods.relu_strikes_back.metrics import token_position_keys  # noqa: E402

OUT = Path(__file__).resolve().parent / "results"
DATA = dict(source="fortunes", tokenizer="char", val_fraction=0.1, split_seed=0, bpe_vocab=512)
RECIPE = dict(steps=300, batch_size=16, clip_grad=1.0, schedule="cosine", warmup_steps=20,
              optimizer={"_target_": "torch.optim.AdamW", "lr": 3e-3, "betas": [0.9, 0.95], "weight_decay": 0.1})


@torch.no_grad()
def curves(model, windows):
    model.eval()
    with record_ffn(model) as ffn:
        model(windows)
    acts = [torch.cat(r) for r in ffn]
    keys = token_position_keys(windows)
    mean = lambda fs: torch.stack(fs).mean(0).tolist()   # noqa: E731 (layer mean)
    return {"observed": mean([aggregated_sparsity(a) for a in acts]),
            "shuffled": mean([shuffled_aggregated_sparsity(a, 0) for a in acts]),
            "matched": mean([matched_shuffled_aggregated_sparsity(a, keys, 0) for a in acts]),
            "uniform": mean([uniform_aggregated_sparsity(a) for a in acts])}


def main():
    torch.set_num_threads(1)
    tok, _, val_ids = corpus(**DATA)
    windows = consecutive_windows(val_ids, 64)[:64]
    net, cor = {"_target_": "methods.relu_strikes_back.TinyLM"}, {"_target_": "methods.relu_strikes_back.corpus", **DATA}
    out = {}
    for name, steps in (("trained", 300), ("step0", 0)):
        model = pretrained_tiny_lm(tok.vocab_size, 0, net, cor, {**RECIPE, "steps": steps}, activation_function="relu")
        out[name] = curves(model, windows)
    OUT.mkdir(exist_ok=True)
    (OUT / "relu_strikes_back_agg_curves.json").write_text(json.dumps(out, indent=1) + "\n")
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.8), sharey=True)
    t = list(range(1, 65))
    for ax, name in zip(axes, ("trained", "step0")):
        for k, style in (("observed", "-"), ("shuffled", "--"), ("matched", "-."), ("uniform", ":")):
            ax.plot(t, out[name][k], style, label=k)
        ax.set_title(f"ReLU tiny GPT, {'300 steps' if name == 'trained' else 'step 0'}")
        ax.set_xlabel("t (tokens of the sequence so far)")
    axes[0].set_ylabel("aggregated sparsity (layer mean)")
    axes[0].legend()
    fig.tight_layout()
    fig.savefig(OUT / "relu_strikes_back_agg_curves.png", dpi=110)
    for name in out:
        print(name, {k: [round(v[i], 4) for i in (0, 7, 15, 31, 63)] for k, v in out[name].items()})


if __name__ == "__main__":
    main()
