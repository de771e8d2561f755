"""The reproduce engine's table summary: seeds averaged, run bookkeeping kept out of the metrics."""
import pytest

from common.reproduce import summarise, wall_time

RUNS = {"a": [{"seed": 0, "run_dir": "r/0", "wall_s": 30.0, "acc": 1.0},
              {"seed": 1, "run_dir": "r/1", "wall_s": 90.0, "acc": 3.0}],
        "b": [{"seed": 0, "run_dir": "r/2", "wall_s": None, "acc": 5.0}]}


def test_summary_is_mean_and_population_std_over_seeds_without_run_info():
    s = summarise(RUNS)
    assert set(s["a"]) == {"acc"}
    assert s["a"]["acc"] == pytest.approx((2.0, 1.0, 2))
    assert s["b"]["acc"] == pytest.approx((5.0, 0.0, 1))


def test_wall_time_counts_only_runs_executed_now():
    assert wall_time(RUNS) == "2.0 min for 2 runs, 1 reused"
    assert wall_time({"a": RUNS["a"]}) == "2.0 min for 2 runs"
