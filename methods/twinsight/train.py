"""The rows of the tables, each a FedAvg run through `common.tasks.federated` (one stage per
row, same seed, same initial supervised weights, same client sampling):
  twinsight     both twins; CE + insdis NT-Xent + sim L_np on labeled clients, NT-Xent + L_np on unlabeled
  frozen_twin   the unsupervised twin frozen at its random init, insdis = 0 (control)
  no_np         sim = 0: the twins never interact (control)
  single        one encoder with classifier and projector, CE + insdis NT-Xent (control)
  labeled_only  FedAvg with CE on the M labeled clients only (the paper's lower bound)
  fixmatch      one model: CE on labeled clients, fixmatch_weight FixMatch on unlabeled ones
  upper         every client labeled (the ceiling)
  majority      no training: every image gets the most frequent label of the labeled clients
                (a fully collapsed model; what one-class prediction scores)
The evaluated model is the global supervised twin (or the single model)."""
from __future__ import annotations

import math
import time

import numpy as np
import torch
import torch.nn.functional as F
from hydra.utils import instantiate
from torch import nn

from common.federated.curves import rounds_to_target
from common.federated.sampling import client_batches, client_seed
from common.ssl import apply, sample_params
from common.tasks.federated import federated
from methods.twinsight.data import FewLabelClients
from methods.twinsight.diagnostics import effective_rank, mean_cosine, pred_histogram
from methods.twinsight.loss import client_loss, fixmatch_loss, single_loss

ROWS = ("twinsight", "frozen_twin", "no_np", "single", "labeled_only", "fixmatch", "upper", "majority")


class Single(nn.Module):
    """One model: encoder + classifier + projector (the `single` row)."""

    def __init__(self, encoder: nn.Module, head: nn.Module, projector: nn.Module):
        super().__init__()
        self.encoder, self.head, self.projector = encoder, head, projector


def features_and_logits(models: dict, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The evaluated model's encoder features and logits: the supervised twin, or the single model."""
    if "sup" in models:
        return models["sup"](x)
    m = models["model"]
    h = m.encoder(x)
    return h, m.head(h)


def majority_row(d: FewLabelClients, eval_y: torch.Tensor, num_classes: int, target: float,
                 rounds: int) -> dict[str, float]:
    """The `majority` row: the most frequent label on the labeled clients, predicted for every
    evaluation image (ties to the lowest class). Its features are constant: feat_cos 1, feat_rank 0;
    its accuracy is the same every round (rounds_to_target 1 if it reaches `target`, else rounds + 1)."""
    seen = d.labels[torch.cat([d.clients[k] for k in d.labeled])]
    top = int(torch.bincount(seen, minlength=num_classes).argmax())
    acc = 100.0 * float((eval_y == top).float().mean())
    return {"acc": acc, "acc_mean": acc, "top_share": 100.0, "feat_cos": 1.0, "feat_rank": 0.0,
            "rounds_to_target": censored_rounds_to_target([1], [acc], target, rounds)}


def row_models(row: str, twin) -> dict[str, nn.Module]:
    """The named models FedAvg averages for `row`, from one freshly built TwinModel."""
    if row in ("twinsight", "frozen_twin", "no_np"):
        if row == "frozen_twin":
            for p in twin.unsup.parameters():
                p.requires_grad_(False)
        return {"sup": twin.sup, "unsup": twin.unsup}
    if row == "single":
        return {"model": Single(twin.sup.encoder, twin.sup.head, twin.unsup.projector)}
    return {"sup": twin.sup}


def make_step(row: str, loss_cfg: dict, fixmatch_weight: float):
    """(models, x_weak, x_strong, labels or None) -> (loss, logs) for one batch of `row`."""
    def step(models, xw, xs, y):
        b = xw.shape[0]
        if row in ("twinsight", "frozen_twin", "no_np"):
            kw = dict(loss_cfg)
            if row == "no_np":
                kw["sim"] = 0.0
            h_s, logits = models["sup"](torch.cat([xw, xs]))
            if row == "frozen_twin":
                kw["insdis"] = 0.0
                with torch.no_grad():
                    h_u, z = models["unsup"](torch.cat([xw, xs]))
            else:
                h_u, z = models["unsup"](torch.cat([xw, xs]))
            return client_loss(h_s[:b], logits[:b], logits[b:], h_u[:b], z[:b], z[b:], labels=y, **kw)
        if row == "single":
            m = models["model"]
            h = m.encoder(torch.cat([xw, xs]))
            z = m.projector(h)
            return single_loss(m.head(h[:b]), z[:b], z[b:], labels=y, insdis=loss_cfg["insdis"],
                               temperature=loss_cfg["temperature"])
        if y is not None:
            loss = F.cross_entropy(models["sup"](xw)[1], y)
            return loss, {"loss": float(loss.detach()), "ce": float(loss.detach())}
        logits = models["sup"](torch.cat([xw, xs]))[1]
        fm, rate = fixmatch_loss(logits[:b], logits[b:], loss_cfg["threshold"])
        loss = fixmatch_weight * fm
        return loss, {"loss": float(loss.detach()), "fixmatch": float(fm.detach()), "mask_rate": float(rate)}
    return step


def censored_rounds_to_target(rounds: list[int], accs: list[float], target: float, total_rounds: int) -> float:
    """`common.federated.curves.rounds_to_target`, with a curve that never reaches `target` in
    `total_rounds` rounds scored `total_rounds + 1` (censored: a lower bound on the true number, and
    a finite value the claims' paired statistics can use)."""
    first = rounds_to_target(rounds, accs, target)
    return float(total_rounds + 1) if math.isinf(first) else first


def run_row(ctx, m, row: str, d: FewLabelClients, weak, strong, eval_x, eval_y, log) -> dict[str, float]:
    """FedAvg of `row` for `m.federated.rounds` rounds; returns acc (%, after the last round),
    acc_mean (the mean over the rounds' evaluations) and rounds_to_target (the first evaluated round
    whose accuracy reaches `m.target_acc`, rounds + 1 when none does)."""
    fed = m.federated
    num_classes = int(m.model.num_classes)
    if row == "majority":
        return majority_row(d, eval_y, num_classes, float(m.target_acc), int(fed.rounds))
    clip = float(m.clip_grad)
    torch.manual_seed(ctx.seed)
    twin = instantiate(m.model, encoder_sup=instantiate(m.encoder), encoder_unsup=instantiate(m.encoder))
    models = row_models(row, twin)
    loss_cfg = {k: v for k, v in dict(m.loss).items()}
    step = make_step(row, loss_cfg, float(m.fixmatch_weight))
    members = list(d.labeled) if row == "labeled_only" else list(range(len(d.clients)))
    labeled = set(range(len(d.clients))) if row == "upper" else set(d.labeled)
    make_optimizer = instantiate(m.local_optimizer)

    def local_update(k: int, r: int, copies: dict) -> dict:
        client = members[k]
        idx_all = d.clients[client]
        params = [p for net in copies.values() for p in net.parameters() if p.requires_grad]
        opt = make_optimizer(params)
        rows = []
        for idx in client_batches(len(idx_all), fed.local_batch_size, fed.local_epochs,
                                  client_seed(ctx.seed, r, client)):
            if len(idx) < 2:   # NT-Xent and L_np need two images
                continue
            x = d.images[idx_all[idx]]
            xw, xs = apply(x, sample_params(len(x), weak)), apply(x, sample_params(len(x), strong))
            y = d.labels[idx_all[idx]] if client in labeled else None
            loss, logs = step(copies, xw, xs, y)
            opt.zero_grad()
            loss.backward()
            if clip > 0:
                torch.nn.utils.clip_grad_norm_(params, clip)
            opt.step()
            rows.append(logs)
        keys = set().union(*rows) if rows else set()
        return {key: float(np.mean([r_[key] for r_ in rows if key in r_])) for key in keys}

    accs: list[float] = []
    evaluated: list[int] = []

    def evaluate(ms: dict, r: int) -> dict:
        outs = [features_and_logits(ms, x) for x in eval_x.split(500)]
        feat, pred = torch.cat([h for h, _ in outs]), torch.cat([lg.argmax(1) for _, lg in outs])
        acc = 100.0 * float((pred == eval_y).float().mean())
        accs.append(acc)
        evaluated.append(r + 1)
        hist = pred_histogram(pred, num_classes)
        return {"acc": acc, "top_share": float(hist.max()), "feat_cos": mean_cosine(feat[:500]),
                "feat_rank": effective_rank(feat)}

    start = time.process_time()
    final = federated(ctx, models, [len(d.clients[c]) for c in members], local_update, evaluate, fed, stage=row,
                      clients_per_round=min(int(fed.clients_per_round), len(members)))
    log({f"{row}/cpu_s_per_round": (time.process_time() - start) / max(1, int(fed.rounds))}, int(fed.rounds))
    return {"acc": final["acc"], "acc_mean": float(np.mean(accs)) if accs else final["acc"],
            "rounds_to_target": censored_rounds_to_target(evaluated, accs, float(m.target_acc), int(fed.rounds)),
            **{k: final[k] for k in ("top_share", "feat_cos", "feat_rank")}}
