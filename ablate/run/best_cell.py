"""`--study STUDY --best` of `ablate generate`, `translate` and `evaluate`: the best finished cell of a study
by the metric it ranks its cells by (the parent run's ``ablate.metric`` tag, a ``final/`` reading), so that
nobody copies a run id out of `ablate runs` by hand."""

from __future__ import annotations

import math
import sys

from ablate.errors import AblateError
from ablate.spec import metricnames
from ablate.spec.study_ref import study_name
from ablate.tracking import record
from ablate.tracking.read import find_study_runs


def best_cell(study: str) -> str:
    """The run id of ``study``'s best finished cell (a spec file, a study name or its parent run id); says
    which on standard error (standard output stays the command's own)."""
    name = study_name(study)
    parent, children = find_study_runs(name)
    metric = parent["tags"].get(record.METRIC, "").split(", ")[0]
    column = f"metrics.{metric}"
    if not metric or column not in children:
        raise AblateError(f"study {name!r}: its parent run names no metric its cells logged (tag "
                          f"{record.METRIC}): give a RUN_ID (`ablate runs --experiment {name}`)")
    status = children.get(f"tags.{record.STATUS}")
    done = children[(status == "finished") if status is not None else children[column].notna()]
    done = done[done[column].map(lambda v: isinstance(v, float) and math.isfinite(v))]
    if done.empty:
        raise AblateError(f"study {name!r}: no finished cell has {metric} yet (`ablate status {study}`)")
    higher = metricnames.direction(record.unfinal(metric)) == "maximize"
    best = done.loc[done[column].idxmax() if higher else done[column].idxmin()]
    label, seed = best.get(f"tags.{record.VARIANT}", "?"), best.get(f"tags.{record.SEED}", "?")
    print(f"best cell of study {name} by {metric} ({'highest' if higher else 'lowest'}): {label}, seed "
          f"{seed}, {best[column]:.4g}, run {best['run_id']}", file=sys.stderr)
    return str(best["run_id"])


def chosen_run(run_id: str | None, study: str | None, best: bool) -> str:
    """RUN_ID, or ``--study STUDY --best``'s cell: exactly one of them."""
    if study is not None and not best:
        raise AblateError("--study needs --best: the study's best cell by its metric (or give a RUN_ID)")
    if best and study is None:
        raise AblateError("--best needs --study STUDY (its spec file or name)")
    if study is not None and run_id is not None:
        raise AblateError(f"give a RUN_ID or --study {study} --best, not both")
    if study is not None:
        return best_cell(study)
    if run_id is None:
        raise AblateError("give a RUN_ID (`ablate runs`) or --study STUDY --best")
    return run_id
