"""How one run's records reach MLflow: straight through the client (`Direct`), or queued in the run
folder's outbox and sent by a thread (`Queued`, ablate/tracking/outbox.py). `Tracker` chooses one when the
run opens and writes every record, artifacts included, through it: what to log is the tracker's business,
how it travels is the transport's.

`Direct` suits a local store (sqlite, a folder), where a write cannot hang on a network. Over an HTTP
server `Queued` keeps training from waiting on it: a silent or frozen server delays records, never steps.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol

from mlflow import MlflowClient
from mlflow.entities import Dataset as DatasetEntity
from mlflow.entities import Metric, Param, RunTag

from ablate.tracking import record
from ablate.tracking.outbox import Courier, log_dataset

MAX_PARAMS_PER_BATCH = 100  # MLflow's limits per log_batch (mlflow.utils.validation)
MAX_METRICS_PER_BATCH = 1000
PENDING_LIMIT = 256  # asynchronous metric batches in flight before `Direct` waits for them


class Transport(Protocol):
    """The writes of one run. Values arrive checked (MLflow's length limits) and deduplicated by step."""

    def params(self, items: Sequence[Param]) -> None: ...
    def metrics(self, items: Sequence[Metric]) -> None: ...
    def tags(self, tags: Mapping[str, str]) -> None: ...
    def artifact(self, path: Path, artifact_path: str | None) -> None: ...
    def artifacts(self, directory: Path, artifact_path: str | None) -> None: ...
    def text(self, text: str, artifact_file: str) -> None: ...
    def mapping(self, data: Mapping[str, Any], artifact_file: str) -> None: ...
    def figure(self, figure: Any, artifact_file: str) -> None: ...
    def dataset(self, entity: DatasetEntity, context: str) -> None: ...
    def logged_artifacts(self) -> list[dict[str, str]]:
        """The run's ``mlflow.loggedArtifacts`` list as the store holds it ([] when it cannot be read)."""
        ...
    def settle(self, timeout: float) -> bool:
        """Everything written so far has reached the store (waiting at most ``timeout`` seconds)."""
        ...
    def flush(self) -> None: ...
    def delayed(self) -> int:
        """Records that waited for a silent server over the run's life (summary.json)."""
        ...
    def end(self, tags: Mapping[str, str], mlflow_status: str) -> None: ...


class Direct:
    """Each record sent by the client as it comes (metric batches asynchronously when asked to)."""

    def __init__(self, client: MlflowClient, run_id: str, *, async_logging: bool = False) -> None:
        self.client, self.run_id, self.async_logging = client, run_id, async_logging
        self._pending: list[Any] = []  # RunOperations of asynchronous log_batch calls, awaited by flush()

    def params(self, items: Sequence[Param]) -> None:
        for i in range(0, len(items), MAX_PARAMS_PER_BATCH):
            self.client.log_batch(self.run_id, params=list(items[i: i + MAX_PARAMS_PER_BATCH]),
                                  synchronous=True)

    def metrics(self, items: Sequence[Metric]) -> None:
        for i in range(0, len(items), MAX_METRICS_PER_BATCH):
            op = self.client.log_batch(self.run_id, metrics=list(items[i: i + MAX_METRICS_PER_BATCH]),
                                       synchronous=not self.async_logging)
            if op is not None:
                self._pending.append(op)
        if len(self._pending) > PENDING_LIMIT:  # keep the backlog (and memory) bounded on long runs
            self.flush()

    def tags(self, tags: Mapping[str, str]) -> None:
        items = [RunTag(k, v) for k, v in tags.items()]
        for i in range(0, len(items), MAX_PARAMS_PER_BATCH):
            self.client.log_batch(self.run_id, tags=items[i: i + MAX_PARAMS_PER_BATCH], synchronous=True)

    def artifact(self, path: Path, artifact_path: str | None) -> None:
        self.client.log_artifact(self.run_id, str(path), artifact_path)

    def artifacts(self, directory: Path, artifact_path: str | None) -> None:
        self.client.log_artifacts(self.run_id, str(directory), artifact_path)

    def text(self, text: str, artifact_file: str) -> None:
        self.client.log_text(self.run_id, text, artifact_file)

    def mapping(self, data: Mapping[str, Any], artifact_file: str) -> None:
        self.client.log_dict(self.run_id, dict(data), artifact_file)

    def figure(self, figure: Any, artifact_file: str) -> None:
        self.client.log_figure(self.run_id, figure, artifact_file)

    def dataset(self, entity: DatasetEntity, context: str) -> None:
        log_dataset(self.client, self.run_id, entity, context)

    def logged_artifacts(self) -> list[dict[str, str]]:
        return list(json.loads(self.client.get_run(self.run_id).data.tags.get(record.LOGGED_ARTIFACTS, "[]")))

    def settle(self, timeout: float) -> bool:
        return True

    def flush(self) -> None:
        pending, self._pending = self._pending, []
        for op in pending:
            op.wait()

    def delayed(self) -> int:
        return 0

    def end(self, tags: Mapping[str, str], mlflow_status: str) -> None:
        try:
            self.flush()
            self.tags(tags)
        finally:
            self.client.set_terminated(self.run_id, mlflow_status)


class Queued:
    """Each record appended to the run folder's outbox and sent in order by the courier's thread."""

    def __init__(self, courier: Courier) -> None:
        self.courier = courier

    def params(self, items: Sequence[Param]) -> None:
        if items:
            self.courier.send({"kind": "params", "params": {p.key: p.value for p in items}})

    def metrics(self, items: Sequence[Metric]) -> None:
        rows = [[m.key, m.value, m.timestamp, m.step] for m in items]
        if rows:
            self.courier.send({"kind": "metrics", "items": rows})

    def tags(self, tags: Mapping[str, str]) -> None:
        self.courier.send({"kind": "tags", "tags": dict(tags)})

    def artifact(self, path: Path, artifact_path: str | None) -> None:
        self.courier.send_file(path, artifact_path)

    def artifacts(self, directory: Path, artifact_path: str | None) -> None:
        self.courier.send_dir(directory, artifact_path)

    def text(self, text: str, artifact_file: str) -> None:
        self.courier.send_made(artifact_file, lambda p: p.write_text(text))

    def mapping(self, data: Mapping[str, Any], artifact_file: str) -> None:
        self.courier.send_made(artifact_file, lambda p: p.write_text(json.dumps(dict(data))))

    def figure(self, figure: Any, artifact_file: str) -> None:
        self.courier.send_made(artifact_file, _figure_writer(figure, artifact_file))

    def dataset(self, entity: DatasetEntity, context: str) -> None:
        self.courier.send({"kind": "dataset", "dataset": entity.to_dictionary(), "context": context})

    def logged_artifacts(self) -> list[dict[str, str]]:
        return []  # the store may be away: the table is listed alone rather than waiting to read it

    def settle(self, timeout: float) -> bool:
        return self.courier.settle(timeout)

    def flush(self) -> None:
        pass  # the courier's thread sends; `end` waits for it a bounded time

    def delayed(self) -> int:
        return self.courier.outbox.delayed()

    def end(self, tags: Mapping[str, str], mlflow_status: str) -> None:
        self.courier.finish(dict(tags), mlflow_status)  # after everything queued before it


def _figure_writer(figure: Any, artifact_file: str) -> Callable[[Path], Any]:
    """How to save a matplotlib or plotly figure as ``artifact_file`` (as ``MlflowClient.log_figure``)."""
    if hasattr(figure, "savefig"):
        return figure.savefig  # type: ignore[no-any-return]
    if artifact_file.endswith(".html"):
        return figure.write_html  # type: ignore[no-any-return]
    return figure.write_image  # type: ignore[no-any-return]
