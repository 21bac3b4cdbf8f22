"""The commands a study or search prints for what comes next: the one that continues it as it was started
(the hint a run prints when a signal stops it, in a terminal or in a SLURM job's log), and the one that
shows where it stands."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from ablate.dburl import redacted


def resume_command(verb: str, spec_path: str, overrides: Sequence[str], workers: int = 1,
                   storage: str | None = None, extra: Sequence[str] = ()) -> str:
    """The command that continues a study or search as it was started: the same overrides, workers and
    storage, then ``extra`` (``--slurm`` and the job shape, ``--trials N``, ``--retry-failed``); a password
    in the storage URL shown as ***: it is not the message's to repeat."""
    parts = [f"ablate {verb}", spec_path, *(f"--set {o}" for o in overrides)]
    if workers > 1:
        parts.append(f"--workers {workers}")
    if storage:
        parts.append(f"--storage {redacted(storage)}")
    return " ".join([*parts, *extra])


def status_command(spec_path: str, overrides: Sequence[str], storage: str | None = None) -> str:
    """`ablate status` of the study as it was started: its overrides name which study of the spec it is."""
    parts = ["ablate status", spec_path, *(f"--set {o}" for o in overrides)]
    if storage:
        parts.append(f"--storage {redacted(storage)}")
    return " ".join(parts)


def plural(count: int, noun: str) -> str:
    """'1 worker process', '2 worker processes', '3 jobs'."""
    if count == 1:
        return f"{count} {noun}"
    return f"{count} {noun}es" if noun.endswith(("s", "sh", "ch", "x")) else f"{count} {noun}s"


@dataclass(frozen=True)
class Launched:
    """How a study was started, for the commands its messages print: `resume` continues it as it was
    started (the same overrides, workers, storage and, for SLURM jobs, ``--slurm`` with the job shape), from
    ``cwd`` when that is not where the message is read (a job's log)."""

    spec_path: str
    overrides: tuple[str, ...]
    workers: int = 1
    storage: str | None = None
    extra: tuple[str, ...] = ()  # --slurm, --jobs N, ...: after the storage
    cwd: str | None = None

    def resume(self, *more: str) -> str:
        command = resume_command("study", self.spec_path, self.overrides, self.workers, self.storage,
                                 (*self.extra, *more))
        return f"cd {self.cwd} && {command}" if self.cwd else command
