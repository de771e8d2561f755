"""Seconds to predict every position of 1,000 prompts, k ∈ {16, 32, 64}: the transformer (one
forward pass) vs the posterior mean (prefix sums, vectorised) vs the same posterior recomputed
per prefix in a loop vs min-norm OLS (one pseudo-inverse per prefix) vs EM (fit on the same
prompts + posterior mean with its estimates). Ratios are to the vectorised posterior mean.

    python benchmarks/mixreg_prediction_time.py  -> table + benchmarks/results/mixreg_prediction_time.json
"""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import torch  # noqa: E402

from benchmarks.common_bench import interleaved, save  # noqa: E402
from methods.mixreg_transformer import (MixRegTransformer, MixtureOfRegressions, batch_em, component_weights,  # noqa: E402
                                        ols_predictions, posterior_mean_predictions)

PROMPTS, DIM, COMPONENTS, NOISE, LENGTHS, REPEATS, EM_ITERS = 1000, 8, 5, 0.5, (16, 32, 64), 3, 50
WIDTH, DEPTH, HEADS = 64, 4, 4   # the mini-tier model


def posterior_mean_per_prefix(xs, ys, components, noise_std):
    """The posterior mean with each prefix's residual sum recomputed from scratch: O(k²) per prompt."""
    out = torch.empty_like(ys)
    for i in range(xs.shape[1]):
        sq = (ys[:, :i, None] - xs[:, :i] @ components.T).square().sum(1)                # (B, m)
        out[:, i] = (component_weights(sq, noise_std) * (xs[:, i] @ components.T)).sum(-1)
    return out


def main():
    torch.manual_seed(0)
    mix = MixtureOfRegressions(DIM, COMPONENTS, NOISE, seed=0)
    model = MixRegTransformer(DIM, WIDTH, DEPTH, HEADS, max_len=max(LENGTHS)).eval()
    rows = {}
    for k in LENGTHS:
        xs, ys, _ = mix.sample(PROMPTS, k, torch.Generator().manual_seed(k))
        c = mix.components

        def transformer():
            with torch.no_grad():
                model(xs, ys)

        def em():
            posterior_mean_predictions(xs, ys, batch_em(xs, ys, COMPONENTS, NOISE, iters=EM_ITERS), NOISE)

        fns = {"transformer": transformer,
               "posterior_mean": lambda: posterior_mean_predictions(xs, ys, c, NOISE),
               "posterior_mean_per_prefix": lambda: posterior_mean_per_prefix(xs, ys, c, NOISE),
               "ols": lambda: ols_predictions(xs, ys),
               "em_fit_predict": em}
        torch.testing.assert_close(posterior_mean_per_prefix(xs, ys, c, NOISE), posterior_mean_predictions(xs, ys, c, NOISE),
                                   rtol=1e-4, atol=1e-4)
        t = interleaved(fns, REPEATS)
        rows[k] = {name: {"seconds": s, "ratio": s / t["posterior_mean"]} for name, s in t.items()}
    names = list(rows[LENGTHS[0]])
    lines = ["| procedure | " + " | ".join(f"k = {k}: ms (× posterior mean)" for k in LENGTHS) + " |",
             "|---|" + "---|" * len(LENGTHS)]
    for name in names:
        lines.append(f"| {name} | " + " | ".join(f"{1e3 * rows[k][name]['seconds']:.1f} ({rows[k][name]['ratio']:.1f}×)"
                                                 for k in LENGTHS) + " |")
    lines += ["", f"{PROMPTS} prompts, d = {DIM}, m = {COMPONENTS}, σ = {NOISE}; transformer width {WIDTH}, depth {DEPTH}, "
              f"{HEADS} heads (the mini model, untrained: the cost does not depend on the weights); EM {EM_ITERS} "
              f"iterations from the prior; {torch.get_num_threads()} CPU thread(s), median of {REPEATS}."]
    table = "\n".join(lines)
    print(table)
    save("mixreg_prediction_time", {"rows": {str(k): v for k, v in rows.items()}, "prompts": PROMPTS, "dim": DIM,
                                    "components": COMPONENTS, "noise_std": NOISE, "em_iters": EM_ITERS,
                                    "model": {"width": WIDTH, "depth": DEPTH, "heads": HEADS}}, table)


if __name__ == "__main__":
    main()
