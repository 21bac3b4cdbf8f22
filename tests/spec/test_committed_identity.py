"""The committed studies keep their identity: every cell a committed report lists (reports/*/runs.csv, at the
baseline's settings) is planned again, from the study's spec as it is now, under the spec hash it ran with.

A new spec field must leave the hash of every spec that does not set it alone (ablate/spec/experiment.py's
``_LATER_DEFAULTS``); otherwise every committed study would retrain from scratch on its next start.
"""

from __future__ import annotations

import csv
from pathlib import Path

import pytest

from ablate.study.designs import plan_study
from ablate.tracking import record

REPO = Path(__file__).resolve().parents[2]
STUDIES = sorted(p.parent for p in (REPO / "reports").glob("*/runs.csv")
                 if (REPO / "experiments" / "ablations" / f"{p.parent.name}.yaml").exists())


def recorded_hashes(report: Path) -> dict[tuple[str, int], str]:
    """(variant, seed) -> spec hash of the cells the report counts at the baseline's settings."""
    with open(report / "runs.csv", newline="") as fh:
        rows = list(csv.DictReader(fh))
    return {(row["variant"], int(row["seed"])): row["spec_hash"] for row in rows
            if row.get("arm", record.BASELINE_ARM) in ("", record.BASELINE_ARM) and row["spec_hash"]}


def test_the_committed_studies_are_found() -> None:
    assert {"modern-axes-multi30k", "tutorial-axes-multi30k", "presets-multi30k"} <= {s.name for s in STUDIES}


@pytest.mark.parametrize("report", STUDIES, ids=[s.name for s in STUDIES])
def test_a_committed_study_plans_its_cells_under_the_hashes_they_ran_with(report: Path) -> None:
    plan = plan_study(str(REPO / "experiments" / "ablations" / f"{report.name}.yaml"))
    planned = {(c.label, c.seed): c.spec.spec_hash for c in plan.cells}
    recorded = recorded_hashes(report)
    assert recorded, f"{report.name}: runs.csv lists no cell"
    changed = {cell: (hash_, planned.get(cell)) for cell, hash_ in recorded.items()
               if planned.get(cell) != hash_}
    assert not changed, f"{report.name}: cells whose identity changed (recorded, planned now): {changed}"
