"""The outbox: what a tracking server could not take yet, kept in order on local disk.

When the MLflow server does not answer, `Tracker` appends each operation (a metric batch with its
original timestamps, tags, an artifact copied aside, the run's end) to ``<run dir>/outbox/queue.jsonl``
and training goes on. Operations are sent back in the order they were queued, as soon as the server
answers again, or by the next run of the same command. A cursor file counts the operations already sent,
so a process killed mid-drain resends at most the one operation in flight, and MLflow drops a metric
sent twice with the same key, step, timestamp and value: nothing is lost or duplicated.

`Outbox` is the queue on disk; `Courier` sends through it for one run's `Tracker` (its hooks call
`send`, `send_file`, `send_made` and `finish`). A send that fails (connection refused, timeout, 5xx)
marks the server down: everything after it queues behind, in order, and the queue is tried again after
`RETRY_S` seconds, doubling up to a minute, so training loses at most one refused connection per try.
MLflow's own retries would block a step for minutes: `Courier` sets ``MLFLOW_HTTP_REQUEST_MAX_RETRIES=0``
and a 10 s timeout unless the user set them.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from mlflow import MlflowClient
from mlflow.entities import Metric, RunTag

QUEUE = "queue.jsonl"
CURSOR = "sent"
DELAYED = "delayed"  # how many operations went through the outbox over the run's life (summary.json)
RETRY_S = 5.0  # first pause before asking a silent tracking server again
BATCH = 1000  # MLflow's limit of metrics (and 100 of tags) per log_batch


class Outbox:
    def __init__(self, folder: Path) -> None:
        self.folder = Path(folder)

    @property
    def queue(self) -> Path:
        return self.folder / QUEUE

    def _read_int(self, name: str) -> int:
        try:
            return int((self.folder / name).read_text().strip() or 0)
        except (OSError, ValueError):
            return 0

    def _write_int(self, name: str, value: int) -> None:
        tmp = self.folder / f".{name}.tmp"
        tmp.write_text(f"{value}\n")
        os.replace(tmp, self.folder / name)

    def ops(self) -> list[dict[str, Any]]:
        """Every queued operation not yet sent, oldest first (a line cut short by a kill is dropped)."""
        if not self.queue.exists():
            return []
        out = []
        for line in self.queue.read_text().splitlines():
            try:
                out.append(json.loads(line))
            except ValueError:
                continue
        return out[self._read_int(CURSOR):]

    def pending(self) -> int:
        return len(self.ops())

    def delayed(self) -> int:
        """Operations that waited in the outbox during this run's life (sent since, or still waiting)."""
        return self._read_int(DELAYED)

    def add(self, op: dict[str, Any]) -> None:
        self.folder.mkdir(parents=True, exist_ok=True)
        with open(self.queue, "a") as fh:
            fh.write(json.dumps(op, separators=(",", ":")) + "\n")
            fh.flush()
            os.fsync(fh.fileno())
        self._write_int(DELAYED, self.delayed() + 1)

    def add_file(self, src: Path, op: dict[str, Any]) -> None:
        """Queue an artifact: a copy of ``src`` waits here (the original may change or go)."""
        files = self.folder / "files" / f"{self._read_int(DELAYED):06d}"  # keeps the artifact's own name
        files.mkdir(parents=True, exist_ok=True)
        copy = files / Path(src).name
        shutil.copyfile(src, copy)
        self.add({**op, "file": str(copy)})

    def drain(self, send: Callable[[dict[str, Any]], None]) -> int:
        """Send queued operations in order until one fails (its exception propagates); the number sent."""
        ops = self.ops()
        done = self._read_int(CURSOR)
        sent = 0
        for op in ops:
            send(op)
            sent += 1
            self._write_int(CURSOR, done + sent)
        if ops:
            # All sent: start the queue afresh (the `delayed` count stays for the summary).
            self.queue.unlink(missing_ok=True)
            (self.folder / CURSOR).unlink(missing_ok=True)
            shutil.rmtree(self.folder / "files", ignore_errors=True)
        return sent


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return (text[0] if text else type(exc).__name__)[:200]


def deliver(client: MlflowClient, run_id: str, op: Mapping[str, Any]) -> None:
    """Send one queued operation to ``run_id``."""
    kind = op["kind"]
    if kind == "metrics":
        items = [Metric(k, float(v), int(ts), int(s)) for k, v, ts, s in op["items"]]
        for i in range(0, len(items), BATCH):
            client.log_batch(run_id, metrics=items[i: i + BATCH], synchronous=True)
    elif kind == "tags":
        tags = [RunTag(k, v) for k, v in op["tags"].items()]
        for i in range(0, len(tags), 100):
            client.log_batch(run_id, tags=tags[i: i + 100], synchronous=True)
    elif kind == "artifact":
        client.log_artifact(run_id, op["file"], op.get("artifact_path"))
    elif kind == "end":
        client.set_terminated(run_id, op["status"])
    else:
        raise ValueError(f"unknown outbox operation {kind!r}")


def _fail_fast() -> None:
    os.environ.setdefault("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")
    os.environ.setdefault("MLFLOW_HTTP_REQUEST_TIMEOUT", "10")


class Courier:
    """Sends one run's records to a tracking server, through the outbox while the server is away."""

    def __init__(self, client: MlflowClient, run_id: str, uri: str, folder: Path,
                 last_step: dict[str, int]) -> None:
        _fail_fast()
        self.client, self.run_id, self.uri = client, run_id, uri
        self.outbox = Outbox(folder)
        self.down_since: float | None = None  # when the server stopped answering; None while it answers
        self.next_try = 0.0
        # Records an earlier run of this command left behind count as logged (never send a step twice) and
        # go first. Their end and status belong to that earlier process: this one ends the run itself.
        for op in self.outbox.ops():
            for key, _, _, step in op.get("items", []):
                last_step[key] = max(int(step), last_step.get(key, int(step)))
        self.drain(resuming=True)

    @property
    def down(self) -> bool:
        return self.down_since is not None

    def send(self, op: dict[str, Any]) -> None:
        if not self.down and not self.outbox.pending():
            try:
                deliver(self.client, self.run_id, op)
                return
            except Exception as exc:  # noqa: BLE001 - whatever the transport raised: the server is away
                self._went_down(exc)
        self.outbox.add(op)
        self.drain()

    def send_file(self, path: Path, artifact_path: str | None) -> None:
        if not self.down and not self.outbox.pending():
            try:
                self.client.log_artifact(self.run_id, str(path), artifact_path)
                return
            except Exception as exc:  # noqa: BLE001
                self._went_down(exc)
        self.outbox.add_file(path, {"kind": "artifact", "artifact_path": artifact_path})
        self.drain()

    def send_made(self, artifact_file: str, write: Callable[[Path], Any]) -> None:
        """An artifact made by ``write(path)`` (text, JSON, a figure) under the name ``artifact_file``."""
        with tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp) / Path(artifact_file).name
            write(path)
            folder = str(Path(artifact_file).parent)
            self.send_file(path, None if folder == "." else folder)

    def _went_down(self, exc: BaseException) -> None:
        if self.down_since is None:
            self.down_since = time.time()
            self.next_try = self.down_since + RETRY_S
            print(f"note: the tracking server {self.uri} does not answer ({_first_line(exc)}); training goes "
                  f"on and its records wait in {self.outbox.folder}", file=sys.stderr, flush=True)

    def drain(self, resuming: bool = False) -> None:
        """Send the queue if the server may be back (asked at most every RETRY_S.. 60 s while down)."""
        if not self.outbox.pending() or (self.down and time.time() < self.next_try):
            return

        def send(op: dict[str, Any]) -> None:
            if resuming and op["kind"] == "end":
                return
            if resuming and op["kind"] == "tags":
                op = {**op, "tags": {k: v for k, v in op["tags"].items() if k != "ablate.status"}}
            deliver(self.client, self.run_id, op)

        try:
            self.outbox.drain(send)
        except Exception as exc:  # noqa: BLE001 - still away: ask again later
            self._went_down(exc)
            assert self.down_since is not None
            waited = time.time() - self.down_since
            self.next_try = time.time() + min(60.0, max(RETRY_S, waited))
            return
        if self.down:
            print(f"note: the tracking server {self.uri} answers again; the queued records were sent",
                  file=sys.stderr, flush=True)
        self.down_since = None

    def finish(self, tags: dict[str, str], mlflow_status: str) -> None:
        """End the run (after everything queued before); one line if records still wait for the server."""
        self.send({"kind": "tags", "tags": tags})
        self.send({"kind": "end", "status": mlflow_status})
        self.next_try = 0.0
        self.drain()
        left = self.outbox.pending()
        if left:
            print(f"warning: the tracking server {self.uri} is down: {left} records of run {self.run_id} "
                  f"wait in {self.outbox.folder}; run the same command again to send them (the run folder "
                  "holds the complete local record)", file=sys.stderr, flush=True)


def send_outbox(folder: Path, run_id: str | None, tracking_uri: str) -> int:
    """Send what a finished run left in its outbox (at the next run of the same command); the number of
    records still waiting (and one line) when the server is still away."""
    box = Outbox(folder)
    if not run_id or not box.pending():
        return 0
    _fail_fast()
    client = MlflowClient(tracking_uri)
    try:
        box.drain(lambda op: deliver(client, run_id, op))
    except Exception as exc:  # noqa: BLE001 - still away
        left = box.pending()
        print(f"warning: the tracking server {tracking_uri} does not answer ({_first_line(exc)}): {left} "
              f"records of run {run_id} still wait in {folder}", file=sys.stderr, flush=True)
        return left
    print(f"note: sent the records run {run_id} had queued in {folder} to {tracking_uri}", file=sys.stderr,
          flush=True)
    return 0
