"""The outbox: a run's tracking operations, written ahead on local disk and sent in order by a thread.

Over an HTTP tracking server, `Tracker`'s transport (`transport.Queued`) hands each operation (params, a
metric batch with its original timestamps, tags, a dataset input, an artifact or a folder of them copied
aside, the run's end) to its `Courier`, which appends it as one line
to ``<run dir>/outbox/queue.jsonl`` and returns: the training thread never waits on the network. A daemon
thread sends the queue in order. A cursor file counts the operations sent, so a process killed at any
instant resends at most the one operation in flight (MLflow drops a metric sent twice with the same key,
step, timestamp and value; tags, artifacts and the end are the same sent twice): nothing is lost or
duplicated. Once everything is sent the queue starts afresh.

A send that fails (connection refused, the timeout of a server that takes the connection but never
answers, 5xx) marks the server down, in one line: the queue waits and is tried again after `RETRY_S`
seconds, doubling up to a minute, and one line says when the server answers again. `Courier.finish`
waits for the sender at most `FINISH_WAIT_S` seconds and leaves the rest in the outbox with one line; the
next run of the same command sends it (`send_outbox`; a resumed run's `Courier` sends an earlier
process's leftovers first, without their end and status). MLflow's own retries would hold the queue for
minutes: `Courier` sets ``MLFLOW_HTTP_REQUEST_MAX_RETRIES=0`` and a 10 s timeout unless the user set them.

`Outbox.lock` keeps an append and the sender's cursor writes and clean-up apart within a process (an
operation appended while the sender empties the queue is never deleted with it); across processes the
run folder's lock leaves one writer. Appends are not fsynced (a killed process loses nothing the kernel
holds, and the metrics the trainer flushes are in its checkpoint already); the queue is synced when the
server stops answering, for what then waits.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from mlflow import MlflowClient
from mlflow.entities import Dataset as DatasetEntity
from mlflow.entities import DatasetInput, InputTag, Metric, Param, RunTag
from mlflow.exceptions import MlflowException

from ablate.dburl import redacted
from ablate.tracking import record

QUEUE = "queue.jsonl"
CURSOR = "sent"
DELAYED = "delayed"  # how many operations waited for a silent server over the run's life (summary.json)
RETRY_S = 5.0  # first pause before asking a silent tracking server again
BATCH = 1000  # MLflow's limit of metrics (and 100 of tags) per log_batch
FINISH_WAIT_S = 5.0  # how long the end of a run waits for the sender before leaving the rest queued


class Outbox:
    """The queue on disk. Within a process, `lock` keeps an append (with its artifact copy) and the
    sender's cursor writes and clean-up apart; across processes the run folder's lock (ablate/run/lock.py)
    leaves one writer."""

    def __init__(self, folder: Path) -> None:
        self.folder = Path(folder)
        self.lock = threading.RLock()

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

    def _read(self) -> tuple[list[dict[str, Any]], int]:
        """The operations after the cursor, oldest first, and the length of the queue's complete lines: a
        line still being appended is not read yet, and one cut short by a kill (see `mend`) is skipped."""
        try:
            data = self.queue.read_bytes()
        except FileNotFoundError:
            return [], 0
        end = data.rfind(b"\n") + 1
        out = []
        for line in data[:end].splitlines():
            try:
                out.append(json.loads(line))
            except ValueError:
                continue
        return out[self._read_int(CURSOR):], end

    def ops(self) -> list[dict[str, Any]]:
        """Every queued operation not yet sent, oldest first."""
        return self._read()[0]

    def pending(self) -> int:
        return len(self.ops())

    def delayed(self) -> int:
        """Operations that waited in the outbox for a silent server during this run's life (sent since, or
        still waiting)."""
        return self._read_int(DELAYED)

    def count_delayed(self, n: int) -> None:
        if n:
            with self.lock:
                self.folder.mkdir(parents=True, exist_ok=True)
                self._write_int(DELAYED, self.delayed() + n)

    def mend(self) -> None:
        """End a line a killed process left half-written, so that it stays a line of its own (skipped)
        instead of swallowing the next operation appended after it."""
        with self.lock:
            try:
                with open(self.queue, "rb+") as fh:
                    if fh.seek(0, os.SEEK_END) == 0:
                        return
                    fh.seek(-1, os.SEEK_END)
                    if fh.read(1) != b"\n":
                        fh.write(b"\n")
            except FileNotFoundError:
                pass

    def add(self, op: dict[str, Any], *, delayed: bool = True) -> None:
        """Append ``op`` (one whole line, so a reader never takes a half-written one); ``delayed``: it waits
        for a silent server (counted for summary.json) rather than only passing through."""
        line = json.dumps(op, separators=(",", ":")) + "\n"
        with self.lock:
            self.folder.mkdir(parents=True, exist_ok=True)
            with open(self.queue, "a") as fh:
                fh.write(line)
            self.count_delayed(1 if delayed else 0)

    def add_file(self, src: Path, op: dict[str, Any], *, delayed: bool = True) -> None:
        """Queue an artifact: a copy of ``src`` waits here (the original may change or go)."""
        with self.lock:  # the clean-up after a full drain must not remove the copy before its line is in
            files = self.folder / "files"
            files.mkdir(parents=True, exist_ok=True)
            copy = Path(tempfile.mkdtemp(dir=files)) / Path(src).name  # keeps the artifact's own name
            shutil.copyfile(src, copy)
            self.add({**op, "file": str(copy)}, delayed=delayed)

    def add_dir(self, src: Path, op: dict[str, Any], *, delayed: bool = True) -> None:
        """Queue a folder of artifacts: a copy of the tree waits here (its files may change or go)."""
        with self.lock:
            files = self.folder / "files"
            files.mkdir(parents=True, exist_ok=True)
            copy = Path(tempfile.mkdtemp(dir=files)) / "dir"
            shutil.copytree(src, copy)
            self.add({**op, "dir": str(copy)}, delayed=delayed)

    def sync(self) -> None:
        """Flush the queue to the disk (a power loss; a killed process loses nothing the kernel holds)."""
        try:
            fd = os.open(self.queue, os.O_RDONLY)
        except FileNotFoundError:
            return
        try:
            os.fsync(fd)
        finally:
            os.close(fd)

    def drain(self, send: Callable[[dict[str, Any]], None],
              closed: Callable[[], bool] = lambda: False) -> int:
        """Send queued operations in order, also those appended meanwhile, until the queue is empty (it then
        starts afresh) or a send raises (the exception propagates; the cursor keeps what was sent). Once
        ``closed()`` is true the files are no longer this drain's to touch: it stops. The number sent."""
        sent = 0
        while True:
            ops, end = self._read()
            done = self._read_int(CURSOR)
            for op in ops:
                send(op)
                sent += 1
                with self.lock:
                    if closed():
                        return sent
                    done += 1
                    self._write_int(CURSOR, done)
            with self.lock:
                if closed():
                    return sent
                size = self.queue.stat().st_size if self.queue.exists() else 0
                if size == end:
                    if end:
                        self._reset()
                    return sent
                self.mend()  # more came meanwhile; a fragment a killed process left becomes a line

    def _reset(self) -> None:
        # All sent: start the queue afresh (the `delayed` count stays for the summary). The cursor goes
        # first: a kill between the two leaves a queue sent again (MLflow drops a repeated metric), never a
        # stale cursor that would skip the first operations of the next queue.
        (self.folder / CURSOR).unlink(missing_ok=True)
        self.queue.unlink(missing_ok=True)
        shutil.rmtree(self.folder / "files", ignore_errors=True)


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
    elif kind == "params":
        params = [Param(k, v) for k, v in op["params"].items()]
        for i in range(0, len(params), 100):
            client.log_batch(run_id, params=params[i: i + 100], synchronous=True)
    elif kind == "artifact":
        client.log_artifact(run_id, op["file"], op.get("artifact_path"))
    elif kind == "artifacts":
        client.log_artifacts(run_id, op["dir"], op.get("artifact_path"))
    elif kind == "dataset":
        log_dataset(client, run_id, DatasetEntity(**op["dataset"]), op["context"])
    elif kind == "end":
        client.set_terminated(run_id, op["status"])
    else:
        raise ValueError(f"unknown outbox operation {kind!r}")


def log_dataset(client: MlflowClient, run_id: str, entity: DatasetEntity, context: str) -> None:
    """Record a dataset as a run input (the Datasets column of the UI)."""
    tag = InputTag("mlflow.data.context", context)
    try:
        client.log_inputs(run_id, [DatasetInput(entity, [tag])])
    except MlflowException as e:
        # Two workers logging the same dataset at once (ablate study/tune --workers N): the store's
        # check-then-insert fails for one of them on the unique (experiment, name, digest) key. The row
        # exists now, so a second try links it to this run.
        if "unique constraint" not in str(e).lower() and "integrityerror" not in str(e).lower():
            raise
        time.sleep(0.2)
        client.log_inputs(run_id, [DatasetInput(entity, [tag])])


def _fail_fast() -> None:
    os.environ.setdefault("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")
    os.environ.setdefault("MLFLOW_HTTP_REQUEST_TIMEOUT", "10")


class Courier:
    """Sends one run's records to a tracking server from a daemon thread, through the outbox.

    The training thread only appends (`send`, `send_file`, `send_made`: a line in the queue, an artifact
    copied aside) and wakes the sender, which delivers the queue in order, marks the server down on a
    failure and asks again after a pause. `finish` waits for it at most `FINISH_WAIT_S`."""

    def __init__(self, client: MlflowClient, run_id: str, uri: str, folder: Path,
                 last_step: dict[str, int]) -> None:
        _fail_fast()
        self.client, self.run_id, self.uri = client, run_id, uri
        self.shown = redacted(uri)  # how messages name the server: a password in its URI as ***
        self.outbox = Outbox(folder)
        self.outbox.mend()
        self.down_since: float | None = None  # when the server stopped answering; None while it answers
        self.next_try = 0.0
        # Records an earlier run of this command left behind count as logged (never send a step twice) and
        # go first. Their end and status belong to that earlier process: this one ends the run itself.
        inherited = self.outbox.ops()
        for op in inherited:
            for key, _, _, step in op.get("items", []):
                last_step[key] = max(int(step), last_step.get(key, int(step)))
        self._inherited = len(inherited)  # the sender's count of those still to send
        self._cv = threading.Condition()
        self._queued = bool(inherited)  # the sender has something to send
        self._asked = self._answered = 0  # requests to try now (`settle`); the last one a pass began after
        self._closed = False  # `finish` let go of the outbox: the sender touches its files no more
        # The sender; it returns once `finish` let go of the outbox (tests join it to see nothing follows).
        self.sender = threading.Thread(target=self._run, name=f"ablate-courier-{run_id[:8]}", daemon=True)
        self.sender.start()

    @property
    def down(self) -> bool:
        return self.down_since is not None

    def send(self, op: dict[str, Any]) -> None:
        with self.outbox.lock:  # `down` and the count agree with the sender's `_went_down`
            self.outbox.add(op, delayed=self.down)
        self._wake()

    def send_file(self, path: Path, artifact_path: str | None) -> None:
        with self.outbox.lock:
            op = {"kind": "artifact", "artifact_path": artifact_path}
            self.outbox.add_file(path, op, delayed=self.down)
        self._wake()

    def send_dir(self, directory: Path, artifact_path: str | None) -> None:
        with self.outbox.lock:
            self.outbox.add_dir(directory, {"kind": "artifacts", "artifact_path": artifact_path},
                                delayed=self.down)
        self._wake()

    def send_made(self, artifact_file: str, write: Callable[[Path], Any]) -> None:
        """An artifact made by ``write(path)`` (text, JSON, a figure) under the name ``artifact_file``."""
        with tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp) / Path(artifact_file).name
            write(path)
            folder = str(Path(artifact_file).parent)
            self.send_file(path, None if folder == "." else folder)

    def _wake(self) -> None:
        with self._cv:
            self._queued = True
            self._cv.notify_all()

    # -- the sender thread
    def _run(self) -> None:
        while True:
            with self._cv:
                while not self._closed and not self._ready():
                    self._cv.wait(max(0.0, self.next_try - time.time()) if self._queued else None)
                if self._closed:
                    return
                self._queued, asked = False, self._asked
            self._pass()
            with self._cv:
                self._answered = asked
                self._cv.notify_all()

    def _ready(self) -> bool:
        due = not self.down or time.time() >= self.next_try or self._asked > self._answered
        return self._queued and due

    def _pass(self) -> None:
        """Send the queue; on a failure the server is down and the queue waits for the next try."""
        def send(op: dict[str, Any]) -> None:
            if self._inherited and op["kind"] == "tags":
                op = {**op, "tags": {k: v for k, v in op["tags"].items() if k != record.STATUS}}
            if not (self._inherited and op["kind"] == "end"):
                deliver(self.client, self.run_id, op)
            self._inherited = max(0, self._inherited - 1)

        try:
            self.outbox.drain(send, closed=lambda: self._closed)
        except Exception as exc:  # noqa: BLE001 - whatever the transport raised: the server is away
            self._went_down(exc)
            self._wake()  # still queued: `_run` waits until `next_try`
            return
        with self.outbox.lock:
            if self.down and not self._closed:
                print(f"note: the tracking server {self.shown} answers again; the queued records were sent",
                      file=sys.stderr, flush=True)
            self.down_since = None

    def _went_down(self, exc: BaseException) -> None:
        with self.outbox.lock:
            if self.down_since is None:
                self.down_since = time.time()
                self.outbox.count_delayed(self.outbox.pending())  # later ones are counted as they come
                if not self._closed:
                    print(f"note: the tracking server {self.shown} does not answer ({_first_line(exc)}); "
                          f"training goes on and its records wait in {self.outbox.folder}", file=sys.stderr,
                          flush=True)
            waited = time.time() - self.down_since
        self.outbox.sync()  # what waits now may wait long
        with self._cv:  # asked at most every RETRY_S.. 60 s while down
            self.next_try = time.time() + min(60.0, max(RETRY_S, waited))

    # -- the end
    def settle(self, timeout: float) -> bool:
        """Have the sender try now (even while the server is down) and wait, at most ``timeout`` seconds,
        until it has; whether everything queued was sent."""
        with self._cv:
            self._asked += 1
            asked, self._queued = self._asked, True
            self._cv.notify_all()
            self._cv.wait_for(lambda: self._answered >= asked, timeout)
        return not self.outbox.pending()

    def finish(self, tags: dict[str, str], mlflow_status: str) -> None:
        """End the run (after everything queued before), waiting for the sender at most `FINISH_WAIT_S`;
        one line if records still wait for the server (the next run of the command sends them)."""
        self.send({"kind": "tags", "tags": tags})
        self.send({"kind": "end", "status": mlflow_status})
        self.settle(FINISH_WAIT_S)
        with self.outbox.lock:  # a send still in flight may end, but its cursor is not written any more
            self._closed = True
        self._wake()
        left = self.outbox.pending()
        if left:
            print(f"warning: the tracking server {self.shown} is down or too slow: {left} records of run "
                  f"{self.run_id} wait in {self.outbox.folder}; run the same command again to send them (the "
                  "run folder holds the complete local record)", file=sys.stderr, flush=True)


def send_outbox(folder: Path, run_id: str | None, tracking_uri: str) -> int:
    """Send what a finished run left in its outbox (at the next run of the same command); the number of
    records still waiting (and one line) when the server is still away."""
    box = Outbox(folder)
    box.mend()
    if not run_id or not box.pending():
        return 0
    _fail_fast()
    client = MlflowClient(tracking_uri)
    try:
        box.drain(lambda op: deliver(client, run_id, op))
    except Exception as exc:  # noqa: BLE001 - still away
        left = box.pending()
        shown = redacted(tracking_uri)
        print(f"warning: the tracking server {shown} does not answer ({_first_line(exc)}): {left} "
              f"records of run {run_id} still wait in {folder}", file=sys.stderr, flush=True)
        return left
    print(f"note: sent the records run {run_id} had queued in {folder} to {redacted(tracking_uri)}",
          file=sys.stderr, flush=True)
    return 0
