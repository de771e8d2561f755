"""Paper-tier checks that cost no GPU time, and a short GPU smoke of every paper config.

--dry-run   builds each paper-tier model at full size on the meta device (`methods.<m>.build(cfg)`:
            the model from the config alone) and compares its parameter count with the paper's
            (`paper.params_m`, millions) for every config that has one, so a config error never
            costs GPU time. One JSON line per config; exit 1 on a mismatch or a failed build.
--gpu-smoke N steps of each paper config (CUDA, or the CPU with `cpu=True`) on synthetic inputs of
            the paper's shapes (`common.reproduce.synthetic`: the datasets and the Hub weights are
            stand-ins, installed in this process only), without torch.compile, with the stage
            caches (ICLR24_CACHE) in a scratch folder removed afterwards. Each config's
            peak memory and step time go to benchmarks/results/gpu_<method>.json, written after
            every config so that a run cut short by its time limit still reports.
"""
from __future__ import annotations

import contextlib
import fnmatch
import gc
import json
import os
import resource
import signal
import statistics
import tempfile
import time
from pathlib import Path
from unittest import mock

import torch
import yaml
from hydra import compose, initialize_config_dir

from common.config import CONFIG_DIR, UserError
from common.reproduce.tables import experiments
from common.results import ROOT
from common.runner import import_method, run_method

PARAMS_RTOL = 0.02
SMOKE_SETTINGS = ROOT / "scripts" / "gpu_check.yaml"
RESULTS = Path(os.environ.get("GPU_CHECK_RESULTS") or ROOT / "benchmarks" / "results")


def build_on_meta(cfg) -> tuple[torch.nn.Module, int]:
    module = import_method(cfg.method.name)
    if not hasattr(module, "build"):
        raise UserError(f"methods.{cfg.method.name} has no build(cfg): it cannot be built without data", exit_code=2)
    with torch.device("meta"):
        model = module.build(cfg)
    return model, sum(p.numel() for p in model.parameters())


def dry_run(method: str, extra: list[str], log=print, rows: list | None = None) -> int:
    """1 when a paper-tier model's size is more than 2% off the paper's, or a config does not build.
    One line per config to `log`; `rows` (when given) receives each config's numbers as a dict."""
    from common.reproduce import synthetic

    status = 0
    synthetic.install()     # offline: the Hub architectures from synthetic.HF_CONFIGS (nothing is loaded on meta)
    try:
        status = _dry_run(method, extra, log, rows)
    finally:
        synthetic.uninstall()
    return status


def _count(cfg) -> int | None:
    """Parameters of the paper-tier network: `build(cfg)` on meta, or for a method that builds
    nothing before its data, the Hub model its config names (`method.model`); None without either."""
    module = import_method(cfg.method.name)
    if hasattr(module, "build"):
        return build_on_meta(cfg)[1]
    from common.reproduce import synthetic

    hub = cfg.method.get("model") if hasattr(cfg.method, "get") else None
    if isinstance(hub, str) and hub in synthetic.HF_CONFIGS:
        import transformers

        with torch.device("meta"):
            model = transformers.AutoModelForCausalLM.from_config(synthetic.hf_config(hub))
        return sum(p.numel() for p in model.parameters())
    return None


def _dry_run(method: str, extra: list[str], log, rows) -> int:
    status = 0
    with initialize_config_dir(str(CONFIG_DIR), version_base="1.3"):
        for name in experiments(method, "paper"):
            row: dict = {"experiment": name}
            try:
                cfg = compose("train", overrides=[f"experiment={name}", *extra])
                expected = (cfg.paper or {}).get("params_m")
                count = None if getattr(import_method(cfg.method.name), "TRAINS_NO_NETWORK", False) else _count(cfg)
                if count is None:
                    row.update(params_m=None, status="no network to count")
                    line = f"{name}: no network to count (it trains none, or builds it only from its data)"
                else:
                    row["params_m"] = round(count / 1e6, 3)
                    line = f"{name}: {count / 1e6:.2f} M parameters"
                    if expected:
                        ok = abs(count / 1e6 - expected) <= PARAMS_RTOL * expected
                        row.update(paper_params_m=expected, status="ok" if ok else "MISMATCH")
                        line += f" (paper {expected} M: {row['status']})"
                        status |= not ok
                    else:
                        row["status"] = "no paper count"
            except Exception as err:  # a dry run reports every config, whatever one of them does
                row.update(status="ERROR", error=f"{type(err).__name__}: {err}"[:400])
                line = f"{name}: ERROR {row['error']}"
                status = 1
            log(line)
            if rows is not None:
                rows.append(row)
    return status


def smoke_settings(path: Path = SMOKE_SETTINGS) -> dict:
    """scripts/gpu_check.yaml: the synthetic data's sizes (`synthetic`; per method on the CPU:
    `cpu_synthetic`) and the overrides every smoke (`all`), each experiment (`experiments`: fnmatch
    patterns) and the CPU's reduced mode (`cpu`) add."""
    data = yaml.safe_load(path.read_text()) if path.exists() else {}
    return {"synthetic": data.get("synthetic") or {}, "all": data.get("all") or [],
            "experiments": data.get("experiments") or {}, "cpu": data.get("cpu") or {},
            "cpu_synthetic": data.get("cpu_synthetic") or {}}


def synthetic_sizes(method: str, cpu: bool, settings: dict) -> dict:
    """The stand-ins' sizes for `method`'s smoke: `synthetic`, and on the CPU `cpu_synthetic[method]`
    over it (ImageNet's 10,000 test images at 224 are 1.5 GB and an hour of CPU scoring)."""
    sizes = dict(settings["synthetic"])
    if cpu:
        sizes.update(settings["cpu_synthetic"].get(method) or {})
    return sizes


@contextlib.contextmanager
def _scratch_cache():
    """ICLR24_CACHE pointed at a scratch folder for the smoke, then restored: a stage cache's key is
    the stage's settings (METR's base: init_from and the stream's config), not the data behind them,
    so a smoke's random-init base on synthetic images would otherwise sit under the key of the real
    run, which would load it."""
    with tempfile.TemporaryDirectory(prefix="gpu_smoke_cache_") as tmp, mock.patch.dict(os.environ, ICLR24_CACHE=tmp):
        yield


def _matching(table: dict, name: str) -> list[str]:
    return [o for pattern, overrides in table.items() if fnmatch.fnmatch(name, pattern) for o in overrides]


def smoke_overrides(name: str, steps: int, cpu: bool, settings: dict | None = None) -> list[str]:
    """The experiment's overrides for a smoke; the generic ones (`trainer.max_steps`, `trainer.progress`
    and the `*` patterns) only where the composed config has the key (a method's own loop may not)."""
    from omegaconf import OmegaConf

    settings = settings or smoke_settings()
    hardware = ["hardware=cpu"] if cpu else ["hardware=cuda"]
    base = compose("train", overrides=[f"experiment={name}", *hardware])
    soft = [f"trainer.max_steps={steps}", "trainer.progress=false", *settings["experiments"].get("*", []),
            *(settings["cpu"].get("*", []) if cpu else [])]
    soft = [o for o in soft if OmegaConf.select(base, o.split("=", 1)[0].lstrip("+")) is not None]
    specific = {k: v for k, v in settings["experiments"].items() if k != "*"}
    specific_cpu = {k: v for k, v in settings["cpu"].items() if k != "*"} if cpu else {}
    return [f"experiment={name}", *hardware, "hardware.compile=false", f"run_name=gpu_smoke/{name}",
            *settings["all"], *soft, *_matching(specific, name), *_matching(specific_cpu, name)]


class StepTimer:
    """Times `common.trainer.Trainer.train_step` (synchronised on CUDA) and stops every fit after
    `steps` steps (`trainer.should_stop`), also a method's own stages with their own budgets."""

    def __init__(self, steps: int):
        self.steps, self.times, self._saved = steps, [], None

    def install(self) -> "StepTimer":
        from common.trainer import Trainer

        real, timer = Trainer.train_step, self
        self._saved = real

        def train_step(trainer, batch):
            sync = torch.cuda.synchronize if torch.cuda.is_available() else (lambda: None)
            sync()
            t0 = time.perf_counter()
            out = real(trainer, batch)
            sync()
            timer.times.append(time.perf_counter() - t0)
            trainer._smoke_steps = getattr(trainer, "_smoke_steps", 0) + 1
            if trainer._smoke_steps >= timer.steps:
                trainer.should_stop = True
            return out
        Trainer.train_step = train_step
        return self

    def uninstall(self) -> None:
        if self._saved is not None:
            from common.trainer import Trainer
            Trainer.train_step = self._saved
            self._saved = None

    def summary(self) -> dict:
        t = self.times
        return {"steps_timed": len(t), "first_step_s": round(t[0], 4) if t else None,
                "step_s": round(statistics.median(t[1:] if len(t) > 1 else t), 4) if t else None}


def _peak_memory(cpu: bool) -> dict:
    if not cpu and torch.cuda.is_available():
        return {"peak_gb": round(torch.cuda.max_memory_allocated() / 2**30, 3),
                "reserved_gb": round(torch.cuda.max_memory_reserved() / 2**30, 3)}
    return {"peak_rss_gb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20, 3)}


def _write(path: Path, method: str, rows: dict) -> None:
    data = json.loads(path.read_text()) if path.exists() else {}
    data.setdefault("method", method)
    data.setdefault("configs", {}).update(rows)
    data["device"] = torch.cuda.get_device_name() if torch.cuda.is_available() else "cpu"
    data["torch"] = torch.__version__
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=1) + "\n")


class SmokeTimeout(Exception):
    pass


@contextlib.contextmanager
def _deadline(seconds: float | None):
    """SmokeTimeout after `seconds` (SIGALRM; the main thread only), so that one slow config leaves
    the process, and the next configs, running."""
    if not seconds:
        yield
        return

    def alarm(signum, frame):
        raise SmokeTimeout(f"cut at its time limit of {seconds:.0f} s")
    old = signal.signal(signal.SIGALRM, alarm)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


def gpu_smoke(method: str, steps: int, extra: list[str], log=print, only: list[str] | None = None,
              cpu: bool = False, results: Path = RESULTS, seconds: float | None = None) -> int:
    """`steps` steps of each paper config of `method` (those in `only`, when given), each cut after
    `seconds`; 1 when one fails."""
    if not cpu and not torch.cuda.is_available():
        log("--gpu-smoke needs CUDA; none here, nothing to do (--cpu runs it on the CPU)")
        return 0
    from common.reproduce import synthetic

    settings = smoke_settings()
    names = experiments(method, "paper")
    if only:
        unknown = sorted(set(only) - set(names))
        if unknown:
            raise UserError(f"--only names {unknown}, not paper configs of {method}: {names}", exit_code=2)
        names = [n for n in names if n in only]
    out = results / f"gpu_{method}.json"
    status = 0
    synthetic.install(shrink=cpu, **synthetic_sizes(method, cpu, settings))
    timer = StepTimer(steps).install()
    try:
        with _scratch_cache(), initialize_config_dir(str(CONFIG_DIR), version_base="1.3"):
            for name in names:
                _write(out, method, {name: {"status": "running (the process died or was cut if this stays)",
                                            "started_at": time.time()}})
                timer.times, overrides = [], []
                synthetic.STATE["used"].clear()
                if torch.cuda.is_available():
                    torch.cuda.reset_peak_memory_stats()
                start = time.perf_counter()
                try:
                    with _deadline(seconds):
                        overrides = smoke_overrides(name, steps, cpu, settings) + list(extra)
                        cfg = compose("train", overrides=overrides)
                        synthetic.configure(cfg)
                        metrics, ok = run_method(cfg), True
                except BaseException as err:  # a smoke reports every config, whatever one of them does
                    if isinstance(err, KeyboardInterrupt):
                        raise
                    metrics, ok = {"error": f"{type(err).__name__}: {err}"[:600]}, False
                gc.collect()
                if torch.cuda.is_available():
                    torch.cuda.empty_cache()
                status |= not ok
                row = {"status": "ok" if ok else "error", "started_at": time.time() - (time.perf_counter() - start),
                       "seconds": round(time.perf_counter() - start, 2),
                       **timer.summary(), **_peak_memory(cpu), "synthetic": synthetic.used(),
                       "metrics": metrics, "overrides": overrides}
                _write(out, method, {name: row})
                log(json.dumps({"experiment": name, **{k: v for k, v in row.items() if k != "overrides"}}))
    finally:
        timer.uninstall()
        synthetic.uninstall()
    return status
