"""A ladder's runs told apart by rung (``ablation.scales``): the rungs in order of compute, as the study's
parent run records them (tag ``ablate.scales``), and each run's rung (its ``ablate.rung`` tag).
``loaded_study`` reads each rung's runs as a study of its own."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any, Protocol

from ablate.tracking import record


class Tagged(Protocol):
    tags: dict[str, str]


def rung_order(parent: Mapping[str, Any]) -> list[str]:
    """A ladder's rung names in order of compute; [] for a study without a ladder."""
    text = parent["tags"].get(record.SCALES)
    return [str(r["name"]) for r in json.loads(text)["rungs"]] if text else []


def by_rung(parent: Mapping[str, Any], runs: Sequence[Tagged]) -> dict[str, list[Any]]:
    """Each rung's runs, in order of compute (a rung without runs left out)."""
    out: dict[str, list[Any]] = {}
    for name in rung_order(parent):
        mine = [r for r in runs if r.tags.get(record.RUNG) == name]
        if mine:
            out[name] = mine
    return out
