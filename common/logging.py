"""Metric sinks: JSONL in the run dir always; wandb (offline unless the user sets a mode); none."""
from __future__ import annotations

import json
import math
import os
from pathlib import Path


class MetricLogger:
    """Rank 0 logs; other ranks get a logger whose calls do nothing."""

    def __init__(self, run_dir: str | os.PathLike, cfg_logger, config: dict | None = None,
                 enabled: bool = True, resume: bool = False):
        self.enabled = enabled and cfg_logger.kind != "none"
        self.path = Path(run_dir) / "metrics.jsonl"
        self._wandb = None
        if not self.enabled:
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        if not resume:
            self.path.write_text("")
        if cfg_logger.kind == "wandb":
            import wandb

            os.environ.setdefault("WANDB_MODE", cfg_logger.mode)
            self._wandb = wandb.init(project=cfg_logger.project, dir=str(run_dir), config=config,
                                     resume="allow" if resume else None, reinit=True)

    def log(self, metrics: dict, step: int) -> None:
        if not self.enabled:
            return
        clean = {k: (float(v) if isinstance(v, (int, float)) or hasattr(v, "item") else v)
                 for k, v in metrics.items()}
        with self.path.open("a") as f:
            f.write(json.dumps({"step": step, **clean}) + "\n")
        if self._wandb is not None:
            self._wandb.log({k: v for k, v in clean.items() if isinstance(v, float)
                             and math.isfinite(v)}, step=step)

    def truncate_after(self, step: int) -> None:
        """On resume, drop lines logged after the checkpoint so the file reads as one run."""
        if not self.enabled or not self.path.exists():
            return
        keep = [line for line in self.path.read_text().splitlines()
                if line and json.loads(line)["step"] <= step]
        self.path.write_text("".join(line + "\n" for line in keep))

    def close(self) -> None:
        if self._wandb is not None:
            self._wandb.finish()


def read_jsonl(path: str | os.PathLike) -> list[dict]:
    return [json.loads(line) for line in Path(path).read_text().splitlines() if line]
