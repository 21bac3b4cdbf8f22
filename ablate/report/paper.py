"""The effects of a report as a table for a paper: `ablate report STUDY --format latex` (booktabs) or
`--format csv`, one row per comparison with the baseline.

It reads what the report already computed, in the shape of its ``report.json``, and decides nothing:

- with adaptive seeds (``sequential`` and ``verdicts``): each comparison's deciding look (Δ, its repeated
  interval, the seeds), its verdict word (``val_answer``: better / worse / no effect / identical / open) and
  the test split's look and answer at the same seeds;
- with a fixed seed list (``effects``): each effect on the primary metric (Δ, 95% interval, seeds, the
  verdict's short word: better / worse / no detectable effect / not testable ...), and beside it the test
  split's effect by the same test at the same seeds (``test_effects``: Δ, interval, word; a report.json from
  before them: the difference of the test split's means alone).

Of the report package it calls only ``ablate.report.compute.loaded_study.quality_meta`` (a metric's unit,
decimals and direction) and ``ablate.report.compute.statistics.fmt`` / ``fmt_interval`` (how the report
prints numbers).
"""

from __future__ import annotations

import csv
import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from ablate.errors import AblateError
from ablate.report.compute.comparisons import Answer
from ablate.report.compute.loaded_study import quality_meta
from ablate.report.compute.statistics import fmt, fmt_interval

FORMATS = ("latex", "csv")
SUFFIX = {"latex": "tex", "csv": "csv"}


@dataclass(frozen=True)
class EffectRow:
    """One comparison with the baseline, as the report states it."""

    variant: str
    metric: str
    diff: float | None
    lo: float | None
    hi: float | None
    seeds: int | None
    verdict: str
    test_metric: str | None
    test_diff: float | None
    test_lo: float | None
    test_hi: float | None
    test_verdict: str | None


def _num(value: Any) -> float | None:
    """A number of report.json (NaN and missing alike: None)."""
    if value is None or isinstance(value, str):
        return None
    number = float(value)
    return None if math.isnan(number) else number


def _test_metric(metric: str) -> str:
    split, _, name = metric.partition("/")
    return f"test/{name}" if split == "val" and name else ""


def effect_rows(report: Mapping[str, Any]) -> list[EffectRow]:
    """The rows of a report.json: its sequential verdicts where the study had adaptive seeds, else its
    fixed-sample effects on the primary metric."""
    sequential = report.get("sequential")
    if sequential and sequential.get("comparisons"):
        return _sequential_rows(sequential, report.get("verdicts") or [])
    return _fixed_rows(report)


def _sequential_rows(sequential: Mapping[str, Any], verdicts: Sequence[Mapping[str, Any]]) -> list[EffectRow]:
    metric = str(sequential["metric"])
    test = _test_metric(metric)
    by_variant = {v["variant"]: v for v in verdicts}
    rows = []
    for c in sequential["comparisons"]:
        v = by_variant.get(c["variant"], {})
        rows.append(EffectRow(
            c["variant"], metric, _num(c.get("diff")), _num(c.get("lo")), _num(c.get("hi")), c.get("seeds"),
            str(v.get("val_answer") or c.get("state") or Answer.OPEN), test or None, _num(v.get("test_diff")),
            _num(v.get("test_lo")), _num(v.get("test_hi")), v.get("test_answer")))
    return rows


def _fixed_rows(report: Mapping[str, Any]) -> list[EffectRow]:
    primary = report.get("primary_metric")
    variants = report.get("variants") or {}
    base = variants.get(report.get("baseline"), {}).get("metrics", {})
    tested = {t["variant"]: t for t in report.get("test_effects") or []}
    rows = []
    for e in report.get("effects") or []:
        if primary is not None and e["metric"] != primary:
            continue
        test = _test_metric(e["metric"])
        mine = variants.get(e["variant"], {}).get("metrics", {})
        a, b = _num(mine.get(test, {}).get("mean")), _num(base.get(test, {}).get("mean"))
        said = str(e.get("answer") or e.get("verdict", ""))  # a report.json before the short word: the line
        label = f"{e['variant']}: "
        t = tested.get(e["variant"], {})
        rows.append(EffectRow(
            e["variant"], e["metric"], _num(e.get("diff")), _num(e.get("lo")), _num(e.get("hi")),
            min(e.get("n_base", 0), e.get("n_variant", 0)) or None,
            said[len(label):] if said.startswith(label) else said,
            test or None, _num(t["diff"]) if t else None if a is None or b is None else a - b,
            _num(t.get("lo")), _num(t.get("hi")), t.get("answer")))
    return rows


# ---------------------------------------------------------------- CSV
def write_csv(rows: Sequence[EffectRow], path: Path) -> Path:
    """One line per row, numbers unrounded (empty where the report has none)."""
    with open(path, "w", newline="", encoding="utf-8") as f:
        writer = csv.DictWriter(f, fieldnames=list(EffectRow.__dataclass_fields__))
        writer.writeheader()
        for row in rows:
            writer.writerow({k: "" if v is None else v for k, v in asdict(row).items()})
    return path


# ---------------------------------------------------------------- LaTeX
_LATEX_SPECIAL = {"\\": r"\textbackslash{}", "&": r"\&", "%": r"\%", "$": r"\$", "#": r"\#", "_": r"\_",
                  "{": r"\{", "}": r"\}", "~": r"\textasciitilde{}", "^": r"\textasciicircum{}"}


def latex_escape(text: str) -> str:
    return "".join(_LATEX_SPECIAL.get(ch, ch) for ch in text)


def _math(text: str) -> str:
    return "$" + text.replace(",", "{,}") + "$"  # thousands separators, not list commas in math mode


def _cell(value: float | None, dec: int, signed: bool = False) -> str:
    return "--" if value is None else _math(fmt(value, dec, signed))


def _interval(lo: float | None, hi: float | None, dec: int) -> str:
    if lo is None or hi is None:
        return "--"
    return _math(fmt_interval(lo, hi, dec)).replace("{,} ", ",\\ ")


def latex_table(rows: Sequence[EffectRow], study: str, baseline: str) -> str:
    """A booktabs ``table`` (needs ``\\usepackage{booktabs}``): validation decides, test beside it."""
    metric = rows[0].metric if rows else "metric"
    test = next((r.test_metric for r in rows if r.test_metric), None)
    unit, dec, _ = quality_meta(metric)
    lines = [
        r"\begin{table}[t]",
        r"\centering",
        r"\small",
        r"\begin{tabular}{lrcrlrcl}",
        r"\toprule",
        rf"& \multicolumn{{4}}{{c}}{{{latex_escape(metric)}}} & \multicolumn{{3}}{{c}}"
        rf"{{{latex_escape(test or 'test')}}} \\",
        r"\cmidrule(lr){2-5} \cmidrule(lr){6-8}",
        r"Variant & $\Delta$ & Interval & Seeds & Verdict & $\Delta$ & Interval & Verdict \\",
        r"\midrule",
    ]
    for r in rows:
        cells = [latex_escape(r.variant), _cell(r.diff, dec, True), _interval(r.lo, r.hi, dec),
                 "--" if r.seeds is None else str(r.seeds), latex_escape(r.verdict),
                 _cell(r.test_diff, dec, True), _interval(r.test_lo, r.test_hi, dec),
                 latex_escape(r.test_verdict or "--")]
        lines.append(" & ".join(cells) + r" \\")
    lines += [
        r"\bottomrule",
        r"\end{tabular}",
        rf"\caption{{{latex_escape(study)}: each variant against \texttt{{{latex_escape(baseline)}}}, "
        rf"$\Delta$ in {latex_escape(unit)}. Validation decides; the test split is shown beside it.}}",
        rf"\label{{tab:{_label(study)}}}",
        r"\end{table}",
    ]
    return "\n".join(lines) + "\n"


def _label(study: str) -> str:
    return "".join(ch if ch.isalnum() or ch in "-:" else "-" for ch in study)


def write_table(report_dir: Path, fmt_name: str) -> Path:
    """Write ``effects.tex`` or ``effects.csv`` beside the report's report.json; returns its path."""
    report = json.loads((report_dir / "report.json").read_text(encoding="utf-8"))
    rows = effect_rows(report)
    if not rows:  # a search, or a study without a baseline: nothing is compared
        kind = str(report.get("kind", "study"))
        raise AblateError(f"{report_dir / 'report.json'}: no effects against a baseline to tabulate "
                          f"({'an' if kind[:1] in 'aeiou' else 'a'} {kind} report); the report itself is "
                          "written")
    path = report_dir / f"effects.{SUFFIX[fmt_name]}"
    if fmt_name == "csv":
        return write_csv(rows, path)
    path.write_text(latex_table(rows, str(report.get("study", "")), str(report.get("baseline", ""))),
                    encoding="utf-8")
    return path
