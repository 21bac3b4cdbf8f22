"""`ablate export STUDY` and `ablate import DIR`: a study's finished cells as a small folder, and back.

The folder (committed beside the study's report, e.g. ``reports/<study>/export/``)::

    study.json              format, study name, MLflow experiment, Optuna study, metric, cells
    parent/                 the study's parent run (ablate/tracking/run_files.py: run.json + artifacts/)
    cells/<cell key>/       one finished (or diverged) cell each: params, tags, metric histories, spec.yaml
    searches/<i>/           with ablation.tune: each search and its trials (study/export_searches.py)

Failed and unfinished cells are not exported (they are not results), nor checkpoints. Importing recreates
the runs in the current MLflow store (a fresh one: a study that is already there is refused) and, in the
Optuna store (``--storage``, default the local journal), one COMPLETE trial per cell with the attributes
`ablate study` identifies it by (its spec hash and seed), its value (the study metric's last logged value,
which is what the cell reported when it finished) and its evaluation history. Afterwards `ablate study
SPEC` continues the study, skipping the imported cells, and `ablate report STUDY` rebuilds the report.
"""

from __future__ import annotations

import json
import math
import shutil
import tempfile
from pathlib import Path
from typing import Any, TypedDict

import optuna
from optuna.distributions import BaseDistribution
from optuna.trial import TrialState

from ablate.errors import AblateError
from ablate.spec import metricnames
from ablate.spec.study_ref import study_name
from ablate.study import optuna_attrs
from ablate.study.cell_queue import CellQueue
from ablate.study.export_searches import SearchIndex, export_searches, import_searches
from ablate.study.optuna_store import Store
from ablate.tracking import record
from ablate.tracking.read import find_study_runs
from ablate.tracking.run_files import RunFile, export_run, import_run

FORMAT = "ablate-study-export/1"
RESULTS = ("finished", "diverged")


def main_export(study: str, out: str | None = None) -> int:
    """Write the study's finished cells to ``out`` (default reports/<study>/export); replaces an older
    export there atomically (written beside it, then moved into place)."""
    study = study_name(study)  # a spec file names its study
    parent, frame = find_study_runs(study)
    tags = parent["tags"]
    if tags.get(record.KIND) != "ablation":
        raise AblateError(f"study {study!r} is not an ablation study ({record.KIND} "
                          f"{tags.get(record.KIND)!r}): only ablation studies are exported")
    name = tags.get(record.STUDY, study)
    dest = Path(out or Path("reports") / name / "export")
    latest: dict[str, dict[str, Any]] = {}  # cell key -> its latest finished or diverged run
    for rec in frame.sort_values("start_time").to_dict("records"):
        if rec.get(f"tags.{record.STATUS}") in RESULTS and isinstance(rec.get(f"tags.{record.CELL}"), str):
            latest[rec[f"tags.{record.CELL}"]] = rec
    dest.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=".export-", dir=dest.parent))
    try:
        run_record = export_run(parent["run_id"], staging / "parent")
        for key, rec in sorted(latest.items()):
            export_run(str(rec["run_id"]), staging / "cells" / key, parent_id=run_record["run_id"])
        meta: ExportMeta = {"format": FORMAT, "study": name, "experiment": run_record["experiment"],
                "optuna_study": tags.get(record.OPTUNA_STUDY), "metric": tags.get(record.METRIC),
                "cells": sorted(latest)}
        # ablation.tune's searches
        searches = export_searches(str(parent["experiment_id"]), frame, staging, run_record["run_id"])
        if searches:
            meta["searches"] = searches
        (staging / "study.json").write_text(json.dumps(meta, indent=1, sort_keys=True) + "\n")
        if dest.exists():
            shutil.rmtree(dest)
        staging.rename(dest)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    skipped = int(len(frame)) - len(latest) - len(searches)
    tuned = f" and {len(searches)} tuning searches ({sum(s['trials'] for s in searches)} trials)" \
        if searches else ""
    print(f"exported study {name}: {len(latest)} finished cells{tuned} to {dest}"
          + (f" ({skipped} failed, unfinished or superseded runs left out)" if skipped else ""))
    return 0


class ExportMeta(TypedDict, total=False):
    """An export's study.json: its format, the study, its MLflow experiment and Optuna study, the deciding
    metric, every cell's key and (with ablation.tune) the searches."""

    format: str  # FORMAT
    study: str
    experiment: str
    optuna_study: str | None
    metric: str | None
    cells: list[str]
    searches: list[SearchIndex]


def _meta(folder: Path) -> ExportMeta:
    try:
        meta = json.loads((folder / "study.json").read_text())
    except (OSError, ValueError) as exc:
        raise AblateError(f"{folder}: not a study export (study.json: {exc})") from None
    if meta.get("format") != FORMAT:
        raise AblateError(f"{folder}/study.json: format {meta.get('format')!r}, expected {FORMAT!r}")
    return meta


def _value(run: RunFile, metric: str, direction: str) -> tuple[float, dict[int, float]]:
    """The cell's value (last logged, the final evaluation) and its history by step (finite values)."""
    rows = sorted(run["metrics"].get(metric, []), key=lambda r: (r[0], r[1]))  # (step, timestamp, value)
    # The final evaluation is logged one step past training, with train/wall_time_s (ablate/run/runner.py);
    # the trial's reports were the evaluations during training only.
    final = {int(r[0]) for r in run["metrics"].get(metricnames.WALL_TIME, [])}
    history = {int(step): float(v) for step, _, v in rows
               if math.isfinite(float(v)) and int(step) not in final}
    value = float(rows[-1][2]) if rows else math.nan
    if not math.isfinite(value):  # a diverged cell: the worst value, as CellQueue.finish records it
        value = math.inf if direction == "minimize" else -math.inf
    return value, history


def main_import(folder: str, storage: str | None = None) -> int:
    """Recreate an exported study in the current MLflow store and the Optuna store ``storage``."""
    src = Path(folder)
    meta = _meta(src)
    try:
        find_study_runs(meta["study"])
    except AblateError:
        pass  # not there: what an import needs
    else:
        raise AblateError(f"study {meta['study']!r} is already in this MLflow store: import into a fresh one "
                          "(another MLFLOW_TRACKING_URI or working directory)")
    runs: dict[str, RunFile] = {}  # every cell read (and checked) before anything is written
    for key in meta["cells"]:
        try:
            runs[key] = json.loads((src / "cells" / key / "run.json").read_text())
            missing = {record.SEED, record.STATUS} - set(runs[key]["tags"])
            if missing:
                raise KeyError(f"tags {sorted(missing)} missing")
        except (OSError, ValueError, KeyError) as exc:
            raise AblateError(f"{src / 'cells' / key}: not an exported cell ({type(exc).__name__}: {exc})"
                              ) from None
    metric = str(meta["metric"])
    direction = metricnames.direction(metric)
    queue = CellQueue(Store(storage), str(meta["optuna_study"]), direction)
    assert queue.study is not None
    have = set(queue.latest())
    parent_id = import_run(src / "parent", meta["experiment"])
    queue.set(optuna_attrs.PARENT, parent_id)
    added = 0
    for key in meta["cells"]:
        run = runs[key]
        run_id = import_run(src / "cells" / key, meta["experiment"], parent_id)
        if key in have:
            continue  # the Optuna store already knows the cell: its trial stays
        tags = run["tags"]
        value, history = _value(run, metric, direction)
        attrs = {optuna_attrs.CELL: key, optuna_attrs.CELL_LABEL: tags.get(record.VARIANT, key),
                 optuna_attrs.CELL_SEED: int(tags[record.SEED]),
                 optuna_attrs.CELL_SPEC_HASH: tags.get(record.SPEC_HASH, ""),
                 optuna_attrs.CELL_OVERRIDES: json.dumps(json.loads(tags.get(record.OVERRIDES, "{}")),
                                                         sort_keys=True),
                 optuna_attrs.CELL_ARM: tags.get(record.ARM, record.BASELINE_ARM),
                 optuna_attrs.STATUS: tags[record.STATUS], optuna_attrs.RUN_ID: run_id}
        dists: dict[str, BaseDistribution] = {}
        queue.study.add_trial(optuna.trial.create_trial(
            state=TrialState.COMPLETE, value=value, params={}, distributions=dists, user_attrs=attrs,
            intermediate_values=history))
        added += 1
    # ablation.tune's searches
    trials = import_searches(src, meta.get("searches") or [], meta["experiment"], parent_id, queue.store)
    searches = f", {len(meta['searches'])} searches ({trials} trials into Optuna)" if meta.get("searches") \
        else ""
    print(f"imported study {meta['study']}: parent run {parent_id}, {len(meta['cells'])} cells into MLflow "
          f"experiment {meta['experiment']!r}; {added} cell trials into {queue.store.describe()} "
          f"(Optuna study {meta['optuna_study']}){searches}")
    return 0
