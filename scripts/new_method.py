"""Lay out a new method: python scripts/new_method.py NAME [--paper "Title, ICLR 2024"] [--root DIR]

Creates methods/NAME/ (README with an Equations table, __init__.py with run(cfg, ctx) on the
classify template, model.py, loss.py), configs/method/NAME.yaml, the smoke and mini experiment
configs and tests/test_NAME.py. The generated smoke run trains a small classifier on scikit-learn's
digits (offline) through scripts/train.py; replace the model, loss, data and table with the
paper's, one file at a time (docs/adding-a-method.md).
"""
import argparse
import re
import sys
from pathlib import Path
from string import Template

FILES = {
    "methods/$name/__init__.py": '''"""$title. See README.md."""
from __future__ import annotations

from hydra.utils import instantiate

from common import data, tasks
from methods.$name.loss import classification_loss
from methods.$name.model import Model


def run(cfg, ctx) -> dict[str, float]:
    """Build the model and data, hand them to a task template (common/tasks), return metrics."""
    splits = data.image_splits(cfg.dataset)
    ds = cfg.dataset
    model = instantiate(cfg.method.model, in_dim=ds.in_chans * ds.img_size ** 2, num_classes=ds.num_classes)
    return tasks.classify(ctx, model, splits["train"], splits["test"], eval_batch_size=cfg.eval.batch_size)


__all__ = ["Model", "classification_loss", "run"]
''',
    "methods/$name/model.py": '''"""nn.Modules of $title (a runnable starting point: replace with the paper's model)."""
from __future__ import annotations

import torch
from torch import nn

from common.data.transforms import to_signed
from methods.$name.loss import classification_loss


class Model(nn.Module):
    """images (N, C, H, W) uint8 -> logits (N, num_classes)."""

    def __init__(self, in_dim: int, num_classes: int, hidden: int = 64):
        super().__init__()
        self.net = nn.Sequential(nn.Flatten(), nn.Linear(in_dim, hidden), nn.ReLU(), nn.Linear(hidden, num_classes))

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        return self.net(to_signed(images))

    def training_step(self, batch):
        images, labels = batch
        logits = self(images)
        return classification_loss(logits, labels), {"acc": (logits.argmax(1) == labels).float().mean()}
''',
    "methods/$name/loss.py": '''"""Losses of $title as pure functions, one per equation (docstring: the equation number)."""
from __future__ import annotations

import torch
import torch.nn.functional as F


def classification_loss(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """Eq. (1): mean cross-entropy, -1/N sum_i log softmax(logits_i)[y_i]. Replace with the paper's."""
    return F.cross_entropy(logits, labels)
''',
    "methods/$name/README.md": '''# $title

Paper: TODO (link). Official code: TODO (link).

## Idea

TODO: the idea in one paragraph.

## Equations

| equation | function |
|---|---|
| (1) cross-entropy | `loss.classification_loss` |

## Results (mini tier)

<!-- BEGIN ${name}_mini -->
<!-- END ${name}_mini -->

## Commands

```bash
python scripts/train.py experiment=${name}_smoke          # seconds
python scripts/reproduce.py $name --tier mini --check     # the headline table
python scripts/reproduce.py $name --tier mini --seeds 100,101,102   # held-out seeds
```

## Deviations

TODO: every place the code differs from the paper or the official code, which it follows and why.
''',
    "configs/method/$name.yaml": '''# @package _global_
# $title: the paper's hyper-parameters (defaults of the Python API too).
defaults:
  - override /dataset: digits
  - override /eval: classify
method:
  name: $name
  model: {_target_: methods.$name.Model, hidden: 64}
trainer:
  max_steps: 200
  batch_size: 64
  optimizer: {_target_: torch.optim.AdamW, lr: 1.0e-3, weight_decay: 0.0}
''',
    "configs/experiment/${name}_smoke.yaml": '''# @package _global_
# Seconds: every code path of $name runs. python scripts/train.py experiment=${name}_smoke
defaults:
  - override /method: $name
run_name: ${name}_smoke
trainer: {max_steps: 5, log_every: 1, progress: false}
table:
  seeds: [0]
  metrics: [test_acc]
  rows: {model: []}
''',
    "configs/experiment/${name}_mini.yaml": '''# @package _global_
# CPU minutes: the paper's headline claim at small scale.
#   python scripts/reproduce.py $name --tier mini --check
defaults:
  - override /method: $name
run_name: ${name}_mini
trainer: {progress: false}
# {seeds: [...], split: val} once a hyper-parameter is chosen on validation data (never a report seed)
tuned_on: {seeds: [], split: none, reason: "the scaffold's defaults; nothing tuned yet"}
table:
  seeds: [0, 1, 2]
  # extend: {to: 10}   # a rule fixed before the run: WITHIN NOISE claims resolvable in <= 10 seeds extend once
  metrics: [test_acc]
  rows:
    model: []
    untrained: [trainer.max_steps=0]
  controls: {model: [untrained]}   # naive rows that must fail each claim the method row passes
paper: null
claims:
  # the paper's own finding, marked headline; replace with the paper's comparison
  - {claim: "model.test_acc > 50", headline: true}
''',
    "tests/test_$name.py": '''"""$name: each equation against an independent derivation."""
import math

import pytest
import torch

from methods.$name import Model, classification_loss


def test_classification_loss_matches_a_slow_loop():
    g = torch.Generator().manual_seed(0)
    logits, labels = torch.randn(5, 4, generator=g), torch.tensor([0, 3, 1, 1, 2])
    slow = -sum(float(logits[i, labels[i]]) - math.log(sum(math.exp(float(v)) for v in logits[i]))
                for i in range(5)) / 5
    assert float(classification_loss(logits, labels)) == pytest.approx(slow, rel=1e-6)


def test_model_shapes():
    model = Model(in_dim=64, num_classes=10)
    assert model(torch.zeros(3, 1, 8, 8, dtype=torch.uint8)).shape == (3, 10)
''',
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("name", help="package name: lower case, digits and underscores")
    parser.add_argument("--paper", default=None, help='the title line, e.g. "Foo: bar (ICLR 2024)"')
    parser.add_argument("--root", default=str(Path(__file__).resolve().parent.parent), help="repository root")
    args = parser.parse_args()
    if not re.fullmatch(r"[a-z][a-z0-9_]*", args.name):
        sys.exit(f"error: NAME must be lower case letters, digits and underscores, got '{args.name}'")
    root = Path(args.root)
    existing = [p for p in (root / "methods" / args.name, root / "configs/method" / f"{args.name}.yaml") if p.exists()]
    if existing:
        sys.exit(f"error: {existing[0]} exists already; pick another name")
    values = {"name": args.name, "title": args.paper or f"{args.name} (ICLR 2024)"}
    for rel, text in FILES.items():
        path = root / Template(rel).substitute(values)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(Template(text).substitute(values))
        print(f"wrote {path.relative_to(root)}")
    print(f"next: python scripts/train.py experiment={args.name}_smoke, then docs/adding-a-method.md")


if __name__ == "__main__":
    main()
