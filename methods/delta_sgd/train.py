"""One run per seed: every row (a client optimiser) on every task by FedAvg through
`common.tasks.federated`, then the regret of each row against the best row on each task.
Metrics `<row>/acc_<task>`, `<row>/regret_<task>`, `<row>/max_regret`, `<row>/mean_regret` and,
for the step-size rows, `<row>/lr_<task>` (the median local step size over all clients, rounds
and steps)."""
from __future__ import annotations

import math

import numpy as np
import torch
import torch.nn.functional as F
from hydra.utils import instantiate
from omegaconf import OmegaConf

from common.config import UserError
from common.federated import client_batches, client_seed
from common.tasks.federated import federated
from methods.delta_sgd.baselines import dog_local, sps_local
from methods.delta_sgd.config import Row, Task, as_spec
from methods.delta_sgd.data import SOURCES, make_task
from methods.delta_sgd.rule import delta_sgd_local, growth_local, log_uniform, regret

EVAL_BATCH = 2000
KINDS = ("sgd", "adam", "adagrad", "dsgd", "growth", "randlr", "sps", "dog")


def check_rows(rows: dict) -> None:
    for name, spec in rows.items():
        if "/" in name or not name.isidentifier():
            raise UserError(f"method.rows: {name!r} must be an identifier (a claim names it)", exit_code=2)
        if spec.get("kind") not in KINDS:
            raise UserError(f"method.rows.{name}.kind must be one of {', '.join(KINDS)}, got {spec.get('kind')!r}",
                            exit_code=2)


def pick(catalogue, names, what: str) -> dict:
    """The entries of `method.<what>` named by `method.run_<what>`, in that order, each checked
    through its dataclass (`config.Row` for rows, `config.Task` for tasks) and returned as a dict."""
    catalogue = OmegaConf.to_container(catalogue, resolve=True)
    missing = [n for n in names if n not in catalogue]
    if missing:
        raise UserError(f"method.run_{what} names {missing}, not in method.{what} ({', '.join(catalogue)})",
                        exit_code=2)
    cls = {"rows": Row, "tasks": Task}.get(what)
    out = {}
    for n in names:
        if cls is None:
            out[n] = catalogue[n]
            continue
        try:
            out[n] = as_spec(cls, catalogue[n], f"method.{what}.{n}")
        except ValueError as err:
            raise UserError(f"method.{what}.{n}: {err}", exit_code=2) from None
    return out


def finite(model: torch.nn.Module) -> bool:
    return all(bool(torch.isfinite(p).all()) for p in model.parameters())


def sgd_step_size(spec: dict, r: int, rounds: int) -> float:
    """`lr`; with `decay`, divided by 10 from 0-based round int(rounds / 2) + 1 on and by 100 from
    int(3 rounds / 4) + 1 on (official main.py: `args.lr /= 10` when epoch - 1 == int(0.5 E), int(0.75 E))."""
    lr = float(spec["lr"])
    if spec.get("decay", False):
        lr /= 10 ** ((r >= int(0.5 * rounds) + 1) + (r >= int(0.75 * rounds) + 1))
    return lr


def make_local_update(spec: dict, task: dict, fed, seed: int, trace: list):
    """The `local_update(client, round, copies)` of one row on one task. A client whose starting
    model is not finite (the row diverged) does not train. `trace` gets (round, step sizes) per pass."""
    x, y, parts = task["x"], task["y"], task["parts"]
    kind = spec["kind"]

    def local_update(k: int, r: int, copies: dict) -> dict:
        net = copies["model"]
        if not finite(net):
            return {}
        part = parts[k]
        batches = [part[i] for i in client_batches(len(part), int(fed.local_batch_size), int(fed.local_epochs),
                                                   client_seed(seed, r, k))]
        losses: list[float] = []

        def loss_fn(model, idx):
            loss = F.cross_entropy(model(x[idx]), y[idx])
            if model is net:
                losses.append(float(loss.detach()))
            return loss

        if kind == "dsgd":
            steps = delta_sgd_local(net, batches, loss_fn, lr=spec["lr"], amplifier=spec["amplifier"],
                                    damping=spec["damping"], eps=spec["eps"], weight_decay=spec["weight_decay"])
        elif kind == "growth":
            steps = growth_local(net, batches, loss_fn, lr=spec["lr"], amplifier=spec["amplifier"])
        elif kind == "sps":
            steps = sps_local(net, batches, loss_fn, c=spec["c"], eps=spec["eps"])
        elif kind == "dog":
            steps = dog_local(net, batches, loss_fn, reps_rel=spec["reps_rel"], eps=spec["eps"])
        else:
            if kind == "randlr":   # one log-uniform step per client and round, from its own generator
                lr = log_uniform(np.random.default_rng([seed, r, k, 7]), spec["low"], spec["high"])
                opt = torch.optim.SGD(net.parameters(), lr=lr)
            elif kind == "sgd":
                lr = sgd_step_size(spec, r, int(fed.rounds))
                opt = torch.optim.SGD(net.parameters(), lr=lr, momentum=float(spec.get("momentum", 0.0)))
            elif kind == "adagrad":
                lr = float("nan")
                opt = torch.optim.Adagrad(net.parameters(), lr=float(spec["lr"]))
            else:
                lr = float("nan")
                opt = torch.optim.Adam(net.parameters(), lr=float(spec["lr"]))
            for idx in batches:
                opt.zero_grad()
                loss_fn(net, idx).backward()
                opt.step()
            steps = [lr] * len(batches)
        trace.append((r, list(steps)))
        out = {"loss": float(np.mean(losses))} if losses else {}
        if steps and math.isfinite(steps[0]):
            out["lr"] = float(np.mean(steps))
        return out

    return local_update


def make_evaluate(task: dict, curve: list | None = None):
    """Accuracy (points) on the evaluation rows; a model or logits not finite: chance and
    `diverged`. `curve` gets (round, acc) per call."""
    chance = 100.0 / task["num_classes"]

    def score(net) -> dict:
        if not finite(net):
            return {"acc": chance, "diverged": 1.0}
        correct = 0
        for x, y in zip(task["x_eval"].split(EVAL_BATCH), task["y_eval"].split(EVAL_BATCH)):
            logits = net(x)
            if not bool(torch.isfinite(logits).all()):
                return {"acc": chance, "diverged": 1.0}
            correct += int((logits.argmax(1) == y).sum())
        return {"acc": 100.0 * correct / len(task["y_eval"]), "diverged": 0.0}

    def evaluate(models: dict, r: int) -> dict:
        out = score(models["model"])
        if curve is not None:
            curve.append((int(r), out["acc"]))
        return out

    return evaluate


def run_all(cfg, ctx) -> dict[str, float]:
    m = cfg.method
    rows, tasks = pick(m.rows, m.run_rows, "rows"), pick(m.tasks, m.run_tasks, "tasks")
    check_rows(rows)
    if not rows or not tasks:
        raise UserError("method.rows and method.tasks must not be empty", exit_code=2)
    fed = m.federated
    acc: dict[str, dict[str, float]] = {r: {} for r in rows}
    out: dict[str, float] = {}
    curves: dict[str, dict[str, list]] = {t: {} for t in tasks}
    traces: dict[str, dict[str, list]] = {t: {} for t in tasks}
    for tname, t in tasks.items():
        if t["source"] not in SOURCES:
            raise UserError(f"method.tasks.{tname}.source must be one of {', '.join(SOURCES)}", exit_code=2)
        task = make_task(t["source"], float(t["alpha"]), int(t["pool"]), int(t["eval_size"]), int(fed.num_clients),
                         int(fed.min_size), ctx.seed, cfg.dataset.root, bool(cfg.dataset.download), str(m.eval_split),
                         t.get("per_client"))
        task = {k: v.to(ctx.device) if isinstance(v, torch.Tensor) else v for k, v in task.items()}
        sizes = [len(p) for p in task["parts"]]
        ctx.log({f"{tname}/client_sizes": sizes}, 0)
        for rname, spec in rows.items():
            torch.manual_seed(ctx.seed)            # the same initial weights for every row of a task
            model = instantiate(m.models[t["model"]]).to(ctx.device)
            trace: list = []
            curve = curves[tname].setdefault(rname, [])
            final = federated(ctx, {"model": model}, sizes, make_local_update(spec, task, fed, ctx.seed, trace),
                              make_evaluate(task, curve), fed, stage=f"{tname}_{rname}")
            traces[tname][rname] = trace
            acc[rname][tname] = float(final["acc"])
            out[f"{rname}/acc_{tname}"] = float(final["acc"])
            out[f"{rname}/diverged_{tname}"] = float(final["diverged"])
            steps = [s for _, pass_steps in trace for s in pass_steps]
            if spec["kind"] in ("dsgd", "growth", "randlr", "sps", "dog") and steps:
                out[f"{rname}/lr_{tname}"] = float(np.median(steps))
    reference = [r for r, spec in rows.items() if not spec["control"]] or list(rows)
    for rname, reg in regret(acc, reference).items():
        out.update({f"{rname}/{k}": v for k, v in reg.items()})
    if ctx.hw.is_main:
        from methods.delta_sgd.plots import curves_plot, steps_plot

        curves_plot(curves, ctx.run_dir / "acc_curves.png", f"seed {ctx.seed}")
        steps_plot(traces, rows, ctx.run_dir / "step_sizes.png", f"seed {ctx.seed}")
    return out
