"""A study's parent MLflow run: opened or reopened (`open_parent`), what an ablation's shows (its
description: what it compares, the metric it ranks by, the cells and their outcome so far; the cells table
artifact), a search's trials table, and how either study ends it (`close_parent`, or `leave_open` for
another process to end)."""

from __future__ import annotations

import math
import sys
from collections.abc import Mapping, Sequence
from typing import Any

from optuna.trial import FrozenTrial

from ablate.errors import AblateError
from ablate.spec.experiment import ExperimentSpec
from ablate.study import optuna_attrs
from ablate.study.cell_queue import CellRecords
from ablate.study.derived_specs import SearchPlan
from ablate.study.study_plan import StudyPlan
from ablate.tracking import NullTracker, Tracker, record


def close_parent(tracker: NullTracker, *, note: str, table: Mapping[str, Sequence[object]],
                 table_artifact: str, why: str | None, done: bool, interrupted: bool,
                 done_text: tuple[str, str] | None = None) -> None:
    """Bring the parent run up to date (its description ``note``, the cells or trials ``table``) and end
    it the way the study ended: failed when a repeated failure stopped it (``why``, tagged as the error),
    finished when every cell or trial is done (``done_text`` = (text, artifact name) logged first),
    interrupted by a signal, else left open: cells or trials still run in other processes or machines."""
    tracker.set_tags({record.NOTE: note})
    tracker.log_table(table, table_artifact)
    if why:
        tracker.set_tags({record.ERROR: why})
        tracker.end("failed")
    elif done:
        if done_text is not None:
            tracker.log_text(*done_text)
        tracker.end("finished")
    elif interrupted:
        tracker.end("interrupted")
    else:
        tracker.detach()


def parent_description(plan: StudyPlan, records: CellRecords,
                       later: Mapping[str, StudyPlan] | None = None) -> str:
    """The study parent run's description (markdown in MLflow's UI): what it compares, the metric it
    ranks by, and the cells with their outcome so far; ``later`` (heading -> the arm's plan) adds each
    later arm's cells (each variant at its own best, the confirmation cells) under its heading."""
    abl = plan.spec.ablation
    assert abl is not None
    metric = record.final(plan.metric)
    rungs = f"{len(plan.rungs)} rungs x " if getattr(plan, "rungs", None) else ""
    lines = [f"**Ablation study {plan.name}**: design {abl.design}, {len(plan.variants)} variants x "
             f"{rungs}{len(plan.seeds)} seed(s) = {len(plan.cells)} cells.",
             f"Cells rank by **{metric}** ({plan.direction}): the best checkpoint on the whole validation "
             "split; child runs are named `variant · seed N`.", ""]
    if plan.spec.description:
        lines += [plan.spec.description, ""]
    align = "llrlrl" if rungs else "lrlrl"
    lines += markdown_table(cells_table(plan, records), align)
    for heading, arm in (later or {}).items():
        if arm.cells:
            lines += ["", f"**{heading[0].upper()}{heading[1:]}**", ""]
            lines += markdown_table(cells_table(arm, records), "lrlrl")
    return "\n".join(lines)


def markdown_table(columns: Mapping[str, Sequence[object]], align: str = "") -> list[str]:
    """The lines of a markdown table of ``columns`` (as MLflow's log_table takes them); ``align`` has an
    ``l`` or ``r`` per column (default left); an empty cell reads ``-``."""
    rule = ["---:" if a == "r" else "---" for a in align.ljust(len(columns), "l")]
    lines = ["| " + " | ".join(columns) + " |", "|" + "|".join(rule) + "|"]
    for row in zip(*columns.values(), strict=True):
        lines.append("| " + " | ".join("-" if v in (None, "") else str(v) for v in row) + " |")
    return lines


def cells_table(plan: StudyPlan, records: CellRecords) -> dict[str, list[object]]:
    """Columns of the cells table (variant, seed, status, metric, run id) as MLflow's log_table takes."""
    metric = record.final(plan.metric)
    cols: dict[str, list[Any]] = {"variant": [], "seed": [], "status": [], metric: [], "run": []}
    if getattr(plan, "rungs", None):  # a ladder: each cell's rung beside its variant
        cols = {"variant": [], "rung": [], **{k: v for k, v in cols.items() if k != "variant"}}
    for c in plan.cells:
        r = records.get(c.key)
        cols["variant"].append(c.label)
        if "rung" in cols:
            cols["rung"].append(c.rung)
        cols["seed"].append(c.seed)
        cols["status"].append(r.status if r else "pending")
        cols[record.final(plan.metric)].append(round(r.metric, 4) if r and r.metric is not None else None)
        cols["run"].append((r.run_id or "")[:8] if r else "")
    return cols


def trials_table(plan: SearchPlan, trials: Sequence[FrozenTrial]) -> dict[str, list[object]]:
    """Columns of a search's trials table (trial, state, each objective's final/ value, the sampled values,
    the MLflow run id): what the search's parent run shows as a description and a table artifact."""
    metrics = [record.final(m) for m in plan.metrics]
    fields = sorted({k for t in trials for k in t.params})
    cols: dict[str, list[Any]] = {"trial": [], "state": [], **{m: [] for m in metrics},
                                  **{f: [] for f in fields}, "run": []}
    for t in sorted(trials, key=lambda t: t.number):
        cols["trial"].append(t.number)
        cols["state"].append(t.state.name.lower())
        values = t.values or [None] * len(metrics)
        for m, v in zip(metrics, values, strict=True):
            cols[m].append(round(v, 4) if v is not None and math.isfinite(v) else None)
        for f in fields:
            cols[f].append(plan.decode(f, t.params[f]) if f in t.params else None)
        cols["run"].append(str(t.user_attrs.get(optuna_attrs.RUN_ID) or "")[:8])
    return cols


def search_description(plan: SearchPlan, name: str, budget: int, trials: Sequence[FrozenTrial] = ()) -> str:
    """The search parent run's description: what it searches, the metric(s) trials rank by, where the best
    trial's spec is, and (once trials ran) the trials table."""
    search = plan.search
    ranked = ", ".join(f"{d} **{record.final(m)}**" for m, d in zip(plan.metrics, plan.directions,
                                                                    strict=True))
    lines = [f"**Search {plan.spec.name}** (Optuna study `{name}`): {budget} trials, sampler "
             f"{search.sampler}, pruner {search.pruner.name}. Trials rank by {ranked}: the best checkpoint "
             f"on the whole validation split. The best trial's spec: `{record.BEST_SPEC_ARTIFACT}`; "
             "child runs are named `trial-N · seed S`.", ""]
    if plan.spec.description:
        lines += [plan.spec.description, ""]
    if trials:
        lines += markdown_table(trials_table(plan, trials))
    return "\n".join(lines)


def leave_open(tracker: NullTracker) -> None:
    """Stop holding a run without ending it (other processes or machines still add children)."""
    tracker.detach()


def open_parent(spec: ExperimentSpec, run_name: str, tags: Mapping[str, str], resume_run_id: str | None,
                description: str | None = None) -> NullTracker:
    """Start the study's parent MLflow run, or reopen the one the store remembers. A remembered run the
    tracking store no longer has (mlflow.db deleted, another MLFLOW_TRACKING_URI) gets a fresh parent."""
    if resume_run_id:
        try:
            return Tracker.start(spec, run_name=run_name, tags=tags, resume_run_id=resume_run_id)
        except AblateError as exc:
            print(f"note: {exc}; starting a new parent run", file=sys.stderr)
    return Tracker.start(spec, run_name=run_name, tags=tags, description=description)
