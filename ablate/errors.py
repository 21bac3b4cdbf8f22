"""User-facing errors: the CLI prints their message (one line per problem) and exits 2, no traceback."""

from __future__ import annotations

import errno
import os

# OSError numbers that mean "the storage refused", not a bug: one line and exit 1, the run resumable.
STORAGE_ERRNOS = {errno.ENOSPC: "no space left on device", errno.EDQUOT: "disk quota exceeded",
                  errno.EROFS: "read-only file system", errno.EACCES: "permission denied",
                  errno.EPERM: "operation not permitted"}
# What SQLite (MLflow's default store, an Optuna store) says for the same causes.
SQLITE_STORAGE = ("database or disk is full", "attempt to write a readonly database", "disk i/o error",
                  "unable to open database file")


class AblateError(Exception):
    """Bad input from the user (spec, data, arguments): exit code 2, message only."""

    exit_code = 2


class StorageError(AblateError):
    """The disk said no (full, read-only, permission denied): one line naming the path, exit 1; what was
    written before stays, so the same command resumes once there is space."""

    exit_code = 1

    @classmethod
    def from_os(cls, exc: OSError, path: os.PathLike[str] | str | None = None,
                what: str = "") -> StorageError | OSError:
        """A StorageError for the storage errnos, else ``exc`` itself (a real bug keeps its traceback)."""
        reason = STORAGE_ERRNOS.get(exc.errno or 0)
        if reason is None:
            return exc
        where = path if path is not None else exc.filename
        needs = f" ({what} needs space there)" if what and exc.errno in (errno.ENOSPC, errno.EDQUOT) else ""
        return cls(f"{reason} writing {where}{needs}; free space or fix the permission, then run the same "
                   "command again to resume")


def storage_problem(exc: BaseException) -> StorageError | None:
    """The storage failure behind ``exc`` (its chain included), as one line; None when it is not one."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, StorageError):
            return current
        if isinstance(current, OSError) and (current.errno or 0) in STORAGE_ERRNOS:
            made = StorageError.from_os(current)
            return made if isinstance(made, StorageError) else None
        text = str(current).lower()
        hit = next((s for s in SQLITE_STORAGE if s in text), None)
        if hit is not None:
            uri = os.environ.get("MLFLOW_TRACKING_URI", "sqlite:///mlflow.db")
            return StorageError(f"{hit} in a SQLite store (MLflow: {uri}); free space on its disk or fix its "
                                "permission, then run the same command again to resume")
        current = current.__cause__ or current.__context__
    return None
