"""`Tracker`: one MLflow run written through an MlflowClient bound to its store (`NullTracker` when
tracking is off); statuses, MLflow's value limits, the outbox for a server that does not answer."""

from __future__ import annotations

import atexit
import getpass
import json
import math
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any, Literal

from mlflow import MlflowClient
from mlflow.entities import Dataset as DatasetEntity
from mlflow.entities import DatasetInput, InputTag, Metric, Param, RunTag
from mlflow.exceptions import MlflowException

import ablate.tracking.record as R
from ablate.errors import AblateError
from ablate.tracking.outbox import FINISH_WAIT_S, Courier
from ablate.tracking.store import (
    check_reachable,
    dataset_source,
    download_artifacts,
    environment,
    environment_tags,
    experiment_id,
    is_server_uri,
    resolve_tracking_uri,
)

if TYPE_CHECKING:
    import torch

    from ablate.spec.experiment import ExperimentSpec, ModelSpec


Status = Literal["finished", "diverged", "failed", "pruned", "killed", "interrupted"]
# A diverged run is a result (its last metrics say how it failed), so it is FINISHED for MLflow. A pruned
# trial was stopped on purpose by the tuner and its metrics are valid up to the prune step: also FINISHED.
# KILLED for interruptions (SIGTERM/Ctrl-C: interrupted; a dead worker: killed), FAILED for crashes.
MLFLOW_STATUS: dict[str, str] = {
    "finished": "FINISHED", "diverged": "FINISHED", "pruned": "FINISHED",
    "failed": "FAILED", "killed": "KILLED", "interrupted": "KILLED",
}
# MLflow's limits (mlflow.utils.validation): values longer than these are rejected, not truncated.
MAX_PARAM_VALUE = 6000
MAX_TAG_VALUE = 8000
MAX_PARAMS_PER_BATCH = 100
MAX_METRICS_PER_BATCH = 1000


def _param_value(value: Any) -> str:
    """Short strings: strings as they are, everything else (lists, bools, None) as compact JSON."""
    text = value if isinstance(value, str) else json.dumps(value, separators=(",", ":"), default=str)
    return text if len(text) <= MAX_PARAM_VALUE else text[: MAX_PARAM_VALUE - 3] + "..."


def _tag_value(value: Any) -> str:
    text = str(value)
    return text if len(text) <= MAX_TAG_VALUE else text[: MAX_TAG_VALUE - 3] + "..."


# ---------------------------------------------------------------- trackers
class NullTracker:
    """The Tracker API doing nothing: what `Tracker.start` returns when ``tracking.enabled`` is false."""

    run_id: str | None = None
    experiment_id: str | None = None
    tracking_uri: str | None = None

    def log_params_from_spec(self, spec: ExperimentSpec) -> None: ...
    def log_params(self, params: Mapping[str, Any]) -> None: ...
    def log_metrics(self, metrics: Mapping[str, float], step: int,
                    timestamp_ms: int | None = None) -> None: ...
    def set_tags(self, tags: Mapping[str, Any]) -> None: ...
    def log_artifact(self, path: str | Path, artifact_path: str | None = None) -> None: ...
    def log_artifacts(self, directory: str | Path, artifact_path: str | None = None) -> None: ...
    def log_text(self, text: str, artifact_file: str) -> None: ...
    def log_dict(self, data: Mapping[str, Any], artifact_file: str) -> None: ...
    def log_figure(self, figure: Any, artifact_file: str) -> None: ...
    def log_dataset(self, name: str, digest: str, source: str, context: str = "train") -> None: ...
    def log_loss_curve(self, train: Sequence[tuple[int, float]],
                       val: Sequence[tuple[int, float]]) -> None: ...
    def log_table(self, columns: Mapping[str, Sequence[Any]], artifact_file: str) -> None: ...
    def log_model(self, model: torch.nn.Module, name: str = "model", *, step: int = 0,
                  model_spec: ModelSpec | None = None) -> str | None:
        return None
    def last_step(self, key: str) -> int | None:
        return None
    def flush(self) -> None: ...
    def use_outbox(self, folder: Path) -> None: ...
    def delayed(self) -> int:
        return 0
    def detach(self) -> None: ...
    def end(self, status: Status = "finished") -> None: ...

    def __enter__(self) -> NullTracker:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        if exc_type is None:
            self.end("finished")
        elif issubclass(exc_type, KeyboardInterrupt):
            self.end("killed")
        else:
            try:
                self.set_tags({R.ERROR: f"{exc_type.__name__}: {exc}"})
            finally:
                self.end("failed")


_OPEN: set[Tracker] = set()  # runs not ended yet, ended as killed at interpreter exit


@atexit.register
def _end_open_runs() -> None:
    # An interpreter exiting with a run still open (sys.exit in a worker, an unhandled signal turned into
    # SystemExit) must not leave it RUNNING forever.
    for tracker in list(_OPEN):
        try:
            tracker.end("killed")
        except Exception:  # noqa: BLE001 - best effort at exit; the store may already be gone
            pass


class Tracker(NullTracker):
    """One MLflow run. Use `Tracker.start`; as a context manager it ends failed on an exception, killed on
    Ctrl-C, finished otherwise."""

    def __init__(self, client: MlflowClient, run_id: str, experiment_id: str, tracking_uri: str, *,
                 async_logging: bool = False) -> None:
        self.client = client
        self.run_id: str = run_id
        self.experiment_id: str = experiment_id
        self.tracking_uri: str = tracking_uri
        self.async_logging = async_logging
        self._pending: list[Any] = []  # RunOperations of asynchronous log_batch calls, awaited by flush()
        self._last_step: dict[str, int] = {}
        self._params: dict[str, str] = {}  # what the run holds already (MLflow params cannot change)
        self._changed: set[str] = set()
        self._monitor: Any = None
        self._model_spec: ModelSpec | None = None  # what the run's model is built from (log_model)
        self._ended = False
        self._outbox: Courier | None = None  # a tracking server's outage queue, set by `use_outbox`
        _OPEN.add(self)

    @classmethod
    def start(cls, spec: ExperimentSpec, *, experiment: str | None = None, run_name: str | None = None,
              tags: Mapping[str, Any] | None = None, parent_run_id: str | None = None,
              resume_run_id: str | None = None, variant: str | None = None,
              description: str | None = None) -> NullTracker:
        """Open a run (or reopen ``resume_run_id``, status back to RUNNING) and log the spec, tags, and the
        ``spec.yaml`` / ``environment.json`` artifacts. Experiment: ``experiment`` > ``tracking.experiment``
        > ``spec.name``. ``variant`` (default: the run name, else the spec's name) is the run's
        ``ablate.variant``; ``description`` (default: the spec's) its description in the MLflow UI. A study's
        parent run (``ablate.kind`` ablation or search in ``tags``) gets no seed or spec hash: the cells
        have their own."""
        cfg = spec.tracking
        if not cfg.enabled:
            return NullTracker()
        uri = resolve_tracking_uri(cfg.uri)
        check_reachable(uri)  # a one-line error now, not minutes of MLflow's retries and a traceback
        client = MlflowClient(uri)
        env = environment()
        exp_name = experiment or cfg.experiment or spec.name
        is_study = (tags or {}).get(R.KIND) in R.STUDY_KINDS
        all_tags: dict[str, Any] = {
            R.STUDY: exp_name, R.VARIANT: variant or run_name or spec.name,
            **({} if is_study else {R.SEED: spec.seed, R.SPEC_HASH: spec.spec_hash}),
            R.USER: getpass.getuser(), R.SOURCE_TYPE: "LOCAL",
            R.SOURCE_NAME: Path(sys.argv[0]).name if sys.argv and sys.argv[0] else "python",
            **environment_tags(),
        }
        note = spec.description if description is None else description
        if note:
            all_tags[R.NOTE] = note
        if parent_run_id:
            all_tags[R.PARENT_RUN] = parent_run_id
        all_tags.update(tags or {})
        all_tags[R.STATUS] = "running"
        if resume_run_id:
            try:
                run = client.get_run(resume_run_id)
            except MlflowException as e:
                raise AblateError(f"cannot resume MLflow run {resume_run_id} in {uri}: {e.message}") from e
            client.update_run(resume_run_id, status="RUNNING")
            run_id, exp_id = resume_run_id, str(run.info.experiment_id)
            # The run keeps the identity tags it was created with; only the caller's and the status change.
            all_tags = {**(tags or {}), R.STATUS: "running"}
        else:
            exp_id = experiment_id(client, exp_name, uri, description=spec.description)
            created = client.create_run(exp_id, run_name=run_name,
                                        tags={k: _tag_value(v) for k, v in all_tags.items()})
            run_id = created.info.run_id
        tracker = cls(client, run_id, exp_id, uri, async_logging=cfg.async_logging)
        tracker._model_spec = spec.model
        try:
            if resume_run_id:
                tracker.set_tags(all_tags)
                tracker._load_last_steps()
                tracker._params = dict(run.data.params)
            tracker.log_params_from_spec(spec)
            tracker._log_spec_and_environment(spec, env, resumed=resume_run_id is not None)
            if cfg.system_metrics:
                tracker._start_system_metrics(resumed=resume_run_id is not None)
        except BaseException:
            tracker.end("failed")  # the run exists now: never leave it RUNNING
            raise
        return tracker

    def _log_spec_and_environment(self, spec: ExperimentSpec, env: Mapping[str, str], resumed: bool) -> None:
        """spec.yaml and environment.json as the run was created. A resume that brings another spec (its
        changed params listed in ``ablate.params_changed``) or environment leaves them as they are, beside
        the params they explain, and adds ``spec.resumed.yaml`` / ``environment.resumed.json``."""
        if not resumed:
            self.log_dict(env, R.ENVIRONMENT_ARTIFACT)
            self.log_text(_spec_yaml(spec), R.SPEC_ARTIFACT)
            return
        if self._changed:
            self.log_text(_spec_yaml(spec), R.SPEC_RESUMED_ARTIFACT)
        with tempfile.TemporaryDirectory() as tmp:
            try:
                before = json.loads(download_artifacts(self.run_id, R.ENVIRONMENT_ARTIFACT, tmp,
                                                       tracking_uri=self.tracking_uri).read_text())
            except (MlflowException, OSError, ValueError):  # not there (a run ablate did not create)
                before = None
        if before != dict(env):
            name = R.ENVIRONMENT_RESUMED_ARTIFACT if before is not None else R.ENVIRONMENT_ARTIFACT
            self.log_dict(env, name)

    # -- logging
    def log_params_from_spec(self, spec: ExperimentSpec) -> None:
        from ablate.spec.experiment import flatten

        self.log_params(flatten(spec.resolved()))

    def log_params(self, params: Mapping[str, Any]) -> None:
        """Log params not logged yet. MLflow refuses to change a param, so a value that differs from the
        one already logged (a resume with, say, another tracking option) is kept as it was and its key
        listed in the ``ablate.params_changed`` tag."""
        new = {str(k): _param_value(v) for k, v in params.items()}
        changed = sorted(k for k, v in new.items() if self._params.get(k, v) != v)
        items = [Param(k, v) for k, v in new.items() if k not in self._params]
        for i in range(0, len(items), MAX_PARAMS_PER_BATCH):
            self.client.log_batch(self.run_id, params=items[i: i + MAX_PARAMS_PER_BATCH], synchronous=True)
        self._params.update((p.key, p.value) for p in items)
        if changed:
            self._changed.update(changed)
            self.set_tags({R.PARAMS_CHANGED: ",".join(sorted(self._changed))})

    def log_metrics(self, metrics: Mapping[str, float], step: int, timestamp_ms: int | None = None) -> None:
        """Log ``metrics`` at ``step``, stamped ``timestamp_ms`` (when they were measured; default now). A
        step at or below the last one logged for a key (a replay after a resume from an earlier checkpoint)
        is dropped, so every step of every metric appears once."""
        now = int(time.time() * 1000) if timestamp_ms is None else int(timestamp_ms)
        items = []
        for key, value in metrics.items():
            last = self._last_step.get(key)
            if last is not None and step <= last:
                continue
            self._last_step[key] = step
            items.append(Metric(key, float(value), now, int(step)))
        if self._outbox is not None:
            rows = [[m.key, m.value, m.timestamp, m.step] for m in items]
            return self._outbox.send({"kind": "metrics", "items": rows}) if rows else None
        for i in range(0, len(items), MAX_METRICS_PER_BATCH):
            op = self.client.log_batch(self.run_id, metrics=items[i: i + MAX_METRICS_PER_BATCH],
                                       synchronous=not self.async_logging)
            if op is not None:
                self._pending.append(op)
        if len(self._pending) > 256:  # keep the backlog (and memory) bounded on long runs
            self.flush()

    def last_step(self, key: str) -> int | None:
        """The last step logged for ``key`` (this session or, after a resume, before it)."""
        return self._last_step.get(key)

    def _load_last_steps(self) -> None:
        for key in self.client.get_run(self.run_id).data.metrics:
            if not key.startswith("system/"):
                self._last_step[key] = max(m.step for m in self.client.get_metric_history(self.run_id, key))

    def set_tags(self, tags: Mapping[str, Any]) -> None:
        if self._outbox is not None:
            return self._outbox.send({"kind": "tags", "tags": {str(k): _tag_value(tags[k]) for k in tags}})
        items = [RunTag(str(k), _tag_value(v)) for k, v in tags.items()]
        for i in range(0, len(items), MAX_PARAMS_PER_BATCH):
            self.client.log_batch(self.run_id, tags=items[i: i + MAX_PARAMS_PER_BATCH], synchronous=True)

    def log_artifact(self, path: str | Path, artifact_path: str | None = None) -> None:
        if self._outbox is not None:
            return self._outbox.send_file(Path(path), artifact_path)
        self.client.log_artifact(self.run_id, str(path), artifact_path)

    def log_artifacts(self, directory: str | Path, artifact_path: str | None = None) -> None:
        self.client.log_artifacts(self.run_id, str(directory), artifact_path)

    def log_text(self, text: str, artifact_file: str) -> None:
        if self._outbox is not None:
            return self._outbox.send_made(artifact_file, lambda p: p.write_text(text))
        self.client.log_text(self.run_id, text, artifact_file)

    def log_dict(self, data: Mapping[str, Any], artifact_file: str) -> None:
        if self._outbox is not None:
            return self._outbox.send_made(artifact_file, lambda p: p.write_text(json.dumps(dict(data))))
        self.client.log_dict(self.run_id, dict(data), artifact_file)

    def log_figure(self, figure: Any, artifact_file: str) -> None:
        """A matplotlib (or plotly) figure, saved as ``artifact_file`` (.png, .svg, .html ...)."""
        if self._outbox is not None and hasattr(figure, "savefig"):
            return self._outbox.send_made(artifact_file, figure.savefig)
        self.client.log_figure(self.run_id, figure, artifact_file)

    def log_dataset(self, name: str, digest: str, source: str, context: str = "train") -> None:
        """Record the dataset as a run input (Datasets column of the UI): name, digest (fingerprint, at most
        36 characters for MLflow) and where it came from (URL, file path, hub name or a description)."""
        from mlflow.data.meta_dataset import MetaDataset

        dataset = MetaDataset(dataset_source(source), name=name, digest=digest[:36])  # type: ignore[abstract]
        entity = DatasetEntity(**dataset.to_dict())  # name, digest, source_type, source
        tag = InputTag("mlflow.data.context", context)
        try:
            self.client.log_inputs(self.run_id, [DatasetInput(entity, [tag])])
        except MlflowException as e:
            # Two workers logging the same dataset at once (ablate ablate/tune --workers N): the store's
            # check-then-insert fails for one of them on the unique (experiment, name, digest) key. The
            # row exists now, so a second try links it to this run.
            if "unique constraint" not in str(e).lower() and "integrityerror" not in str(e).lower():
                raise
            time.sleep(0.2)
            self.client.log_inputs(self.run_id, [DatasetInput(entity, [tag])])

    def log_table(self, columns: Mapping[str, Sequence[Any]], artifact_file: str) -> None:
        """A table (column name -> values) as a JSON artifact MLflow's artifact view shows as a table,
        replacing an earlier one. Not ``MlflowClient.log_table``, which appends to an existing artifact (a
        study parent logs its cells table each time `ablate ablate` stops): the same "split" JSON (columns,
        rows; NaN as null, e.g. a diverged cell's metric), listed once in ``mlflow.loggedArtifacts``."""
        names = list(columns)
        rows = [[None if isinstance(v, float) and not math.isfinite(v) else v for v in row]
                for row in zip(*(columns[k] for k in names), strict=True)]
        self.log_text(json.dumps({"columns": names, "data": rows}), artifact_file)
        logged: list[dict[str, str]] = []  # with an outbox the store is away: list this table alone
        if self._outbox is None:
            logged = json.loads(self.client.get_run(self.run_id).data.tags.get(R.LOGGED_ARTIFACTS, "[]"))
        entry = {"path": artifact_file, "type": "table"}
        if entry not in logged:
            self.set_tags({R.LOGGED_ARTIFACTS: json.dumps([*logged, entry])})

    def log_loss_curve(self, train: Sequence[tuple[int, float]], val: Sequence[tuple[int, float]]) -> None:
        """``loss_curve.png``: (step, train loss) per logging window and (step, val loss) per evaluation."""
        from ablate.tracking.figures import loss_curve

        figure = loss_curve(train, val)
        if figure is not None:
            self.log_figure(figure, R.LOSS_CURVE_ARTIFACT)

    def log_model(self, model: torch.nn.Module, name: str = "model", *, step: int = 0,
                  model_spec: ModelSpec | None = None) -> str | None:
        """Log ``model`` with ``mlflow.pytorch``; an ablate model (built from ``model_spec``, by default the
        run's spec) also gets its weights, so that `load_model` rebuilds it without unpickling
        (`ablate.tracking.models`). Returns its ``models:/`` URI, also kept in the ``ablate.model_uri``
        tag."""
        from ablate.tracking.models import log_model

        if self._outbox is not None and not self._outbox.settle(FINISH_WAIT_S):
            return None  # the server is away or behind: the best checkpoint in the run folder is the model
        uri = log_model(self.client, self.run_id, self.experiment_id, self.tracking_uri, model, name=name,
                        step=step, model_spec=model_spec or self._model_spec)
        self.set_tags({R.MODEL_URI: uri})
        return uri

    # -- ending
    def flush(self) -> None:
        """Wait for asynchronous metric batches to reach the store."""
        pending, self._pending = self._pending, []
        for op in pending:
            op.wait()

    def detach(self) -> None:
        """Let go of the run without ending it: it stays RUNNING for other processes that still log to it
        (a study's parent run while workers elsewhere add cells). Flushes first; later calls are no-ops,
        and the exit hook no longer ends it as killed."""
        if self._release():
            self.flush()

    def _release(self) -> bool:
        """Mark the run let go of (once): False when it already was; stops the system-metrics monitor."""
        if self._ended:
            return False
        self._ended = True
        _OPEN.discard(self)
        if self._monitor is not None:
            self._monitor.finish()
        return True

    def end(self, status: Status = "finished") -> None:
        """Tag ``ablate.status`` and end the MLflow run (see MLFLOW_STATUS); ending twice is a no-op."""
        if status not in MLFLOW_STATUS:
            raise ValueError(f"unknown run status {status!r}; expected one of {', '.join(MLFLOW_STATUS)}")
        if not self._release():
            return
        if self._outbox is not None:  # the end waits in the queue too, after everything logged before it
            return self._outbox.finish({R.STATUS: status}, MLFLOW_STATUS[status])
        try:
            self.flush()
            self.set_tags({R.STATUS: status})
        finally:
            self.client.set_terminated(self.run_id, MLFLOW_STATUS[status])

    def use_outbox(self, folder: Path) -> None:
        """Send the run's records from a thread through a queue written ahead in ``folder``: training never
        waits on the server, and what a silent one cannot take waits there (ablate/tracking/outbox.py)."""
        if is_server_uri(self.tracking_uri):
            self._outbox = Courier(self.client, self.run_id, self.tracking_uri, folder, self._last_step)

    def delayed(self) -> int:
        return self._outbox.outbox.delayed() if self._outbox is not None else 0

    def _start_system_metrics(self, resumed: bool) -> None:
        # CPU, memory, disk, network (psutil) and GPU (pynvml, when present) as system/* metrics; the
        # sampling period is MLFLOW_SYSTEM_METRICS_SAMPLING_INTERVAL seconds (default 10).
        from mlflow.system_metrics.system_metrics_monitor import SystemMetricsMonitor

        self._monitor = SystemMetricsMonitor(self.run_id, resume_logging=resumed,
                                             tracking_uri=self.tracking_uri)
        self._monitor.start()


def _spec_yaml(spec: ExperimentSpec) -> str:
    try:
        from ablate.spec.load import dump_spec_yaml
    except ImportError:  # specload is another module's; the resolved data is the same information
        import yaml

        return yaml.safe_dump(spec.resolved(), sort_keys=False)
    return dump_spec_yaml(spec)
