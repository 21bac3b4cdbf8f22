"""Knife-edge verdicts: a verdict whose deciding bound lies within a declared fraction of its margin is
marked borderline, with the range its bound takes when each seed is left out in turn.

A margin verdict is decided by one end of an interval against the margin (equivalence: both ends inside
``+-margin``; "better by more than m": the near end beyond m). Where that end sits within
``fraction x margin`` of the margin, one seed more or less could flip it: GQA's "inside +-0.03" cleared its
margin by 0.0002, WSD's by 0.0004. :func:`borderline` says whether a bound is that close;
:func:`leave_one_out` gives the interval's ends with each seed left out (the jackknife's replicates,
Quenouille 1956), whose range the report prints beside the verdict, so a reader sees whether the verdict
hangs on one seed.

Pure numpy/scipy.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from scipy import stats

FRACTION = 0.1  # a bound within 10% of the margin is borderline unless a study declares otherwise


def borderline(bound: float, margin: float, fraction: float = FRACTION) -> bool:
    """Whether the deciding ``bound`` lies within ``fraction x |margin|`` of the margin (either side of
    it: a verdict that just failed is as fragile as one that just passed)."""
    if not (math.isfinite(bound) and math.isfinite(margin)) or margin == 0:
        return False
    return abs(abs(bound) - abs(margin)) <= fraction * abs(margin)


@dataclass(frozen=True)
class LeaveOneOut:
    """The t interval's ends over the leave-one-seed-out samples: each end's smallest and largest value."""

    lo_range: tuple[float, float]
    hi_range: tuple[float, float]
    n: int

    def as_dict(self) -> dict[str, object]:
        return {"lo_range": list(self.lo_range), "hi_range": list(self.hi_range), "seeds": self.n}


def _t_interval(d: np.ndarray, level: float) -> tuple[float, float]:
    t = float(stats.t.ppf(1.0 - (1.0 - level) / 2.0, len(d) - 1))
    half = t * float(d.std(ddof=1)) / math.sqrt(len(d))
    return float(d.mean()) - half, float(d.mean()) + half


def leave_one_out(differences: Sequence[float], level: float) -> LeaveOneOut | None:
    """The paired t interval at ``level`` with each seed left out in turn (None with fewer than 3 seeds:
    a sample of one has no interval)."""
    d = np.asarray(differences, dtype=float)
    if len(d) < 3:
        return None
    ends = [_t_interval(np.delete(d, i), level) for i in range(len(d))]
    lows, highs = [e[0] for e in ends], [e[1] for e in ends]
    return LeaveOneOut((min(lows), max(lows)), (min(highs), max(highs)), len(d))
