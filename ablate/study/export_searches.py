"""A study's tuning searches (``ablation.tune``) in its export, and back: `ablate export` writes
each variant's search run and its trials' runs beside the cells, and `ablate import` recreates them in
MLflow and each search's Optuna study (its trials, their values and sampled points), so that the report
made from an import has the same tuning sections and `ablate study` continues without searching again.

    searches/<i>/run/           the search run (ablate/tracking/run_files.py: run.json + artifacts/)
    searches/<i>/trials/<k>/    each finished, pruned or diverged trial (failed ones are not results)

A trial's point is read back from its run's params (the spec flattened, as MLflow holds it) over the
tuning space the parent recorded (``ablate.tune``); its distribution is the space's, widened to the value
where the baseline lay outside the searched range (its first trial runs it all the same).
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, TypedDict

import optuna
import pandas as pd
from optuna.distributions import (
    BaseDistribution,
    CategoricalChoiceType,
    CategoricalDistribution,
    FloatDistribution,
    IntDistribution,
)
from optuna.trial import TrialState

from ablate.errors import AblateError
from ablate.spec import metricnames
from ablate.spec.study_sections import SearchParam
from ablate.study import optuna_attrs
from ablate.study.derived_specs import show
from ablate.study.optuna_store import Store, open_study
from ablate.tracking import record
from ablate.tracking.read import child_runs
from ablate.tracking.run_files import RunFile, export_run, import_run

TRIAL_RESULTS = ("finished", "pruned", "diverged")
STATES = {"finished": TrialState.COMPLETE, "pruned": TrialState.PRUNED, "diverged": TrialState.PRUNED}


class SearchIndex(TypedDict):
    """One exported search in study.json's ``searches``: its variant, folder, trials and Optuna study."""

    variant: str
    folder: str  # searches/<i>, under the export
    trials: int
    optuna_study: str | None


def export_searches(experiment_id: str, frame: pd.DataFrame, dest: Path, parent_id: str
                    ) -> list[SearchIndex]:
    """Write each variant's latest search run and its trials under ``dest``/searches; their index for
    study.json (``experiment_id``: the study's MLflow experiment; ``parent_id``: the parent's id as
    exported)."""
    latest: dict[str, dict[str, Any]] = {}
    for rec in frame.sort_values("start_time").to_dict("records"):
        if rec.get(f"tags.{record.KIND}") == "search":
            latest[str(rec.get(f"tags.{record.VARIANT}"))] = rec
    out: list[SearchIndex] = []
    for i, (variant, rec) in enumerate(sorted(latest.items())):
        folder = dest / "searches" / str(i)
        run_record = export_run(str(rec["run_id"]), folder / "run", parent_id=parent_id)
        trials = child_runs(str(rec["run_id"]), experiment_id)
        rows = trials.sort_values("start_time").to_dict("records") if not trials.empty else []
        kept = [t for t in rows if t.get(f"tags.{record.STATUS}") in TRIAL_RESULTS]
        for k, t in enumerate(kept):
            export_run(str(t["run_id"]), folder / "trials" / str(k), parent_id=run_record["run_id"])
        out.append({"variant": variant, "folder": f"searches/{i}", "trials": len(kept),
                    "optuna_study": rec.get(f"tags.{record.OPTUNA_STUDY}")})
    return out


def import_searches(src: Path, searches: Sequence[SearchIndex], experiment: str, parent_id: str,
                    store: Store) -> int:
    """Recreate the export's searches under the imported parent, in MLflow and in ``store``; the trials
    added to Optuna (a search the store already holds keeps its trials)."""
    if not searches:
        return 0
    parent = json.loads((src / "parent" / "run.json").read_text())
    tune = json.loads(parent["tags"].get(record.TUNE, "null"))
    if tune is None:
        raise AblateError(f"{src}: the export has searches but its parent records no tuning space "
                          f"({record.TUNE})")
    space = {k: SearchParam(**v) for k, v in tune["space"].items()}
    added = 0
    for s in searches:
        folder = src / s["folder"]
        run = json.loads((folder / "run" / "run.json").read_text())
        search_id = import_run(folder / "run", experiment, parent_id)
        metric = record.unfinal(run["tags"].get(record.METRIC, ""))
        study = open_study(store, str(s["optuna_study"]), [metricnames.direction(metric)])
        assert study is not None
        known = bool(study.get_trials(deepcopy=False))
        study.set_user_attr(optuna_attrs.PARENT, search_id)
        for k in range(int(s["trials"])):
            trial_folder = folder / "trials" / str(k)
            trial_id = import_run(trial_folder, experiment, search_id)
            if not known:
                run_record = json.loads((trial_folder / "run.json").read_text())
                study.add_trial(_trial(run_record, trial_id, space, tune["baseline"], metric))
                added += 1
    return added


def _trial(run_record: RunFile, run_id: str, space: dict[str, SearchParam], baseline: Mapping[str, object],
           metric: str) -> optuna.trial.FrozenTrial:
    """A trial of an exported run: its state, value (the final metric), point and attributes."""
    status = run_record["tags"][record.STATUS]
    params: dict[str, CategoricalChoiceType] = {}
    dists: dict[str, BaseDistribution] = {}
    for name, p in space.items():
        if name not in run_record["params"]:
            continue
        value = _value(run_record["params"][name], p, name, run_record["run_name"])
        params[name], dists[name] = value, _distribution(p, value)
    rows = run_record["metrics"].get(record.final(metric), [])
    value = float(rows[-1][2]) if rows and status == "finished" else None
    state = STATES[status] if value is None or math.isfinite(value) else TrialState.PRUNED
    attrs: dict[str, Any] = {optuna_attrs.STATUS: status, optuna_attrs.RUN_ID: run_id}
    if all(show(params.get(k)) == show(v) for k, v in baseline.items()):
        attrs[optuna_attrs.BASELINE] = True
    return optuna.trial.create_trial(state=state, value=value if state == TrialState.COMPLETE else None,
                                     params=params, distributions=dists, user_attrs=attrs)


def _value(text: str, p: SearchParam, name: str, run: str) -> CategoricalChoiceType:
    """A sampled value from its MLflow param (JSON for anything but a string), as the sampler holds it."""
    try:
        value = json.loads(text)
    except ValueError:
        value = text
    if p.choice is not None:
        encoded = not all(_primitive(c) for c in p.choice)
        for c in p.choice:
            if c == value or show(c) == show(value):
                return json.dumps(c, sort_keys=True) if encoded else c
        raise AblateError(f"exported trial {run!r}: {name}={text} is none of the tuning space's choices")
    return int(value) if p.int else float(value)


def _distribution(p: SearchParam, value: CategoricalChoiceType) -> BaseDistribution:
    """The space's distribution of one dimension, widened to hold ``value`` (a baseline off the range)."""
    if p.choice is not None:  # choices Optuna cannot hold travel as JSON text, as the search encoded them
        primitive = all(_primitive(c) for c in p.choice)
        return CategoricalDistribution(list(p.choice) if primitive else [json.dumps(c, sort_keys=True)
                                                                          for c in p.choice])
    assert p.low is not None and p.high is not None and isinstance(value, int | float)
    low, high = min(p.low, value), max(p.high, value)
    widened = (low, high) != (p.low, p.high)  # its step no longer divides the range: drop it
    if p.int:
        return IntDistribution(int(low), int(high), log=p.log, step=1 if widened else int(p.step or 1))
    return FloatDistribution(low, high, log=p.log, step=None if widened else p.step)


def _primitive(value: object) -> bool:
    return value is None or isinstance(value, str | int | float | bool)
