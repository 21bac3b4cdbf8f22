"""A study's design, recorded before its first cell and never moved after the data (a pre-registration).

What decides a study's verdicts is fixed when it starts: the deciding metric (``ablation.metric`` as
resolved), the seeds (the planned looks, or the fixed list), the level and the family it is shared by, the
smallest effect worth knowing and each claim's question and margin; a ladder's rungs (their overrides, the
target and the margin its transfer verdicts are judged by), its family every rung's comparisons. The group-
sequential constants (Pocock's per-look level) depend on them, so changing any of them once cells have run
would judge old data by a rule chosen after seeing it. The record lives in the study's Optuna store (every
worker and machine reads it before taking a cell) and on its parent MLflow run; a spec that no longer
matches it is refused with one line naming the field that changed and how to run the new design: a new
study, under a new name.

A study started before this record existed gets it at its next start, from its spec as it then is.
"""

from __future__ import annotations

import json
from typing import Any

from ablate.errors import AblateError
from ablate.study.cell_queue import CellQueue
from ablate.study.optuna_attrs import PLAN as PLAN_ATTR
from ablate.study.optuna_attrs import PREREGISTERED as STORE_ATTR
from ablate.study.study_plan import StudyPlan

# record key -> the spec field a reader changes to change it
FIELDS = {"metric": "ablation.metric", "seeds": "ablation.seeds", "looks": "ablation.seeds",
          "alpha": "ablation.alpha", "scales": "ablation.scales (a ladder's rungs, target and margin)",
          "family": "ablation.axes or ablation.tune (the comparisons that share alpha: a tuned study's "
                    "own-best comparisons join them)",
          "min_effect": "ablation.min_effect", "claims": "ablation.expect"}


def design_record(plan: StudyPlan) -> dict[str, object]:
    """The design of ``plan`` (a StudyPlan at the baseline's settings) as a JSON-able dict."""
    abl = plan.spec.ablation
    assert abl is not None
    claims = {c.variant: {"effect": c.effect, "margin": c.margin} for c in abl.expect}
    record: dict[str, Any] = {"metric": plan.metric, "alpha": abl.alpha,
                              "family": plan.family, "min_effect": abl.min_effect,
                              "claims": claims}
    design = plan.design
    if design is not None:
        record["looks"] = list(design.looks)
    else:
        record["seeds"] = list(plan.seeds)
    if plan.rungs:  # a ladder: its rungs are its design (its family every rung's comparisons: plan.family)
        scales = abl.scales
        assert scales is not None
        rungs = [{"name": r.name, "overrides": r.overrides} for r in plan.rungs]  # in order of compute
        record["scales"] = {"rungs": rungs, "target": scales.target,
                            "margin": scales.margin, "tokens_per_param": scales.tokens_per_param}
    return record


def changed_field(recorded: dict[str, object], current: dict[str, object]) -> str | None:
    """The first record key whose value differs (in FIELDS order), None when the design is the same."""
    for key in FIELDS:
        if key in recorded and recorded.get(key) != current.get(key):
            return key
    return None


def refusal(study: str, recorded: dict[str, object], current: dict[str, object]) -> str | None:
    """The one-line refusal of a spec whose design differs from the recorded one, else None."""
    key = changed_field(recorded, current)
    if key is None:
        return None
    return (f"{FIELDS[key]}: study {study!r} was pre-registered with {key} {_shown(recorded.get(key))}, the "
            f"spec now gives {_shown(current.get(key))}; a study's design never moves after it is recorded. "
            f"Put the spec back, or run the new design as a new study (a new `name:` or tracking.experiment)")


def _shown(value: object) -> str:
    if isinstance(value, list) and value and all(isinstance(v, int) for v in value):
        return f"{value[0]}..{value[-1]}" if value == list(range(value[0], value[-1] + 1)) else str(value)
    return json.dumps(value, sort_keys=True)


def record_or_refuse(queue: CellQueue, plan: StudyPlan, plan_text: str,
                     plan_data: dict[str, object] | None = None) -> bool:
    """Record ``plan``'s design in the study's store if it has none yet (True), with the power plan it was
    recorded with (its text and data), else refuse a changed one with an AblateError (exit 2, nothing
    written). Call under the store's lock."""
    current = design_record(plan)
    text = queue.get(STORE_ATTR)
    if text:
        why = refusal(plan.name, json.loads(text), current)
        if why:
            raise AblateError(why)
        return False
    queue.set(STORE_ATTR, json.dumps(current, sort_keys=True))
    queue.set(PLAN_ATTR, json.dumps({"text": plan_text, "plan": plan_data}))
    return True


def recorded_plan(queue: CellQueue) -> tuple[str, dict[str, object] | None]:
    """The power plan the design was recorded with: (its text, its data), ("", None) when none."""
    raw = queue.get(PLAN_ATTR)
    if not raw:
        return "", None
    found = json.loads(raw)
    return str(found.get("text") or ""), found.get("plan")


def check_only(queue: CellQueue, plan: StudyPlan) -> str | None:
    """The dry run's reading: the refusal a start would give, else None (writes nothing)."""
    text = queue.get(STORE_ATTR)
    return refusal(plan.name, json.loads(text), design_record(plan)) if text else None
