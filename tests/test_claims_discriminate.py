"""Claims that discriminate: controls, headline verdicts, placeholders in `why`, the extension rule,
tuned_on (the issue "Claims that discriminate")."""

import numpy as np
import pytest
from omegaconf import OmegaConf
from scipy import stats

from common.config import CONFIG_DIR, UserError, choices
from common.reproduce.claims import (FAIL, NOT_DISCRIMINATING, PASS, ClaimSpec, check_controls, claim_spec,
                                     judge, judge_spec, substitute)
from common.reproduce.publish import (NOT_REPRODUCED, NOT_TESTED, PARTLY, REPRODUCED, headline_verdict)
from common.reproduce.record import TableResult
from common.reproduce.render import claim_line
from common.reproduce.tables import check_tuned_on, extension_seeds, judge_claims
from common.reproduce.why import LITERAL_DECIMAL, fill, seeds_needed_text

SEEDS = [0, 1, 2, 3]
METHOD = [0.50, 0.52, 0.49, 0.51]        # error of the method
ZERO = [1.00, 1.01, 0.99, 1.00]          # the zero predictor
RIDGE = [0.45, 0.47, 0.44, 0.46]         # a naive baseline better than the method
BAYES = [0.60, 0.61, 0.62, 0.60]


def values(**rows):
    return {row: {"err": list(v)} for row, v in rows.items()}


def test_substitute_replaces_only_the_controlled_row():
    assert substitute("transformer.err < argmin.err + 0.05", "transformer", "zero") == "zero.err < argmin.err + 0.05"


def test_a_claim_its_control_also_passes_is_not_discriminating():
    table = values(method=METHOD, zero=ZERO, ridge=RIDGE, bayes=BAYES)
    r = judge_spec(ClaimSpec("method.err < bayes.err"), table, {"method": ["zero", "ridge"]})
    assert r.status == NOT_DISCRIMINATING          # ridge also beats bayes
    by = {c["control"]: c for c in r.controls}
    assert by["zero"]["status"] == FAIL and by["ridge"]["status"] == PASS
    assert by["ridge"]["claim"] == "ridge.err < bayes.err"
    assert "control ridge: PASS" in claim_line(r) and "control zero: FAIL" in claim_line(r)


def test_a_claim_only_the_method_passes_stays_pass():
    table = values(method=METHOD, zero=ZERO, bayes=BAYES)
    r = judge_spec(ClaimSpec("method.err < bayes.err"), table, {"method": ["zero"]})
    assert r.status == PASS and [c["status"] for c in r.controls] == [FAIL]


def test_a_control_the_claim_already_names_is_skipped_and_control_none_opts_out():
    table = values(method=METHOD, zero=ZERO)
    r = judge_spec(ClaimSpec("method.err < zero.err"), table, {"method": ["zero"]})
    assert r.status == PASS and r.controls == []      # zero.err < zero.err would compare a row with itself
    r = judge_spec(ClaimSpec("method.err < 0.6", no_control="exactness"), values(method=METHOD, zero=[0.1] * 4),
                   {"method": ["zero"]})
    assert r.status == PASS and r.controls == [] and "No control: exactness" in claim_line(r)


def test_a_claim_s_own_controls_replace_the_table_s_for_its_rows():
    """ridge stands in for method on the table, but this claim holds method to zero only."""
    table = values(method=METHOD, zero=ZERO, ridge=RIDGE, bayes=BAYES)
    spec = claim_spec({"claim": "method.err < bayes.err", "controls": {"method": ["zero"]}})
    r = judge_spec(spec, table, {"method": ["zero", "ridge"]})
    assert r.status == PASS and [c["control"] for c in r.controls] == ["zero"]
    r = judge_spec(claim_spec("method.err < bayes.err"), table, {"method": ["zero", "ridge"]})
    assert r.status == NOT_DISCRIMINATING                   # without its own: the table's ridge applies


def test_a_headline_left_without_a_control_says_so():
    table = values(method=METHOD, zero=ZERO)
    r = judge_spec(ClaimSpec("method.err < zero.err", headline=True), table, {"method": ["zero"]})
    assert r.controls == [] and "No control judged" in claim_line(r)
    r = judge_spec(ClaimSpec("method.err < zero.err"), table, {"method": ["zero"]})
    assert "No control judged" not in claim_line(r)        # only headlines are held to it


def test_a_known_failure_passing_only_on_held_out_seeds_is_not_sent_back_to_claims():
    r = judge_spec(ClaimSpec("method.err < zero.err"), values(method=METHOD, zero=ZERO), {})
    assert r.status == PASS
    assert "move it back to claims" in claim_line(r, known=True)
    line = claim_line(r, known=True, held_out=True)
    assert "PASSES on these held-out seeds" in line and "move it back" not in line


def test_a_control_that_is_not_a_row_is_a_config_error():
    with pytest.raises(UserError, match="ridg") as err:
        check_controls({"method": ["ridg"]}, {"method", "ridge"}, "x_mini")
    assert err.value.exit_code == 2


@pytest.mark.parametrize("entry, message", [
    ({"claim": "a.x > b.x", "control": "ridge"}, "may only be `none`"),
    ({"claim": "a.x > b.x", "control": "none"}, "reason"),
    ({"claim": "a.x > b.x", "headlin": True}, "unknown"),
    ({"claim": "a.x > b.x", "controls": {"c": ["z"]}}, "does not compare"),
    ({"claim": "a.x > b.x", "controls": ["z"]}, "mapping"),
    ({"claim": "a.x > b.x", "controls": {"a": ["z"]}, "control": "none", "reason": "r"}, "contradict"),
])
def test_bad_claim_entries_exit_2(entry, message):
    with pytest.raises(UserError, match=message) as err:
        claim_spec(entry)
    assert err.value.exit_code == 2


def test_claim_entries_normalise():
    assert claim_spec("a.x > b.x") == ClaimSpec("a.x > b.x")
    assert claim_spec({"claim": "a.x > b.x", "headline": True}).headline
    with pytest.raises(UserError, match="why"):
        claim_spec({"claim": "a.x > b.x"}, known=True)


def _record(statuses_report, statuses_held, headline=(True, True), controls=None):
    judged = [{"control": "zero", "status": FAIL, "margin": -1.0, "low": -1.5, "high": -0.5}]
    controls = controls or [judged] * len(statuses_report)
    def rec(statuses):
        return {"tables": [{"experiment": "m_mini",
                            "claims": [{"claim": f"c{i}", "status": s, "headline": h, "margin": 1.0, "low": 0.5,
                                        "high": 1.5, "controls": controls[i]}
                                       for i, (s, h) in enumerate(zip(statuses, headline))]}]}
    return rec(statuses_report), (rec(statuses_held) if statuses_held is not None else None)


@pytest.mark.parametrize("report, held, headline, expected", [
    ([PASS, PASS], [PASS, PASS], (True, True), REPRODUCED),
    ([PASS, PASS], [PASS, FAIL], (True, True), PARTLY),
    ([PASS, NOT_DISCRIMINATING], [PASS, PASS], (True, True), PARTLY),
    ([PASS, PASS], None, (True, True), NOT_REPRODUCED),         # held-out seeds never run: not shown
    ([FAIL, PASS], [FAIL, FAIL], (True, True), NOT_REPRODUCED),
    ([PASS, PASS], [PASS, PASS], (False, False), NOT_TESTED),
])
def test_headline_verdicts(report, held, headline, expected):
    main, held_rec = _record(report, held, headline)
    assert headline_verdict(main, held_rec)[0] == expected


def test_a_headline_pass_counts_only_with_a_judged_control_or_a_stated_reason():
    main, held = _record([PASS, PASS], [PASS, PASS], controls=[[], []])
    assert headline_verdict(main, held)[:2] == (NOT_REPRODUCED, 0)
    main, held = _record([PASS, PASS], [PASS, PASS], controls=[None, []])
    main["tables"][0]["claims"][0]["no_control"] = "exactness: no naive method is exact"
    assert headline_verdict(main, held)[:2] == (PARTLY, 1)


def test_placeholders_are_filled_from_the_record():
    table = values(method=METHOD, bayes=BAYES)
    r = judge("method.err > bayes.err", table)
    text = fill("method {method.err} vs {bayes.err}: margin {margin} {interval} on {seeds}; per seed "
                "{per_seed}; {seeds_needed}", table, r, SEEDS)
    assert f"method {np.mean(METHOD):.4g} vs {np.mean(BAYES):.4g}" in text
    assert f"margin {r.margin:.4g} [{r.low:.4g}, {r.high:.4g}] on 0, 1, 2, 3" in text
    assert text.endswith(seeds_needed_text(r.seeds_needed))
    for bad in ("{nope}", "{method.acc}"):
        with pytest.raises(UserError):
            fill(bad, table, r, SEEDS)


def test_seeds_needed_reads_as_words_when_no_count_exists():
    """"~{seeds_needed} seeds" must not render "~— seeds": no count drops the tilde."""
    table = values(method=METHOD, bayes=BAYES)
    fails, holds = judge("method.err > bayes.err", table), judge("bayes.err > method.err", table)
    assert fails.seeds_needed is None and fill("(~{seeds_needed} seeds)", table, fails, SEEDS) == \
        "(no number of seeds)"
    assert fill("~{seeds_needed}", table, holds, SEEDS) == f"~{holds.seeds_needed}"
    assert seeds_needed_text(51, "≈") == "more than 50" and seeds_needed_text(7, "≈") == "≈7"


def _why_texts():
    for name in choices("experiment"):
        cfg = OmegaConf.load(CONFIG_DIR / "experiment" / f"{name}.yaml")
        for k in cfg.get("known_failures") or []:
            yield name, str(k.get("why", ""))


@pytest.mark.parametrize("name, why", list(_why_texts()))
def test_no_literal_decimal_in_any_why(name, why):
    """Numbers enter a `why` only through placeholders, so a re-run cannot leave them stale."""
    assert not LITERAL_DECIMAL.search(why), (name, LITERAL_DECIMAL.findall(why), why)


def test_the_literal_scan_catches_decimals():
    assert LITERAL_DECIMAL.search("0.306 vs 0.280") and not LITERAL_DECIMAL.search("{ridge.dist} in 3 of 6 seeds")


def _base(extend=None, claims=("a.x > b.x",)):
    table = {"seeds": [0, 1, 2], "rows": {"a": [], "b": []}, "metrics": ["x"]}
    if extend:
        table["extend"] = {"to": extend}
    return OmegaConf.create({"claims": list(claims), "known_failures": [], "table": table,
                             "tuned_on": {"seeds": [3], "split": "val"}})


def test_extension_fires_only_within_its_bound_once_and_skips_tuning_seeds():
    noisy = TableResult("x_mini", [0, 1, 2], ["x"], {
        "a": [{"seed": s, "x": v} for s, v in zip([0, 1, 2], [1.0, 1.6, 1.3])],
        "b": [{"seed": s, "x": v} for s, v in zip([0, 1, 2], [0.9, 1.0, 1.1])]})
    more, record = extension_seeds(_base(extend=10), noisy, {3}, "x_mini")
    assert more == [4, 5, 6, 7, 8, 9, 10] and "extended to 10" in record["why"]   # seed 3 tuned: skipped
    assert record | {"why": ""} == {"to": 10, "first_seeds": [0, 1, 2], "fired": True, "why": ""}
    assert extension_seeds(_base(extend=4), noisy, {3}, "x_mini")[0] == []  # needs more seeds than allowed
    assert extension_seeds(_base(), noisy, set(), "x_mini") == ([], None)  # no rule: never
    clear = TableResult("x_mini", [0, 1, 2], ["x"], {
        "a": [{"seed": s, "x": v} for s, v in zip([0, 1, 2], [2.0, 2.1, 2.2])],
        "b": [{"seed": s, "x": 1.0} for s in [0, 1, 2]]})
    assert extension_seeds(_base(extend=10), clear, set(), "x_mini")[0] == []   # already PASS
    full = TableResult("x_mini", list(range(10)), ["x"], {
        "a": [{"seed": s, "x": 1.0 + 0.3 * (s % 3)} for s in range(10)],
        "b": [{"seed": s, "x": 1.0 + 0.1 * (s % 2)} for s in range(10)]})
    more, record = extension_seeds(_base(extend=10), full, set(), "x_mini")
    assert more == [] and not record["fired"] and "already 10 seeds" in record["why"]   # once: at its bound


def test_an_extension_rule_set_after_a_look_says_so_on_the_page():
    from common.reproduce.render import table_markdown

    t = TableResult("x_mini", [0, 1, 2], ["x"], {
        "a": [{"seed": s, "x": v} for s, v in zip([0, 1, 2], [1.0, 1.6, 1.3])],
        "b": [{"seed": s, "x": v} for s, v in zip([0, 1, 2], [0.9, 1.0, 1.1])]})
    base = _base(extend=10)
    base.table.extend.fixed = "after the held-out seeds were seen"
    t.extension = extension_seeds(base, t, set(), "x_mini")[1]
    assert t.extension["fixed"] == "after the held-out seeds were seen"
    assert "Extension rule (fixed after the held-out seeds were seen): to 10" in "\n".join(table_markdown(t))
    t.extension = extension_seeds(_base(extend=10), t, set(), "x_mini")[1]
    assert "fixed" not in t.extension and "Extension rule (fixed before the run)" in "\n".join(table_markdown(t))


def test_an_extended_table_is_judged_at_97_5_percent():
    t = TableResult("x_mini", [0, 1, 2, 3], ["x"], {
        "a": [{"seed": s, "x": v} for s, v in enumerate([1.3, 1.5, 1.2, 1.6])],
        "b": [{"seed": s, "x": 1.0} for s in range(4)]})
    judge_claims(_base(extend=10), t, "x_mini")
    d = np.array([0.3, 0.5, 0.2, 0.6])
    half = stats.t.ppf(1 - 0.025 / 2, 3) * d.std(ddof=1) / 2
    assert t.level == 0.975 and t.claims[0].low == pytest.approx(d.mean() - half)


@pytest.mark.parametrize("tuned, message", [
    (None, "no tuned_on"),
    ({"seeds": [0], "split": "test"}, "never on the test split"),
    ({"seeds": [], "split": "none"}, "reason"),
    ({"seeds": [4], "split": "none", "reason": "x"}, "no seeds"),
    ({"seeds": [4], "split": "validation-ish"}, "must be val"),
])
def test_tuned_on_is_required_and_never_the_test_split(tuned, message):
    base = _base()
    base.tuned_on = tuned
    with pytest.raises(UserError, match=message) as err:
        check_tuned_on("x_mini", base)
    assert err.value.exit_code == 2


def test_a_tuning_table_declares_validation_data():
    base = OmegaConf.create({"claims": [], "known_failures": [], "tuned_on": None,
                             "table": {"purpose": "tuning", "seeds": [10]}})
    with pytest.raises(UserError, match="table.split: val"):
        check_tuned_on("x_mini_tune", base)
    base.table.split = "val"
    check_tuned_on("x_mini_tune", base)
