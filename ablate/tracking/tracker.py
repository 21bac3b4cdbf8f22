"""`Tracker`: one MLflow run (`NullTracker` when tracking is off): what a run records, its statuses and
MLflow's value limits. How the records travel is its transport's (ablate/tracking/transport.py): straight
to a local store, or through the run folder's outbox to a server that may not answer; chosen once, when
the run opens."""

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
from mlflow.data.meta_dataset import MetaDataset
from mlflow.entities import Dataset as DatasetEntity
from mlflow.entities import Metric, Param
from mlflow.exceptions import MlflowException
from mlflow.system_metrics.system_metrics_monitor import SystemMetricsMonitor

from ablate.dburl import redacted
from ablate.errors import AblateError
from ablate.spec.experiment import flatten
from ablate.spec.load import dump_spec_yaml
from ablate.tracking import record
from ablate.tracking.figures import loss_curve
from ablate.tracking.mlflow_store import (
    check_reachable,
    dataset_source,
    download_artifacts,
    environment,
    environment_tags,
    experiment_id,
    is_server_uri,
    resolve_tracking_uri,
)
from ablate.tracking.models import log_model
from ablate.tracking.outbox import FINISH_WAIT_S, Courier
from ablate.tracking.transport import Direct, Queued, Transport
from ablate.tracking.versions import versions_tag

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


def param_value(value: Any) -> str:
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
                self.set_tags({record.ERROR: f"{exc_type.__name__}: {exc}"})
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


def failed_segments(tags: Mapping[str, str]) -> dict[str, str]:
    """The tag that keeps a failed segment visible once its run is resumed (--retry-failed): the earlier
    failures' errors, this one's added; nothing when the run's last segment did not fail."""
    if tags.get(record.STATUS) != "failed":
        return {}
    try:
        earlier = list(json.loads(tags.get(record.FAILED_SEGMENTS, "[]")))
    except ValueError:
        earlier = []
    earlier.append(tags.get(record.ERROR, "failed (no error recorded)")[-500:])
    return {record.FAILED_SEGMENTS: json.dumps(earlier[-10:])}  # an MLflow tag holds 8000 characters


class Tracker(NullTracker):
    """One MLflow run. Use `Tracker.start`; as a context manager it ends failed on an exception, killed on
    Ctrl-C, finished otherwise."""

    def __init__(self, client: MlflowClient, run_id: str, experiment_id: str, tracking_uri: str, *,
                 async_logging: bool = False, last_step: Mapping[str, int] | None = None,
                 outbox: Path | None = None) -> None:
        self.client = client
        self.run_id: str = run_id
        self.experiment_id: str = experiment_id
        self.tracking_uri: str = tracking_uri
        self._last_step: dict[str, int] = dict(last_step or {})
        self._transport: Transport = _transport(client, run_id, tracking_uri, async_logging, outbox,
                                                self._last_step)
        self._params: dict[str, str] = {}  # what the run holds already (MLflow params cannot change)
        self._changed: set[str] = set()
        self._monitor: Any = None
        self._model_spec: ModelSpec | None = None  # what the run's model is built from (log_model)
        self._ended = False
        _OPEN.add(self)

    @classmethod
    def start(cls, spec: ExperimentSpec, *, experiment: str | None = None, run_name: str | None = None,
              tags: Mapping[str, Any] | None = None, parent_run_id: str | None = None,
              resume_run_id: str | None = None, variant: str | None = None,
              description: str | None = None, outbox: Path | None = None) -> NullTracker:
        """Open a run (or reopen ``resume_run_id``, status back to RUNNING) and log the spec, tags, and the
        ``spec.yaml`` / ``environment.json`` artifacts. Experiment: ``experiment`` > ``tracking.experiment``
        > ``spec.name``. ``variant`` (default: the run name, else the spec's name) is the run's
        ``ablate.variant``; ``description`` (default: the spec's) its description in the MLflow UI. A study's
        parent run (``ablate.kind`` ablation or search in ``tags``) gets no seed or spec hash: the cells
        have their own. ``outbox``: over a tracking server, every record of the run goes through this
        folder's queue and a sending thread (`transport.Queued`), so training never waits on the server."""
        cfg = spec.tracking
        if not cfg.enabled:
            return NullTracker()
        uri = resolve_tracking_uri(cfg.uri)
        check_reachable(uri)  # a one-line error now, not minutes of MLflow's retries and a traceback
        client = MlflowClient(uri)
        env = environment()
        exp_name = experiment or cfg.experiment or spec.name
        is_study = (tags or {}).get(record.KIND) in record.STUDY_KINDS
        all_tags: dict[str, Any] = {
            record.STUDY: exp_name, record.VARIANT: variant or run_name or spec.name,
            **({} if is_study else {record.SEED: spec.seed, record.SPEC_HASH: spec.spec_hash}),
            **({} if is_study else versions_tag(spec)),
            record.USER: getpass.getuser(), record.SOURCE_TYPE: "LOCAL",
            record.SOURCE_NAME: Path(sys.argv[0]).name if sys.argv and sys.argv[0] else "python",
            **environment_tags(),
        }
        note = spec.description if description is None else description
        if note:
            all_tags[record.NOTE] = note
        if parent_run_id:
            all_tags[record.PARENT_RUN] = parent_run_id
        all_tags.update(tags or {})
        all_tags[record.STATUS] = "running"
        if resume_run_id:
            try:
                run = client.get_run(resume_run_id)
            except MlflowException as e:
                raise AblateError(f"cannot resume MLflow run {resume_run_id} in {redacted(uri)}: "
                                  f"{e.message}") from e
            client.update_run(resume_run_id, status="RUNNING")
            run_id, exp_id = resume_run_id, str(run.info.experiment_id)
            # The run keeps the identity tags it was created with; only the caller's and the status change.
            all_tags = {**(tags or {}), record.STATUS: "running", **failed_segments(run.data.tags)}
        else:
            exp_id = experiment_id(client, exp_name, uri, description=spec.description)
            created = client.create_run(exp_id, run_name=run_name,
                                        tags={k: _tag_value(v) for k, v in all_tags.items()})
            run_id = created.info.run_id
        try:
            # Read before the transport starts: a resumed run drops the steps it logged already.
            last = _last_steps(client, run_id) if resume_run_id else {}
        except BaseException:
            try:  # as `end("failed")` does: never leave it RUNNING
                client.set_tag(run_id, record.STATUS, "failed")
            finally:
                client.set_terminated(run_id, MLFLOW_STATUS["failed"])
            raise
        tracker = cls(client, run_id, exp_id, uri, async_logging=cfg.async_logging, last_step=last,
                      outbox=outbox)
        tracker._model_spec = spec.model
        try:
            if resume_run_id:
                tracker.set_tags(all_tags)
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
            self.log_dict(env, record.ENVIRONMENT_ARTIFACT)
            self.log_text(_spec_yaml(spec), record.SPEC_ARTIFACT)
            return
        if self._changed:
            self.log_text(_spec_yaml(spec), record.SPEC_RESUMED_ARTIFACT)
        with tempfile.TemporaryDirectory() as tmp:
            try:
                before = json.loads(download_artifacts(self.run_id, record.ENVIRONMENT_ARTIFACT, tmp,
                                                       tracking_uri=self.tracking_uri).read_text())
            except (MlflowException, OSError, ValueError):  # not there (a run ablate did not create)
                before = None
        if before != dict(env):
            name = record.ENVIRONMENT_RESUMED_ARTIFACT if before is not None else record.ENVIRONMENT_ARTIFACT
            self.log_dict(env, name)

    # -- logging
    def log_params_from_spec(self, spec: ExperimentSpec) -> None:
        params = flatten(spec.resolved())
        if isinstance(params.get(TRACKING_URI), str):  # a password in the URI is not the run's to keep
            params[TRACKING_URI] = redacted(params[TRACKING_URI])
        self.log_params(params)

    def log_params(self, params: Mapping[str, Any]) -> None:
        """Log params not logged yet. MLflow refuses to change a param, so a value that differs from the
        one already logged (a resume with, say, another tracking option) is kept as it was and its key
        listed in the ``ablate.params_changed`` tag."""
        new = {str(k): param_value(v) for k, v in params.items()}
        changed = sorted(k for k, v in new.items() if self._params.get(k, v) != v)
        items = [Param(k, v) for k, v in new.items() if k not in self._params]
        self._transport.params(items)
        self._params.update((p.key, p.value) for p in items)
        if changed:
            self._changed.update(changed)
            self.set_tags({record.PARAMS_CHANGED: ",".join(sorted(self._changed))})

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
        self._transport.metrics(items)

    def last_step(self, key: str) -> int | None:
        """The last step logged for ``key`` (this session or, after a resume, before it)."""
        return self._last_step.get(key)

    def set_tags(self, tags: Mapping[str, Any]) -> None:
        self._transport.tags({str(k): _tag_value(v) for k, v in tags.items()})

    def log_artifact(self, path: str | Path, artifact_path: str | None = None) -> None:
        self._transport.artifact(Path(path), artifact_path)

    def log_artifacts(self, directory: str | Path, artifact_path: str | None = None) -> None:
        self._transport.artifacts(Path(directory), artifact_path)

    def log_text(self, text: str, artifact_file: str) -> None:
        self._transport.text(text, artifact_file)

    def log_dict(self, data: Mapping[str, Any], artifact_file: str) -> None:
        self._transport.mapping(data, artifact_file)

    def log_figure(self, figure: Any, artifact_file: str) -> None:
        """A matplotlib (or plotly) figure, saved as ``artifact_file`` (.png, .svg, .html ...)."""
        self._transport.figure(figure, artifact_file)

    def log_dataset(self, name: str, digest: str, source: str, context: str = "train") -> None:
        """Record the dataset as a run input (Datasets column of the UI): name, digest (fingerprint, at most
        36 characters for MLflow) and where it came from (URL, file path, hub name or a description)."""
        dataset = MetaDataset(dataset_source(source), name=name, digest=digest[:36])  # type: ignore[abstract]
        entity = DatasetEntity(**dataset.to_dict())  # name, digest, source_type, source
        self._transport.dataset(entity, context)

    def log_table(self, columns: Mapping[str, Sequence[Any]], artifact_file: str) -> None:
        """A table (column name -> values) as a JSON artifact MLflow's artifact view shows as a table,
        replacing an earlier one. Not ``MlflowClient.log_table``, which appends to an existing artifact (a
        study parent logs its cells table each time `ablate study` stops): the same "split" JSON (columns,
        rows; NaN as null, e.g. a diverged cell's metric), listed once in ``mlflow.loggedArtifacts``."""
        names = list(columns)
        rows = [[None if isinstance(v, float) and not math.isfinite(v) else v for v in row]
                for row in zip(*(columns[k] for k in names), strict=True)]
        self.log_text(json.dumps({"columns": names, "data": rows}), artifact_file)
        logged = self._transport.logged_artifacts()
        entry = {"path": artifact_file, "type": "table"}
        if entry not in logged:
            self.set_tags({record.LOGGED_ARTIFACTS: json.dumps([*logged, entry])})

    def log_loss_curve(self, train: Sequence[tuple[int, float]], val: Sequence[tuple[int, float]]) -> None:
        """``loss_curve.png``: (step, train loss) per logging window and (step, val loss) per evaluation."""
        figure = loss_curve(train, val)
        if figure is not None:
            self.log_figure(figure, record.LOSS_CURVE_ARTIFACT)

    def log_model(self, model: torch.nn.Module, name: str = "model", *, step: int = 0,
                  model_spec: ModelSpec | None = None) -> str | None:
        """Log ``model`` with ``mlflow.pytorch``; an ablate model (built from ``model_spec``, by default the
        run's spec) also gets its weights, so that `load_model` rebuilds it without unpickling
        (`ablate.tracking.models`). Returns its ``models:/`` URI, also kept in the ``ablate.model_uri``
        tag."""
        if not self._transport.settle(FINISH_WAIT_S):
            return None  # the server is away or behind: the best checkpoint in the run folder is the model
        uri = log_model(self.client, self.run_id, self.experiment_id, self.tracking_uri, model, name=name,
                        step=step, model_spec=model_spec or self._model_spec)
        self.set_tags({record.MODEL_URI: uri})
        return uri

    # -- ending
    def flush(self) -> None:
        """Wait for asynchronous metric batches to reach the store."""
        self._transport.flush()

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
        # Queued, the end waits in the queue too, after everything logged before it.
        self._transport.end({record.STATUS: status}, MLFLOW_STATUS[status])

    def delayed(self) -> int:
        return self._transport.delayed()

    def _start_system_metrics(self, resumed: bool) -> None:
        # CPU, memory, disk, network (psutil) and GPU (pynvml, when present) as system/* metrics; the
        # sampling period is MLFLOW_SYSTEM_METRICS_SAMPLING_INTERVAL seconds (default 10).

        self._monitor = SystemMetricsMonitor(self.run_id, resume_logging=resumed,
                                             tracking_uri=self.tracking_uri)
        self._monitor.start()


def _transport(client: MlflowClient, run_id: str, uri: str, async_logging: bool, outbox: Path | None,
               last_step: dict[str, int]) -> Transport:
    """The run's transport, chosen once: the outbox over a tracking server when the run has a folder for
    it (records an earlier process left there go first and count as logged in ``last_step``), else
    direct."""
    if outbox is not None and is_server_uri(uri):
        return Queued(Courier(client, run_id, uri, outbox, last_step))
    return Direct(client, run_id, async_logging=async_logging)


def _last_steps(client: MlflowClient, run_id: str) -> dict[str, int]:
    """The last step the run holds for each of its metrics (system metrics are MLflow's own)."""
    return {key: max(m.step for m in client.get_metric_history(run_id, key))
            for key in client.get_run(run_id).data.metrics if not key.startswith("system/")}


TRACKING_URI = "tracking.uri"  # the spec field whose value may carry a login (http://user:pw@host)


def _spec_yaml(spec: ExperimentSpec) -> str:
    """The run's spec.yaml: the resolved spec, a password in its tracking URI shown as ***."""
    if spec.tracking.uri and redacted(spec.tracking.uri) != spec.tracking.uri:
        spec = spec.model_copy(update={"tracking": spec.tracking.model_copy(
            update={"uri": redacted(spec.tracking.uri)})})
    return dump_spec_yaml(spec)
