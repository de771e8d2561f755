"""Steps/s of common/trainer.py against a bare PyTorch loop, same model, data and optimizer.

    python benchmarks/trainer_overhead.py      -> prints a table, writes benchmarks/results/trainer_overhead.json
Target: overhead at most 5%.
"""
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from omegaconf import OmegaConf  # noqa: E402
from torch import nn  # noqa: E402

from benchmarks.common_bench import interleaved, save  # noqa: E402
from common.data import StepSampler  # noqa: E402
from common.hardware import Hardware  # noqa: E402
from common.logging import MetricLogger  # noqa: E402
from common.nn import SmallCNN  # noqa: E402
from common.trainer import Trainer  # noqa: E402

STEPS, BATCH, REPEATS = 40, 128, 5


class Classifier(nn.Module):
    def __init__(self):
        super().__init__()
        self.encoder = SmallCNN(1, 16)
        self.head = nn.Linear(self.encoder.num_features, 10)

    def forward(self, x):
        return self.head(self.encoder(x))

    def training_step(self, batch):
        x, y = batch
        loss = F.cross_entropy(self(x), y)
        return loss, {}


def main():
    torch.manual_seed(0)
    x, y = torch.randn(4096, 1, 28, 28), torch.randint(0, 10, (4096,))
    sampler = StepSampler(len(x), BATCH, seed=0)
    cfg = OmegaConf.create(dict(max_steps=STEPS, batch_size=BATCH, grad_accum=1, clip_grad=None,
                                optimizer={"_target_": "torch.optim.AdamW", "lr": 1e-3},
                                schedule={"name": "cosine", "warmup_steps": 0}, log_every=10,
                                eval_every=0, ckpt_every=0, progress=True))
    hw = Hardware(device=torch.device("cpu"))
    tmp = Path(tempfile.mkdtemp())

    def bare():
        model = Classifier()
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
        sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, STEPS)
        for step in range(STEPS):
            idx = sampler(step)
            loss = F.cross_entropy(model(x[idx]), y[idx])
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            sched.step()

    def ours():
        logger = MetricLogger(tmp, OmegaConf.create({"kind": "jsonl"}))
        Trainer(Classifier(), cfg, hw, tmp, logger, lambda s: (x[sampler(s)], y[sampler(s)])).fit()

    t = interleaved({"bare": bare, "trainer": ours}, REPEATS)
    ratio = t["trainer"] / t["bare"]
    rows = {"bare_steps_per_s": STEPS / t["bare"], "trainer_steps_per_s": STEPS / t["trainer"],
            "overhead_ratio": ratio, "overhead_percent": 100 * (ratio - 1)}
    table = (f"| loop | steps/s |\n|---|---|\n| bare PyTorch | {rows['bare_steps_per_s']:.2f} |\n"
             f"| common.trainer | {rows['trainer_steps_per_s']:.2f} |\n\n"
             f"Trainer overhead: {rows['overhead_percent']:+.1f}% (target at most 5%; median of {REPEATS} "
             f"interleaved runs of {STEPS} steps, SmallCNN(16) classifier, batch {BATCH}, "
             f"{torch.get_num_threads()} CPU threads)")
    print(table)
    save("trainer_overhead", {**rows, "steps": STEPS, "batch": BATCH, "repeats": REPEATS,
                              "threads": torch.get_num_threads()}, table)


if __name__ == "__main__":
    main()
