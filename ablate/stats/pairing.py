"""The pairs a comparison is judged on: per seed, the variant's result minus the baseline's, with a diverged
cell kept in its pair and counted against its own side. The study's rounds (ablate/study/seed_rounds.py)
and the report (ablate/report/compute/comparisons.py) both pair through :func:`paired_differences`, so the
rule changes here and nowhere else; the verdicts those pairs lead to are ablate/stats/verdict.py's.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

# The score a metric gives a model that produced nothing usable: what a diverged cell scores where the
# metric defines one (a translation scores BLEU 0); a likelihood has no such floor.
DIVERGED_SCORE = {"bleu": 0.0, "chrf": 0.0, "exact_match": 0.0}
Cell = tuple[str, float | None]  # (status, result value) of one cell: finished | diverged | failed | ...


def paired_differences(pairs: Sequence[tuple[Cell, Cell]], metric: str, higher: bool
                       ) -> tuple[list[float | None], int]:
    """Per seed, variant - baseline from ((baseline status, value), (variant status, value)); and how many
    pairs hold a diverged cell counted against its side.

    A diverged cell is a result, not a missing value: dropping its pair would bias the comparison toward the
    side that diverged. It counts against its own side: it scores the metric's DIVERGED_SCORE where there
    is one (BLEU 0), else its pair takes the least favourable difference the comparison's finished pairs
    show (the lowest variant - baseline when the variant diverged, on a metric where higher is better). A
    failed cell (an error, not a result), a cell still to run and two diverged cells stay out (None)."""
    def finite(value: float | None) -> bool:
        return value is not None and math.isfinite(value)

    done = [v[1] - b[1] for b, v in pairs  # type: ignore[operator]
            if b[0] == v[0] == "finished" and finite(b[1]) and finite(v[1])]
    floor = DIVERGED_SCORE.get(metric.rsplit("/", 1)[-1])
    out: list[float | None] = []
    counted = 0
    for (b_status, b_value), (v_status, v_value) in pairs:
        if b_status == v_status == "finished" and finite(b_value) and finite(v_value):
            out.append(v_value - b_value)  # type: ignore[operator]
            continue
        filled = None
        if v_status == "diverged" and b_status == "finished" and finite(b_value):
            worst = (min(done) if higher else max(done)) if done else None
            filled = floor - b_value if floor is not None else worst  # type: ignore[operator]
        elif b_status == "diverged" and v_status == "finished" and finite(v_value):
            best = (max(done) if higher else min(done)) if done else None
            filled = v_value - floor if floor is not None else best  # type: ignore[operator]
        counted += filled is not None
        out.append(filled)
    return out, counted
