"""Publishing reproduced tables: results/<method>_<tier>[_heldout].{md,json} with provenance and
fingerprints, the tables inside the method README, and the generated status pages (the matrix
at the top of docs/reproductions.md and the methods table of README.md)."""
from __future__ import annotations

import json
import re

from common import results
from common.reproduce.claims import PASS
from common.reproduce.machine import runs_machine
from common.reproduce.record import TableResult
from common.reproduce.render import copy_figures, markdown, plot_curves

RESULTS_DIR = results.ROOT / "results"


def stem(method: str, tier: str, held_out: bool) -> str:
    return f"{method}_{tier}" + ("_heldout" if held_out else "")


def publish(method: str, tier: str, tables: list[TableResult], command: str, fingerprints: dict,
            keep_others: bool = False, rejudged: bool = False) -> str:
    """Write results/, update the README regions and the status pages; return the Markdown.
    `keep_others`: the tables re-run replace theirs in the record; its other tables stay as recorded.
    `rejudged`: the tables' runs, curves, figures, fingerprints and stamps are the record's own."""
    held_out = any(t.held_out for t in tables)
    RESULTS_DIR.mkdir(exist_ok=True)
    fresh = list(tables)
    old_path = RESULTS_DIR / f"{stem(method, tier, held_out)}.json"
    if keep_others and old_path.exists():
        ran = {t.experiment for t in tables}
        old = json.loads(old_path.read_text())
        others = [d for d in old["tables"] if d["experiment"] not in ran]
        old_stamp = {k: old.get("provenance", {}).get(k) for k in ("git_sha", "time")}
        for d in others:
            d.setdefault("verified", old_stamp)   # a kept table keeps the stamp of the run that made it
            if "seeds" not in d:      # a record from before the claims had statuses: nothing to carry over
                print(f"note: the pre-framework record of {d['experiment']} is dropped; re-run it "
                      f"(python scripts/reproduce.py {method} --tier {tier} --only {d['experiment']})")
        kept = [TableResult.from_dict(d) for d in others if "seeds" in d]
        tables = sorted(tables + kept, key=lambda t: (t.experiment != f"{method}_{tier}", t.experiment))
    # per table: `--only` re-runs one table of a file, and the file's provenance would otherwise
    # restamp the tables it kept as if they had been verified now
    stamp = {k: v for k, v in results.provenance().items() if k in ("git_sha", "time")}
    for t in ([] if rejudged else fresh):
        name = t.experiment + ("_heldout" if held_out else "")
        plot = plot_curves(t.runs, RESULTS_DIR / f"{name}.png", name)
        t.plot = str(plot) if plot else None
        t.figures = [] if held_out else copy_figures(t.runs, t.experiment, RESULTS_DIR)
        t.fingerprint = fingerprints.get(t.experiment)
        t.verified = {**stamp, **runs_machine(t.runs)}
    text = markdown(method, tier, tables, command)
    key = stem(method, tier, held_out)
    (RESULTS_DIR / f"{key}.md").write_text(text)
    body = ("\n" + text.split("\n", 4)[-1]).replace("](", "](../../results/").replace("\n## ", "\n### ")
    results.update_readmes(key, body)
    results.write(RESULTS_DIR / f"{key}.json",
                  {"method": method, "tier": tier, "held_out": held_out, "command": command,
                   "tables": [t.to_dict() for t in tables]})
    write_status_pages()
    return text


def load_records(tier: str = "mini") -> dict[str, dict]:
    """stem -> the JSON record of every published table file of a tier."""
    return {p.stem: json.loads(p.read_text()) for p in sorted(RESULTS_DIR.glob(f"*_{tier}*.json"))}


def _claims(record: dict | None) -> dict[str, dict]:
    out = {}
    legacy = {"status": "not judged (old record)", "margin": float("nan"), "low": float("nan"), "high": float("nan")}
    for t in (record or {}).get("tables", []):
        t = {**t, "claims": [{**legacy, **c} for c in t.get("claims", [])],
             "known_failures": [{**legacy, **c} for c in t.get("known_failures", [])]}
        for c in t.get("claims", []):
            out[(t["experiment"], c["claim"])] = {**c, "known": False}
        for c in t.get("known_failures", []):
            out[(t["experiment"], c["claim"])] = {**c, "known": True}
    return out


def _status(c: dict | None) -> str:
    if c is None:
        return "not run"
    return f"known failure ({c['status']})" if c["known"] else c["status"]


def status_matrix(tier: str = "mini") -> list[str]:
    """method x claim -> status on the report seeds and on held-out seeds, with the commit."""
    records = load_records(tier)
    lines = ["| method | table | claim | status | margin [95% CI] | held-out seeds | verified |",
             "|---|---|---|---|---|---|---|"]
    for key, record in records.items():
        if record.get("held_out") or not key.startswith(f"{record['method']}_{tier}"):
            continue
        held = _claims(records.get(f"{key}_heldout") or records.get(f"{record['method']}_{tier}_heldout"))
        stamps = {t["experiment"]: t.get("verified") or record.get("provenance", {}) for t in record["tables"]}
        for (experiment, claim), c in _claims(record).items():
            prov = stamps.get(experiment, {})
            verified = f"{prov.get('time', '?')[:10]} `{prov.get('git_sha', '?')[:8]}`"
            margin = f"{c['margin']:.3g} [{c['low']:.3g}, {c['high']:.3g}]"
            shown = f"**headline** `{claim}`" if c.get("headline") else f"`{claim}`"
            lines.append(f"| {record['method']} | {experiment} | {shown} | {_status(c)} | {margin} | "
                         f"{_status(held.get((experiment, claim)))} | {verified} |")
    return lines


REPRODUCED, PARTLY, NOT_REPRODUCED, NOT_TESTED = "REPRODUCED", "PARTLY", "NOT REPRODUCED", "NOT TESTED"


def controlled(c: dict) -> bool:
    """A claim had a naive stand-in judged (and failing it: else it is NOT DISCRIMINATING), or says
    why none exists (`control: none` with a reason). A headline PASS without either would pass just
    as well for a method that learned nothing, so it does not count towards the verdict."""
    return bool(c.get("controls") or c.get("no_control"))


def headline_verdict(main: dict | None, held: dict | None) -> tuple[str, int, int]:
    """(verdict, headline claims that PASS discriminating, with a judged control or a stated reason
    for none, on report and held-out seeds; headline claims): REPRODUCED all, PARTLY some, NOT
    REPRODUCED none, NOT TESTED when none is declared."""
    report = {k: c for k, c in _claims(main).items() if c.get("headline")}
    if not report:
        return NOT_TESTED, 0, 0
    held_out = _claims(held)
    passed = sum(c["status"] == PASS and controlled(c) and held_out.get(k, {}).get("status") == PASS
                 for k, c in report.items())
    verdict = REPRODUCED if passed == len(report) else PARTLY if passed else NOT_REPRODUCED
    return verdict, passed, len(report)


def verdict_count(tier: str = "mini") -> str:
    """One line: how many papers reproduce their headline at this tier."""
    records = load_records(tier)
    verdicts = [headline_verdict(records.get(f"{m}_{tier}"), records.get(f"{m}_{tier}_heldout"))[0]
                for m in _method_names()]
    n = {v: verdicts.count(v) for v in (REPRODUCED, PARTLY, NOT_REPRODUCED, NOT_TESTED)}
    return (f"Headline reproduced at the {tier} tier: **{n[REPRODUCED]} of {len(verdicts)} papers**, "
            f"{n[PARTLY]} partly, {n[NOT_REPRODUCED]} not reproduced, {n[NOT_TESTED]} not tested "
            f"(a headline claim counts when it PASSes, discriminating against a judged control or with a stated "
            f"reason that none exists, on the report and the held-out seeds).")


def _method_names() -> list[str]:
    return [p.parent.name for p in sorted((results.ROOT / "methods").glob("*/README.md"))]


def methods_table(tier: str = "mini") -> list[str]:
    """The README's methods table: per method, its headline verdict and how its claims fare."""
    records = load_records(tier)
    lines = [verdict_count(tier), "",
             "| method | paper | headline | mini-tier claims | on held-out seeds | known failures |",
             "|---|---|---|---|---|---|"]
    for method in _method_names():
        title = (results.ROOT / "methods" / method / "README.md").read_text().splitlines()[0].lstrip("# ").strip()
        main, held = records.get(f"{method}_{tier}"), records.get(f"{method}_{tier}_heldout")
        claims = [c for c in _claims(main).values() if not c["known"]]
        known = [c for c in _claims(main).values() if c["known"]]

        def count(cs):
            return f"{sum(c['status'] == PASS for c in cs)}/{len(cs)} PASS" if cs else "—"

        verdict, passed, total = headline_verdict(main, held)
        headline = f"{verdict} ({passed}/{total})" if total else verdict
        held_claims = [c for c in _claims(held).values() if not c["known"]]
        lines.append(f"| [{method}](methods/{method}) | {title} | {headline} | "
                     f"{count(claims) if main else 'no table yet'} | "
                     f"{count(held_claims) if held else 'not run'} | {len(known)} |")
    return lines


def write_status_pages(tier: str = "mini") -> None:
    parts = ["# Reproductions", "",
             "Generated by `scripts/reproduce.py` from `results/*.json`. A claim is judged per seed "
             "(rows share seeds) and on its mean with a paired 95% t-interval: PASS when the interval "
             "clears the boundary, WITHIN NOISE when only the mean does, FAIL otherwise. Known failures "
             "are the paper's claims that do not reproduce at this tier, with the reason in the table. "
             "A claim that a naive control row also PASSes is NOT DISCRIMINATING.",
             "", verdict_count(tier), "", "## Status", "", *status_matrix(tier), ""]
    for md in sorted(RESULTS_DIR.glob("*.md")):
        parts += [re.sub(r"^(#+) ", r"#\1 ", md.read_text().replace("](", "](../results/"), flags=re.M), ""]
    (results.ROOT / "docs" / "reproductions.md").write_text("\n".join(parts))
    results.update_marked_region(results.ROOT / "README.md", "methods-table", "\n".join(methods_table(tier)))
