"""How many seeds a new study needs, at the effect this study observed and across its interval, never at
an effect assumed beforehand.

A report that says "a new study with N seeds would tell" must size N on what the data say: the
rope-margin study's 18 seeds gave 0.82 power at an assumed 0.083 nats but 37% at the observed 0.070; a
"no effect" plan that assumes a true effect of 0 promises far fewer seeds than the observed effect needs.
So :func:`seeds_across` sizes a fixed-sample paired t test (the seed is the unit; ``sd`` the paired sd
this study measured) at three true effects: the observed one and the two ends of its interval, and says
where no number of seeds would do (an end on the wrong side of the claim's margin).

The question decides what "tells" means:

* ``beyond`` (a direction, or "better by more than ``margin``"): the interval at ``1 - alpha`` excludes the
  margin on the effect's side; power ``P(T > t_{1 - alpha/2, n-1})`` with T noncentral t, noncentrality
  ``(|d| - margin) sqrt(n) / sd`` (``margin`` 0 for a direction claim);
* ``within`` (equivalence within ``+-margin``): both one-sided tests at ``alpha / 2`` reject (Schuirmann
  1987), power by the normal approximation ``Phi((margin - |d|) / se - t) - Phi((-margin - |d|) / se + t)``.

Pure numpy/scipy.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

from scipy import stats

POWER = 0.8
MOST = 10_000

Question = Literal["beyond", "within"]


def power_at(n: int, effect: float, sd: float, alpha: float, question: Question, margin: float = 0.0
             ) -> float:
    """The power of a paired t test on ``n`` seeds when the true effect is ``effect`` (module doc)."""
    if n < 2 or sd <= 0:
        return math.nan
    se = sd / math.sqrt(n)
    t = float(stats.t.ppf(1.0 - alpha / 2.0, n - 1))
    if question == "beyond":
        return float(stats.nct.sf(t, n - 1, (abs(effect) - margin) / se))
    upper = stats.norm.cdf((margin - abs(effect)) / se - t)
    lower = stats.norm.cdf((-margin - abs(effect)) / se + t)
    return max(0.0, float(upper - lower))


def seeds_for(effect: float, sd: float, alpha: float, question: Question, margin: float = 0.0,
              power: float = POWER, most: int = MOST, direction: int = 0) -> int | None:
    """The fewest seeds that reach ``power`` at a true ``effect``; None where none up to ``most`` does (the
    effect on the wrong side of the margin, or too close to it). ``direction`` (+1 / -1) for a claim of a
    difference one way: an effect the other way settles it for no number of seeds."""
    if question == "beyond" and (abs(effect) <= margin or direction * effect < 0):
        return None
    if question == "within" and abs(effect) >= margin:
        return None
    lo, hi = 2, 2
    while power_at(hi, effect, sd, alpha, question, margin) < power:
        if hi >= most:
            return None
        lo, hi = hi, min(most, hi * 2)
    while lo < hi:  # the smallest n with enough power (power rises with n)
        mid = (lo + hi) // 2
        if power_at(mid, effect, sd, alpha, question, margin) >= power:
            hi = mid
        else:
            lo = mid + 1
    return hi


@dataclass(frozen=True)
class SeedsAcross:
    """Seeds a new study needs at the observed effect and at each end of its interval (None: no number
    of seeds up to MOST), and the power this study's own seeds had at the observed effect."""

    observed: int | None
    at_lo: int | None
    at_hi: int | None
    power_here: float

    def as_dict(self) -> dict[str, object]:
        return {"observed": self.observed, "at_lo": self.at_lo, "at_hi": self.at_hi,
                "power_at_observed": self.power_here}


def seeds_across(diff: float, lo: float, hi: float, sd: float, seeds: int, alpha: float, question: Question,
                 margin: float = 0.0, power: float = POWER, direction: int = 0) -> SeedsAcross:
    """:func:`seeds_for` at the observed ``diff`` and at ``lo`` and ``hi``; ``seeds`` this study's own."""
    here = power_at(seeds, diff, sd, alpha, question, margin) if direction * diff >= 0 else 0.0
    return SeedsAcross(seeds_for(diff, sd, alpha, question, margin, power, direction=direction),
                       seeds_for(lo, sd, alpha, question, margin, power, direction=direction),
                       seeds_for(hi, sd, alpha, question, margin, power, direction=direction), here)
