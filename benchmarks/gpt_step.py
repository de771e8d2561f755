"""The tiny-LM floor (issue #46): one AdamW training step of common.nn.gpt.GPT against HF
`GPT2LMHeadModel` with the same weights (loaded by `load_hf_gpt2_state_dict`), d 128, 4 layers,
4 heads, t 128, in one process; time (median of interleaved repeats) and activation memory (bytes
autograd saves for backward). Target: ours / HF time <= 1.2.

    python benchmarks/gpt_step.py [--quick]  -> table + benchmarks/results/gpt_step.json
"""
import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import torch  # noqa: E402

from benchmarks.common_bench import interleaved, save, saved_bytes  # noqa: E402
from common.nn.gpt import GPT, GPTConfig, flops_per_token, load_hf_gpt2_state_dict  # noqa: E402


def step_fn(model, x):
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)

    def step():
        loss = model(x, labels=x).loss
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
    return step


def main():
    from transformers import GPT2Config, GPT2LMHeadModel
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true", help="few repeats: checks that the script runs")
    args = parser.parse_args()
    d, layers, heads, t, batch, vocab = 128, 4, 4, 128, 8, 256
    repeats = 3 if args.quick else 15
    torch.manual_seed(0)
    hf = GPT2LMHeadModel(GPT2Config(vocab_size=vocab, n_positions=t, n_embd=d, n_layer=layers, n_head=heads,
                                    resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0,
                                    bos_token_id=0, eos_token_id=0)).train()
    cfg = GPTConfig(vocab_size=vocab, n_positions=t, n_embd=d, n_layer=layers, n_head=heads)
    ours = load_hf_gpt2_state_dict(GPT(cfg), hf.state_dict()).train()
    x = torch.randint(0, vocab, (batch, t), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        gap = float((ours(x, labels=x).loss - hf(x, labels=x).loss).abs())
    assert gap < 1e-4, gap   # the same function before timing
    times = interleaved({"ours": step_fn(ours, x), "hf": step_fn(hf, x)}, repeats)
    mem = {k: saved_bytes(lambda m=m: m(x, labels=x).loss) for k, m in (("ours", ours), ("hf", hf))}
    row = {"d": d, "layers": layers, "heads": heads, "t": t, "batch": batch, "vocab": vocab,
           "ours_ms": 1e3 * times["ours"], "hf_ms": 1e3 * times["hf"], "time_ratio": times["ours"] / times["hf"],
           "ours_saved_mb": mem["ours"] / 2**20, "hf_saved_mb": mem["hf"] / 2**20,
           "memory_ratio": mem["ours"] / mem["hf"],
           "ours_gflops": flops_per_token(cfg, t, training=True) * t * batch / times["ours"] / 1e9,
           "hf_attn": getattr(hf.config, "_attn_implementation", "?")}
    lines = ["| model | train step ms | saved activations MB | GFLOP/s |", "|---|---|---|---|",
             f"| common.nn.gpt.GPT | {row['ours_ms']:.1f} | {row['ours_saved_mb']:.1f} | {row['ours_gflops']:.1f} |",
             f"| HF GPT2LMHeadModel ({row['hf_attn']}) | {row['hf_ms']:.1f} | {row['hf_saved_mb']:.1f} | |",
             "", f"GPT / HF: time {row['time_ratio']:.2f}x (target <= 1.2), activation memory {row['memory_ratio']:.2f}x. "
             f"One AdamW step (forward, loss, backward, update), d {d}, {layers} layers, {heads} heads, t {t}, batch "
             f"{batch}, vocab {vocab}, same weights; median of {repeats} interleaved repeats, "
             f"{torch.get_num_threads()} CPU thread(s); GFLOP/s counts 3 x forward_flops."]
    table = "\n".join(lines)
    print(table)
    payload = {"rows": [row], "repeats": repeats, "threads": torch.get_num_threads(), "quick": args.quick}
    if args.quick:
        save("gpt_step_quick", payload)
    else:
        save("gpt_step", payload, table)


if __name__ == "__main__":
    main()
