"""One writer per run: an advisory lock on the run folder for `ablate run`.

The lock is a file ``<run dir>/.lock`` created exclusively (``O_EXCL``) and held with ``flock`` while
the run trains; it records who holds it (pid, host, start time, command). A second launch of the same run
reads it and stops with one line naming the holder (exit 2), or with ``--wait`` polls until it is free.
A lock left by a process that is gone (same host, pid not running, or running but not holding the flock:
a recycled pid) is taken over with a note. A lock from another host is never judged stale: only that host
can tell, so its owner must remove it. Studies do not use it: their cells are coordinated through the
Optuna store (ablate/study/optuna_store.py).
"""

from __future__ import annotations

import fcntl
import json
import os
import socket
import sys
import time
from pathlib import Path
from types import TracebackType
from typing import Any

from ablate.errors import AblateError

LOCK_NAME = ".lock"


class RunLocked(AblateError):
    """Another process trains this run (exit 2)."""


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # exists, another user's
    return True


def _flock_free(path: Path) -> bool:
    """True when nobody holds the flock of ``path`` (tested by taking it and letting go at once)."""
    try:
        fd = os.open(path, os.O_RDWR)
    except FileNotFoundError:
        return True
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    finally:
        os.close(fd)  # closing releases a flock we took
    return True


class RunLock:
    """``with RunLock(run_dir, wait=False):`` holds the run folder for this process."""

    def __init__(self, run_dir: Path, *, wait: bool = False, poll_s: float = 1.0) -> None:
        self.path = Path(run_dir) / LOCK_NAME
        self.wait = wait
        self.poll_s = poll_s
        self._fd: int | None = None

    def owner(self) -> dict[str, Any] | None:
        try:
            return dict(json.loads(self.path.read_text()))
        except (OSError, ValueError, TypeError):
            return None  # gone, or being written this instant

    def _stale(self, who: dict[str, Any]) -> bool:
        if who.get("host") != socket.gethostname():
            return False
        pid = int(who.get("pid", 0))
        if pid <= 0 or not _alive(pid):
            return True
        # The pid runs, but a holder keeps the flock for its whole life: free flock = a recycled pid. The
        # age guard covers the instant between the holder's create and its flock.
        return time.time() - float(who.get("since", 0)) > 5 and _flock_free(self.path)

    def acquire(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        told = False
        while True:
            try:
                fd = os.open(self.path, os.O_CREAT | os.O_EXCL | os.O_RDWR, 0o644)
            except FileExistsError:
                who = self.owner()
                if who is None:  # half-written by a launch this instant, or unreadable: look again
                    if self.path.exists() and time.time() - self.path.stat().st_mtime > 5:
                        who = {"pid": 0, "host": socket.gethostname(), "since": 0}
                    else:
                        time.sleep(0.1)
                        continue
                if self._stale(who):
                    self._take_over(who)
                    continue
                holder = (f"pid {who.get('pid')} on {who.get('host')} since "
                          f"{time.strftime('%Y-%m-%d %H:%M:%S', time.localtime(float(who.get('since', 0))))}")
                if not self.wait:
                    raise RunLocked(f"{self.path.parent} is being trained by {holder} (lock {self.path}); "
                                    "wait for it, or run with --wait") from None
                if not told:
                    print(f"waiting for {holder}, which trains {self.path.parent}", file=sys.stderr,
                          flush=True)
                    told = True
                time.sleep(self.poll_s)
                continue
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # ours: just created exclusively
            info = {"pid": os.getpid(), "host": socket.gethostname(), "since": time.time(),
                    "command": " ".join(sys.argv)[:500]}
            os.write(fd, json.dumps(info).encode())
            os.fsync(fd)
            self._fd = fd
            return

    def _take_over(self, who: dict[str, Any]) -> None:
        # Rename first: of two launches taking over at once, only one rename succeeds.
        aside = self.path.with_name(f"{LOCK_NAME}.stale.{os.getpid()}")
        try:
            os.rename(self.path, aside)
        except FileNotFoundError:
            return
        aside.unlink(missing_ok=True)
        print(f"note: took over the lock of pid {who.get('pid')} on {who.get('host')} (no longer running) "
              f"on {self.path.parent}", file=sys.stderr, flush=True)

    def release(self) -> None:
        if self._fd is None:
            return
        try:
            who = self.owner()
            if who is not None and who.get("pid") == os.getpid() and who.get("host") == socket.gethostname():
                self.path.unlink(missing_ok=True)
        finally:
            os.close(self._fd)
            self._fd = None

    def __enter__(self) -> RunLock:
        self.acquire()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.release()
