"""What every run shares around a method's `run(cfg)`: the run dir, hardware, logger,
the final metrics line, metrics.json and the results JSON with provenance, and turning
`UserError`s into one-paragraph messages."""
from __future__ import annotations

import importlib
import json
import sys
from dataclasses import dataclass
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from common import hardware, results
from common.config import UserError, choices
from common.hardware import Hardware
from common.logging import MetricLogger


@dataclass
class RunContext:
    hw: Hardware
    run_dir: Path
    logger: MetricLogger


def start(cfg: DictConfig) -> RunContext:
    """Set up hardware, seeding and the logger for one run (called at the top of `run(cfg)`)."""
    hw = hardware.setup(cfg)
    run_dir = Path(cfg.run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    logger = MetricLogger(run_dir, cfg.logger, OmegaConf.to_container(cfg, resolve=True),
                          enabled=hw.is_main, resume=bool(cfg.resume))
    return RunContext(hw, run_dir, logger)


def import_method(name: str):
    if name not in choices("method"):
        raise UserError(f"unknown method '{name}'. Available: {', '.join(choices('method'))}.", exit_code=2)
    return importlib.import_module(f"methods.{name}")


def run_method(cfg: DictConfig) -> dict[str, float]:
    """Import `methods.<name>`, run it, write metrics.json and results.json into the run dir."""
    module = import_method(cfg.method.name)
    metrics = {k: float(v) for k, v in module.run(cfg).items()}
    run_dir = Path(cfg.run_dir)
    if _is_main():
        run_dir.mkdir(parents=True, exist_ok=True)
        (run_dir / "metrics.json").write_text(json.dumps(metrics, indent=2) + "\n")
        (run_dir / "config.yaml").write_text(OmegaConf.to_yaml(cfg, resolve=True))
        results.write(run_dir / "results.json", {"metrics": metrics},
                      OmegaConf.to_container(cfg, resolve=True))
    return metrics


def _is_main() -> bool:
    import torch.distributed as dist

    return not dist.is_initialized() or dist.get_rank() == 0


def guarded(fn, debug: bool):
    """Run `fn()`; a UserError becomes a short message on stderr and its exit code."""
    from hydra.errors import HydraException
    from omegaconf.errors import OmegaConfBaseException

    try:
        return fn()
    except (UserError, HydraException, OmegaConfBaseException) as err:
        if debug:
            raise
        # config errors (a misspelt key in an override or a YAML file) are the user's too
        print(f"error: {err}", file=sys.stderr)
        sys.exit(getattr(err, "exit_code", 1))
    finally:
        hardware.teardown()
