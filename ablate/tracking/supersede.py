"""Tag the stale cells of a study ``ablate.superseded``: their variant's implementation changed since.

The run stays in the store as the record of what ran; the MLflow UI shows the tag, reports leave the run out
(``ablate.report.data``), and the study's next round trains the cell under its new identity.
"""

from __future__ import annotations

import pandas as pd

import ablate.tracking.record as R
from ablate.errors import AblateError
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
    c, marked, earlier = client(), [], []
    for rec in children.to_dict("records"):
        tags, params = tags_and_params(rec)
        why = stale_reason(params, tags)
        if why is None:
            continue
        line = f"{tags.get(R.VARIANT, '?')} seed {tags.get(R.SEED, '?')}: {why}"
        if tags.get(R.SUPERSEDED) == why:
            earlier.append(line)
            continue
        c.set_tag(str(rec["run_id"]), R.SUPERSEDED, why)
        marked.append(line)
    return sorted(marked), sorted(earlier)
