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

Without a claim a comparison is settled either way its looks settle it (ablate/stats/verdict.py): an
interval that excludes 0, or one within ``+-min_effect``; :func:`seeds_either` takes the fewer seeds of the
two at each effect.

On a ladder a new study's gap at a rung also carries the rung's own effect: the scatter of the rungs' gaps
about their line in log compute that the seeds do not explain (``tau^2``, ablate/stats/ladder_fit.py), which
no number of seeds averages away. With ``rung_var`` = tau^2 the standard error is
``sqrt(sd^2 / n + tau^2)`` (a random effect per rung, as every ladder interval carries it), so an effect
within about ``2.8 tau`` of the margin is settled by no number of seeds at 80% power.

Pure numpy/scipy.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from scipy import stats

from ablate.stats.verdict import EQUIVALENCE_PAIRS

POWER = 0.8
MOST = 10_000

Question = Literal["beyond", "within"]


def power_at(n: int, effect: float, sd: float, alpha: float, question: Question, margin: float = 0.0,
             rung_var: float = 0.0) -> float:
    """The power of a paired t test on ``n`` seeds when the true effect is ``effect``; ``rung_var`` a
    ladder's rung-level variance of the gap (module doc)."""
    if n < 2 or sd <= 0:
        return math.nan
    se = math.sqrt(sd * sd / n + max(0.0, rung_var))
    t = float(stats.t.ppf(1.0 - alpha / 2.0, n - 1))
    if question == "beyond":
        return float(stats.nct.sf(t, n - 1, (abs(effect) - margin) / se))
    upper = stats.norm.cdf((margin - abs(effect)) / se - t)
    lower = stats.norm.cdf((-margin - abs(effect)) / se + t)
    return max(0.0, float(upper - lower))


def seeds_for(effect: float, sd: float, alpha: float, question: Question, margin: float = 0.0,
              power: float = POWER, most: int = MOST, direction: int = 0, rung_var: float = 0.0
              ) -> int | None:
    """The fewest seeds that reach ``power`` at a true ``effect``; None where none up to ``most`` does (the
    effect on the wrong side of the margin, or too close to it). ``direction`` (+1 / -1) for a claim of a
    difference one way: an effect the other way settles it for no number of seeds."""
    if question == "beyond" and (abs(effect) <= margin or direction * effect < 0):
        return None
    if question == "within" and abs(effect) >= margin:
        return None
    if not math.isfinite(effect):
        return None
    # a study calls no effect from EQUIVALENCE_PAIRS pairs on (ablate/stats/verdict.py), whatever the power
    lo = hi = EQUIVALENCE_PAIRS if question == "within" else 2
    while power_at(hi, effect, sd, alpha, question, margin, rung_var) < power:
        if hi >= most:
            return None
        lo, hi = hi, min(most, hi * 2)
    while lo < hi:  # the smallest n with enough power (power rises with n)
        mid = (lo + hi) // 2
        if power_at(mid, effect, sd, alpha, question, margin, rung_var) >= power:
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
    rung_var: float = 0.0  # the ladder's rung-level variance the sizing carried (0: seed noise only)
    most: int = MOST  # the largest study it looked at: None above means none up to this many

    def words(self) -> str:
        """What a new study needs, in one phrase for the claim and the opening table alike: 'a new study
        would need 12 seeds at the observed effect, 5 to more than 100 across its interval's ends', or,
        where no size up to :attr:`most` settles it anywhere, that no study of up to that many would."""
        most = f"{self.most:,}"

        def count(n: int | None) -> str:
            return f"more than {most}" if n is None else str(n)

        ends = sorted((self.at_lo, self.at_hi), key=lambda n: 10 ** 9 if n is None else n)
        none = f"no study of up to {most} seeds would settle it"
        if self.observed is None and ends == [None, None]:
            return f"{none}, at the observed effect or at either end of its interval"
        at = (f"{none} at the observed effect" if self.observed is None
              else f"a new study would need {self.observed} seeds at the observed effect")
        return f"{at}, {count(ends[0])} to {count(ends[1])} across its interval's ends"

    def as_dict(self) -> dict[str, object]:
        rung = {"rung_variance": self.rung_var} if self.rung_var > 0 else {}
        return {"observed": self.observed, "at_lo": self.at_lo, "at_hi": self.at_hi,
                "power_at_observed": self.power_here, **rung}


def seeds_across(diff: float, lo: float, hi: float, sd: float, seeds: int, alpha: float, question: Question,
                 margin: float = 0.0, power: float = POWER, direction: int = 0, rung_var: float = 0.0,
                 most: int = MOST) -> SeedsAcross:
    """:func:`seeds_for` at the observed ``diff`` and at ``lo`` and ``hi``; ``seeds`` this study's own."""
    here = power_at(seeds, diff, sd, alpha, question, margin, rung_var) if direction * diff >= 0 else 0.0

    def at(effect: float) -> int | None:
        return seeds_for(effect, sd, alpha, question, margin, power, most, direction, rung_var)

    return SeedsAcross(at(diff), at(lo), at(hi), here, rung_var, most)


def seeds_either(diff: float, lo: float, hi: float, sd: float, seeds: int, alpha: float,
                 min_effect: float | None, power: float = POWER, rung_var: float = 0.0,
                 most: int = MOST) -> SeedsAcross:
    """A comparison without a claim: at each effect the fewer seeds of "the interval excludes 0" and (with
    a ``min_effect``) "the interval lies within +-min_effect"; the power here is the better of the two."""
    beyond = seeds_across(diff, lo, hi, sd, seeds, alpha, "beyond", 0.0, power, 0, rung_var, most)
    if min_effect is None or min_effect <= 0:
        return beyond
    within = seeds_across(diff, lo, hi, sd, seeds, alpha, "within", min_effect, power, 0, rung_var, most)

    def fewer(a: int | None, b: int | None) -> int | None:
        return b if a is None else a if b is None else min(a, b)

    here = max(beyond.power_here, within.power_here)
    return SeedsAcross(fewer(beyond.observed, within.observed), fewer(beyond.at_lo, within.at_lo),
                       fewer(beyond.at_hi, within.at_hi), here, rung_var, most)


def sized_at_found(differences: Sequence[float], alpha: float, question: str | None, margin: float | None,
                   min_effect: float | None, higher: bool, rung_var: float = 0.0,
                   interval: tuple[float, float] | None = None, most: int = MOST) -> SeedsAcross | None:
    """The seeds a new study needs for a comparison's question at the effect its paired ``differences``
    found and across its interval (``interval``, else the paired t interval at ``1 - alpha``): a claim of a
    direction (better / worse, by ``margin`` if it names one), of no effect (within ``margin``, else
    ``min_effect``), or no claim (either way, :func:`seeds_either`). None where there is nothing to size:
    fewer than 2 pairs, no spread, an identity check, a ``none`` claim with no margin, or no claim without
    a ``min_effect`` (a direction only: then at 0 margin)."""
    d = [x for x in differences if math.isfinite(x)]
    if len(d) < 2 or question == "identical":
        return None
    n = len(d)
    mean = sum(d) / n
    sd = math.sqrt(sum((x - mean) ** 2 for x in d) / (n - 1))
    if sd <= 0:
        return None
    if interval is None:
        half = float(stats.t.ppf(1.0 - alpha / 2.0, n - 1)) * math.sqrt(sd * sd / n + max(0.0, rung_var))
        interval = (mean - half, mean + half)
    lo, hi = interval
    if question is None:
        return seeds_either(mean, lo, hi, sd, n, alpha, min_effect, rung_var=rung_var, most=most)
    if question == "none":
        bound = margin if margin is not None else min_effect
        if bound is None:
            return None
        return seeds_across(mean, lo, hi, sd, n, alpha, "within", bound, rung_var=rung_var, most=most)
    way = 1 if (question == "better") == higher else -1
    return seeds_across(mean, lo, hi, sd, n, alpha, "beyond", margin or 0.0, direction=way, rung_var=rung_var,
                        most=most)
