"""common/eval/scaling.py: power-law fits, their bootstrap intervals and crossovers (issue 51)."""
import math
from pathlib import Path

import numpy as np
import pytest

from common.eval.scaling import bootstrap_power_law, crossover, fit_power_law

X = np.array([1.0, 2.0, 4.0, 8.0, 16.0])


def noisy(rng, reps: int, exponent: float = -1.0, prefactor: float = 2.0, spread: float = 0.3) -> np.ndarray:
    """(k, R) replicates with multiplicative log-normal noise: their mean is exactly a power law in x."""
    return prefactor * X[:, None] ** exponent * np.exp(spread * rng.standard_normal((len(X), reps)))


def test_an_exact_power_law_is_recovered():
    exponent, prefactor = fit_power_law(X, 3.0 * X ** -0.7)
    assert exponent == pytest.approx(-0.7, abs=1e-12) and prefactor == pytest.approx(3.0, rel=1e-12)
    # a line through two points of a power law of any sign of exponent
    assert fit_power_law([10.0, 1000.0], [5.0, 5.0 * 100 ** 1.5]) == pytest.approx((1.5, 5.0 / 10 ** 1.5))


def test_the_fit_is_least_squares_in_log_log():
    rng = np.random.default_rng(0)
    y = 2.0 * X ** -0.5 * np.exp(0.1 * rng.standard_normal(len(X)))
    slope, intercept = np.polyfit(np.log(X), np.log(y), 1)        # an independent least-squares fit
    assert fit_power_law(X, y) == pytest.approx((slope, math.exp(intercept)), rel=1e-10)


def test_without_noise_the_intervals_have_zero_width():
    exact = 3.0 * X ** -1.2
    points = bootstrap_power_law(X, exact, n_boot=200)
    replicates = bootstrap_power_law(X, np.repeat(exact[:, None], 7, axis=1), n_boot=200)
    for fit in (points, replicates):
        assert fit["low"] == pytest.approx(-1.2, abs=1e-10) and fit["high"] == pytest.approx(-1.2, abs=1e-10)
        assert fit["exponent"] == pytest.approx(-1.2, abs=1e-12) and fit["prefactor"] == pytest.approx(3.0)


def test_the_bootstrap_is_seeded():
    y = noisy(np.random.default_rng(1), 20)
    assert bootstrap_power_law(X, y, seed=5) == bootstrap_power_law(X, y, seed=5)
    assert bootstrap_power_law(X, y, seed=5)["low"] != bootstrap_power_law(X, y, seed=6)["low"]
    assert bootstrap_power_law(X, y[:, 0], seed=5) == bootstrap_power_law(X, y[:, 0], seed=5)


def test_the_point_estimate_fits_the_replicate_means():
    y = noisy(np.random.default_rng(2), 15)
    fit = bootstrap_power_law(X, y, n_boot=50)
    assert (fit["exponent"], fit["prefactor"]) == pytest.approx(fit_power_law(X, y.mean(axis=1)))
    assert fit["low"] < fit["exponent"] < fit["high"]


def test_the_95_percent_interval_covers_the_true_exponent_about_95_percent_of_the_time():
    rng = np.random.default_rng(3)
    trials = 400
    covered = 0
    for t in range(trials):
        fit = bootstrap_power_law(X, noisy(rng, 40), n_boot=400, seed=t)
        covered += fit["low"] <= -1.0 <= fit["high"]
    # binomial sd of the share at 0.95 over 400 trials: 0.011; the percentile bootstrap of a mean
    # runs a little below nominal at R = 40, so the band is 0.95 ± 4 sd
    assert abs(covered / trials - 0.95) < 0.045, covered / trials


def test_the_interval_narrows_like_one_over_root_r():
    rng = np.random.default_rng(4)

    def mean_width(reps: int) -> float:
        widths = [np.diff([(f := bootstrap_power_law(X, noisy(rng, reps), n_boot=400, seed=i))["low"], f["high"]])[0]
                  for i in range(30)]
        return float(np.mean(widths))

    assert mean_width(400) / mean_width(100) == pytest.approx(0.5, abs=0.06)


def test_crossover_of_two_over_x_and_inverse_root_x_is_at_four():
    x = np.array([1.0, 2.0, 3.0, 5.0, 8.0])      # 4 is not a grid point: interpolated in log-log, exactly
    assert crossover(x, 2.0 / x, x ** -0.5) == pytest.approx(4.0, rel=1e-12)


def test_crossover_is_the_first_reaching_point_and_nan_when_not_bracketed():
    x = np.array([1.0, 2.0, 4.0, 8.0])
    assert math.isnan(crossover(x, [1.0, 1.0, 1.0, 1.0], [2.0, 2.0, 2.0, 2.0]))     # never above
    assert math.isnan(crossover(x, [3.0, 3.0, 3.0, 3.0], [2.0, 2.0, 2.0, 2.0]))     # never reaches
    assert math.isnan(crossover(x, [1.0, 3.0, 1.0, 1.0], [2.0, 2.0, 2.0, 2.0]))     # starts below: not bracketed
    # reaches exactly at a grid point; a later re-crossing does not count
    assert crossover(x, [4.0, 2.0, 3.0, 1.0], [2.0, 2.0, 2.0, 2.0]) == pytest.approx(2.0)


@pytest.mark.parametrize("call, message", [
    (lambda: fit_power_law(X, -X), "must be > 0"),
    (lambda: fit_power_law(X * 0, X), "must be > 0"),
    (lambda: fit_power_law(X, X * np.nan), "finite"),
    (lambda: fit_power_law(X, np.append(X, np.inf)), "finite"),
    (lambda: fit_power_law(X, X[:3]), "match x"),
    (lambda: fit_power_law([2.0, 2.0, 2.0], [1.0, 2.0, 3.0]), "2 distinct x"),
    (lambda: bootstrap_power_law(X, X, level=1.0), r"level must be in \(0, 1\)"),
    (lambda: bootstrap_power_law(X, X, level=0.0), r"level must be in \(0, 1\)"),
    (lambda: bootstrap_power_law(X, np.ones((4, 3))), "match x"),
    (lambda: bootstrap_power_law([1.0, 2.0, 2.0], [1.0, 2.0, 3.0]), "3 distinct x"),
    (lambda: crossover([1.0, 3.0, 2.0], [3.0, 2.0, 1.0], [2.0, 2.0, 2.0]), "increasing"),
    (lambda: crossover([1.0, 2.0], [3.0, 2.0, 1.0], [2.0, 2.0, 2.0]), "one length"),
    (lambda: crossover([1.0, 2.0], [3.0, 0.0], [2.0, 2.0]), "must be > 0"),
])
def test_bad_input_is_a_value_error(call, message):
    with pytest.raises(ValueError, match=message):
        call()


def test_scaling_is_not_exported_from_common_eval():
    """Importing it from common/eval/__init__.py would put it into every table's fingerprint that imports common.eval."""
    init = (Path(__file__).resolve().parents[1] / "common" / "eval" / "__init__.py").read_text()
    assert "scaling" not in init
