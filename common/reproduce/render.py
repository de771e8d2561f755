"""Rendering a reproduced table: Markdown (our mean ± std beside the paper, every claim with its
status, paired margin and interval) and a PNG of the learning curves."""
from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np

from common.logging import read_jsonl
from common.reproduce.claims import NOISE, PASS, ClaimResult
from common.reproduce.record import TableResult, distinct_runs
from common.reproduce.why import seeds_needed_text


def _interval(c: ClaimResult | dict) -> str:
    margin, low, high = (c["margin"], c["low"], c["high"]) if isinstance(c, dict) else (c.margin, c.low, c.high)
    if not np.isfinite(low):
        return f"margin {margin:.3g}"
    return f"margin {margin:.3g} [{low:.3g}, {high:.3g}]"


def _controls(c: ClaimResult) -> str:
    """Each control version's status, e.g. "control ridge: FAIL (margin -0.08 [-0.11, -0.05])"."""
    if c.no_control:
        return f" No control: {c.no_control}."
    parts = [f"control {d['control']}: {d['status']} ({_interval(d)})" for d in c.controls]
    if not parts and c.headline:
        # a declared stand-in that the claim already compares is skipped, so a headline can end up
        # with none: say so rather than let it read as controlled
        return " **No control judged**: no stand-in is declared for its rows, or each one is a row it compares."
    return (" " + "; ".join(parts) + ".") if parts else ""


def claim_line(c: ClaimResult, known: bool = False, held_out: bool = False) -> str:
    needed = ""
    if c.status == NOISE and c.seeds_needed:
        needed = f"; {seeds_needed_text(c.seeds_needed, '≈')} seeds would resolve it at this margin and spread"
    tag = "**headline** " if c.headline else ""
    if known:
        # a claim must pass on both seed sets: a pass on one alone is no reason to move it back
        note = ("PASSES on these held-out seeds" if held_out
                else "now PASSES on these seeds: move it back to claims if the held-out seeds pass too") \
            if c.status == PASS else c.status
        return f"- {tag}NOT REPRODUCED ({note}): `{c.claim}` ({c.values}; {_interval(c)}{needed}). {c.why}{_controls(c)}"
    return f"- {tag}{c.status}: `{c.claim}` ({c.values}; {_interval(c)}{needed}).{_controls(c)}"


def wall_time(t: TableResult) -> str:
    runs = distinct_runs(t.runs)
    walls = [s["wall_s"] for s in runs if s.get("wall_s")]
    total = len(runs)
    missing = f", {total - len(walls)} without a recorded time" if len(walls) < total else ""
    where = t.verified or {}
    machine = f" on {where['cpu']}, {where['threads']} thread{'s' * (where['threads'] != 1)}" if "cpu" in where else ""
    return f"{sum(walls) / 60:.1f} min wall, {t.cpu_minutes():.1f} CPU-min for {len(walls)} runs{missing}{machine}"


def table_markdown(t: TableResult, level: str = "##") -> list[str]:
    summary, paper = t.summary(), t.paper or {}
    head = ["row"] + t.metrics + ([f"paper {paper.get('metric')}"] if paper.get("rows") else [])
    title = t.experiment + (" (held-out seeds)" if t.held_out else "")
    lines = [f"{level} {title}", ""]
    if paper.get("source"):
        lines += [f"Paper: {paper['source']}", ""]
    if t.purpose == "tuning":
        lines += ["A tuning table: its numbers chose hyper-parameters (on validation data), so it "
                  "reports no claims.", ""]
    lines += ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for row, vals in summary.items():
        cells = [row] + [f"{vals[m][0]:.4g} ± {vals[m][1]:.2g}" if m in vals else "—" for m in t.metrics]
        if paper.get("rows"):
            cells.append(str(paper["rows"].get(row, "—")))
        lines.append("| " + " | ".join(cells) + " |")
    seeds = ", ".join(map(str, t.seeds))
    lines += ["", f"Seeds {seeds}; mean ± std over seeds. Compute: {wall_time(t)}.", ""]
    if t.extension:
        fixed = t.extension.get("fixed", "before the run")
        lines += [f"Extension rule (fixed {fixed}): to {t.extension['to']} seeds; "
                  f"first seeds {', '.join(map(str, t.extension['first_seeds']))}; {t.extension['why']}.", ""]
    if t.controls:
        lines += ["Controls (each claim naming the row is re-judged with the row replaced; a claim a control "
                  "also PASSes is NOT DISCRIMINATING): "
                  + "; ".join(f"{row} ← {', '.join(cs)}" for row, cs in t.controls.items()) + ".", ""]
    if t.claims or t.known_failures:
        lines += [f"Claims (paired over seeds; margin > 0 means the claim holds; {t.level * 100:g}% t-interval"
                  + (", as the table may extend its seeds: two looks at the data" if t.level > 0.95 else "")
                  + "):", ""]
        lines += [claim_line(c) for c in t.claims] + [claim_line(k, known=True, held_out=t.held_out) for k in t.known_failures]
    if t.rejudged:
        lines += ["", f"Claims re-judged on the recorded runs at `{t.rejudged.get('git_sha', '?')[:8]}` "
                  f"({t.rejudged.get('time', '?')[:10]}): the code and settings that produced the runs are unchanged."]
    if t.plot:
        lines += ["", f"![learning curves]({Path(t.plot).name})"]
    for fig in t.figures:
        lines += ["", f"![{Path(fig).stem}]({Path(fig).name})"]
    return lines + [""]


def markdown(method: str, tier: str, tables: list[TableResult], command: str) -> str:
    lines = [f"# {method} — {tier} tier", "", f"Generated by `{command}`.", ""]
    for t in tables:
        lines += table_markdown(t)
    return "\n".join(lines)


def plot_curves(runs: dict[str, list[dict]], path: Path, title: str, key: str = "loss") -> Path | None:
    """Mean training curve per row over seeds, with the min-max band (rows without training skip)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4))
    drawn, seen_dirs = False, set()
    for row, seeds in runs.items():
        dirs = tuple(s["run_dir"] for s in seeds)
        if dirs in seen_dirs:   # rows taken from one run (expand_rows) share its curve
            continue
        seen_dirs.add(dirs)
        curves = []
        for s in seeds:
            f = Path(s["run_dir"]) / "metrics.jsonl"
            curves.append([(r["step"], r[key]) for r in read_jsonl(f) if key in r] if f.exists() else [])
        if not curves or not all(curves) or len({len(c) for c in curves}) != 1:
            continue
        steps = [p[0] for p in curves[0]]
        values = np.array([[p[1] for p in c] for c in curves])
        ax.plot(steps, values.mean(0), label=row)
        ax.fill_between(steps, values.min(0), values.max(0), alpha=0.2)
        drawn = True
    if not drawn:
        plt.close(fig)
        return None
    ax.set_xlabel("step"), ax.set_ylabel(f"training {key}"), ax.set_title(title), ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def copy_figures(runs: dict[str, list[dict]], experiment: str, dest_dir: Path) -> list[str]:
    """PNGs a method wrote into the run dir of each row's first seed, copied next to the table."""
    copied, seen_dirs = [], set()
    for row, seeds in runs.items():
        if seeds[0]["run_dir"] in seen_dirs:
            continue
        seen_dirs.add(seeds[0]["run_dir"])
        for png in sorted(Path(seeds[0]["run_dir"]).glob("*.png")):
            dest = dest_dir / f"{experiment}_{row}_{png.name}"
            shutil.copyfile(png, dest)
            copied.append(str(dest))
    return copied
