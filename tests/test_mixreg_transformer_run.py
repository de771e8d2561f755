"""mixreg_transformer's run wiring: EM is fitted on exactly the prompts the transformer is
trained on (`training_prompts`, streamed and fixed-set, and the cap at what training saw), `run`
starts EM from its own stream of the run seed, and the covariate shift scores the transformer on
the scaled prompts; ranks share one process's prompts, validation and test are different streams,
and run() reports every procedure as a row."""
from types import SimpleNamespace

import numpy as np
import pytest
import torch

import methods.mixreg_transformer as mxt
from methods.mixreg_transformer import (MixtureOfRegressions, batch_em, ols_predictions, posterior_mean_predictions,
                                        stages)
from tests.test_mixreg_transformer import D, M, SIGMA, prompts

SMOKE = ["experiment=mixreg_transformer_smoke"]      # d = 4, m = 3, k = 8, batch 16, 4 steps


def fake_ctx(seed, tmp_path=None, rank=0, world_size=1):
    """What `training_prompts` and `run` read from a RunContext."""
    hw = SimpleNamespace(rank=rank, world_size=world_size, is_main=rank == 0, device=torch.device("cpu"))
    return SimpleNamespace(seed=seed, hw=hw, device=hw.device, run_dir=tmp_path, resume=False)


def trained_on(batch_fn, steps):
    """(xs, ys) of every prompt batch_fn hands the trainer over `steps` steps, in order."""
    batches = [batch_fn(step) for step in range(steps)]
    return torch.cat([b[0] for b in batches]), torch.cat([b[1] for b in batches])


def as_set(xs):
    return {tuple(row) for row in xs.flatten(1).tolist()}


# --- 4.1 training_prompts ------------------------------------------------------------------------
@pytest.mark.parametrize("em_prompts, expect", [(40, 40),        # not a multiple of the batch
                                                (1000, 64)])     # capped at 4 steps x 16 prompts
def test_em_prompts_are_the_first_streamed_prompts_the_transformer_saw(compose_cfg, em_prompts, expect):
    cfg = compose_cfg(SMOKE + [f"method.em_prompts={em_prompts}", "seed=3"])
    mixture = mxt.MixtureOfRegressions(4, 3, 0.5, seed=3)
    batch_fn, (em_xs, em_ys) = mxt.training_prompts(cfg, fake_ctx(3), mixture)
    xs, ys = trained_on(batch_fn, int(cfg.trainer.max_steps))
    assert xs.shape == (64, 8, 4) and len(as_set(xs)) == 64      # fresh prompts every step
    assert em_xs.shape == (expect, 8, 4)
    assert torch.equal(em_xs, xs[:expect]) and torch.equal(em_ys, ys[:expect])


def test_em_prompts_are_all_ranks_prompts_together(compose_cfg):
    """Two ranks: each trains on its shard; EM (the same on every rank) sees both shards' prompts."""
    cfg = compose_cfg(SMOKE + ["method.em_prompts=1000", "seed=3"])
    mixture = mxt.MixtureOfRegressions(4, 3, 0.5, seed=3)
    seen, em = set(), []
    for rank in range(2):
        batch_fn, (em_xs, _) = mxt.training_prompts(cfg, fake_ctx(3, rank=rank, world_size=2), mixture)
        xs, _ = trained_on(batch_fn, 4)
        assert xs.shape == (32, 8, 4)
        seen |= as_set(xs)
        em.append(em_xs)
    assert torch.equal(em[0], em[1]) and as_set(em[0]) == seen and len(seen) == 64


def first_appearances(xs, ys, limit):
    """The first `limit` distinct prompts of a training sequence, in the order first seen (a loop)."""
    keep, seen = [], set()
    for i, x in enumerate(xs):
        key = tuple(x.flatten().tolist())
        if key not in seen and len(keep) < limit:
            seen.add(key)
            keep.append(i)
    return xs[keep], ys[keep]


@pytest.mark.parametrize("n, em_prompts, expect", [(48, 32, 32),      # 3 steps an epoch: all 48 seen
                                                   (48, 1000, 48),
                                                   (50, 1000, None)])  # 3 steps of 16 an epoch drop 2 of 50
def test_fixed_set_em_prompts_are_the_distinct_prompts_the_transformer_saw(compose_cfg, n, em_prompts, expect):
    """dataset.train_prompts = n, 4 steps of 16: EM gets the first em_prompts distinct prompts of
    the sequence the transformer trained on, in the order first seen, each with the y it trained
    on; with n = 50 the sampler's dropped partial batch means some prompts are never trained on,
    and EM must not see them."""
    mixture = mxt.MixtureOfRegressions(4, 3, 0.5, seed=3)
    cfg = compose_cfg(SMOKE + [f"dataset.train_prompts={n}", f"method.em_prompts={em_prompts}", "seed=3"])
    batch_fn, (em_xs, em_ys) = mxt.training_prompts(cfg, fake_ctx(3), mixture)
    xs, ys = trained_on(batch_fn, int(cfg.trainer.max_steps))
    fixed = as_set(trained_on(stages.fresh_prompt_batches(mixture.sample, 16, 8, seed=3), 4)[0][:n])
    assert as_set(xs) <= fixed                                   # the transformer sees only the fixed set
    want_xs, want_ys = first_appearances(xs, ys, em_prompts)
    assert torch.equal(em_xs, want_xs) and torch.equal(em_ys, want_ys)
    if expect is not None:
        assert len(em_xs) == expect
    else:
        assert len(as_set(xs)) < n and len(em_xs) == len(as_set(xs))   # unseen prompts stay out of EM


def test_fixed_set_em_prompts_cover_every_ranks_shard(compose_cfg):
    """Two ranks: EM (the same on both) is the distinct prompts of both shards together."""
    cfg = compose_cfg(SMOKE + ["dataset.train_prompts=48", "method.em_prompts=1000", "seed=3"])
    mixture = mxt.MixtureOfRegressions(4, 3, 0.5, seed=3)
    seen, em = set(), []
    for rank in range(2):
        batch_fn, (em_xs, _) = mxt.training_prompts(cfg, fake_ctx(3, rank=rank, world_size=2), mixture)
        seen |= as_set(trained_on(batch_fn, 4)[0])
        em.append(em_xs)
    assert torch.equal(em[0], em[1]) and as_set(em[0]) == seen


# --- 4.3 and 4.1 through run(cfg, ctx) --------------------------------------------------------------
class Stop(Exception):
    pass


def test_run_fits_em_from_its_own_stream_on_the_trained_prompts(compose_cfg, monkeypatch, tmp_path):
    """run(cfg, ctx) with seed 3: EM's start seed is stream_seed(3, EM_STREAM), not the run seed
    (which draws the mixture: EM would start at the true components), and EM's data are the first
    `em_prompts` prompts of the batch function handed to the trainer."""
    cfg = compose_cfg(SMOKE + ["method.em_prompts=40", "seed=3"])
    calls, real_em = [], mxt.batch_em

    def recording_em(xs, ys, num_components, noise_std, iters=50, init=None, seed=0, draw="gaussian"):
        calls.append(dict(xs=xs, ys=ys, seed=seed, init=init, iters=iters, draw=draw))
        return real_em(xs, ys, num_components, noise_std, iters=iters, init=init, seed=seed, draw=draw)

    def no_training(ctx, model, batch_fn, evaluate, **kwargs):
        calls.append(dict(batch_fn=batch_fn))
        raise Stop

    monkeypatch.setattr(mxt, "batch_em", recording_em)
    monkeypatch.setattr(mxt.tasks, "fit_and_evaluate", no_training)
    with pytest.raises(Stop):
        mxt.run(cfg, fake_ctx(3, tmp_path))
    em_call, train_call = calls
    assert em_call["init"] is None and em_call["iters"] == 5
    assert em_call["draw"] == cfg.dataset.mixture.draw == "sphere"    # EM starts from the components' prior
    assert em_call["seed"] == stages.stream_seed(3, stages.EM_STREAM) != 3
    xs, ys = trained_on(train_call["batch_fn"], 4)
    assert torch.equal(em_call["xs"], xs[:40]) and torch.equal(em_call["ys"], ys[:40])


# --- 4.6 the covariate shift scores the transformer on the scaled prompts -----------------------------
class PosteriorMeanModel(torch.nn.Module):
    """A stand-in transformer: the posterior mean under the true components, a prediction that
    depends on the x scale (so a transformer scored on the unscaled prompts shows)."""

    def __init__(self, components, noise_std):
        super().__init__()
        self.anchor = torch.nn.Parameter(torch.zeros(()))       # transformer_predictions asks for a device
        self.components, self.noise_std = components, noise_std

    def forward(self, xs, ys):
        return posterior_mean_predictions(xs, ys, self.components, self.noise_std)


def test_shift_scores_the_transformer_on_the_scaled_prompts(compose_cfg, monkeypatch, tmp_path):
    """run with eval.x_scales=[1, 2] and a transformer that predicts like the posterior mean:
    its nmse_x2 is the posterior mean's nmse_x2 and the error of its predictions on (2x, y')
    computed here; its nmse_x1 is its plain nmse."""
    cfg = compose_cfg(SMOKE + ["eval.x_scales=[1,2]", "seed=3"])
    mixture = mxt.MixtureOfRegressions(4, 3, 0.5, seed=3)
    model = PosteriorMeanModel(mixture.components, 0.5)
    monkeypatch.setattr(mxt.tasks, "fit_and_evaluate", lambda ctx, m, batch_fn, evaluate, **kw: evaluate(model))
    monkeypatch.setattr(mxt, "nmse_vs_position", lambda *args, **kwargs: None)        # no plot: seconds
    monkeypatch.setattr(mxt, "batch_em", lambda xs, ys, m, sigma, **kw: mixture.components + 0.3)  # any estimate
    metrics = mxt.run(cfg, fake_ctx(3, tmp_path))

    xs, ys, comp = stages.test_prompts(mixture, 64, 8, seed=3)
    sx, sy = 2 * xs, ys + torch.einsum("bkd,bd->bk", xs, mixture.components[comp])   # ⟨w_j, 2x⟩ + σε
    by_hand = ((model(sx, sy).double() - sy.double()) ** 2)[:, 1:].mean().item() / 4
    plain = ((model(xs, ys).double() - ys.double()) ** 2)[:, 1:].mean().item() / 4
    assert metrics["transformer/nmse_x2"] == pytest.approx(by_hand, rel=1e-6)
    assert metrics["transformer/nmse_x2"] == metrics["posterior_mean/nmse_x2"]
    assert metrics["transformer/nmse"] == pytest.approx(plain, rel=1e-6)
    assert metrics["transformer/nmse_x1"] == metrics["transformer/nmse"]
    assert abs(by_hand - plain) > 0.1 * plain           # scoring the unscaled prompts would show
    assert metrics["em/nmse_x2"] != metrics["posterior_mean/nmse_x2"]


# --- the run on the framework ---------------------------------------------------------------------

def test_ranks_share_one_processs_fresh_prompts():
    mix = MixtureOfRegressions(D, M, SIGMA, seed=0)
    whole = stages.fresh_prompt_batches(mix.sample, 6, 5, seed=3)(7)
    shards = [stages.fresh_prompt_batches(mix.sample, 6, 5, seed=3, rank=r, world_size=2)(7) for r in range(2)]
    assert all(len(s[0]) == 3 for s in shards)
    together = torch.cat([shards[0][0], shards[1][0]])
    # disjoint shares whose union is the single process's batch
    assert sorted(map(tuple, together.flatten(1).tolist())) == sorted(map(tuple, whole[0].flatten(1).tolist()))
    with pytest.raises(ValueError, match="divisible"):
        stages.fresh_prompt_batches(mix.sample, 5, 5, seed=3, world_size=2)


def test_validation_and_test_prompts_are_different_streams():
    mix = MixtureOfRegressions(D, M, SIGMA, seed=0)
    test_xs = stages.test_prompts(mix, 8, 5, seed=0)[0]
    val_xs = stages.test_prompts(mix, 8, 5, seed=0, split="val")[0]
    assert torch.equal(test_xs, stages.test_prompts(mix, 8, 5, seed=0, split="test")[0])
    assert not torch.equal(test_xs, val_xs)
    with pytest.raises(ValueError, match="'train'"):
        stages.test_prompts(mix, 8, 5, seed=0, split="train")


def test_em_does_not_start_at_the_true_components():
    """The mixture and EM's initial draw both come from the run seed: EM's stream must differ,
    or EM would start (and stay) at the answer."""
    mix = MixtureOfRegressions(D, M, SIGMA, seed=5, dtype=torch.float64)
    start = batch_em(*mix.sample(4, 3)[:2], M, SIGMA, iters=0, seed=stages.stream_seed(5, stages.EM_STREAM))
    assert (start - mix.components).abs().max() > 0.1


def test_nmse_median_is_the_median_prompt_error():
    _, xs, ys, _ = prompts(batch=9, length=6)
    preds = {"ols": ols_predictions(xs, ys)}
    per_prompt = ((preds["ols"].numpy() - ys.numpy())[:, 1:] ** 2).mean(1) / D
    assert stages.procedure_metrics(preds, ys, D)["ols"]["nmse_median"] == pytest.approx(np.median(per_prompt), rel=1e-12)


def test_run_reports_every_procedure_as_a_row(compose_cfg, tmp_path):
    """run(cfg, ctx) on the smoke config: `<procedure>/<metric>` names that reproduce.py turns
    into the rows transformer, posterior_mean, argmin, ridge, ols, zero and em; the plot lands in the run dir."""
    from common.reproduce.tables import expand_rows
    from common.runner import run_method

    cfg = compose_cfg(["experiment=mixreg_transformer_smoke", f"run_dir={tmp_path}"])
    metrics = run_method(cfg)
    rows = expand_rows({"mixreg_transformer": [{"seed": 0, **metrics}]})
    declared = compose_cfg(["experiment=mixreg_transformer_mini"]).table.sub_rows
    assert set(rows) == {"transformer", "posterior_mean", "argmin", "ridge", "ols", "zero", "em"} == set(declared)
    assert set(rows["ols"][0]) >= {"nmse", "nmse_last", "nmse_median", "dist_pm", "dist_argmin", "dist_ols",
                                   "gap_pm_max", "nmse_k4", "nmse_k7"}   # smoke: d = 4, k = 8
    assert "train_loss" in rows["transformer"][0] and np.isfinite(list(metrics.values())).all()
    assert rows["posterior_mean"][0]["dist_pm"] == 0
    assert (tmp_path / "nmse_vs_position.png").exists() and (tmp_path / "nmse_curves.json").exists()
