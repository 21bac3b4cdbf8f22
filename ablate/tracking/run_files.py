"""MLflow runs to and from plain files: what `ablate export` / `ablate import` move between stores.

One run is a folder: ``run.json`` (name, status, start and end time, tags, params, every metric's full
history as ``[step, timestamp, value]`` rows, dataset inputs) and ``artifacts/`` with its small artifacts
(``spec.yaml``, ``environment.json``, ``summary.json``, samples). Checkpoints, logged models, tokenizers
and figures are left out (listed in run.json): the export is meant to be committed beside a report, and
nothing a report computes reads them.

Importing recreates the run in the current store (MLflow gives it a new id; the exported one is kept in the
tag ``ablate.origin_run_id`` so reports show the same ids before and after) with the same times, tags (the
user and source included) and the list of what the export left out (tag ``ablate.artifacts_left_out``), so
that everything read back (`ablate.tracking.read`) is what the exporting store held. Exporting an imported
run undoes both tags and writes the original ids, parent included: a study imported, continued and exported
again changes only the files of what changed.
"""

from __future__ import annotations

import json
import shutil
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any, TypedDict

from mlflow.entities import Dataset as DatasetEntity
from mlflow.entities import DatasetInput, InputTag, Metric, Param, RunTag
from mlflow.tracking import MlflowClient

from ablate.tracking import record
from ablate.tracking.mlflow_store import experiment_id, quiet_transfers, resolve_tracking_uri
from ablate.tracking.read import client

# Left out: checkpoints and models (large, and no report reads them), tokenizers (rebuilt from the data by
# the spec), a parent's earlier report, and figures (redrawn from the metric histories).
SKIPPED = ("checkpoints", "model", "weights", "report", "tokenizer")
SKIPPED_SUFFIXES = (".pt", ".pth", ".safetensors", ".png", ".pdf", ".svg")
MAX_ARTIFACT_BYTES = 2_000_000  # a bigger single file is left out too (and listed in run.json)
_BATCH = 1000  # MLflow's limit of metrics per log_batch
_MAX_TAG = 5000  # well under MLflow's tag value limit: a longer list is not carried (never seen: names only)
# Set by the import itself (name, parent) or about what is not exported (logged models).
_SET_ON_IMPORT = (record.RUN_NAME, record.PARENT_RUN, "mlflow.log-model.history")


def origin_id(run_id: str, tags: Mapping[str, str]) -> str:
    """The run's id in the store it was first logged in (itself unless it was imported)."""
    return tags.get(record.ORIGIN_RUN, run_id)


class RunFile(TypedDict):
    """An exported run's run.json, as `export_run` writes it and `ablate import` reads it."""

    run_id: str  # its origin id (see `origin_id`)
    run_name: str
    status: str
    experiment: str
    start_time: int  # ms since the epoch, MLflow's
    end_time: int | None
    tags: dict[str, str]
    params: dict[str, str]
    metrics: dict[str, list[list[float]]]  # name -> [step, timestamp, value] rows, in order
    inputs: list[dict[str, Any]]  # the dataset inputs, as MLflow holds them
    artifacts_left_out: list[str]


def export_run(run_id: str, folder: Path, parent_id: str | None = None) -> RunFile:
    """Write one run into ``folder`` (run.json + artifacts/); returns the run.json content. ``parent_id``:
    the id the run's parent is exported with (its origin id), written as the run's parent."""
    c = client()
    run = c.get_run(run_id)
    metrics: dict[str, list[list[float]]] = {}
    for key in sorted(run.data.metrics):
        history = c.get_metric_history(run_id, key)
        metrics[key] = [[m.step, m.timestamp, m.value] for m in sorted(history, key=lambda m: (m.step,
                                                                                                m.timestamp))]
    inputs = [{"name": d.dataset.name, "digest": d.dataset.digest, "source_type": d.dataset.source_type,
               "source": d.dataset.source, "schema": d.dataset.schema, "profile": d.dataset.profile,
               "tags": {t.key: t.value for t in d.tags}}
              for d in (run.inputs.dataset_inputs if run.inputs else [])]
    folder.mkdir(parents=True, exist_ok=True)
    tags = dict(run.data.tags)
    # What an earlier export of an imported run left out.
    earlier = json.loads(tags.pop(record.ARTIFACTS_LEFT_OUT, "[]"))
    left_out = sorted(set(_export_artifacts(c, run_id, folder / "artifacts")) | set(earlier))
    if parent_id is not None:
        tags[record.PARENT_RUN] = parent_id
    run_record: RunFile = {
        "run_id": origin_id(run_id, tags), "run_name": run.info.run_name, "status": run.info.status,
        "experiment": c.get_experiment(run.info.experiment_id).name,
        "start_time": run.info.start_time, "end_time": run.info.end_time,
        "tags": dict(sorted((k, v) for k, v in tags.items() if k != record.ORIGIN_RUN)),
        "params": dict(sorted(run.data.params.items())),
        "metrics": metrics, "inputs": inputs, "artifacts_left_out": left_out}
    (folder / "run.json").write_text(json.dumps(run_record, indent=1, sort_keys=True) + "\n")
    return run_record


def _export_artifacts(c: MlflowClient, run_id: str, dest: Path) -> list[str]:
    left_out: list[str] = []

    def walk(path: str | None) -> None:
        for f in c.list_artifacts(run_id, path):
            if f.path.split("/")[0] in SKIPPED or f.path.endswith(SKIPPED_SUFFIXES):
                left_out.append(f.path)
            elif f.is_dir:
                walk(f.path)
            elif (f.file_size or 0) > MAX_ARTIFACT_BYTES:
                left_out.append(f.path)
            else:
                with tempfile.TemporaryDirectory() as tmp, quiet_transfers():
                    local = Path(c.download_artifacts(run_id, f.path, tmp))
                    target = dest / f.path
                    target.parent.mkdir(parents=True, exist_ok=True)
                    shutil.copyfile(local, target)

    walk(None)
    return sorted(left_out)


def import_run(folder: Path, experiment: str, parent_run_id: str | None = None) -> str:
    """Recreate the run of ``folder`` in the current store under ``experiment``; returns its new id."""
    run_record = json.loads((folder / "run.json").read_text())
    c = client()
    exp_id = experiment_id(c, experiment, resolve_tracking_uri(None))
    tags = {k: v for k, v in run_record["tags"].items() if k not in _SET_ON_IMPORT}
    tags[record.ORIGIN_RUN] = origin_id(run_record["run_id"], run_record["tags"])
    left_out = json.dumps(run_record.get("artifacts_left_out", []))
    if left_out != "[]" and len(left_out) <= _MAX_TAG:
        tags[record.ARTIFACTS_LEFT_OUT] = left_out
    if parent_run_id:
        tags[record.PARENT_RUN] = parent_run_id
    run = c.create_run(exp_id, start_time=run_record["start_time"], tags=tags,
                       run_name=run_record["run_name"])
    new_id = run.info.run_id
    params = [Param(k, v) for k, v in run_record["params"].items()]
    metrics = [Metric(k, float(v), int(ts), int(step)) for k, rows in run_record["metrics"].items()
               for step, ts, v in rows]
    for i in range(0, len(params), 100):
        c.log_batch(new_id, params=params[i:i + 100])
    for i in range(0, len(metrics), _BATCH):
        c.log_batch(new_id, metrics=metrics[i:i + _BATCH])
    c.log_batch(new_id, tags=[RunTag(record.RUN_NAME, run_record["run_name"] or "")])
    inputs = [DatasetInput(DatasetEntity(d["name"], d["digest"], d["source_type"], d["source"], d["schema"],
                                         d["profile"]), [InputTag(k, v) for k, v in d["tags"].items()])
              for d in run_record.get("inputs", [])]
    if inputs:
        c.log_inputs(new_id, datasets=inputs)
    artifacts = folder / "artifacts"
    if artifacts.is_dir() and any(artifacts.iterdir()):
        with quiet_transfers():
            c.log_artifacts(new_id, str(artifacts))
    if run_record["status"] not in ("RUNNING", "SCHEDULED"):  # a study's parent may still be open: keep it so
        c.set_terminated(new_id, status=run_record["status"], end_time=run_record["end_time"])
    return new_id
