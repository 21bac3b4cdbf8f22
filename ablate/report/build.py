"""`ablate report STUDY`: a comparison report of one study, read back from MLflow.

Writes ``report.md``, a self-contained ``report.html``, ``runs.csv``, ``report.json`` (every number at full
precision) and ``figures/*.png`` to ``reports/<study>/``, and logs the folder under ``report/`` in the
study's parent run. Everything is sorted and formatted with fixed precision, and the figures are
byte-stable, so the same runs give the same files except for the one "Report generated on" line.

This module only assembles: each section is a function ``Inputs -> Part | None`` in a module named for its
concept, registered there with its place (``ablate.report.section_api`` says what a part holds and how a
section registers). The report opens with the parts' intro blocks (the published results a study checks,
its summary; the best trial for a search); the data, hardware and code tables come last.
"""

from __future__ import annotations

import csv
import io
import json
import math
import os
import shutil
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ablate import __version__
from ablate.errors import AblateError
from ablate.report import freshness
from ablate.report.compute.loaded_study import MACHINE_COLUMN, RUNG_COLUMN, Study, design_params, load_study
from ablate.report.compute.target_reach import retarget
from ablate.report.paper import write_table
from ablate.report.render import STAMP_PREFIX, Document, Links, render_html, render_markdown
from ablate.report.section_api import Inputs, Part, PartFn, parts
from ablate.spec.study_ref import study_name
from ablate.tracking import record
from ablate.tracking.comparison_view import runs_link, ui_base
from ablate.tracking.mlflow_store import resolve_tracking_uri
from ablate.tracking.read import log_report_artifacts

__all__ = ["ABLATION_PARTS", "SEARCH_PARTS", "build_report", "load_study", "main_report"]

# The report of an ablation and of a search, top to bottom: each section registers itself where it is
# defined (ablate/report/section_api.py ``section``), with its place; a part's intro blocks open the report in
# the same order (a ladder's figure and transfer table, published results, the summary, ...).
ABLATION_PARTS: tuple[PartFn, ...] = parts("ablation")
SEARCH_PARTS: tuple[PartFn, ...] = parts("search")


@dataclass(frozen=True)
class Report:
    """What ``build_report`` wrote, and the parts it was made of."""

    path: Path  # report.md
    parts: list[Part]

    @property
    def failed(self) -> list[str]:
        return [p.name for p in self.parts if p.failed]


# ---------------------------------------------------------------- output helpers
def _clean(value: Any) -> Any:
    if isinstance(value, float):
        return None if not math.isfinite(value) else value
    if isinstance(value, dict):
        return {str(k): _clean(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_clean(v) for v in value]
    return value


def write_runs_csv(study: Study, path: Path) -> None:
    """One row per run; a study with tune: or confirm: lists every arm's runs, the arm first (a cell two
    arms share once per arm); a ladder every rung's, its rung first."""
    if study.rungs:
        write_ladder_csv(study, path)
        return
    arms = [("", study)] if not study.arms else [(record.BASELINE_ARM, study), *study.arms.items()]
    rows = [(arm, r) for arm, part in arms for r in part.runs]
    metric_keys = sorted({k for _, r in rows for k in r.metrics})
    varying = sorted(k for k in {k for _, r in rows for k in design_params(r.params)}
                     if len({r.params.get(k) for _, r in rows}) > 1)
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow([*(["arm"] if study.arms else []), "variant", "seed", "status", "spec_hash", "run_id",
                MACHINE_COLUMN, *metric_keys, *varying])
    for arm, r in rows:
        w.writerow([*([arm] if arm else []), r.variant, r.seed, r.status, r.spec_hash,
                    r.shown_id, record.machine(r.tags) or "",
                    *[repr(r.metrics[k]) if k in r.metrics else "" for k in metric_keys],
                    *[r.params.get(k, "") for k in varying]])
    path.write_text(buf.getvalue())


def write_ladder_csv(study: Study, path: Path) -> None:
    """A ladder's runs.csv: one row per run of every rung, the rung column first (runs.csv's other columns
    as for any study)."""
    rows = [(rung, r) for rung, part in study.rungs.items() for r in part.runs]
    metric_keys = sorted({k for _, r in rows for k in r.metrics})
    varying = sorted(k for k in {k for _, r in rows for k in design_params(r.params)}
                     if len({r.params.get(k) for _, r in rows}) > 1)
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow([RUNG_COLUMN, "variant", "seed", "status", "spec_hash", "run_id", MACHINE_COLUMN, *metric_keys,
                *varying])
    for rung, r in rows:
        w.writerow([rung, r.variant, r.seed, r.status, r.spec_hash, r.shown_id, record.machine(r.tags) or "",
                    *[repr(r.metrics[k]) if k in r.metrics else "" for k in metric_keys],
                    *[r.params.get(k, "") for k in varying]])
    path.write_text(buf.getvalue())


def stamp() -> str:
    """The one line that may differ between reruns; SOURCE_DATE_EPOCH pins it (reproducible builds)."""
    epoch = os.environ.get("SOURCE_DATE_EPOCH")
    now = time.gmtime(int(epoch)) if epoch and epoch.isdigit() else time.gmtime()
    return f"{STAMP_PREFIX}{time.strftime('%Y-%m-%d %H:%M:%S', now)} UTC by ablate {__version__}"


# ---------------------------------------------------------------- assembly
def assemble(title: str, parts: Sequence[Part]) -> tuple[Document, dict[str, object]]:
    """The document (every part's intro, then every part's sections, in order) and report.json's data."""
    doc = Document(title, stamp())
    data: dict[str, object] = {}
    for p in parts:
        doc.intro += p.intro
        doc.sections += p.sections
        shared = data.keys() & p.data.keys()
        if shared:  # a programming error: two sections would overwrite each other's numbers
            raise ValueError(f"report part {p.name!r} repeats the data key(s) {sorted(shared)}")
        data |= p.data
    return doc, data


def run_links(study: Study, uri: str) -> Links:
    """Where the report's HTML leads each name in the MLflow UI the store at ``uri`` is seen in: a variant
    to its runs (at every rung of a ladder), a rung to every variant's runs there, and a variant at a rung
    (a ladder's table cell) to the runs that cell compares: the variant's and the baseline's at that rung
    (each set a shared view of the runs page, written into the study's experiment)."""
    base, experiment, ladder = ui_base(uri), str(study.parent["experiment_id"]), bool(study.rungs)
    parts = study.rungs or {"": study}
    every = [r for part in parts.values() for r in part.runs]

    def link(runs: list[str]) -> str:
        return runs_link(uri, base, experiment, runs, ladder, record.FINAL + study.primary)

    names = {v: link([r.run_id for r in every if r.variant == v])
             for v in study.variants if any(r.variant == v for r in every)}
    pairs: dict[tuple[str, str], str] = {}
    for rung, part in study.rungs.items():
        names.setdefault(rung, link([r.run_id for r in part.runs]))
        for v in part.variants:
            cell = [r.run_id for r in part.runs if r.variant in (v, part.baseline)]
            if cell:
                pairs[(v, rung)] = link(cell)
    return Links(base, names, pairs)


def build_report(study: Study, out_dir: Path, links: Links | None = None) -> Report:
    """Write the report files for ``study`` into ``out_dir``; ``links``: report.html's links to the runs. A
    tuned arm's steps to a target are read at the tuned baseline's own final loss first
    (ablate/report/compute/target_reach.py)."""
    study = retarget(study)
    out_dir.mkdir(parents=True, exist_ok=True)
    fig_dir = out_dir / "figures"
    if fig_dir.exists():
        shutil.rmtree(fig_dir)  # a rerun must not keep figures the new report no longer has
    fig_dir.mkdir()
    inp = Inputs(study, fig_dir)
    made = [fn(inp) for fn in (SEARCH_PARTS if study.kind == "search" else ABLATION_PARTS)]
    parts = [p for p in made if p is not None]
    doc, data = assemble(f"{study.kind.capitalize()} report: {study.name}", parts)
    (out_dir / "report.md").write_text(render_markdown(doc))
    (out_dir / "report.html").write_text(render_html(doc, out_dir, links))
    write_runs_csv(study, out_dir / "runs.csv")
    (out_dir / "report.json").write_text(json.dumps(_clean(data), indent=2, sort_keys=True) + "\n")
    return Report(out_dir / "report.md", parts)


def untabulable(study: Study) -> str | None:
    """Why ``study`` has no effects against a baseline to put in a paper's table (None: it has some)."""
    if study.kind == "search":
        return "it is a search: its trials are compared with no baseline"
    if study.baseline is None:
        return "it has no baseline to compare with"
    done = sum(r.status == "finished" for r in study.runs)
    if not study.finished(study.baseline) or not any(study.finished(v) for v in study.variants
                                                     if v != study.baseline):
        return (f"no variant and its baseline both have a finished cell yet ({done} of {len(study.runs)} "
                "runs finished)")
    return None


def _write_tables(out_dir: Path, formats: Sequence[str]) -> None:
    """Each asked table of the effects, from ``out_dir``'s report.json, and where it went."""
    for fmt_name in formats:
        print(f"table: {write_table(out_dir, fmt_name)}")


def main_report(study: str, out: str | None = None, table_format: str | Sequence[str] | None = None,
                links: bool = True) -> int:
    """`ablate report STUDY [--out DIR] [--format latex|csv ...]`: STUDY is the study's spec file, its name
    or the parent run id; ``table_format`` (one or several) also writes the effects as tables
    (ablate/report/paper.py), from one build of the report, or from the report already in the folder when
    it is current (ablate/report/freshness.py). Exit 1 when a section failed or the report could not be
    logged to MLflow (the files are written either way); exit 2, with nothing written, when a table is
    asked of a study with nothing to tabulate. report.html links each variant and rung to its runs in the
    MLflow UI (`ablate ui STUDY` serves it with its links on the UI it starts) unless ``links`` is False
    (``--no-links``: a report committed beside its export, whose runs get new ids at each import)."""
    formats = [table_format] if isinstance(table_format, str) else list(dict.fromkeys(table_format or ()))
    loaded = load_study(study_name(study))
    why = untabulable(loaded) if formats else None
    if why is not None:  # before any file: a half-made report is no answer to "give me the table"
        raise AblateError(f"study {loaded.name}: no effects to tabulate as {' and '.join(formats)}: {why}; "
                          f"nothing written (`ablate status {loaded.name}` shows where its cells stand)")
    out_dir = Path(out) if out else Path("reports") / loaded.name
    digest = freshness.inputs_digest(loaded)
    if formats and freshness.is_current(out_dir, digest):  # a table of the report as it stands
        print(f"report: {out_dir / 'report.md'} is current ({len(loaded.runs)} runs): not rebuilt")
        _write_tables(out_dir, formats)
        return 0
    freshness.forget(out_dir)
    report = build_report(loaded, out_dir, run_links(loaded, resolve_tracking_uri(None)) if links
                          else None)
    _write_tables(out_dir, formats)  # the effects for a paper, from the report.json just written
    n_fig = len(list((out_dir / "figures").glob("*.png")))
    try:
        log_report_artifacts(loaded.parent["run_id"], out_dir)
        logged, ok = f"; logged under report/ in run {loaded.parent['run_id']}", True
    except Exception as exc:  # noqa: BLE001 - the files are written; a read-only store must not lose them
        logged, ok = f"; could not log it to MLflow ({type(exc).__name__}: {exc})", False
    print(f"report: {report.path} and {out_dir / 'report.html'} ({len(loaded.runs)} runs, {n_fig} figures)"
          f"{logged}")
    if report.failed:
        print(f"report: section(s) {', '.join(report.failed)} could not be made", file=sys.stderr)
    if ok and not report.failed:
        freshness.mark_current(out_dir, digest)
    return 0 if ok and not report.failed else 1


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main_report(sys.argv[1], sys.argv[2] if len(sys.argv) > 2 else None))
