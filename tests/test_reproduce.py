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
    return OmegaConf.create({"claims": list(claims), "tuned_on": {"seeds": tuned, "split": "val"} if tuned else
                             {"seeds": [], "split": "none", "reason": "a test"},
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


def test_ci_plan_runs_the_cheapest_stale_tables_first_and_defers_what_does_not_fit(monkeypatch):
    current = {m: {"code": m, "settings": "s", "env": {}} for m in ("a", "b", "c")}
    recorded = {"a": (None, 20.0, "never"), "b": ({"code": "OLD", "settings": "s", "env": {}}, 5.0, "x"),
                "c": ({"code": "OLD", "settings": "s", "env": {}}, 12.0, "x")}
    monkeypatch.setattr(ci, "headline_methods", lambda tier="mini": sorted(current))
    monkeypatch.setattr(ci, "_recorded", lambda m, tier: recorded[m])
    monkeypatch.setattr(ci, "table_fingerprint", lambda m, e: current[m])
    entries = ci.plan(budget_min=15.0)
    assert [(e.method, e.required, e.deferred) for e in entries] == [("b", True, False), ("c", True, True),
                                                                       ("a", False, True)]
    text = ci.describe(entries, 15.0)
    assert "Estimated 5.0 min for 1 tables" in text
    assert "not re-checked: c" in text and "not checked by CI: a" in text     # stale / never recorded
    ran = []
    monkeypatch.setattr("common.reproduce.reproduce", lambda m, *a, **k: ran.append(m) or 0)
    assert ci.run_plan(entries, budget_min=15.0) == 0 and ran == ["b"]


def test_one_run_may_report_several_rows():
    from common.reproduce.tables import expand_rows

    runs = {"all": [{"seed": 0, "run_dir": "d", "wall_s": 1.0, "cpu_s": 2.0, "transformer/nmse": 0.1,
                     "posterior_mean/nmse": 0.05, "steps": 3.0}]}
    out = expand_rows(runs)
    assert out["transformer"] == [{"seed": 0, "run_dir": "d", "wall_s": 1.0, "cpu_s": 2.0, "nmse": 0.1}]
    assert out["posterior_mean"][0]["nmse"] == 0.05 and out["all"][0]["steps"] == 3.0
    two = expand_rows({"a": [{"seed": 0, "x/m": 1.0}], "b": [{"seed": 0, "x/m": 2.0}]})
    assert set(two) == {"a_x", "b_x"}


def test_a_cached_run_is_reused_only_with_the_same_settings_and_code(tmp_path):
    import json

    from omegaconf import OmegaConf

    from common.reproduce.tables import _cached

    cfg = OmegaConf.create({"run_dir": str(tmp_path), "seed": 0, "method": {"lr": 0.1}, "claims": []})
    OmegaConf.save(cfg, tmp_path / "config.yaml")
    (tmp_path / "metrics.json").write_text(json.dumps({"acc": 0.5}))
    (tmp_path / "timing.json").write_text(json.dumps({"wall_s": 2.0, "cpu_s": 3.0, "code": "abc"}))
    assert _cached(cfg, "abc", "rt") == ({"acc": 0.5}, 2.0, 3.0, {})    # recorded before runtime (and machine) were
    assert _cached(cfg, "changed", "rt") is None                  # the method's code moved: run again
    assert _cached(OmegaConf.merge(cfg, {"method": {"lr": 0.2}}), "abc", "rt") is None
    assert _cached(OmegaConf.merge(cfg, {"claims": ["x"]}), "abc", "rt") is not None   # claims are not run settings
    (tmp_path / "timing.json").write_text(json.dumps({"wall_s": 2.0, "cpu_s": 3.0, "code": "abc", "runtime": "rt",
                                                      "cpu": "C", "threads": 1}))
    assert _cached(cfg, "abc", "rt")[3] == {"cpu": "C", "threads": 1}     # a cached run keeps its own machine
    assert _cached(cfg, "abc", "trainer moved") is None           # the trainer or runner moved: run again


def test_the_run_machinery_and_config_targets_are_fingerprinted(tmp_path, monkeypatch):
    """The trainer and runner reach every run through the context, and backbones through a config's
    `_target_`: neither is imported by the method, so a static scan of its imports misses them."""
    code = {str(p.relative_to(ROOT)) for p in fingerprint.code_files("simclr")}
    assert "common/trainer.py" not in code and "common/nn/backbones.py" not in code
    settings = {"method": {"backbone": {"_target_": "common.nn.build_backbone", "name": "small_cnn"},
                           "optimizer": {"_target_": "torch.optim.AdamW"}},
                "rows": [{"_target_": "methods.simclr.SimCLR"}]}
    targets = fingerprint.config_targets(settings)
    assert targets == {"common.nn.build_backbone", "methods.simclr.SimCLR"}    # not torch's
    runtime = {str(p.relative_to(ROOT)) for p in fingerprint.runtime_files(targets)}
    assert {"common/trainer.py", "common/runner.py", "common/callbacks.py", "common/nn/__init__.py",
            "common/nn/backbones.py", "methods/simclr/__init__.py"} <= runtime
    # a change to the trainer moves the runtime hash, not the method's code hash
    for part in ("common", "methods"):
        shutil.copytree(ROOT / part, tmp_path / part, ignore=shutil.ignore_patterns("__pycache__"))
    monkeypatch.setattr(fingerprint, "ROOT", tmp_path)
    before = fingerprint.code_hash("simclr")[0], fingerprint.runtime_hash(targets)[0]
    with open(tmp_path / "common/trainer.py", "a") as f:
        f.write("\n# a change\n")
    after = fingerprint.code_hash("simclr")[0], fingerprint.runtime_hash(targets)[0]
    assert before[0] == after[0] and before[1] != after[1]


def test_a_changed_run_machinery_makes_a_table_stale():
    current = {"code": "c", "runtime": "r", "settings": "s", "env": {}}
    assert fingerprint.staleness({**current}, current) is None
    assert fingerprint.staleness({**current, "runtime": "old"}, current) == "run machinery changed"
    # a record made before the run machinery was fingerprinted is not judged on it
    assert fingerprint.staleness({"code": "c", "settings": "s", "env": {}}, current) is None


def test_a_run_reporting_several_rows_counts_once_in_the_table_cost():
    from common.reproduce.ci import estimated_minutes
    from common.reproduce.record import TableResult
    from common.reproduce.tables import expand_rows

    runs = expand_rows({"all": [{"seed": s, "run_dir": f"d{s}", "wall_s": 60.0, "cpu_s": 96.0, "a/acc": 1.0,
                                 "b/acc": 2.0} for s in range(3)]})
    table = TableResult(experiment="x", seeds=[0, 1, 2], metrics=["acc"], runs=runs)
    assert sorted(runs) == ["a", "b"] and table.cpu_minutes() == pytest.approx(3 * 96 / 60)

    assert table.wall_s() == pytest.approx(180.0) and estimated_minutes(runs) == pytest.approx(3 * 96 / 60)


def test_publishing_some_tables_keeps_the_records_other_tables(tmp_path, monkeypatch):
    import importlib
    import json

    from common.reproduce.record import TableResult

    pub = importlib.import_module("common.reproduce.publish")     # the module, not the function it exports
    monkeypatch.setattr(pub, "RESULTS_DIR", tmp_path)
    monkeypatch.setattr(pub.results, "update_readmes", lambda *a: None)
    monkeypatch.setattr(pub, "write_status_pages", lambda *a: None)
    monkeypatch.setattr(pub, "plot_curves", lambda *a, **k: None)
    monkeypatch.setattr(pub, "copy_figures", lambda *a, **k: [])

    def table(name, acc):
        return TableResult(experiment=name, seeds=[0], metrics=["acc"], runs={"r": [{"seed": 0, "acc": acc}]})

    pub.publish("m", "mini", [table("m_mini", 1.0), table("m_mini_extra", 2.0)], "cmd", {})
    pub.publish("m", "mini", [table("m_mini", 3.0)], "cmd", {}, keep_others=True)
    record = json.loads((tmp_path / "m_mini.json").read_text())
    assert [(t["experiment"], t["runs"]["r"][0]["acc"]) for t in record["tables"]] == [("m_mini", 3.0), ("m_mini_extra", 2.0)]
    pub.publish("m", "mini", [table("m_mini", 4.0)], "cmd", {})
    assert [t["experiment"] for t in json.loads((tmp_path / "m_mini.json").read_text())["tables"]] == ["m_mini"]
    # a pre-framework table (no seeds, claims with 'holds') beside it is dropped, not a crash
    legacy = {"experiment": "m_mini_old", "summary": {}, "runs": {}, "claims": [{"claim": "a > b", "holds": True}]}
    path = tmp_path / "m_mini.json"
    path.write_text(json.dumps({**json.loads(path.read_text()), "tables": [legacy]}))
    pub.publish("m", "mini", [table("m_mini", 5.0)], "cmd", {}, keep_others=True)
    assert [t["experiment"] for t in json.loads(path.read_text())["tables"]] == ["m_mini"]


def test_a_kept_table_keeps_the_commit_and_time_it_was_verified_at(tmp_path, monkeypatch):
    """`--only` re-runs one table of a file: the others keep their own stamp (they were once restamped
    with the file's provenance, so the status page and CI's rotation took them for verified now)."""
    import importlib
    import json

    from common.reproduce import ci
    from common.reproduce.record import TableResult

    pub = importlib.import_module("common.reproduce.publish")
    monkeypatch.setattr(pub, "RESULTS_DIR", tmp_path)
    monkeypatch.setattr(ci, "RESULTS_DIR", tmp_path)
    monkeypatch.setattr(pub.results, "update_readmes", lambda *a: None)
    monkeypatch.setattr(pub, "write_status_pages", lambda *a: None)
    monkeypatch.setattr(pub, "plot_curves", lambda *a, **k: None)
    monkeypatch.setattr(pub, "copy_figures", lambda *a, **k: [])
    now = {"git_sha": "aaaa", "time": "2026-01-01T00:00:00"}       # the commit and time 'now' stands at
    monkeypatch.setattr(pub.results, "provenance", lambda: dict(now))

    def table(name):
        return TableResult(experiment=name, seeds=[0], metrics=["acc"], runs={"r": [{"seed": 0, "acc": 1.0}]})

    pub.publish("m", "mini", [table("m_mini"), table("m_mini_extra")], "cmd", {})
    now.update(git_sha="bbbb", time="2026-02-02T00:00:00")
    pub.publish("m", "mini", [table("m_mini_extra")], "cmd", {}, keep_others=True)
    record = json.loads((tmp_path / "m_mini.json").read_text())
    got = {t["experiment"]: t["verified"]["git_sha"] for t in record["tables"]}
    assert got == {"m_mini": "aaaa", "m_mini_extra": "bbbb"}
    assert ci._recorded("m", "mini")[2] == "2026-01-01T00:00:00"     # the headline was not re-run


def test_a_changed_seed_list_makes_a_table_stale():
    current = {"code": "c", "settings": "s", "env": {}, "seeds": [3, 4, 5]}
    assert fingerprint.staleness({"code": "c", "settings": "s", "env": {}, "seeds": [3, 4, 5]}, current) is None
    assert fingerprint.staleness({"code": "c", "settings": "s", "env": {}, "seeds": [0, 1, 2]},
                                 current) == "seeds changed"
    # a record made before seeds were fingerprinted is not judged on them
    assert fingerprint.staleness({"code": "c", "settings": "s", "env": {}}, current) is None


def test_a_published_table_names_the_cpu_and_threads_its_runs_ran_on(tmp_path, monkeypatch):
    """Floats of a training run move between CPU types and thread counts: each run records both
    (timing.json, so a cached run keeps its own), the table's stamp summarises them (mixed where they
    differ, nothing for runs that recorded none) and its Compute line says them; a table kept by
    `--only` keeps its own stamp."""
    import importlib
    import json

    import torch

    from common.reproduce.machine import machine, runs_machine
    from common.reproduce.record import TableResult

    real = machine()    # the real probe: a non-empty name and torch's thread count
    assert real["cpu"] and real["threads"] == torch.get_num_threads() and machine(3)["threads"] == 3
    pub = importlib.import_module("common.reproduce.publish")
    monkeypatch.setattr(pub.results, "update_readmes", lambda *a: None)
    monkeypatch.setattr(pub, "RESULTS_DIR", tmp_path)
    monkeypatch.setattr(pub, "write_status_pages", lambda *a: None)
    monkeypatch.setattr(pub, "plot_curves", lambda *a, **k: None)
    monkeypatch.setattr(pub, "copy_figures", lambda *a, **k: [])
    cpu = "Test CPU (family 1, model 2)"

    def table(name, *where):
        return TableResult(experiment=name, seeds=[0, 1], metrics=["acc"],
                           runs={"r": [{"seed": i, "acc": 1.0, "wall_s": 30, **w} for i, w in enumerate(where)]})

    text = pub.publish("m", "mini", [table("m_mini", {"cpu": cpu, "threads": 1}, {"cpu": cpu, "threads": 1}),
                                     table("m_mini_b", {"cpu": cpu, "threads": 1}, {"cpu": "Other", "threads": 2})],
                       "cmd", {})
    stamps = {t["experiment"]: t["verified"] for t in json.loads((tmp_path / "m_mini.json").read_text())["tables"]}
    assert stamps["m_mini"]["cpu"] == cpu and stamps["m_mini"]["threads"] == 1
    assert stamps["m_mini_b"]["cpu"] == f"mixed: Other; {cpu}" and stamps["m_mini_b"]["threads"] == "mixed: 1; 2"
    assert f"1.0 min wall, 0.0 CPU-min for 2 runs on {cpu}, 1 thread." in text
    assert table("x", {}, {}).summary()["r"].keys() == {"acc"}                 # cpu, threads are not metrics
    assert runs_machine(table("x", {}, {}).runs) == {}
    assert runs_machine(table("x", {"cpu": cpu, "threads": 1}, {}).runs)["cpu"] == f"{cpu} (1 runs; the others recorded none)"
    pub.publish("m", "mini", [table("m_mini_b", {}, {})], "cmd", {}, keep_others=True)
    stamps = {t["experiment"]: t["verified"] for t in json.loads((tmp_path / "m_mini.json").read_text())["tables"]}
    assert stamps["m_mini"]["cpu"] == cpu and "cpu" not in stamps["m_mini_b"]
