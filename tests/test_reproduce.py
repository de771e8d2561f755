"""The reproduce engine: table records, seed rules, fingerprints and the CI plan."""
import shutil

import pytest
from omegaconf import OmegaConf

from common.config import UserError
from common.reproduce import ci, fingerprint
from common.reproduce.claims import judge
from common.reproduce.record import TableResult
from common.reproduce.render import table_markdown
from common.reproduce.tables import check_seeds
from tests.conftest import ROOT

RUNS = {"a": [{"seed": 0, "run_dir": "r/0", "wall_s": 30.0, "acc": 1.0},
              {"seed": 1, "run_dir": "r/1", "wall_s": 90.0, "acc": 3.0}],
        "b": [{"seed": 0, "run_dir": "r/2", "wall_s": None, "acc": 5.0},
              {"seed": 1, "run_dir": "r/3", "wall_s": 10.0, "acc": 4.0}]}


def test_record_summary_per_seed_and_round_trip():
    t = TableResult("x_mini", [0, 1], ["acc"], RUNS)
    assert t.per_seed() == {"a": {"acc": [1.0, 3.0]}, "b": {"acc": [5.0, 4.0]}}
    assert t.summary()["a"]["acc"] == pytest.approx((2.0, 1.0, 2))
    assert t.wall_s() == 130.0
    t.claims = [judge("b.acc > a.acc", t.per_seed())]
    back = TableResult.from_dict(t.to_dict())
    assert back.claims[0].status == t.claims[0].status and back.runs == RUNS


def test_markdown_shows_status_margin_interval_and_known_failure_reason():
    t = TableResult("x_mini", [0, 1, 2], ["acc"],
                    {"a": [{"seed": s, "run_dir": "", "wall_s": 1.0, "acc": v} for s, v in enumerate([1, 2, 3])],
                     "b": [{"seed": s, "run_dir": "", "wall_s": 1.0, "acc": v} for s, v in enumerate([2, 3, 4])]})
    t.claims = [judge("b.acc > a.acc", t.per_seed())]
    t.known_failures = [judge("a.acc > b.acc", t.per_seed(), why="because")]
    text = "\n".join(table_markdown(t))
    assert "- PASS: `b.acc > a.acc` (3 > 2; margin 1 [1, 1])" in text
    assert "NOT REPRODUCED (FAIL): `a.acc > b.acc`" in text and "because" in text


def cfg(seeds, tuned=None, claims=("a.x > b.x",)):
    return OmegaConf.create({"claims": list(claims), "tuned_on": {"seeds": tuned} if tuned else None,
                             "table": {"seeds": seeds}})


def test_seed_rules():
    check_seeds("t", cfg([0, 1, 2], tuned=[100]), [0, 1, 2], held_out=False)
    with pytest.raises(UserError, match="at least 3"):
        check_seeds("t", cfg([0, 1]), [0, 1], held_out=False)
    check_seeds("t", cfg([0], claims=()), [0], held_out=False)     # a sweep without claims may use one
    with pytest.raises(UserError, match="chose its hyper-parameters"):
        check_seeds("t", cfg([0, 1, 2], tuned=[0]), [0, 1, 2], held_out=False)
    with pytest.raises(UserError, match="already seeds"):
        check_seeds("t", cfg([0, 1, 2]), [2, 3, 4], held_out=True)


def test_code_fingerprint_follows_the_import_closure():
    files = {str(p.relative_to(ROOT)) for p in fingerprint.code_files("simclr")}
    assert {"methods/simclr/__init__.py", "common/tasks/contrastive.py", "common/ssl/model.py",
            "common/__init__.py"} <= files
    assert not any(f.startswith(("methods/care", "common/reproduce")) for f in files)


def test_changing_one_methods_loss_changes_only_its_fingerprint(tmp_path, monkeypatch):
    for part in ("common", "methods"):
        shutil.copytree(ROOT / part, tmp_path / part, ignore=shutil.ignore_patterns("__pycache__"))
    monkeypatch.setattr(fingerprint, "ROOT", tmp_path)
    methods = sorted(p.name for p in (tmp_path / "methods").iterdir() if (p / "__init__.py").exists())
    before = {m: fingerprint.code_hash(m)[0] for m in methods}
    with open(tmp_path / "methods/care/loss.py", "a") as f:
        f.write("\n# a change\n")
    after = {m: fingerprint.code_hash(m)[0] for m in methods}
    assert [m for m in methods if before[m] != after[m]] == ["care"]


def test_ci_plan_requires_only_stale_tables_and_rotates_the_oldest(monkeypatch):
    current = {m: {"code": m, "settings": "s", "env": {"torch": "1"}} for m in ("a", "b", "c", "d")}
    recorded = {"a": ({"code": "a", "settings": "s", "env": {"torch": "1"}}, 10.0, "2026-01-03"),
                "b": ({"code": "OLD", "settings": "s", "env": {"torch": "1"}}, 12.0, "2026-01-05"),
                "c": ({"code": "c", "settings": "s", "env": {"torch": "1"}}, 10.0, "2026-01-01"),
                "d": ({"code": "d", "settings": "s", "env": {"torch": "0"}}, 10.0, "2026-01-09")}
    monkeypatch.setattr(ci, "headline_methods", lambda tier="mini": sorted(current))
    monkeypatch.setattr(ci, "_recorded", lambda m, tier: recorded[m])
    monkeypatch.setattr(ci, "table_fingerprint", lambda m, e: current[m])
    entries = ci.plan(budget_min=32.0)
    assert [(e.method, e.reason, e.required) for e in entries] == [
        ("b", "code changed", True), ("d", "packages changed", False), ("c", "rotation", False)]
    assert "Estimated 32.0 min for 3 tables" in ci.describe(entries, 32.0)


def test_one_run_may_report_several_rows():
    from common.reproduce.tables import expand_rows

    runs = {"all": [{"seed": 0, "run_dir": "d", "wall_s": 1.0, "cpu_s": 2.0, "transformer/nmse": 0.1,
                     "posterior_mean/nmse": 0.05, "steps": 3.0}]}
    out = expand_rows(runs)
    assert out["transformer"] == [{"seed": 0, "run_dir": "d", "wall_s": 1.0, "cpu_s": 2.0, "nmse": 0.1}]
    assert out["posterior_mean"][0]["nmse"] == 0.05 and out["all"][0]["steps"] == 3.0
    two = expand_rows({"a": [{"seed": 0, "x/m": 1.0}], "b": [{"seed": 0, "x/m": 2.0}]})
    assert set(two) == {"a_x", "b_x"}
