"""Re-judging a record without running (`--rejudge [--only]`) and the listing of stale tables (`--stale`)."""
import json

import pytest

from common.config import UserError
from common.reproduce import rejudge as rj
from common.reproduce import stale
from common.reproduce.record import TableResult


def _record(tmp_path, tables, name="m_mini.json", held_out=False):
    path = tmp_path / name
    path.write_text(json.dumps({"method": "m", "tier": "mini", "held_out": held_out,
                                "tables": [t.to_dict() for t in tables]}))
    return path


def _table(name, purpose="report"):
    return TableResult(experiment=name, seeds=[0, 1, 2], metrics=["acc"], purpose=purpose,
                       runs={"r": [{"seed": s, "acc": float(s)} for s in range(3)]})


@pytest.fixture
def stale_headline(tmp_path, monkeypatch):
    """A record whose headline table is stale and whose supporting table is current."""
    _record(tmp_path, [_table("m_mini"), _table("m_mini_long"), _table("m_mini_tune", "tuning")])
    monkeypatch.setattr(rj, "RESULTS_DIR", tmp_path)
    judged = []

    def fake(method, table, extra):
        if table.experiment == "m_mini":
            raise UserError("m_mini: code changed since it was recorded", exit_code=2)
        judged.append(table.experiment)
        return table

    monkeypatch.setattr(rj, "rejudge_table", fake)
    return judged


def test_a_stale_headline_table_refuses_the_whole_rejudge(stale_headline):
    with pytest.raises(UserError, match="code changed"):
        rj.rejudge("m", "mini", False, [])


def test_only_rejudges_the_named_table_while_the_headline_waits_for_its_rerun(stale_headline):
    tables = rj.rejudge("m", "mini", False, [], only=["m_mini_long"])
    assert stale_headline == ["m_mini_long"]                       # the only one judged
    assert [t.experiment for t in tables] == ["m_mini", "m_mini_long", "m_mini_tune"]   # the others kept


def test_only_refuses_a_stale_named_table_and_an_unknown_name(stale_headline):
    with pytest.raises(UserError, match="code changed"):
        rj.rejudge("m", "mini", False, [], only=["m_mini"])
    with pytest.raises(UserError, match="not in m_mini.json"):
        rj.rejudge("m", "mini", False, [], only=["m_mini_typo"])


def test_stale_lists_supporting_and_held_out_tables_and_does_not_count_tuning(tmp_path, monkeypatch):
    current = {"code": "new", "settings": "s", "env": {}, "seeds": [0, 1, 2], "extend": None}
    old = {**current, "code": "old"}
    report = [_table("m_mini"), _table("m_mini_long"), _table("m_mini_tune", "tuning")]
    report[0].fingerprint, report[1].fingerprint, report[2].fingerprint = current, old, old
    held = _table("m_mini_long")
    held.seeds, held.fingerprint = [100, 101, 102], {**current, "seeds": [100, 101, 102]}   # other seeds: current
    _record(tmp_path, report)
    _record(tmp_path, [held], "m_mini_heldout.json", held_out=True)
    (tmp_path / "experiment").mkdir()
    for name in ("m_mini", "m_mini_long", "m_mini_tune"):
        (tmp_path / "experiment" / f"{name}.yaml").write_text("")
    monkeypatch.setattr(stale, "RESULTS_DIR", tmp_path)
    monkeypatch.setattr(stale, "CONFIG_DIR", tmp_path)
    monkeypatch.setattr(stale, "table_fingerprint", lambda m, e: current)
    found = stale.stale_tables()
    assert [(t.experiment, t.held_out, t.reason, t.tuning) for t in found] == [
        ("m_mini_long", False, "code changed", False), ("m_mini_tune", False, "code changed", True)]
    text = stale.describe(found)
    assert text.startswith("1 published tables are stale") and "tuning sweep: not counted" in text
    # the report record on other seeds than the config's is stale; the held-out one never is for that
    report[0].seeds = [0, 1]
    report[0].fingerprint = {k: v for k, v in current.items() if k != "seeds"}
    _record(tmp_path, report)
    assert ("m_mini", "seeds changed") in [(t.experiment, t.reason) for t in stale.stale_tables()]
    assert stale.describe([]) == "No published table is stale."
