"""Share of a SimCLR CPU training step spent on the batched augmentations (common/ssl/augment.py).

    python benchmarks/augment_cost.py  -> table + benchmarks/results/augment_cost.json
"""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import torch  # noqa: E402
from hydra import compose, initialize_config_dir  # noqa: E402

from benchmarks.common_bench import interleaved, save, train_step  # noqa: E402
from common.config import CONFIG_DIR  # noqa: E402
from common.data.transforms import to_float  # noqa: E402
from common.ssl import two_views  # noqa: E402
from methods.simclr import build  # noqa: E402

BATCH, REPEATS = 256, 9


def main():
    with initialize_config_dir(str(CONFIG_DIR), version_base="1.3"):
        cfg = compose("train", overrides=["method=simclr"])
    torch.manual_seed(0)
    model = build(cfg)
    images = torch.randint(0, 256, (BATCH, 1, 28, 28), dtype=torch.uint8)
    step = train_step(model, images)

    t = interleaved({"augment": lambda: two_views(to_float(images), model.augment), "step": step}, REPEATS)
    share = t["augment"] / t["step"]
    table = (f"| work | ms |\n|---|---|\n| two augmented views of {BATCH} images | {1e3 * t['augment']:.1f} |\n"
             f"| whole SimCLR training step (augment + forward + backward + AdamW) | {1e3 * t['step']:.1f} |\n\n"
             f"Augmentation is {100 * share:.1f}% of a CPU training step (SmallCNN width {cfg.method.backbone.width}, "
             f"median of {REPEATS}, {torch.get_num_threads()} threads).")
    print(table)
    save("augment_cost", {"augment_s": t["augment"], "step_s": t["step"], "share": share, "batch": BATCH}, table)


if __name__ == "__main__":
    main()
