"""Adaptive seeds: which cells an ablation study with ``seeds: {min, max, step}`` still needs.

Every comparison is a variant against the baseline, paired by seed, and the study's comparisons are one
family (each tested at alpha over the family size). Round one runs ``min`` seeds of every variant; after
each round every comparison is walked through its planned looks (each judged by
``ablate.stats.sequential.evaluate`` against the question of the variant's ``expect:`` claim, if any) and
one whose question is still open gets the next look's seeds, up to ``max``; a decided one gets none. The
baseline runs as many seeds as its most demanding comparison.
Everything is recomputed from the cell records in the store, so a rerun, a second worker or another machine
reaches the same plan (idempotent, resumable) and enqueues only what is missing.

A comparison whose complete look has no seed where both it and the baseline finished (the variant, or the
baseline, diverged or failed in every seed) has no pair to test: it is decided as "no_pairs" (a result, such
as post-norm without warm-up diverging, not a reason to spend more seeds).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ablate.stats.pairing import Cell, paired_differences
from ablate.stats.sequential import Design, evaluate, planned_looks
from ablate.stats.verdict import Look, Question, Verdict, read

TERMINAL = ("finished", "diverged", "failed")


@dataclass(frozen=True)
class Progress:
    """Where one comparison stands: seeds it needs now, its latest look and a one-word state."""

    label: str
    needed: int  # seeds this comparison needs run (its current look)
    look: Look | None  # the deciding look, else the last complete one (None before the first)
    state: str  # 'effect' | 'no_effect' | 'identical' | 'no_pairs' | 'open' | 'undecided' | 'waiting'
    verdict: Verdict | None = None  # once its rounds are over: the comparison's verdict

    @property
    def decided(self) -> bool:
        """No more seeds: its verdict is in (``verdict.Verdict.progress``), or it stays undecided."""
        return self.state in ("effect", "no_effect", "identical", "no_pairs", "undecided")


def _verdict_in(label: str, needed: int, verdict: Verdict) -> Progress:
    """A comparison whose rounds are over, with its verdict."""
    return Progress(label, needed, verdict.look, verdict.progress, verdict)


def design_of(ablation: Any, family: int = 1) -> Design | None:
    """The sequential design of an ablation section with a seed range, else None (a fixed seed list);
    ``family``: the number of comparisons the study makes (variants other than the baseline)."""
    seeds = getattr(ablation, "seeds", None)
    if seeds is None or isinstance(seeds, list):
        return None
    return Design(planned_looks(seeds.min, seeds.max, seeds.step), ablation.alpha, ablation.min_effect,
                  max(1, family))


def questions(ablation: Any) -> dict[str, tuple[Question, float | None]]:
    """{variant label: (the question its claim asks, the claim's margin or None)} from ``ablation.expect``."""
    return {claim.variant: (claim.effect, claim.margin) for claim in getattr(ablation, "expect", None) or []}


def _pairs(plan: Any, records: Mapping[str, Any], label: str, seeds: list[int]
           ) -> tuple[list[float | None], bool]:
    """(per-seed differences, None where either run did not finish; every cell terminal) over ``seeds``."""
    cells = {(c.label, c.seed): c.key for c in plan.cells}
    pairs: list[tuple[Cell, Cell]] = []
    complete = True
    for seed in seeds:
        base, var = records.get(cells[("baseline", seed)]), records.get(cells[(label, seed)])
        if base is None or var is None or base.status not in TERMINAL or var.status not in TERMINAL:
            complete = False
            pairs.append((("pending", None), ("pending", None)))
            continue
        pairs.append(((base.status, base.metric), (var.status, var.metric)))
    # a diverged cell counts against its side (ablate/stats/verdict.py paired_differences)
    return paired_differences(pairs, plan.metric, plan.direction == "maximize")[0], complete


def progress(plan: Any, design: Design, records: Mapping[str, Any]) -> dict[str, Progress]:
    """Each comparison's state from the store's cell records (``CellQueue.records()``)."""
    out: dict[str, Progress] = {}
    asked = questions(plan.spec.ablation)
    for label in plan.variants:
        if label == "baseline":
            continue
        question, margin = asked.get(label, (None, None))
        result: Progress | None = None
        looks: list[Look] = []
        for k, n in enumerate(design.looks):
            diffs, complete = _pairs(plan, records, label, plan.seeds[:n])
            if not complete:
                result = Progress(label, n, looks[-1] if looks else None, "waiting" if k == 0 else "open")
                break
            if all(d is None for d in diffs):
                result = _verdict_in(label, n, read(looks, lost=True))
                break
            values = [math.nan if d is None else d for d in diffs]
            looks.append(evaluate(values, design, k + 1, question, margin))
            if looks[-1].decided:
                result = _verdict_in(label, n, read(looks))
                break
        out[label] = result or _verdict_in(label, design.looks[-1], read(looks))
    return out


def needed_keys(plan: Any, design: Design, records: Mapping[str, Any]) -> list[str]:
    """Cell keys the study needs now, in the plan's (seed-major) order."""
    prog = progress(plan, design, records)
    base_n = max([p.needed for p in prog.values()] + [design.looks[0]])
    want = {(label, s) for label, p in prog.items() for s in plan.seeds[:p.needed]}
    want |= {("baseline", s) for s in plan.seeds[:base_n]}
    return [c.key for c in plan.cells if (c.label, c.seed) in want]


def format_progress(plan: Any, design: Design, records: Mapping[str, Any]) -> str:
    """One line per comparison: its state, seeds, interval and smallest detectable effect."""
    lines = [f"adaptive seeds: {design.describe()}"]
    width = max([len(v) for v in plan.variants] + [4])
    for label, p in progress(plan, design, records).items():
        lk = p.look
        shown = "no complete look yet"
        if lk is not None:
            shown = f"n={lk.n}, diff {lk.diff:+.4g}"
            if not math.isnan(lk.lo):
                shown += f" [{lk.lo:+.4g}, {lk.hi:+.4g}], detectable {lk.detectable:.3g}"
        lines.append(f"  {label:<{width}}  {p.state:<10} needs {p.needed} seeds; {shown}")
    return "\n".join(lines)
