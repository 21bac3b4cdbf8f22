"""What a new study would need, read off a study's own seeds once they exist (the dry run's plan "from the
study's own seeds", for information only): the seeds that settle each comparison's question at the effect
its pairs found and at each end of that effect's interval (ablate/stats/replication_size.py
``sized_at_found``), never at an effect assumed beforehand (its claim's margin or ``min_effect``).

On a ladder each rung's comparison is sized with the rung-level variance of its gap where the study's own
rungs estimate one (the scatter of the rungs' gaps about their line in log compute that the seeds do not
explain, ablate/stats/transfer.py ``fit_line``): a new study's gap at a rung carries its rung's own effect,
which no number of seeds averages away. Each line says which noise it used.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from ablate.stats.power import MOST_SEEDS
from ablate.stats.replication_size import SeedsAcross, sized_at_found
from ablate.stats.simulated_rules import rung_noise
from ablate.stats.transfer import GapRung
from ablate.study.cell_queue import CellRecords
from ablate.study.seed_rounds import ended_pairs, questions
from ablate.study.sized_ladder import ladder_design
from ablate.study.study_plan import StudyPlan


def _count(n: int | None) -> str:
    return f"more than {MOST_SEEDS}" if n is None else str(n)


def across_text(found: SeedsAcross, rung_noise: str = "") -> str:
    """'31 seeds at the effect found, 9 to more than 100 across its interval (these seeds had 42% power
    there)'."""
    ends = sorted((found.at_lo, found.at_hi), key=lambda n: 10 ** 9 if n is None else n)
    noise = f"; {rung_noise}" if rung_noise else ""
    return (f"{_count(found.observed)} seeds at the effect found, {_count(ends[0])} to {_count(ends[1])} "
            f"across its interval (these seeds had {found.power_here:.0%} power there{noise})")


def _finite(diffs: Sequence[float | None]) -> list[float]:
    return [d for d in diffs if d is not None and math.isfinite(d)]


def found_sizes(plan: StudyPlan, records: CellRecords) -> dict[str, SeedsAcross | None]:
    """Each comparison's new-study seeds at the effect the study's own finished pairs found (two or more)."""
    design = plan.verdict_design
    asked = questions(plan.ablation)
    out: dict[str, SeedsAcross | None] = {}
    for label in [v for v in plan.variants if v != "baseline"]:
        diffs = _finite(ended_pairs(plan, records, label, leading=False))
        if len(diffs) < 2:
            continue
        question, margin = asked.get(label, (None, None))
        out[label] = sized_at_found(diffs, design.level, question, margin, design.min_effect,
                                    plan.direction == "maximize", most=MOST_SEEDS)
    return out


def found_lines(plan: StudyPlan, records: CellRecords) -> list[str]:
    """The dry run's lines for :func:`found_sizes` (none before a comparison has two pairs)."""
    sizes = found_sizes(plan, records)
    if not sizes:
        return []
    lines = ["  a new study at the effects these seeds found (a paired t test, 80% power; information only):"]
    for label, found in sizes.items():
        lines.append(f"    {label}: " + ("nothing to size (no spread, an identity check or no question)"
                                          if found is None else across_text(found)))
    return lines


def rung_pairs(plan: StudyPlan, records: CellRecords, label: str) -> list[GapRung]:
    """One comparison's finished pairs at each rung of a ladder, with the rung's planned compute."""
    by = {(c.rung, c.label, c.seed): records.get(c.key) for c in plan.cells}
    out = []
    for rung in plan.rungs:
        diffs = []
        for seed in plan.seeds:
            b, v = by.get((rung.name, "baseline", seed)), by.get((rung.name, label, seed))
            if (b is not None and v is not None and b.status == v.status == "finished"
                    and b.metric is not None and v.metric is not None):
                diffs.append(v.metric - b.metric)
        out.append(GapRung(rung.name, rung.compute.flops, tuple(_finite(diffs))))
    return out


def ladder_found_sizes(plan: StudyPlan, records: CellRecords
                       ) -> dict[str, dict[str, tuple[SeedsAcross | None, str]]]:
    """rung -> comparison -> (its new-study seeds at the gap found there, with the gap's rung variance;
    the words for the noise it used)."""
    design = ladder_design(plan)
    if design is None:
        return {}
    asked = questions(plan.ablation)
    out: dict[str, dict[str, tuple[SeedsAcross | None, str]]] = {}
    for label in [v for v in plan.variants if v != "baseline"]:
        gaps = rung_pairs(plan, records, label)
        tau2, words = rung_noise(gaps)
        question, margin = asked.get(label, (None, None))
        for gap in gaps:
            if gap.n < 2:
                continue
            found = sized_at_found(gap.differences, design.level, question, margin, design.min_effect,
                                   plan.direction == "maximize", tau2, most=MOST_SEEDS)
            out.setdefault(gap.name, {})[label] = (found, words)
    return out


def ladder_found_lines(plan: StudyPlan, records: CellRecords) -> list[str]:
    """The dry run's lines for :func:`ladder_found_sizes`, rung by rung."""
    sizes = ladder_found_sizes(plan, records)
    if not sizes:
        return []
    lines = ["  a new study at the gaps these seeds found, rung by rung (a paired t test, 80% power; "
             "information only):"]
    for rung in [r.name for r in plan.rungs if r.name in sizes]:
        for label, (found, words) in sizes[rung].items():
            text = "nothing to size (no spread)" if found is None else across_text(found, words)
            lines.append(f"    rung {rung}, {label}: {text}")
    return lines
