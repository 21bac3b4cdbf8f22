"""The trial store every study coordinates through: Optuna storages, a cross-process lock, owners.

Stores: a JournalFileBackend file (``.ablate/optuna-journal.log``, default; safe for processes of one
machine, and for several machines when the file is on a shared disk such as NFS) or ``--storage
postgresql://...`` (RDBStorage with heartbeats, for several machines). Workers pop WAITING trials under a
store-wide lock, so no cell or trial slot runs twice however many processes share the store. A trial whose
worker died is failed and re-queued: by its heartbeat going stale (RDB: Optuna's own heartbeat and
RetryHeartbeatStaleTrialCallback), or on a journal store, which has no heartbeat of its own, because its
owner process (host, pid and start time, kept in the trial's user attrs) is gone; an owner on another host
cannot be asked, so there the worker refreshes a timestamp (system attr ``ablate.heartbeat``) every
interval and a timestamp older than the grace period means the worker is gone. Hosts sharing a journal
need clocks that agree to well within the grace period (NTP does).

Ablation studies queue their cells on top of it (ablate/study/cell_queue.py).
"""

from __future__ import annotations

import hashlib
import os
import socket
import sys
import threading
import time
import warnings
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager
from datetime import datetime
from pathlib import Path
from typing import Any, TypedDict

import optuna
import sqlalchemy
from optuna.storages import RDBStorage, RetryHeartbeatStaleTrialCallback
from optuna.storages.journal import JournalFileBackend, JournalFileOpenLock, JournalFileSymlinkLock
from optuna.trial import FrozenTrial, TrialState
from sqlalchemy.pool import NullPool

from ablate.dburl import redacted, with_installed_driver
from ablate.errors import AblateError
from ablate.study.optuna_attrs import HEARTBEAT, OWNER, RETRY_HISTORY

DEFAULT_JOURNAL = Path(".ablate") / "optuna-journal.log"
MAX_RETRY = 3  # re-queues of a trial whose worker died (an interrupted one is re-queued without limit)
warnings.filterwarnings("ignore", category=optuna.exceptions.ExperimentalWarning)
optuna.logging.set_verbosity(optuna.logging.WARNING)


def heartbeat_settings() -> tuple[int, int]:
    """(interval, grace) seconds of trial heartbeats; ABLATE_HEARTBEAT_INTERVAL / _GRACE override (tests)."""
    interval = int(os.environ.get("ABLATE_HEARTBEAT_INTERVAL", "30"))
    return interval, int(os.environ.get("ABLATE_HEARTBEAT_GRACE", str(3 * interval)))


# ---------------------------------------------------------------- the store
class Store:
    """An Optuna storage plus a cross-process lock around queue operations (enqueue, pop, reclaim)."""

    def __init__(self, url: str | None = None, *, create: bool = True) -> None:
        self.url = url
        if url and "://" in url:
            self.kind = "rdb"
            url = with_installed_driver(url)
            if not url.startswith(("postgresql", "sqlite:///")):
                raise AblateError(f"--storage {redacted(url)!r}: expected postgresql://... (or sqlite:///file.db)")
            interval, grace = heartbeat_settings()
            for attempt in range(3):  # workers starting together on a fresh database race to create tables
                try:
                    self.storage: Any = _rdb(url, interval, grace, create)
                    break
                except Exception as exc:  # noqa: BLE001 - connection refused, bad credentials, missing driver
                    if attempt == 2:
                        reason = next(iter(str(exc).strip().splitlines()), type(exc).__name__)  # one line
                        raise AblateError(
                            f"cannot open the Optuna store {self.describe()}: {reason}") from exc
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
            self.journal_interval, self.journal_grace = heartbeat_settings()

    @staticmethod
    def exists(url: str | None) -> bool:
        """False for a journal file not written yet (reading must not create it)."""
        return bool(url and "://" in url) or Path(url or DEFAULT_JOURNAL).exists()

    def describe(self) -> str:
        if not self.url or "://" not in self.url:
            return f"journal file {self.url or DEFAULT_JOURNAL}"
        return redacted(self.url)

    @property
    def heartbeat(self) -> int | None:
        """Optuna's own heartbeat interval (RDB stores); None for a journal (see `beat`)."""
        return self.storage.get_heartbeat_interval() if self.kind == "rdb" else None

    @property
    def grace(self) -> float | None:
        """Seconds without a beat after which a journal trial's owner on another host counts as dead."""
        return float(self.journal_grace) if self.kind == "journal" else None

    @contextmanager
    def lock(self, name: str) -> Iterator[None]:
        """Exclusive across processes (journal, sqlite: a file lock) and machines (PostgreSQL: advisory)."""
        if self.kind == "rdb" and self._url.startswith("postgresql"):
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

    def beat(self, trial: optuna.Trial) -> AbstractContextManager[None]:
        """A context manager recording the trial's heartbeat every interval from a daemon thread: Optuna's
        RDB heartbeat, or on a journal the ``ablate.heartbeat`` timestamp (other hosts read it)."""
        if self.kind == "rdb":
            return _Heartbeat(self, trial, self.storage.record_heartbeat, self.heartbeat) if self.heartbeat \
                else _nothing()
        return _Heartbeat(self, trial, self.touch, self.journal_interval)

    def trial_id(self, study_name: str, number: int) -> int:
        """The storage's id of trial `number` (what its per-trial methods take)."""
        return int(self.storage.get_trial_id_from_study_id_trial_number(
            self.storage.get_study_id_from_name(study_name), number))

    def touch(self, trial_id: int) -> None:
        """Record now as the journal trial's last sign of life."""
        self.storage.set_trial_system_attr(trial_id, HEARTBEAT, time.time())


def _rdb(url: str, interval: int, grace: int, create: bool) -> RDBStorage:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)  # heartbeats: "experimental"
        return RDBStorage(url, engine_kwargs={"pool_pre_ping": True}, heartbeat_interval=interval,
                          grace_period=grace, skip_table_creation=not create,
                          heartbeat_stale_trial_callback=RetryHeartbeatStaleTrialCallback(max_retry=MAX_RETRY))


@contextmanager
def _nothing() -> Iterator[None]:
    yield


@contextmanager
def _file_lock(path: str) -> Iterator[None]:
    try:
        import fcntl  # lazy: POSIX only (Windows has none: Optuna's lock file below)
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
    """Calls ``beat(trial_id)`` on entry and then every ``interval`` seconds until the block ends."""

    def __init__(self, store: Store, trial: optuna.Trial, beat: Callable[[int], None], interval: float
                 ) -> None:
        self._id = store.trial_id(trial.study.study_name, trial.number)
        self._beat, self._stop = beat, threading.Event()
        self._thread = threading.Thread(target=self._run, args=(interval,), daemon=True)

    def _once(self) -> None:
        try:
            self._beat(self._id)
        except Exception:  # noqa: BLE001 - a lost connection must not kill training; the next beat retries
            pass

    def _run(self, interval: float) -> None:
        while not self._stop.wait(interval):
            self._once()

    def __enter__(self) -> None:
        self._once()  # the first beat before training starts, then the thread keeps it fresh
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


class Owner(TypedDict):
    """Which process runs a trial: its host, pid and start time (``/proc/<pid>/stat``'s field 22)."""

    host: str
    pid: int
    start: str | None


def owner() -> Owner:
    return {"host": socket.gethostname(), "pid": os.getpid(), "start": _start_time(os.getpid())}


def owner_alive(who: Owner | None, started: datetime | None = None, beat: float | None = None,
                grace: float | None = None) -> bool:
    """Whether a trial's owner process still runs. Same host: its pid (and start time) is there. Another
    host: its last heartbeat ``beat`` (journal stores) is younger than ``grace`` seconds; without one
    (an RDB store, whose own heartbeat decides, or an older ablate) it cannot be known: True."""
    if not who:  # popped but killed before the owner was written: stale after a minute
        return started is None or (time.time() - started.timestamp()) < 60
    if who.get("host") != socket.gethostname():
        return beat is None or grace is None or time.time() - float(beat) < grace
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


def trial_alive(t: FrozenTrial, store: Store) -> bool:
    """Whether the worker running trial `t` (RUNNING) is still there (see `owner_alive`)."""
    return owner_alive(t.user_attrs.get(OWNER), t.datetime_start, t.system_attrs.get(HEARTBEAT), store.grace)


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
        if trial_alive(t, store):
            continue
        try:
            study.tell(t.number, state=TrialState.FAIL)
        except (ValueError, optuna.exceptions.UpdateFinishedTrialError):
            continue  # finished meanwhile
        requeue(study, study.get_trials(deepcopy=False)[t.number], MAX_RETRY)
        done.append(t.number)
    return done


def resumed(t: FrozenTrial) -> bool:
    """Whether a trial is the re-queued copy of one that stopped part-way (interrupted, its worker gone, or
    a failed one run again): it has a checkpoint to resume from."""
    return RETRY_HISTORY in t.system_attrs


def claim(study: optuna.Study, store: Store) -> tuple[optuna.Trial | None, bool]:
    """Pop a WAITING trial (None when none); the flag says trials still run somewhere. Re-queued copies
    (`resumed`) go first, oldest first, then the others in queue order: an interrupted cell resumes before
    any new cell starts, instead of waiting behind every cell queued after it (Optuna's own `Study.ask`
    pops the lowest trial number, and a re-queued copy is the newest trial).

    Holding the store lock while choosing and marking the trial RUNNING makes the pop exact: no cell or
    budget slot runs twice and no stray trial appears.
    """
    with store.lock(study.study_name):
        reclaim(study, store)
        waiting = study.get_trials(deepcopy=False, states=(TrialState.WAITING,))
        trial = _pop(study, sorted(waiting, key=lambda t: (not resumed(t), t.number)))
        if trial is None:
            return None, bool(study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)))
        trial.set_user_attr(OWNER, owner())
        if store.kind == "journal":
            store.touch(store.trial_id(study.study_name, trial.number))  # alive before `beat` starts
        return trial, True


def claim_where(study: optuna.Study, store: Store, same: Callable[[Mapping[str, Any]], bool],
                count: int) -> list[optuna.Trial]:
    """Pop up to ``count`` WAITING trials whose user attrs ``same`` accepts, as `claim` pops one (under
    the store lock, re-queued copies first): the cells a worker packs with the one it claimed."""
    taken: list[optuna.Trial] = []
    with store.lock(study.study_name):
        waiting = [t for t in study.get_trials(deepcopy=False, states=(TrialState.WAITING,))
                   if same(t.user_attrs)]
        for t in sorted(waiting, key=lambda t: (not resumed(t), t.number)):
            if len(taken) >= count:
                break
            trial = _pop(study, [t])
            if trial is None:
                continue
            trial.set_user_attr(OWNER, owner())
            if store.kind == "journal":
                store.touch(store.trial_id(study.study_name, trial.number))
            taken.append(trial)
    return taken


def _pop(study: optuna.Study, waiting: Sequence[FrozenTrial]) -> optuna.Trial | None:
    """The first of ``waiting`` this process marks RUNNING, as `Study.ask` pops a queued trial (its state
    set through the storage, which refuses a trial another process took or finished first)."""
    study._thread_local.cached_all_trials = None  # as `Study.ask`: read the storage afresh for this trial
    for t in waiting:
        trial_id = t._trial_id  # the storage's id (a FrozenTrial keeps it without a public accessor)
        try:
            if study._storage.set_trial_state_values(trial_id, state=TrialState.RUNNING):
                return optuna.Trial(study, trial_id)
        except optuna.exceptions.UpdateFinishedTrialError:
            continue
    return None


def open_study(store: Store, name: str, directions: Sequence[str], *, create: bool = True,
               sampler: optuna.samplers.BaseSampler | None = None,
               pruner: optuna.pruners.BasePruner | None = None) -> optuna.Study | None:
    if not create:
        try:
            return optuna.load_study(study_name=name, storage=store.storage, sampler=sampler, pruner=pruner)
        except KeyError:
            return None
    return optuna.create_study(study_name=name, storage=store.storage, directions=list(directions),  # type: ignore[arg-type]
                               sampler=sampler, pruner=pruner, load_if_exists=True)
