"""Pruning time per block and peak memory of Wanda, SparseGPT and BESA, as ratios to Wanda.

Two randomly initialised blocks with SmolLM2-135M's shapes (width 576, MLP 1536, 9 heads,
3 KV heads), 32 calibration windows of 128 tokens. Each method runs in a fresh process so
its peak resident memory (above the model's) is its own.

    python benchmarks/besa_prune_time.py  -> table + benchmarks/results/besa_prune_time.json
"""
import json
import resource
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

# name -> (method, BESA's epochs, sequences per step): the mini tier's recipe and the paper's
METHODS = {"wanda": ("wanda", 1, 8), "sparsegpt": ("sparsegpt", 1, 8), "besa": ("besa", 3, 8),
           "besa_paper_recipe": ("besa", 1, 1)}


def one(name: str) -> dict:
    import torch
    import transformers

    from methods.besa import prune

    cfg = transformers.LlamaConfig(vocab_size=1000, hidden_size=576, intermediate_size=1536, num_hidden_layers=2,
                                   num_attention_heads=9, num_key_value_heads=3, max_position_embeddings=256)
    torch.manual_seed(0)
    model = transformers.LlamaForCausalLM(cfg).eval()
    ids = torch.randint(0, 1000, (32, 128))
    base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    method, epochs, batch_size = METHODS[name]
    report = prune(model, ids, 0.5, method, batch_size=batch_size, epochs=epochs, progress=False)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return {"seconds_per_block": report["seconds_per_block"], "extra_peak_mb": (peak - base) / 1024}


def main():
    if len(sys.argv) == 3 and sys.argv[1] == "--one":
        print(json.dumps(one(sys.argv[2])))
        return
    from benchmarks.common_bench import save

    rows = {}
    for m in METHODS:
        out = subprocess.run([sys.executable, __file__, "--one", m], capture_output=True, text=True, check=True)
        rows[m] = json.loads(out.stdout.strip().splitlines()[-1])
    w = rows["wanda"]
    lines = ["| method | s / block | × Wanda | extra peak memory (MB) |", "|---|---|---|---|"]
    for m, r in rows.items():
        lines.append(f"| {m} | {r['seconds_per_block']:.2f} | {r['seconds_per_block'] / w['seconds_per_block']:.1f} "
                     f"| {r['extra_peak_mb']:.0f} |")
    table = "\n".join(lines) + ("\n\nbesa: the mini tier's 3 epochs at batch 8 over 32 × 128 tokens per block "
                                "(12 Adam steps); besa_paper_recipe: the paper's 1 epoch at batch 1 (32 steps). "
                                "SparseGPT's per-column sweep is a Python loop over 4,992 columns per block.")
    print(table)
    save("besa_prune_time", {"calibration": [32, 128], "blocks": 2, "methods": rows, "recipes": METHODS}, table)


if __name__ == "__main__":
    main()
