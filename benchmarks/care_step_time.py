"""Time per training step of CARE vs SimCLR (the extra equivariance forward passes), as a ratio.

    python benchmarks/care_step_time.py   -> table + benchmarks/results/care_step_time.json
"""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import torch  # noqa: E402
from omegaconf import OmegaConf  # noqa: E402

from benchmarks.common_bench import interleaved, save, ssl_step  # noqa: E402
from common.config import CONFIG_DIR  # noqa: E402
from methods.care import CARE  # noqa: E402

BATCH, REPEATS = 256, 7


def main():
    base = OmegaConf.load(CONFIG_DIR / "method" / "care.yaml").method
    rows = {}
    for width in (16, 32):
        fns = {}
        for name, weight in (("simclr", 0.0), ("care", base.equi_weight)):
            cfg = OmegaConf.merge(base, {"equi_weight": weight, "backbone": {"width": width}})
            fns[name] = ssl_step(CARE, cfg, BATCH)[0]
        t = interleaved(fns, REPEATS)
        rows[f"small_cnn_w{width}"] = {"simclr_s": t["simclr"], "care_s": t["care"], "ratio": t["care"] / t["simclr"]}
    lines = ["| backbone | SimCLR s/step | CARE s/step | CARE / SimCLR |", "|---|---|---|---|"]
    lines += [f"| {k} | {r['simclr_s']:.3f} | {r['care_s']:.3f} | {r['ratio']:.2f} |" for k, r in rows.items()]
    lines += ["", f"Batch {BATCH}, K = {base.chunks} chunks; CARE adds two forward/backward passes of the batch "
              f"(the equivariance views). Median of {REPEATS} interleaved steps, {torch.get_num_threads()} CPU threads."]
    table = "\n".join(lines)
    print(table)
    save("care_step_time", {"rows": rows, "batch": BATCH, "chunks": base.chunks, "repeats": REPEATS,
                            "threads": torch.get_num_threads()}, table)


if __name__ == "__main__":
    main()
