"""Adaptive seeds: which cells an ablation study with ``seeds: {min, max, step}`` still needs.

Every comparison is a variant against the baseline, paired by seed, and the study's comparisons are one
family (each tested at alpha over the family size). Round one runs ``min`` seeds of every variant; after
each round every comparison's paired differences are walked through its planned looks by
``ablate.stats.sequential.progress`` (each look judged against the question of the variant's ``expect:``
claim, if any), and one whose question is still open gets the next look's seeds, up to ``max``; a decided
one gets none. The baseline runs as many seeds as its most demanding comparison. Everything is recomputed
from the cell records in the store, so a rerun, a second worker or another machine reaches the same plan
(idempotent, resumable) and enqueues only what is missing. This module only gathers the pairs from the
records and turns the comparisons' needs into cell keys: the statistics floor decides.
"""

from __future__ import annotations

import math

from ablate.spec.study_sections import AblationSpec
from ablate.stats.pairing import Cell, paired_differences
from ablate.stats.sequential import Design, Progress, progress
from ablate.stats.verdict import Question
from ablate.study.cell_queue import CellRecords
from ablate.study.study_plan import TERMINAL, StudyPlan


def questions(ablation: AblationSpec | None) -> dict[str, tuple[Question, float | None]]:
    """{variant label: (the question its claim asks, the claim's margin or None)} from ``ablation.expect``."""
    return {claim.variant: (claim.effect, claim.margin) for claim in getattr(ablation, "expect", None) or []}


PENDING: Cell = ("pending", None)


def ended_cells(plan: StudyPlan, records: CellRecords, label: str, leading: bool = True
                ) -> list[tuple[Cell, Cell]]:
    """The comparison's (baseline, variant) cells as (status, value) in seed order: over its leading seeds
    whose two cells have both ended (what its rounds are judged on), or with ``leading`` False over every
    seed, a pair still running given as pending."""
    cells = {(c.label, c.seed): c.key for c in plan.cells}
    pairs: list[tuple[Cell, Cell]] = []
    for seed in plan.seeds:
        base, var = records.get(cells[("baseline", seed)]), records.get(cells[(label, seed)])
        if base is None or var is None or base.status not in TERMINAL or var.status not in TERMINAL:
            if leading:
                break
            pairs.append((PENDING, PENDING))
            continue
        pairs.append(((base.status, base.metric), (var.status, var.metric)))
    return pairs


def ended_pairs(plan: StudyPlan, records: CellRecords, label: str, leading: bool = True
                ) -> list[float | None]:
    """The paired differences of :func:`ended_cells` (None where either cell did not finish; a diverged
    cell counts against its side: ablate/stats/pairing.py)."""
    return paired_differences(ended_cells(plan, records, label, leading), plan.metric,
                              plan.direction == "maximize")[0]


def comparison_progress(plan: StudyPlan, design: Design, records: CellRecords) -> dict[str, Progress]:
    """Each comparison's state from the store's cell records (``CellQueue.records()``)."""
    asked = questions(plan.spec.ablation)
    higher = plan.direction == "maximize"
    return {label: progress(ended_cells(plan, records, label), plan.metric, higher, design,
                            *asked.get(label, (None, None)))
            for label in plan.variants if label != "baseline"}


def needed_keys(plan: StudyPlan, design: Design, records: CellRecords) -> list[str]:
    """Cell keys the study needs now, in the plan's (seed-major) order."""
    prog = comparison_progress(plan, design, records)
    base_n = max([p.needed for p in prog.values()] + [design.looks[0]])
    want = {(label, s) for label, p in prog.items() for s in plan.seeds[:p.needed]}
    want |= {("baseline", s) for s in plan.seeds[:base_n]}
    return [c.key for c in plan.cells if (c.label, c.seed) in want]


def format_progress(plan: StudyPlan, design: Design, records: CellRecords) -> str:
    """One line per comparison: its state, seeds, interval and smallest detectable effect."""
    lines = [f"adaptive seeds: {design.describe()}"]
    width = max([len(v) for v in plan.variants] + [4])
    for label, p in comparison_progress(plan, design, records).items():
        lk = p.look
        shown = "no complete look yet"
        if lk is not None:
            shown = f"n={lk.n}, diff {lk.diff:+.4g}"
            if not math.isnan(lk.lo):
                shown += f" [{lk.lo:+.4g}, {lk.hi:+.4g}], detectable {lk.detectable:.3g}"
        need = (f"has its {p.needed} seeds" if lk is not None and lk.n >= p.needed
                else f"needs {p.needed} seeds")
        lines.append(f"  {label:<{width}}  {p.state:<10} {need}; {shown}")
    return "\n".join(lines)
