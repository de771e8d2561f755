"""METR: multi-exit training makes early [CLS] attention a reliable score for EViT token reduction
(Liu, Kan, Shan, Chen; ICLR 2024). See README.md.

run(): a ViT pre-trained without exits (a stage, cached when `method.pretrain.seed` fixes one base
for all seeds) is fine-tuned twice on the same batches and with the same keep rate per step
(`method.train_keep`, a KeepSchedule; official METR reduces from step 0, 1 = no reduction):
`evit` (cross-entropy only, the budget-matched control) and `metr` (with the exits' losses);
each, and the base, is scored at every rate of `method.eval_keep_rates` at the drop blocks with
[CLS]-attention ranks and with random ranks. Metrics `<row>/acc_k<100 rho>` for the rows base,
evit, evit_random, metr, metr_random, and `metr/exit_acc_b<block>` (rho = 1).

Paper tier (ImageNet-1k): `method.train_stream` names an IterableDataset of (uint8 image, label)
(common.data.imagenet_stream.ImageNetTrainStream: the training archive read as a stream), built
with this rank's `rank`, `world_size` and the stage's `seed`; the test split is the registry's
(ImageNet's validation archive, decoded when indexed, in `method.loader.workers` processes)."""
from __future__ import annotations

import torch
from hydra.utils import instantiate
from omegaconf import OmegaConf
from torch import nn

from common import data, tasks
from common.config import UserError
from methods.metr.canvas import place_on_canvas, random_offsets, step_generator
from methods.metr.loss import KeepSchedule, keep_rate_schedule, metr_loss, multi_exit_loss, self_distillation_loss
from methods.metr.model import METRViT, exit_head

ROWS = ("base", "evit", "metr")


def build(cfg) -> METRViT:
    """The network from the config alone: `method.model` on the canvas (or the dataset's images)."""
    ds, canvas = cfg.dataset, cfg.method.canvas
    size = ds.img_size if canvas is None else int(canvas.size)
    return instantiate(cfg.method.model, img_size=size, in_chans=ds.in_chans, num_classes=ds.num_classes)


class Learner(nn.Module):
    """One training stage of a METRViT: batches (images, labels, keep rate) -> metr_loss with the
    stage's weights (0, 0: plain cross-entropy, EViT's fine-tuning and the pre-training)."""

    def __init__(self, model: METRViT, me_weight: float, sd_weight: float, tau: float):
        super().__init__()
        self.model, self.me_weight, self.sd_weight, self.tau = model, float(me_weight), float(sd_weight), float(tau)
        metr_loss(torch.zeros(1, 2), [], torch.zeros(1, dtype=torch.long), self.me_weight, self.sd_weight, self.tau)

    def training_step(self, batch):
        images, labels, keep_rate = batch
        logits, exits = self.model(images, keep_rate=keep_rate)
        loss = metr_loss(logits, exits, labels, self.me_weight, self.sd_weight, self.tau)
        logs = {"keep_rate": float(keep_rate)}
        if self.me_weight or self.sd_weight:
            with torch.no_grad():
                logs["exit_ce"] = float(multi_exit_loss(exits, labels))
                logs["exit_kd"] = float(self_distillation_loss(exits, logits, self.tau))
        return loss, logs


def _splits(cfg):
    """(training images, labels), (scored images on their fixed canvas, labels). The last
    `method.val_size` training images never train; `method.eval_on: val` scores them (tuning),
    `test` scores the test split. With `method.train_stream` the training split is not loaded
    (None: the stream is built per stage) and the test split is scored whole, as the registry
    gives it."""
    if cfg.method.get("train_stream") is not None:
        ds, m = cfg.dataset, cfg.method
        if ds.test_size is not None or m.canvas is not None or int(m.val_size) or m.eval_on != "test":
            raise UserError("method.train_stream scores the whole test split as it is: it needs dataset.test_size "
                            f"null, method.canvas null, method.val_size 0 and method.eval_on test; got "
                            f"{ds.test_size}, {m.canvas}, {m.val_size}, {m.eval_on}", exit_code=2)
        return None, data.load(ds.name, "test", ds.root, ds.download)
    s = data.image_splits(cfg.dataset)
    (x, y), (xt, yt) = s["train"], s["test"]
    val, where = int(cfg.method.val_size), cfg.method.eval_on
    if where not in ("val", "test"):
        raise UserError(f"method.eval_on must be 'val' or 'test', got '{where}'", exit_code=2)
    if not 0 <= val < len(y) or (where == "val" and val == 0):
        raise UserError(f"method.val_size must be in [0, {len(y)}) (> 0 with eval_on=val), got {val}", exit_code=2)
    if val:
        (x, y), held = (x[:-val], y[:-val]), (x[-val:], y[-val:])
        if where == "val":
            xt, yt = held
    canvas = cfg.method.canvas
    if canvas is not None:
        g = torch.Generator().manual_seed(int(canvas.test_seed))
        xt = place_on_canvas(xt, random_offsets(len(xt), xt.shape[-1], int(canvas.size), g), int(canvas.size))
    return (x, y), (xt, yt)


def _batches(cfg, train, seed: int, sampler, keep: KeepSchedule | None):
    """batches(step): the sampler's images, placed at offsets drawn from (seed, step), the labels,
    and the step's keep rate (`keep(step)`, EViT's schedule; rate 1 throughout when `keep` is None)."""
    (x, y), canvas = train, cfg.method.canvas

    def batch(step: int):
        idx = sampler(step)
        images = x[idx]
        if canvas is not None:
            g = step_generator(seed, step)
            images = place_on_canvas(images, random_offsets(len(idx), images.shape[-1], int(canvas.size), g),
                                     int(canvas.size))
        rate = 1.0 if keep is None else keep(step)
        return images, y[idx], rate
    return batch


class _Indexed(torch.utils.data.Dataset):
    """(images[i], labels[i]) of images decoded when indexed (common.data.imagenet.ArchiveImages)."""

    def __init__(self, images, labels):
        self.images, self.labels = images, labels

    def __len__(self) -> int:
        return len(self.labels)

    def __getitem__(self, i):
        return self.images[i], self.labels[i]


def stream_batches(stream, batch_size: int, workers: int, keep: KeepSchedule | None):
    """batches(step) from an IterableDataset of (image, label) (the paper tier's training archive):
    the next `batch_size` of the stream, a new pass (its `set_epoch`, when it has one) when one
    ends, and the step's keep rate. Not a pure function of the step: a resumed run sees other
    images than an uninterrupted one."""
    loader = torch.utils.data.DataLoader(stream, batch_size=int(batch_size), num_workers=int(workers),
                                         drop_last=True, pin_memory=torch.cuda.is_available())
    state = {"epoch": 0, "it": None}

    def batch(step: int):
        for _ in range(2):
            if state["it"] is None:
                if hasattr(stream, "set_epoch"):
                    stream.set_epoch(state["epoch"])
                state["it"] = iter(loader)
            try:
                images, labels = next(state["it"])
                return images, labels, 1.0 if keep is None else keep(step)
            except StopIteration:
                state["it"], state["epoch"] = None, state["epoch"] + 1
        raise ValueError(f"the training stream gave no batch of {batch_size} in a whole pass")
    return batch


def _train_batches(cfg, ctx, train, seed: int, sampler_seed: int | None, keep: KeepSchedule | None):
    """The stage's batches(step): from the training tensors (`_batches`, the sampler seeded
    `sampler_seed`, the run seed's when None), or from `method.train_stream` (seeded `seed`)."""
    m = cfg.method
    if train is not None:
        sampler = ctx.sampler(len(train[1])) if sampler_seed is None else ctx.sampler(len(train[1]), seed=sampler_seed)
        return _batches(cfg, train, seed, sampler, keep)
    world = int(ctx.hw.world_size)
    stream = instantiate(m.train_stream, rank=int(ctx.hw.rank), world_size=world, seed=int(seed))
    return stream_batches(stream, int(cfg.trainer.batch_size) // world, int(m.loader.workers), keep)


def _test_batches(test, batch_size: int, workers: int):
    """(images, labels) in order: slices of a tensor, or, for images decoded when indexed, a
    DataLoader over them in `workers` processes."""
    x, y = test
    if torch.is_tensor(x):
        for i in range(0, len(y), batch_size):
            yield x[i:i + batch_size], y[i:i + batch_size]
    else:
        yield from torch.utils.data.DataLoader(_Indexed(x, y), batch_size=batch_size, num_workers=int(workers))


@torch.no_grad()
def score(model: METRViT, test, keep_rates, batch_size: int, device, eval_seed: int, exits: bool = False,
          selects=("cls", "random"), workers: int = 0) -> dict:
    """acc_k<100 rho> (%) with [CLS] ranks and `random/acc_k<..>` with random ranks (one generator
    seeded `eval_seed` per rate, so rows share their draws), and with `exits` each exit's accuracy.
    `workers`: decoding processes for test images decoded when indexed (ImageNet)."""
    x, y = test
    out: dict[str, float] = {}
    for rate in keep_rates:
        tag = f"acc_k{round(100 * float(rate))}"
        for select in selects:
            if select == "random" and rate == 1.0:   # nothing is dropped: the same pass as [CLS] ranks
                out[f"random/{tag}"] = out[tag]
                continue
            g = torch.Generator(device=device).manual_seed(int(eval_seed))
            right, exit_right = 0, None
            for xb, yb in _test_batches(test, batch_size, workers):
                logits, ex = model(xb.to(device), keep_rate=float(rate), select=select, generator=g)
                yb = yb.to(device)
                right += int((logits.argmax(-1) == yb).sum())
                if exits and rate == 1.0 and select == "cls":
                    hits = [int((z.argmax(-1) == yb).sum()) for z in ex]
                    exit_right = hits if exit_right is None else [a + b for a, b in zip(exit_right, hits)]
            out[tag if select == "cls" else f"random/{tag}"] = 100.0 * right / len(y)
            if exit_right is not None:
                out.update({f"exit_acc_b{b}": 100.0 * r / len(y) for b, r in zip(model.exit_blocks, exit_right)})
    return out


def _stage_cfg(trainer, spec):
    """The trainer config of the pre-training stage: the run's, with `spec`'s steps, lr, warm-up, wd."""
    t = OmegaConf.to_container(trainer, resolve=True)
    t["max_steps"] = int(spec.max_steps)
    t["optimizer"]["lr"] = float(spec.lr)
    t["optimizer"]["weight_decay"] = float(spec.weight_decay)
    t["schedule"]["warmup_steps"] = int(spec.warmup_steps)
    return OmegaConf.create(t)


def pretrain(cfg, ctx, train) -> dict[str, torch.Tensor]:
    """The base (state dict): `method.pretrain.max_steps` of cross-entropy, no exits, no reduction.
    With `method.pretrain.seed` set, one base for every run seed (init and batches from that seed),
    cached under `method.cache_dir` by a fingerprint of what makes it."""
    spec = cfg.method.pretrain
    shared = spec.seed is not None
    seed = int(spec.seed) if shared else ctx.seed
    tcfg = _stage_cfg(cfg.trainer, spec)

    def make() -> dict[str, torch.Tensor]:
        if shared:
            torch.manual_seed(seed)
        model = build(cfg)
        if cfg.method.init_from is not None:   # paper tier: a released checkpoint (DeiT), timm's weights
            import timm
            src = timm.create_model(str(cfg.method.init_from), pretrained=True, num_classes=cfg.dataset.num_classes)
            model.vit.load_state_dict(src.state_dict())
        if int(spec.max_steps) == 0:
            return {k: v.detach().cpu().clone() for k, v in model.state_dict().items()}
        learner = Learner(model, 0.0, 0.0, 1.0)
        batches = _train_batches(cfg, ctx, train, 10_000 + seed, 10_000 + seed, None)
        tasks.fit_and_evaluate(ctx, learner, batches, lambda m: {}, stage="pretrain", trainer_cfg=tcfg)
        return {k: v.detach().cpu().clone() for k, v in model.state_dict().items()}

    if not shared:
        return make()
    from common.distill.experts import cached, data_digest
    settings = {"what": "metr-base", "version": 1, "seed": seed, "model": OmegaConf.to_container(cfg.method.model),
                "canvas": None if cfg.method.canvas is None else OmegaConf.to_container(cfg.method.canvas),
                "dataset": cfg.dataset.name,
                "train_size": cfg.dataset.train_size, "trainer": OmegaConf.to_container(tcfg),
                "data": data_digest(train[0][:512], train[1]) if train is not None
                else OmegaConf.to_container(cfg.method.train_stream, resolve=True)}
    if cfg.method.init_from is not None:
        settings["init_from"] = str(cfg.method.init_from)
    return cached(settings, make, cfg.method.cache_dir)


def run(cfg, ctx) -> dict[str, float]:
    m = cfg.method
    for key in ("me_weight", "sd_weight"):
        if float(m.loss[key]) < 0:
            raise UserError(f"method.loss.{key} must be >= 0, got {m.loss[key]}", exit_code=2)
    keep = instantiate(m.train_keep)   # KeepSchedule: both fine-tunes reduce alike (ValueError on bad input)
    if cfg.dataset.name == "imagenet":   # the paper tier: registers the ImageNet-1k loader (a new module)
        import common.data.imagenet  # noqa: F401
    train, test = _splits(cfg)
    base = pretrain(cfg, ctx, train)
    rates = [float(r) for r in m.eval_keep_rates]
    bs, dev = int(cfg.eval.batch_size), ctx.device
    workers = int(m.loader.workers)

    def rows(name: str, found: dict) -> dict[str, float]:
        out = {}
        for k, v in found.items():
            if k.startswith("random/"):
                out[f"{name}_random/{k[len('random/'):]}"] = v
            else:
                out[f"{name}/{k}"] = v
        return out

    def base_scores() -> dict[str, torch.Tensor]:
        model = build(cfg).to(dev)
        model.load_state_dict(base)
        model.eval()
        return {k: torch.tensor(v) for k, v in score(model, test, rates, bs, dev, 0, selects=("cls",),
                                                      workers=workers).items()}

    if m.pretrain.seed is None:
        found = base_scores()
    else:   # one base for every seed: its scores are the same in every run, computed once
        from common.distill.experts import cached, data_digest
        tested = data_digest(*test) if torch.is_tensor(test[0]) else {"dataset": cfg.dataset.name, "labels": data_digest(test[1])}
        found = cached({"what": "metr-base-scores", "version": 1, "base": data_digest(*base.values()),
                        "test": tested, "rates": rates, "batch": bs}, base_scores, m.cache_dir)
    metrics = rows("base", {k: float(v) for k, v in found.items()})
    for name, (me, sd) in (("evit", (0.0, 0.0)), ("metr", (float(m.loss.me_weight), float(m.loss.sd_weight)))):
        model = build(cfg)
        model.load_state_dict(base)
        learner = Learner(model, me, sd, float(m.loss.tau))
        batches = _train_batches(cfg, ctx, train, ctx.seed, None, keep)
        found = tasks.fit_and_evaluate(
            ctx, learner, batches,
            lambda lr, name=name: score(lr.model, test, rates, bs, dev, int(m.eval_seed), exits=name == "metr",
                                        workers=workers),
            stage=name)
        metrics.update(rows(name, found))
    return metrics


__all__ = ["KeepSchedule", "Learner", "METRViT", "build", "exit_head", "keep_rate_schedule", "metr_loss", "multi_exit_loss",
           "place_on_canvas", "pretrain", "run", "score", "self_distillation_loss", "stream_batches"]
