"""The committed studies keep their identity: every cell a committed report lists (reports/*/runs.csv, at the
baseline's settings) is planned again, from the study's spec as it is now, under the spec hash it ran with.

A new spec field must leave the hash of every spec that does not set it alone (ablate/spec/experiment.py's
``_LATER_DEFAULTS``); otherwise every committed study would retrain from scratch on its next start.
"""

from __future__ import annotations

import csv
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import pytest

from ablate.spec import model as model_section
from ablate.spec import train as train_section
from ablate.study import ladder_tuning
from ablate.study.designs import plan_study
from ablate.study.study_plan import StudyPlan
from ablate.tracking import record

REPO = Path(__file__).resolve().parents[2]
STUDIES = sorted(p.parent for p in (REPO / "reports").glob("*/runs.csv")
                 if (REPO / "experiments" / "ablations" / f"{p.parent.name}.yaml").exists())


# Variants whose implementation was fixed after committed reports ran (registry ``version=``): their cells
# are stale by design, not broken, and train anew under the new version when the study is started again.
# (axis, variant) -> the version before the fix. Remove an entry once every report listing its cells is rerun.
RAISED = {("optimizer", "muon"): 1, ("parametrisation", "mup"): 1, ("optimizer", "adafactor"): 1}


def recorded_hashes(report: Path) -> dict[tuple[str, int], str]:
    """(variant, seed) -> spec hash of the cells the report counts at the baseline's settings."""
    with open(report / "runs.csv", newline="") as fh:
        rows = list(csv.DictReader(fh))
    return {(row["variant"], int(row["seed"])): row["spec_hash"] for row in rows
            if row.get("arm", record.BASELINE_ARM) in ("", record.BASELINE_ARM) and row["spec_hash"]}


def at_recorded_bests(plan: StudyPlan, report: Path) -> StudyPlan:
    """A tuned ladder's cells run at each variant's tuned best at each rung, which only its tuning cells
    know: planned here at the best each cell's row in runs.csv records (the spec's own plan elsewhere)."""
    tune = ladder_tuning.tuning(plan)
    if tune is None:
        return plan
    size_rung = {r.name: r.size_rung for r in plan.rungs}
    with open(report / "runs.csv", newline="") as fh:
        rows = list(csv.DictReader(fh))
    bests = {(row["variant"], size_rung[row["rung"]]): {f: float(row[f]) for f in tune.grid} for row in rows}
    return ladder_tuning.tuned_plan(plan, [ladder_tuning.RungBest(variant, rung, 0, [], best, [])
                                           for (variant, rung), best in bests.items()])


def test_the_committed_studies_are_found() -> None:
    assert {"modern-axes-multi30k", "tutorial-axes-multi30k", "presets-multi30k"} <= {s.name for s in STUDIES}


@pytest.mark.parametrize("report", STUDIES, ids=[s.name for s in STUDIES])
def test_a_committed_study_plans_its_cells_under_the_hashes_they_ran_with(report: Path) -> None:
    spec = REPO / "experiments" / "ablations" / f"{report.name}.yaml"
    plan = at_recorded_bests(plan_study(str(spec)), report)
    planned = {(c.label, c.seed): c.spec.spec_hash for c in plan.cells}
    recorded = recorded_hashes(report)
    assert recorded, f"{report.name}: runs.csv lists no cell"
    changed = {cell: (hash_, planned.get(cell)) for cell, hash_ in recorded.items()
               if planned.get(cell) != hash_}
    if changed:  # stale by a version raised since (RAISED): planned at the old versions, each is as it ran
        with pytest.MonkeyPatch.context() as patch:
            old = _before_fixes(model_section.component_versions)
            patch.setattr(model_section, "component_versions", old)  # the model's axes (muP)
            recipe = train_section._version
            patch.setattr(train_section, "_version", lambda section, name: RAISED.get(  # the recipe's (Muon)
                (train_section.section_axis(section).kind, name), recipe(section, name)))
            before = {(c.label, c.seed): c.spec.spec_hash for c in plan_study(
                str(REPO / "experiments" / "ablations" / f"{report.name}.yaml")).cells}
        changed = {cell: hashes for cell, hashes in changed.items() if before.get(cell) != hashes[0]}
    assert not changed, f"{report.name}: cells whose identity changed (recorded, planned now): {changed}"


def _before_fixes(versions: Callable[[Mapping[str, Any]], dict[str, int]]
                  ) -> Callable[[Mapping[str, Any]], dict[str, int]]:
    """component_versions with the variants of RAISED at their versions before the fix (1: left out)."""
    def old(model: Mapping[str, Any]) -> dict[str, int]:
        out = versions(model)
        for (axis, name), version in RAISED.items():
            if model.get(axis) == name and axis in out:
                if version > 1:
                    out[axis] = version
                else:
                    del out[axis]
        return out
    return old
