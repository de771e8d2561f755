"""Share of a SimCLR CPU training step spent on the batched augmentations (common/ssl/augment.py).

    python benchmarks/augment_cost.py  -> table + benchmarks/results/augment_cost.json
"""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import torch  # noqa: E402
from omegaconf import OmegaConf  # noqa: E402

from benchmarks.common_bench import interleaved, save, ssl_step  # noqa: E402
from common.config import CONFIG_DIR  # noqa: E402
from common.ssl import ContrastiveModel, to_float, two_views  # noqa: E402

BATCH, REPEATS = 256, 9


def main():
    cfg = OmegaConf.load(CONFIG_DIR / "method" / "simclr.yaml").method
    step, images = ssl_step(ContrastiveModel, cfg, BATCH)

    t = interleaved({"augment": lambda: two_views(to_float(images), cfg.augment), "step": step}, REPEATS)
    share = t["augment"] / t["step"]
    table = (f"| work | ms |\n|---|---|\n| two augmented views of {BATCH} images | {1e3 * t['augment']:.1f} |\n"
             f"| whole SimCLR training step (augment + forward + backward + AdamW) | {1e3 * t['step']:.1f} |\n\n"
             f"Augmentation is {100 * share:.1f}% of a CPU training step (SmallCNN width {cfg.backbone.width}, "
             f"median of {REPEATS}, {torch.get_num_threads()} threads).")
    print(table)
    save("augment_cost", {"augment_s": t["augment"], "step_s": t["step"], "share": share, "batch": BATCH}, table)


if __name__ == "__main__":
    main()
