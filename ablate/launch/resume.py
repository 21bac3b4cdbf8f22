"""The command that continues an interrupted study or search as it was started, for the hint a run prints
when a signal stops it."""

from __future__ import annotations

from collections.abc import Sequence

from ablate.dburl import redacted


def resume_command(verb: str, spec_path: str, overrides: Sequence[str], workers: int = 1,
                   storage: str | None = None) -> str:
    """The command that continues a study or search as it was started: the same overrides, workers and
    storage (a password in the storage URL shown as ***: it is not the message's to repeat)."""
    parts = [f"ablate {verb}", spec_path, *(f"--set {o}" for o in overrides)]
    if workers > 1:
        parts.append(f"--workers {workers}")
    if storage:
        parts.append(f"--storage {redacted(storage)}")
    return " ".join(parts)
