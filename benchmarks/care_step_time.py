"""Time per training step of CARE vs SimCLR (CARE with λ = 0: no equivariance views), as a ratio.

    python benchmarks/care_step_time.py   -> table + benchmarks/results/care_step_time.json
"""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import torch  # noqa: E402
from hydra import compose, initialize_config_dir  # noqa: E402

from benchmarks.common_bench import interleaved, save, train_step  # noqa: E402
from common.config import CONFIG_DIR  # noqa: E402
from methods.care import build  # noqa: E402

BATCH, REPEATS = 128, 7  # the mini tier's batch


def step_fn(overrides: list[str]):
    """One optimizer step of the model built from configs/method/care.yaml with `overrides`."""
    with initialize_config_dir(str(CONFIG_DIR), version_base="1.3"):
        cfg = compose("train", overrides=["method=care", *overrides])
    torch.manual_seed(0)
    model = build(cfg)
    images = torch.randint(0, 256, (BATCH, cfg.dataset.in_chans, 28, 28), dtype=torch.uint8)
    return train_step(model, images), cfg


def main():
    rows = {}
    for width in (16, 32):
        fns = {}
        for name, extra in (("simclr", ["method.model.equi_weight=0"]), ("care", [])):
            fns[name], cfg = step_fn([f"method.backbone.width={width}", *extra])
        t = interleaved(fns, REPEATS)
        rows[f"small_cnn_w{width}"] = {"simclr_s": t["simclr"], "care_s": t["care"], "ratio": t["care"] / t["simclr"]}
    chunks = cfg.method.model.chunks
    lines = ["| backbone | SimCLR s/step | CARE s/step | CARE / SimCLR |", "|---|---|---|---|"]
    lines += [f"| {k} | {r['simclr_s']:.3f} | {r['care_s']:.3f} | {r['ratio']:.2f} |" for k, r in rows.items()]
    lines += ["", f"Batch {BATCH}, K = {chunks} chunks; CARE adds two forward/backward calls of the batch (the "
              f"equivariance views t1 and t2). Median of {REPEATS} interleaved steps, {torch.get_num_threads()} "
              f"CPU threads, on a shared (loaded) machine."]
    table = "\n".join(lines)
    print(table)
    save("care_step_time", {"rows": rows, "batch": BATCH, "chunks": chunks, "repeats": REPEATS,
                            "threads": torch.get_num_threads()}, table)


if __name__ == "__main__":
    main()
