"""A ladder's runs told apart by rung (spec field ``ablation.scales``): each run's rung is its ``ablate.rung``
tag, the rungs' order the study's record's (``StudyRecord.ladder``, ablate/study/recorded_study.py).
``loaded_study`` reads each rung's runs as a study of its own."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, TypeVar

from ablate.tracking import record


class Tagged(Protocol):
    tags: dict[str, str]


T = TypeVar("T", bound=Tagged)


def by_rung(names: Sequence[str], runs: Sequence[T]) -> dict[str, list[T]]:
    """Each rung's runs, in the order of ``names`` (the ladder's rungs in order of compute; a rung without
    runs left out)."""
    out: dict[str, list[T]] = {}
    for name in names:
        mine = [r for r in runs if r.tags.get(record.RUNG) == name]
        if mine:
            out[name] = mine
    return out
