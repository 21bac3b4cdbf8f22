"""Reading studies back from MLflow for `ablate report`: the runs of a study (by name or parent run id) as
pandas rows, metric histories, dataset inputs, text artifacts, and logging the finished report on the
parent run. The store is the one `ablate.tracking.mlflow_store.resolve_tracking_uri` picks
(MLFLOW_TRACKING_URI, else ./mlflow.db).
"""

from __future__ import annotations

import difflib
import functools
import re
import shutil
import tempfile
from pathlib import Path
from typing import Any

import mlflow
import pandas as pd
from mlflow.exceptions import MlflowException
from mlflow.tracking import MlflowClient

from ablate.dburl import redacted
from ablate.errors import AblateError
from ablate.tracking import record

# not the package: its server module reads here
from ablate.tracking.mlflow_store import check_reachable, missing_local_store, resolve_tracking_uri, use_uri
from ablate.tracking.mlflow_store import quiet_transfers as _quiet

RUN_ID = re.compile(r"^[0-9a-f]{32}$")
STUDY_KINDS = record.STUDY_KINDS


def _uri() -> str:
    return resolve_tracking_uri(None)


def client() -> MlflowClient:
    uri = _uri()

    use_uri(uri)  # search_runs (pandas) is fluent-only; use_uri does not leak MLFLOW_TRACKING_URI
    return _client_for(uri)


@functools.lru_cache(maxsize=4)
def _client_for(uri: str) -> MlflowClient:
    check_reachable(uri)  # once per store (a failure is not cached): a one-line error, not minutes of retries
    return MlflowClient(tracking_uri=uri)


def _run_dict(run: Any) -> dict[str, Any]:
    return {
        "run_id": run.info.run_id,
        "experiment_id": run.info.experiment_id,
        "run_name": run.info.run_name or "",
        "status": run.info.status,
        "tags": dict(run.data.tags),
        "params": dict(run.data.params),
        "metrics": dict(run.data.metrics),
    }


def _quote(value: str) -> str:
    return "'" + value.replace("'", "\\'") + "'"


def tags_and_params(row: dict[str, Any]) -> tuple[dict[str, str], dict[str, str]]:
    """A ``search_runs`` frame row's tags and params, their prefixes ('tags.', 'params.') removed."""
    tags = {k[5:]: str(v) for k, v in row.items() if k.startswith("tags.") and isinstance(v, str)}
    params = {k[7:]: str(v) for k, v in row.items() if k.startswith("params.") and isinstance(v, str)}
    return tags, params


def find_study_runs(study: str) -> tuple[dict[str, Any], pd.DataFrame]:
    """The study's parent run (as a dict) and its child runs (``mlflow.search_runs`` frame).

    ``study`` is a study name (tag ``ablate.study`` on a run without a parent; a run tagged ``ablate.kind``
    ablation or search is preferred over a plain single run of the same experiment) or the parent's run id.
    Several parents with one name (a study started twice): the latest one wins. Unknown -> AblateError,
    and a local store that does not exist is not created.
    """
    missing = missing_local_store(_uri())
    if missing is not None:
        raise AblateError(f"unknown study {study!r}: no MLflow store at {missing} (nothing has been tracked "
                          "from this folder; run it here, or set MLFLOW_TRACKING_URI to its store)")
    c = client()
    parent = None
    if RUN_ID.match(study):
        try:
            parent = c.get_run(study)
        except MlflowException:
            parent = None
    if parent is None:
        found = mlflow.search_runs(search_all_experiments=True, output_format="list",
                                   filter_string=f"tags.`{record.STUDY}` = {_quote(study)}",
                                   order_by=["attributes.start_time DESC", "attributes.run_id ASC"])
        roots = [r for r in found if record.PARENT_RUN not in r.data.tags]
        studies = [r for r in roots if r.data.tags.get(record.KIND) in STUDY_KINDS]
        if not roots:
            raise AblateError(f"unknown study {study!r}: no MLflow parent run with that name or id "
                              f"in {redacted(_uri())}; {known_studies_text(study)}")
        parent = (studies or roots)[0]
    children = child_runs(parent.info.run_id, parent.info.experiment_id)
    if children.empty:
        raise AblateError(f"study {study!r}: run {parent.info.run_id} has no child runs (not an ablation or "
                          "search study, or none of its cells has started)")
    return _run_dict(parent), children


def known_studies(limit: int = 1000) -> list[str]:
    """The names of the studies (ablation and search parent runs) the store holds, latest first."""
    found = [r for kind in STUDY_KINDS  # MLflow's filter has no IN for tags
             for r in mlflow.search_runs(search_all_experiments=True, output_format="list", max_results=limit,
                                         filter_string=f"tags.`{record.KIND}` = {_quote(kind)}")]
    found.sort(key=lambda r: -(r.info.start_time or 0))
    names = [r.data.tags.get(record.STUDY) or r.info.run_name for r in found
             if record.PARENT_RUN not in r.data.tags]
    return list(dict.fromkeys(n for n in names if n))


def known_studies_text(study: str) -> str:
    """What an unknown study's message adds: the studies the store has (a close one suggested)."""
    names = known_studies()
    if not names:
        return "the store holds no study yet (`ablate study SPEC` or `ablate tune SPEC` makes one)"
    close = difflib.get_close_matches(study, names, n=1)
    shown = ", ".join(names[:20]) + (f" and {len(names) - 20} more" if len(names) > 20 else "")
    return f"its studies: {shown}" + (f"; did you mean {close[0]!r}?" if close else "")


def child_runs(run_id: str, experiment_id: str) -> pd.DataFrame:
    """The runs whose parent is ``run_id`` (``mlflow.search_runs`` frame; empty when none): a study's
    cells and searches, or a variant's search's trials."""
    client()
    found = mlflow.search_runs(experiment_ids=[experiment_id],
                               filter_string=f"tags.`{record.PARENT_RUN}` = {_quote(run_id)}")
    return found if isinstance(found, pd.DataFrame) else pd.DataFrame()


def metric_history(run_id: str, key: str) -> list[tuple[int, float]]:
    """(step, value) sorted by step; a step logged twice (a resumed run) keeps its latest value."""
    by_step: dict[int, tuple[int, float]] = {}
    for m in client().get_metric_history(run_id, key):
        if m.step not in by_step or m.timestamp >= by_step[m.step][0]:
            by_step[m.step] = (m.timestamp, m.value)
    return [(step, by_step[step][1]) for step in sorted(by_step)]


def dataset_inputs(run_id: str) -> list[tuple[str, str, str]]:
    """(name, digest, source) of every dataset logged as the run's input, sorted."""
    run = client().get_run(run_id)
    inputs = run.inputs.dataset_inputs if run.inputs else []
    return sorted((d.dataset.name, d.dataset.digest, d.dataset.source) for d in inputs)


def list_artifacts(run_id: str, path: str | None = None) -> list[str]:
    return sorted(f.path for f in client().list_artifacts(run_id, path))


def download_artifact(run_id: str, path: str, dst_dir: str | Path) -> Path | None:
    """Copy one artifact (file or folder) into ``dst_dir``; None when the run does not have it."""
    parent = str(Path(path).parent) if "/" in path else None
    if Path(path).name not in {Path(p).name for p in list_artifacts(run_id, parent)}:
        return None
    Path(dst_dir).mkdir(parents=True, exist_ok=True)
    with _quiet():
        return Path(client().download_artifacts(run_id, path, str(dst_dir)))


def read_text_artifact(run_id: str, path: str) -> str | None:
    with tempfile.TemporaryDirectory() as tmp:
        local = download_artifact(run_id, path, tmp)
        return local.read_text() if local is not None and local.is_file() else None


def log_report_artifacts(parent_run_id: str, folder: str | Path,
                         artifact_path: str = record.REPORT_DIR) -> None:
    """Attach a written report folder to the study's parent run (replacing an earlier report)."""
    c = client()
    with tempfile.TemporaryDirectory() as tmp:
        # Copy first: the artifact store must not see files being rewritten mid-upload.
        staged = Path(tmp) / "report"
        shutil.copytree(folder, staged)
        with _quiet():
            c.log_artifacts(parent_run_id, str(staged), artifact_path)


def run_metrics(run_id: str, spec_uri: str | None = None) -> dict[str, float] | None:
    """A run's latest metric values in the store ``spec_uri`` resolves to (the environment's first); None
    where the store cannot be reached or holds no such run."""
    try:
        return dict(_client_for(resolve_tracking_uri(spec_uri)).get_run(run_id).data.metrics)
    except (AblateError, MlflowException, OSError):
        return None


def run_tags(run_id: str) -> dict[str, str]:
    """A run's tags (its study, variant, seed and spec hash: what an exported model records of it)."""
    try:
        return dict(client().get_run(run_id).data.tags)
    except MlflowException as exc:
        raise AblateError(f"no MLflow run {run_id} in {redacted(_uri())}: {exc.message}") from None


def cell_run_id(study: str, variant: str, seed: int) -> str:
    """The run of one cell of a study (``ablate.variant`` and ``ablate.seed``), the latest finished one where
    a cell was run more than once; AblateError naming the variants and seeds the study has otherwise."""
    _, children = find_study_runs(study)
    variant_col, seed_col, status_col = (f"tags.{record.VARIANT}", f"tags.{record.SEED}",
                                         f"tags.{record.STATUS}")
    for col in (variant_col, seed_col, status_col):
        if col not in children.columns:
            children[col] = None
    rows = children[(children[variant_col] == variant) & (children[seed_col] == str(seed))]
    finished = rows[rows[status_col] == "finished"]
    chosen = finished if not finished.empty else rows
    if chosen.empty:
        variants = sorted({str(v) for v in children[variant_col].dropna()})
        seeds = sorted({int(s) for s in children[seed_col].dropna() if str(s).isdigit()})
        seed_text = f"{seeds[0]}-{seeds[-1]}" if seeds else "none"
        raise AblateError(f"study {study!r} has no cell {variant}:{seed}; its variants: "
                          f"{', '.join(variants)}; its seeds: {seed_text}")
    return str(chosen.sort_values("start_time", ascending=False).iloc[0]["run_id"])
