"""The runner owns a run: it validates the config, opens a `RunContext` (hardware, seeding,
run dir, logger, rank-aware samplers, trainers), calls `methods.<name>.run(cfg, ctx)`, writes
metrics.json / config.yaml / results.json, and tears everything down in one place, also when
`run` raises. Process-wide settings a run may change (default dtype, threads, determinism,
warning filters) are restored afterwards, so runs in one process (reproduce.py) do not leak.
"""
from __future__ import annotations

import contextlib
import importlib
import json
import sys
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterator

import torch
from omegaconf import DictConfig, OmegaConf

from common import hardware, results
from common.config import UserError, choices
from common.data.sampler import StepSampler
from common.hardware import Hardware
from common.logging import MetricLogger


@dataclass
class RunContext:
    """What a method's `run(cfg, ctx)` is handed; it builds model, data and evaluation only."""
    cfg: DictConfig
    hw: Hardware
    run_dir: Path
    logger: MetricLogger
    last_step: int = 0
    stages: list[str] = field(default_factory=list)

    @property
    def seed(self) -> int:
        return int(self.cfg.seed)

    @property
    def device(self) -> torch.device:
        return self.hw.device

    @property
    def resume(self) -> bool:
        return bool(self.cfg.resume)

    def sampler(self, num_items: int, batch_size: int | None = None, seed: int | None = None) -> StepSampler:
        """This rank's share of each step's global batch (`trainer.batch_size` unless given):
        N ranks together see exactly the samples of one process, never the same ones twice."""
        batch = int(self.cfg.trainer.batch_size) if batch_size is None else batch_size
        return StepSampler(num_items, batch, self.seed if seed is None else seed, self.hw.rank, self.hw.world_size)

    def trainer(self, model: torch.nn.Module, batch_fn: Callable[[int], object], eval_fn=None,
                callbacks=(), stage: str | None = None, trainer_cfg=None):
        """The one Trainer, on `trainer_cfg` (default: the run's `trainer`). A `stage` (teacher,
        student, ...) gets its own folder for its checkpoint and curve inside the run dir."""
        from common.trainer import Trainer

        run_dir, logger = self.run_dir, self.logger
        if stage is not None:
            if stage in self.stages:
                raise ValueError(f"stage '{stage}' was already trained in this run")
            self.stages.append(stage)
            run_dir = self.run_dir / stage
            # a stage's curve is a JSONL file of its own (wandb, if on, gets the run's final metrics)
            logger = MetricLogger(run_dir, OmegaConf.create({"kind": "jsonl"}),
                                  enabled=self.hw.is_main and self.logger.enabled, resume=self.resume)
        return Trainer(model, trainer_cfg if trainer_cfg is not None else self.cfg.trainer, self.hw, run_dir,
                       logger, batch_fn, eval_fn=eval_fn, callbacks=callbacks)

    def log(self, metrics: dict, step: int | None = None) -> None:
        self.logger.log(metrics, self.last_step if step is None else step)


@contextlib.contextmanager
def _process_state() -> Iterator[None]:
    """Restore what runs may change process-wide, whatever happens inside."""
    dtype, threads = torch.get_default_dtype(), torch.get_num_threads()
    deterministic = torch.are_deterministic_algorithms_enabled()
    warn_only = torch.is_deterministic_algorithms_warn_only_enabled()
    benchmark = torch.backends.cudnn.benchmark
    try:
        with warnings.catch_warnings():
            yield
    finally:
        torch.set_default_dtype(dtype)
        torch.set_num_threads(threads)
        torch.use_deterministic_algorithms(deterministic, warn_only=warn_only)
        torch.backends.cudnn.benchmark = benchmark


@contextlib.contextmanager
def open_run(cfg: DictConfig) -> Iterator[RunContext]:
    """Hardware, seeding, run dir and logger for one run; closed in one place, also on errors."""
    with _process_state():
        hw = hardware.setup(cfg)
        logger = None
        try:
            run_dir = Path(cfg.run_dir)
            run_dir.mkdir(parents=True, exist_ok=True)
            logger = MetricLogger(run_dir, cfg.logger, OmegaConf.to_container(cfg, resolve=True),
                                  enabled=hw.is_main, resume=bool(cfg.resume))
            yield RunContext(cfg, hw, run_dir, logger)
        finally:
            if logger is not None:
                logger.close()
            hardware.teardown()


def import_method(name: str):
    if name not in choices("method"):
        raise UserError(f"unknown method '{name}'. Available: {', '.join(choices('method'))}.", exit_code=2)
    return importlib.import_module(f"methods.{name}")


def run_method(cfg: DictConfig) -> dict[str, float]:
    """Validate `cfg`, run `methods.<name>.run(cfg, ctx)`, write metrics.json, config.yaml and
    results.json (provenance) into the run dir; return the metrics."""
    from common.schema import validate

    validate(cfg)
    module = import_method(cfg.method.name)
    with open_run(cfg) as ctx:
        metrics = module.run(cfg, ctx)
        bad = {k: v for k, v in metrics.items() if not isinstance(v, (int, float)) or isinstance(v, bool)}
        if bad:
            raise TypeError(f"methods.{cfg.method.name}.run must return numbers, got {bad}")
        metrics = {k: float(v) for k, v in metrics.items()}
        ctx.log(metrics)
        if ctx.hw.is_main:
            (ctx.run_dir / "metrics.json").write_text(json.dumps(metrics, indent=2) + "\n")
            (ctx.run_dir / "config.yaml").write_text(OmegaConf.to_yaml(cfg, resolve=True))
            results.write(ctx.run_dir / "results.json", {"metrics": metrics},
                          OmegaConf.to_container(cfg, resolve=True))
    return metrics


def guarded(fn, debug: bool):
    """Run `fn()`; a UserError (or a config error) becomes one paragraph on stderr and its
    exit code, with no traceback unless `debug`."""
    from hydra.errors import HydraException
    from omegaconf.errors import OmegaConfBaseException

    try:
        return fn()
    except (UserError, HydraException, OmegaConfBaseException) as err:
        if debug:
            raise
        print(f"error: {err}", file=sys.stderr)
        sys.exit(getattr(err, "exit_code", 1))
