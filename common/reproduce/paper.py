"""Paper-tier checks that cost no GPU time, and a short GPU smoke of every paper config.

--dry-run   builds each paper-tier model at full size on the meta device (`methods.<m>.build(cfg)`:
            the model from the config alone) and compares its parameter count with the paper's
            (`paper.params_m`, millions), so a config error never costs GPU time.
--gpu-smoke N steps of each paper config on CUDA (synthetic inputs where `dataset.synthetic`
            exists and the data is absent), one JSON line per config."""
from __future__ import annotations

import json
import time

import torch
from hydra import compose, initialize_config_dir

from common.config import CONFIG_DIR, UserError
from common.reproduce.tables import experiments
from common.runner import import_method, run_method

PARAMS_RTOL = 0.02


def build_on_meta(cfg) -> tuple[torch.nn.Module, int]:
    module = import_method(cfg.method.name)
    if not hasattr(module, "build"):
        raise UserError(f"methods.{cfg.method.name} has no build(cfg): it cannot be built without data", exit_code=2)
    with torch.device("meta"):
        model = module.build(cfg)
    return model, sum(p.numel() for p in model.parameters())


def dry_run(method: str, extra: list[str], log=print) -> int:
    """1 when a paper-tier model's size is more than 2% off the paper's."""
    status = 0
    with initialize_config_dir(str(CONFIG_DIR), version_base="1.3"):
        for name in experiments(method, "paper"):
            cfg = compose("train", overrides=[f"experiment={name}", *extra])
            if getattr(import_method(cfg.method.name), "TRAINS_NO_NETWORK", False):
                log(f"{name}: trains no network (its build returns the synthetic task): no parameters to count")
                continue
            _, count = build_on_meta(cfg)
            expected = (cfg.paper or {}).get("params_m")
            line = f"{name}: {count / 1e6:.2f} M parameters"
            if expected:
                ok = abs(count / 1e6 - expected) <= PARAMS_RTOL * expected
                line += f" (paper {expected} M: {'ok' if ok else 'MISMATCH'})"
                status |= not ok
            log(line)
    return status


def gpu_smoke(method: str, steps: int, extra: list[str], log=print) -> int:
    if not torch.cuda.is_available():
        log("--gpu-smoke needs CUDA; none here, nothing to do")
        return 0
    status = 0
    with initialize_config_dir(str(CONFIG_DIR), version_base="1.3"):
        for name in experiments(method, "paper"):
            base = compose("train", overrides=[f"experiment={name}"])
            synthetic = ["dataset.synthetic=true"] if "synthetic" in base.dataset else []
            cfg = compose("train", overrides=[f"experiment={name}", "hardware=cuda", f"trainer.max_steps={steps}",
                                              "trainer.progress=false", *synthetic, f"run_name=gpu_smoke/{name}",
                                              *extra])
            start = time.perf_counter()
            try:
                metrics, ok = run_method(cfg), True
            except Exception as err:  # a smoke reports every config, whatever one of them does
                metrics, ok = {"error": f"{type(err).__name__}: {err}"[:500]}, False
            status |= not ok
            log(json.dumps({"experiment": name, "ok": ok, "seconds": round(time.perf_counter() - start, 1),
                            "peak_gb": round(torch.cuda.max_memory_allocated() / 2**30, 2), **metrics}))
            torch.cuda.reset_peak_memory_stats()
    return status
