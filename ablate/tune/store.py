"""The trial store every study coordinates through: Optuna storages, a cross-process lock, owners.

Stores: a JournalFileBackend file (``.ablate/optuna-journal.log``, default; safe for processes of one
machine) or ``--storage postgresql://...`` (RDBStorage with heartbeats, for several machines). Workers pop
WAITING trials under a store-wide lock, so no cell or trial slot runs twice however many processes share
the store. A trial whose worker died is failed and re-queued: by its heartbeat going stale (RDB, Optuna's
RetryHeartbeatStaleTrialCallback) or, since Optuna's journal store has no heartbeat, because its owner
process (host, pid and start time, kept in the trial's user attrs) is gone.

Ablation studies (ablate/study.py) use `CellQueue`: one Optuna study per ablation study, each cell
(variant x seed) one enqueued trial, the trial's state the cell's outcome.
"""

from __future__ import annotations

import math
import os
import socket
import sys
import time
import warnings
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import optuna
from optuna.storages import RDBStorage, RetryHeartbeatStaleTrialCallback
from optuna.storages.journal import JournalFileBackend, JournalFileOpenLock, JournalFileSymlinkLock
from optuna.trial import FrozenTrial, TrialState

from ablate.errors import AblateError

DEFAULT_JOURNAL = Path(".ablate") / "optuna-journal.log"
OWNER = "ablate.owner"  # user attr: the process running a trial
MAX_RETRY = 3  # re-queues of a trial whose worker died (an interrupted one is re-queued without limit)
warnings.filterwarnings("ignore", category=optuna.exceptions.ExperimentalWarning)
optuna.logging.set_verbosity(optuna.logging.WARNING)


def heartbeat_settings() -> tuple[int, int]:
    """(interval, grace) seconds for RDB stores; ABLATE_HEARTBEAT_INTERVAL / _GRACE override (tests)."""
    interval = int(os.environ.get("ABLATE_HEARTBEAT_INTERVAL", "30"))
    return interval, int(os.environ.get("ABLATE_HEARTBEAT_GRACE", str(3 * interval)))


# ---------------------------------------------------------------- the store
class Store:
    """An Optuna storage plus a cross-process lock around queue operations (enqueue, pop, reclaim)."""

    def __init__(self, url: str | None = None, *, create: bool = True) -> None:
        self.url = url
        if url and "://" in url:
            self.kind = "rdb"
            url = _driver(url)
            if not url.startswith(("postgresql", "sqlite:///")):
                raise AblateError(f"--storage {url!r}: expected postgresql://... (or sqlite:///file.db)")
            interval, grace = heartbeat_settings()
            for attempt in range(3):  # workers starting together on a fresh database race to create tables
                try:
                    self.storage: Any = _rdb(url, interval, grace, create)
                    break
                except Exception as exc:  # noqa: BLE001 - connection refused, bad credentials, missing driver
                    if attempt == 2:
                        raise AblateError(f"cannot open the Optuna store {self.describe()}: {exc}") from exc
                    time.sleep(1.0 + attempt)
            self._url = url
        else:
            self.kind = "journal"
            self.path = Path(url or DEFAULT_JOURNAL)
            self.path.parent.mkdir(parents=True, exist_ok=True)
            # Symlink lock: atomic on local disks and NFS; Windows cannot make symlinks without privileges.
            lock_type = JournalFileOpenLock if os.name == "nt" else JournalFileSymlinkLock
            lock = lock_type(str(self.path))
            self.storage = optuna.storages.JournalStorage(JournalFileBackend(str(self.path), lock_obj=lock))

    @staticmethod
    def exists(url: str | None) -> bool:
        """False for a journal file not written yet (reading must not create it)."""
        return bool(url and "://" in url) or Path(url or DEFAULT_JOURNAL).exists()

    def describe(self) -> str:
        if not self.url or "://" not in self.url:
            return f"journal file {self.url or DEFAULT_JOURNAL}"
        head, _, tail = self.url.partition("://")
        return f"{head}://{tail.rpartition('@')[2]}"  # no credentials in messages

    @property
    def heartbeat(self) -> int | None:
        return self.storage.get_heartbeat_interval() if self.kind == "rdb" else None

    @contextmanager
    def lock(self, name: str) -> Iterator[None]:
        """Exclusive across processes (journal, sqlite: a file lock) and machines (PostgreSQL: advisory)."""
        if self.kind == "rdb" and self._url.startswith("postgresql"):
            import hashlib

            import sqlalchemy
            from sqlalchemy.pool import NullPool

            key = int.from_bytes(hashlib.sha256(name.encode()).digest()[:8], "big", signed=True)
            engine = sqlalchemy.create_engine(self._url, poolclass=NullPool)
            try:
                with engine.connect() as conn:  # session lock: released by the server if this process dies
                    conn.execute(sqlalchemy.text("SELECT pg_advisory_lock(:k)"), {"k": key})
                    try:
                        yield
                    finally:
                        conn.execute(sqlalchemy.text("SELECT pg_advisory_unlock(:k)"), {"k": key})
            finally:
                engine.dispose()
            return
        path = str(self.path) if self.kind == "journal" else self._url[len("sqlite:///"):]
        with _file_lock(path + ".ablate-lock"):
            yield

    def beat(self, trial: Any) -> Any:
        """A context manager recording the trial's heartbeat every interval (RDB stores only)."""
        return _Heartbeat(self, trial) if self.heartbeat else _nothing()


def _rdb(url: str, interval: int, grace: int, create: bool) -> RDBStorage:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)  # heartbeats: "experimental"
        return RDBStorage(url, engine_kwargs={"pool_pre_ping": True}, heartbeat_interval=interval,
                          grace_period=grace, skip_table_creation=not create,
                          heartbeat_stale_trial_callback=RetryHeartbeatStaleTrialCallback(max_retry=MAX_RETRY))


def _driver(url: str) -> str:
    """postgres:// and postgresql:// name no driver; SQLAlchemy 2.1 then wants psycopg 3, and ablate ships
    psycopg2-binary: name the one installed."""
    scheme, sep, rest = url.partition("://")
    if scheme not in ("postgres", "postgresql"):
        return url
    import importlib.util

    driver = "" if importlib.util.find_spec("psycopg") else "+psycopg2"
    return f"postgresql{driver}{sep}{rest}"


@contextmanager
def _nothing() -> Iterator[None]:
    yield


@contextmanager
def _file_lock(path: str) -> Iterator[None]:
    try:
        import fcntl
    except ImportError:  # Windows: Optuna's lock file (a dead holder's lock expires after its grace period)
        lock = JournalFileOpenLock(path)
        lock.acquire()
        try:
            yield
        finally:
            lock.release()
        return
    with open(path, "a") as handle:  # flock: the kernel drops it when the holder dies
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


class _Heartbeat:
    def __init__(self, store: Store, trial: Any) -> None:
        import threading

        storage = store.storage
        self._id = storage.get_trial_id_from_study_id_trial_number(
            storage.get_study_id_from_name(trial.study.study_name), trial.number)
        self._storage, self._stop = storage, threading.Event()
        self._thread = threading.Thread(target=self._run, args=(store.heartbeat,), daemon=True)

    def _run(self, interval: int) -> None:
        while True:
            try:
                self._storage.record_heartbeat(self._id)
            except Exception:  # noqa: BLE001 - a lost connection must not kill training; the next beat retries
                pass
            if self._stop.wait(interval):
                return

    def __enter__(self) -> None:
        self._thread.start()

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


# ---------------------------------------------------------------- owners and reclaiming
def _start_time(pid: int) -> str | None:
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return None if fields[0] in ("Z", "X") else fields[19]  # a zombie is dead; field 22 guards pid reuse


def owner() -> dict[str, Any]:
    return {"host": socket.gethostname(), "pid": os.getpid(), "start": _start_time(os.getpid())}


def owner_alive(who: Mapping[str, Any] | None, started: Any = None) -> bool:
    """Whether a trial's owner process still runs; unknowable for another host (True)."""
    if not who:  # popped but killed before the owner was written: stale after a minute
        return started is None or (time.time() - started.timestamp()) < 60
    if who.get("host") != socket.gethostname():
        return True
    pid = int(who["pid"])
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    start = _start_time(pid)
    if sys.platform.startswith("linux"):
        return start is not None and (who.get("start") is None or start == who["start"])
    return True


def requeue(study: optuna.Study, trial: FrozenTrial, max_retry: int | None = None) -> None:
    """A WAITING copy of a failed trial (params, user attrs, retry history): Optuna's own retry callback."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        RetryHeartbeatStaleTrialCallback(max_retry=max_retry)(study, trial)


def reclaim(study: optuna.Study, store: Store) -> list[int]:
    """Fail and re-queue RUNNING trials whose worker is gone; call under the store lock."""
    done: list[int] = []
    if store.heartbeat:
        optuna.storages.fail_stale_trials(study)  # stale heartbeats -> FAIL -> the retry callback
    for t in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
        if owner_alive(t.user_attrs.get(OWNER), t.datetime_start):
            continue
        try:
            study.tell(t.number, state=TrialState.FAIL)
        except (ValueError, optuna.exceptions.UpdateFinishedTrialError):
            continue  # finished meanwhile
        except RuntimeError:
            pass  # GridSampler's study.stop() outside optimize(): the trial is failed all the same
        requeue(study, study.get_trials(deepcopy=False)[t.number], MAX_RETRY)
        done.append(t.number)
    return done


def claim(study: optuna.Study, store: Store) -> tuple[optuna.Trial | None, bool]:
    """Pop the oldest WAITING trial (None when none); the flag says trials still run somewhere.

    `Study.ask` creates a fresh trial when the queue is empty; holding the store lock while checking the
    queue and asking makes the pop exact: no cell or budget slot runs twice and no stray trial appears.
    """
    with store.lock(study.study_name):
        reclaim(study, store)
        if not study.get_trials(deepcopy=False, states=(TrialState.WAITING,)):
            return None, bool(study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # "heartbeat is supposed to be used with optimize": we beat
            trial = study.ask()
        trial.set_user_attr(OWNER, owner())
        return trial, True


def open_study(store: Store, name: str, directions: Sequence[str], *, create: bool = True,
               sampler: Any = None, pruner: Any = None) -> optuna.Study | None:
    if not create:
        try:
            return optuna.load_study(study_name=name, storage=store.storage, sampler=sampler, pruner=pruner)
        except KeyError:
            return None
    return optuna.create_study(study_name=name, storage=store.storage, directions=list(directions),  # type: ignore[arg-type]
                               sampler=sampler, pruner=pruner, load_if_exists=True)


# ---------------------------------------------------------------- ablation cells as trials
CELL = "ablate.cell"


@dataclass
class CellRecord:
    """The latest trial of one cell, as `ablate status` shows it."""

    status: str  # pending | running | finished | diverged | failed
    metric: float | None = None
    step: int | None = None
    run_id: str | None = None
    trial: int | None = None
    error: str | None = None


class CellQueue:
    """One ablation study in the store: cells enqueued once, popped by workers, outcomes as trial states."""

    def __init__(self, store: Store, name: str, direction: str, *, create: bool = True) -> None:
        self.store, self.name = store, name
        self.study = open_study(store, name, [direction], create=create,
                                sampler=optuna.samplers.RandomSampler(seed=0))

    def latest(self) -> dict[str, FrozenTrial]:
        out: dict[str, FrozenTrial] = {}
        for t in self.study.get_trials(deepcopy=False) if self.study else []:
            if CELL in t.user_attrs:
                out[t.user_attrs[CELL]] = t  # trials come in number order: the last one wins
        return out

    def enqueue(self, cells: Sequence[Mapping[str, Any]], retry_failed: bool = False) -> tuple[int, int]:
        """Enqueue cells the store has not seen (and failed ones with retry_failed): (new, retried)."""
        assert self.study is not None
        new = retried = 0
        with self.store.lock(self.name):
            latest = self.latest()
            for cell in cells:
                t = latest.get(cell[CELL])
                if t is None:
                    self.study.enqueue_trial({}, user_attrs=dict(cell))
                    new += 1
                elif t.state == TrialState.FAIL and retry_failed:
                    requeue(self.study, t)
                    retried += 1
        return new, retried

    def get(self, key: str) -> Any:
        return self.study.user_attrs.get(key) if self.study else None

    def set(self, key: str, value: Any) -> None:
        assert self.study is not None
        self.study.set_user_attr(key, value)

    def claim(self) -> tuple[optuna.Trial | None, bool]:
        assert self.study is not None
        return claim(self.study, self.store)

    def report(self, trial: optuna.Trial, step: int, value: float | None) -> None:
        if value is not None and math.isfinite(value):
            try:
                trial.report(value, step)
            except optuna.exceptions.UpdateFinishedTrialError:
                pass  # failed as stale meanwhile; finish() says so

    def finish(self, trial: optuna.Trial, status: str, value: float | None, run_id: str | None = None,
               error: str | None = None) -> None:
        """finished/diverged -> COMPLETE (user attr status; no value counts as the worst), else FAIL."""
        assert self.study is not None
        try:
            trial.set_user_attr("status", status)
            if run_id:
                trial.set_user_attr("mlflow_run_id", run_id)
            if error:
                trial.set_user_attr("error", error[-2000:])
            if status in ("finished", "diverged"):
                if value is None or not math.isfinite(value):
                    value = math.inf if self.study.direction.name == "MINIMIZE" else -math.inf
                self.study.tell(trial, value)
            else:
                self.study.tell(trial, state=TrialState.FAIL)
        except (optuna.exceptions.UpdateFinishedTrialError, ValueError):
            # Its heartbeat went stale and another worker re-queued it: that copy resumes the checkpoint.
            print(f"cell trial {trial.number} was failed as stale meanwhile; its re-queued copy counts",
                  file=sys.stderr, flush=True)

    def release(self, trial: optuna.Trial) -> None:
        """An interrupted cell: FAIL this trial and queue the cell again (it resumes from its checkpoint)."""
        assert self.study is not None
        try:
            trial.set_user_attr("status", "killed")
            self.study.tell(trial, state=TrialState.FAIL)
        except (optuna.exceptions.UpdateFinishedTrialError, ValueError):
            return
        requeue(self.study, self.study.get_trials(deepcopy=False)[trial.number])

    def records(self) -> dict[str, CellRecord]:
        out: dict[str, CellRecord] = {}
        for key, t in self.latest().items():
            last = max(t.intermediate_values) if t.intermediate_values else None
            metric = t.value if t.state == TrialState.COMPLETE else (
                t.intermediate_values[last] if last is not None else None)
            status = {TrialState.WAITING: "pending", TrialState.RUNNING: "running",
                      TrialState.FAIL: "failed"}.get(t.state, t.user_attrs.get("status", "finished"))
            if t.state == TrialState.RUNNING and not owner_alive(t.user_attrs.get(OWNER), t.datetime_start):
                status = "interrupted"
            if metric is not None and not math.isfinite(metric):
                metric = None
            out[key] = CellRecord(status, metric, last, t.user_attrs.get("mlflow_run_id"), t.number,
                                  t.user_attrs.get("error"))
        return out

