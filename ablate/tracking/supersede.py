"""Tag the stale cells of a study ``ablate.superseded``: their variant's implementation changed since.

The run stays in the store as the record of what ran; the MLflow UI shows the tag, reports leave the run out
(``ablate.report.compute.loaded_study``), and the study's next round trains the cell under its new identity.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pandas as pd

from ablate.errors import AblateError
from ablate.tracking import record
from ablate.tracking.read import client, find_study_runs, tags_and_params
from ablate.tracking.versions import stale_reason


def mark_study(parent_run_id: str) -> tuple[list[str], list[str]]:
    """:func:`mark_superseded` over the child runs of a study's parent (none yet: nothing to mark)."""
    try:
        _, children = find_study_runs(parent_run_id)
    except AblateError:  # a new study: no cell has run yet
        return [], []
    return mark_superseded(children)


def mark_superseded(children: pd.DataFrame) -> tuple[list[str], list[str]]:
    """Tag each stale child run of a study ``ablate.superseded`` (once). Returns the runs tagged now and
    those tagged before, '<variant> seed <n>: <why>' each."""
    found = tag_stale(children, lambda rec, tags, params: stale_reason(params, tags))
    return (sorted(f"{cell}: {why}" for _, cell, why, now in found if now),
            sorted(f"{cell}: {why}" for _, cell, why, now in found if not now))


# (a search_runs row, its tags, its params) -> why the run is stale, or None
Reason = Callable[[dict[str, Any], dict[str, str], dict[str, str]], "str | None"]


def tag_stale(children: pd.DataFrame, reason: Reason) -> list[tuple[str, str, str, bool]]:
    """Tag ``ablate.superseded`` with its reason each child run that ``reason`` names stale, once (a run
    tagged with the same reason before is left as it is). Returns (run id, '<variant> seed <n>', why,
    tagged now) for every stale run."""
    c, found = client(), []
    for rec in children.to_dict("records"):
        tags, params = tags_and_params(rec)
        why = reason(rec, tags, params)
        if why is None:
            continue
        now = tags.get(record.SUPERSEDED) != why
        if now:
            c.set_tag(str(rec["run_id"]), record.SUPERSEDED, why)
        cell = f"{tags.get(record.VARIANT, '?')} seed {tags.get(record.SEED, '?')}"
        found.append((str(rec["run_id"]), cell, why, now))
    return found
