"""Training FLOPs: what every pass a method runs costs, in matrix-multiply FLOPs (2·m·n·k per
product; elementwise ops, norms and sorting are not counted, as usual).

A run tallies (`model.Sampled`): per sample, the exact forward F and backward B of the whole
network, measured once with torch's FlopCounterMode; each pass adds N·F (forward) or N·B
(exact backward); a sampled backward then subtracts what its linear layers skipped
(`SamplingState.skipped_flops`, counted row by row from the rows each product really used).
VCAS thus pays for the controller's M forwards, M exact and M² SampleA backwards, SB for its
selection forward over the whole batch. `official_flops_ratio` is the official code's
bookkeeping (vcas_trainer.py `flops_ratio`), in units of one block's forward.
"""
from __future__ import annotations

from typing import Callable

import torch
from torch.utils.flop_counter import FlopCounterMode, sdpa_backward_flop_count, sdpa_flop_count

_aten = torch.ops.aten


def _sdpa_cpu(query_shape, key_shape, value_shape, *args, **kwargs) -> int:
    return sdpa_flop_count(query_shape, key_shape, value_shape)


def _sdpa_cpu_backward(grad_out_shape, query_shape, key_shape, value_shape, *args, **kwargs) -> int:
    return sdpa_backward_flop_count(grad_out_shape, query_shape, key_shape, value_shape)


# torch counts the CUDA attention kernels but not the CPU one that timm's fused attention uses here
CPU_ATTENTION = {_aten._scaled_dot_product_flash_attention_for_cpu: _sdpa_cpu,
                 _aten._scaled_dot_product_flash_attention_for_cpu_backward: _sdpa_cpu_backward}


def counter() -> FlopCounterMode:
    return FlopCounterMode(display=False, custom_mapping=CPU_ATTENTION)


def forward_backward_flops(forward: Callable[[], torch.Tensor], params: list[torch.Tensor]) -> tuple[float, float]:
    """(forward, backward) FLOPs of `forward()` (a scalar loss) and of its gradient w.r.t. `params`;
    no gradient is stored."""
    with counter() as fwd:
        loss = forward()
    with counter() as bwd:
        torch.autograd.grad(loss, params)
    return float(fwd.get_total_flops()), float(bwd.get_total_flops())


def official_flops_ratio(rho: list[float], nu_per_block: list[float], every: int, m: int) -> float:
    """Training cost over exact at this schedule (official `flops_ratio_tmp`): a block's forward,
    activation backward and weight backward are one unit each; VCAS costs 1 + ρ_l + ρ_l·ν̄_l per
    block, and every F steps the controller adds M exact steps and M² SampleA-only steps."""
    nb = len(rho)
    act_only = 1 + 2 * sum(rho) / nb
    act_and_w = 1 + sum(rho) / nb + sum(r * n for r, n in zip(rho, nu_per_block)) / nb
    return (act_and_w * every + 3 * m + act_only * m**2) / (3 * every)
