"""Group-sequential paired t-tests: when a variant-vs-baseline comparison has seen enough seeds.

An adaptive study (``ablation.seeds: {min, max, step}``) looks at each comparison after ``min`` seeds,
then after every ``step`` more, up to ``max``: the planned looks ``n_1 < n_2 < ... < n_K``. Looking
K times at a fixed-level test and stopping at the first p < 0.05 would call a null effect significant far
more often than 5% of the time, so the boundaries are those of a group-sequential design:

* Method: Pocock's design (Pocock 1977, "Group sequential methods in the design and analysis of clinical
  trials") on the paired t statistic of the per-seed differences (variant - baseline, one per seed), in
  the "significance level" form of Jennison & Turnbull (2000, "Group Sequential Methods with Applications
  to Clinical Trials", section 11.4, t-tests with unknown variance): every look uses the same nominal
  two-sided level ``p*``, so look k rejects when ``|t_k| > t(1 - p*/2, n_k - 1)``.
* ``p*`` is calibrated so that over all K looks the chance of any false rejection is ``alpha``
  when the differences are normal with mean 0: under that null the joint law of (t_1, ..., t_K) does not
  depend on the unknown variance, so it is simulated once (``CALIBRATION_PATHS`` paths from a fixed seed:
  deterministic) and ``p*`` is the quantile of the smallest per-look p-value at alpha less two Monte
  Carlo standard errors (0.001 for alpha 0.05), so the simulation's own error cannot push the level above
  alpha. One look is the ordinary paired t-test (``p* = alpha``).
* The interval at a look is the repeated confidence interval (Jennison & Turnbull ch. 9)
  ``mean +- t(1 - p*/2, n - 1) * s / sqrt(n)``: the K intervals cover the true effect simultaneously
  with probability 1 - alpha, so the interval at whatever look the study stopped is valid however the
  stopping was decided (by this metric or any other).
* The comparisons of one study are one family: each is tested at ``alpha / family`` (Bonferroni, inside the
  group-sequential design: Pocock's per-look level is calibrated at that level), so the chance that any
  comparison of the study gives a false effect stays at or below ``alpha``.
* A comparison is decided by its own question. Without a claim, or with a ``better`` / ``worse`` claim: at
  the first look where its interval excludes 0 (an effect, sign known) or lies inside
  ``[-min_effect, +min_effect]`` (no effect as large as min_effect: an equivalence verdict from the same
  simultaneous interval, given only from ``EQUIVALENCE_PAIRS`` pairs on: stats/verdict.py). With a
  ``none`` claim (no effect within ``+-margin``): at the first look where the interval lies within the
  margin (from as many pairs) or wholly beyond it; an interval that excludes 0 but still reaches
  inside the margin answers a question nobody asked, so the comparison gets more seeds. Otherwise it stays
  open up to ``max`` (without min_effect, until it excludes 0).
* The smallest detectable effect at n seeds is ``(t(1 - p*/2, n-1) + t(power, n-1)) * s / sqrt(n)``: the
  true effect this test would find with probability ``power`` (80%) given the spread s the seeds showed.

Pure numpy/scipy; the verdict vocabulary and its rules (a look's state, whether it answers its claim's
question, what a walk of looks says) are ``ablate.stats.verdict``'s. ``ablate.study.seed_rounds`` decides
the next round with this code and ``ablate.report`` (a layer above ``study``) states the verdicts with it.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import numpy as np
from scipy import stats

from ablate.spec.study_sections import AblationSpec
from ablate.stats.multiplicity import bonferroni_level
from ablate.stats.pairing import Cell, paired_differences
from ablate.stats.verdict import (
    ALPHA,
    Look,
    Question,
    State,
    Verdict,
    answers,
    equivalent,
    read,
)

POWER = 0.8
CALIBRATION_PATHS = 200_000  # Monte Carlo error of the overall level: sqrt(.05 * .95 / 2e5) = 0.0005
CALIBRATION_SEED = 0
_CHUNK = 20_000
METHOD = "Pocock group-sequential paired t-test"



def planned_looks(minimum: int, maximum: int, step: int = 1) -> tuple[int, ...]:
    """Seeds at each look: min, min + step, ..., and always max itself."""
    if not 2 <= minimum <= maximum or step < 1:
        raise ValueError(f"looks need 2 <= min <= max and step >= 1, got {minimum}, {maximum}, {step}")
    looks = list(range(minimum, maximum + 1, step))
    if looks[-1] != maximum:
        looks.append(maximum)
    return tuple(looks)


@lru_cache(maxsize=64)
def nominal_level(looks: tuple[int, ...], alpha: float = ALPHA) -> float:
    """The per-look two-sided level p* that spends exactly ``alpha`` over ``looks`` (see module doc)."""
    if len(looks) == 1:
        return alpha
    rng = np.random.default_rng(CALIBRATION_SEED)
    n = np.asarray(looks)
    smallest = []
    for _ in range(CALIBRATION_PATHS // _CHUNK):  # in chunks: memory stays small for many seeds
        x = rng.standard_normal((_CHUNK, int(n[-1])))  # (paths, max seeds): null differences
        s1 = np.cumsum(x, axis=1)[:, n - 1]  # (paths, looks): running sums at each look
        s2 = np.cumsum(x * x, axis=1)[:, n - 1]
        mean = s1 / n
        var = (s2 - n * mean**2) / (n - 1)
        t = mean / np.sqrt(var / n)
        smallest.append((2.0 * stats.t.sf(np.abs(t), n - 1)).min(axis=1))  # smallest two-sided p per path
    # Two Monte Carlo standard errors below alpha: the simulated quantile errs on the safe side.
    target = alpha - 2.0 * math.sqrt(alpha * (1.0 - alpha) / CALIBRATION_PATHS)
    return float(np.quantile(np.concatenate(smallest), target))


@lru_cache(maxsize=4096)
def _quantile(q: float, df: int) -> float:
    return float(stats.t.ppf(q, df))


@dataclass(frozen=True)
class Design:
    """The planned looks of one adaptive study, its overall level and its smallest effect worth knowing."""

    looks: tuple[int, ...]
    alpha: float = ALPHA
    min_effect: float | None = None
    family: int = 1  # comparisons in the study: each is tested at alpha / family (Bonferroni)

    @property
    def level(self) -> float:
        """The overall two-sided level of one comparison: the study's alpha shared by its family."""
        return bonferroni_level(self.alpha, self.family)

    @property
    def nominal(self) -> float:
        return nominal_level(self.looks, self.level)

    def critical(self, n: int) -> float:
        """|t| a look with n paired seeds must pass (df n - 1)."""
        return _quantile(1.0 - self.nominal / 2.0, n - 1)

    @classmethod
    def from_spec(cls, ablation: AblationSpec, family: int, maximum: int | None = None) -> Design | None:
        """The one constructor of a study's sequential design: its planned looks from ``ablation.seeds``'
        range (``maximum`` in place of ``seeds.max``: the first look alone while ``max: auto`` is being
        chosen), its alpha and min_effect, and the ``family`` of verdicts that share its alpha (one_family).
        None for a fixed seed list, whose verdicts take :meth:`one_look`."""
        seeds = ablation.seeds
        if seeds is None or isinstance(seeds, list):
            return None
        top = seeds.max if maximum is None else maximum
        return cls(planned_looks(seeds.min, int(top), seeds.step), ablation.alpha, ablation.min_effect,
                   max(1, family))

    @classmethod
    def one_look(cls, ablation: AblationSpec, family: int, seeds: int) -> Design:
        """A fixed seed list's design: one look at all its ``seeds``, the same paired t-test, the same
        alpha shared by the same family."""
        return cls((seeds,), ablation.alpha, ablation.min_effect, family)

    def to_tag(self, **extra: Any) -> str:
        """The design as the parent run's tag records it (JSON; ``extra`` keys after the design's own):
        read back by :meth:`from_tag`."""
        return json.dumps({"looks": list(self.looks), "alpha": self.alpha, "min_effect": self.min_effect,
                           "family": self.family, **extra})

    @classmethod
    def from_tag(cls, text: str, family: int | None = None) -> Design:
        """A design recorded by :meth:`to_tag`; ``family``: the family a reader judges it by, in place of
        the recorded one (a report counts every verdict it states: a study recorded before that rule is
        judged by it too)."""
        d = json.loads(text)
        return cls(tuple(int(n) for n in d["looks"]), float(d["alpha"]),
                   None if d.get("min_effect") is None else float(d["min_effect"]),
                   int(d.get("family", 1)) if family is None else family)

    def describe(self) -> str:
        looks = ", ".join(str(n) for n in self.looks)
        tail = f"; min_effect {self.min_effect:g}" if self.min_effect is not None else ""
        family = (f"family-wise two-sided alpha {self.alpha:g} over {self.family} comparisons "
                  f"(Bonferroni: each at {self.level:.4g})" if self.family > 1
                  else f"overall two-sided alpha {self.alpha:g}")
        return (f"{METHOD}: {len(self.looks)} planned look{'s' * (len(self.looks) > 1)} at n = {looks} "
                f"seeds, {family}, nominal level per look {self.nominal:.4f}" + tail)


def evaluate(differences: Sequence[float], design: Design, look: int, question: Question = None,
             margin: float | None = None, higher: bool = True) -> Look:
    """The verdict at planned look ``look`` (1-based) from its per-seed differences (non-finite dropped);
    ``question`` and ``margin`` (a ``none`` claim's, default min_effect; a ``better`` / ``worse`` claim's own,
    superiority by that margin) decide whether it is decided; ``higher``: the metric grows as things
    improve (which way a margin claim points)."""
    d = np.asarray([float(v) for v in differences], dtype=float)
    d = d[np.isfinite(d)]
    n, final = len(d), look >= len(design.looks)
    if margin is None and question not in ("better", "worse"):  # a direction-only claim names no margin
        margin = design.min_effect
    if n < 2:
        diff = float(d.mean()) if n else math.nan
        return Look(n, look, diff, math.nan, math.nan, math.nan, math.nan, State.UNTESTABLE, final)
    diff, sd = float(d.mean()), float(d.std(ddof=1))
    if sd == 0.0:  # t undefined: every seed moved by exactly the same amount (0: e.g. mask -inf vs -1e9)
        state = State.IDENTICAL if diff == 0.0 else State.EFFECT
        return Look(n, look, diff, diff, diff, 0.0, 0.0, state, final,
                    answers(state, diff, diff, question, margin, higher=higher, n=n))
    crit = design.critical(n)
    half = crit * sd / math.sqrt(n)
    lo, hi = diff - half, diff + half
    if lo > 0.0 or hi < 0.0:
        state = State.EFFECT
    elif design.min_effect is not None and equivalent(lo, hi, design.min_effect, n):
        state = State.NO_EFFECT  # from EQUIVALENCE_PAIRS pairs on: fewer stay open (stats/verdict.py)
    else:
        state = State.OPEN
    detectable = (crit + _quantile(POWER, n - 1)) * sd / math.sqrt(n)
    return Look(n, look, diff, lo, hi, sd, detectable, state, final,
                answers(state, lo, hi, question, margin, higher=higher, n=n))


Window = Callable[[int], Sequence[float | None] | None]  # n -> the first n seeds' differences, None: not in


def walk_windows(window: Window, design: Design, question: Question = None, margin: float | None = None,
                 higher: bool = True) -> list[Look]:
    """Every planned look whose seeds are in (``window(n)``: the paired differences of the first n seeds,
    None: the n-th is not in yet), up to and including the one that decided the comparison's ``question``:
    a later look is never consulted once an earlier one decided."""
    looks: list[Look] = []
    for k, n in enumerate(design.looks, start=1):
        differences = window(n)
        if differences is None:
            break
        values = [math.nan if v is None else float(v) for v in differences]
        looks.append(evaluate(values, design, k, question, margin, higher))
        if looks[-1].decided:
            break
    return looks


def walk(differences: Sequence[float | None], design: Design, question: Question = None,
         margin: float | None = None, higher: bool = True) -> list[Look]:
    """:func:`walk_windows` over the per-seed differences (in seed order; None: the pair has no value,
    e.g. a diverged run), each look reading the first n of them."""
    return walk_windows(lambda n: differences[:n] if len(differences) >= n else None, design, question,
                        margin, higher)


def run_sequence(differences: Sequence[float | None], design: Design, question: Question = None,
                 margin: float | None = None, higher: bool = True) -> Look | None:
    """The look that decided the comparison's ``question`` (:func:`walk`), else the last look the data
    reach (None if the first look is not reached yet)."""
    looks = walk(differences, design, question, margin, higher)
    return looks[-1] if looks else None


@dataclass(frozen=True)
class Progress:
    """Where one comparison's rounds of adaptive seeds stand: the seeds it needs run now, its verdict so far
    (its deciding or latest look: ``verdict.look``), and whether its rounds are over."""

    needed: int
    verdict: Verdict
    done: bool

    @property
    def look(self) -> Look | None:
        return self.verdict.look

    @property
    def state(self) -> State:
        """Its one-word state: the verdict's once its rounds are over, else open or waiting."""
        if self.done:
            return self.verdict.progress
        return State.OPEN if self.verdict.look is not None else State.WAITING

    @property
    def decided(self) -> bool:
        """No more seeds: its verdict is in, or it stays undecided at its last planned look."""
        return self.done


def progress(pairs: Sequence[tuple[Cell, Cell]], metric: str, higher: bool, design: Design,
             question: Question = None, margin: float | None = None) -> Progress:
    """Where a comparison's rounds stand, from the (baseline, variant) cells of its leading seeds that have
    both ended, in seed order. Each look pairs its own seeds (ablate/stats/pairing.py: a diverged cell
    counts against its side among the pairs that look sees) and :func:`walk_windows` decides; a first look
    whose seeds have no pair at all ends its rounds as ``no pairs`` (a variant, or the baseline, that
    diverged or failed in every seed: a result, not a reason to spend more seeds); otherwise a comparison
    neither decided nor at its last look needs the next look's seeds."""
    def window(n: int) -> list[float | None] | None:
        return paired_differences(pairs[:n], metric, higher)[0] if len(pairs) >= n else None

    first = design.looks[0]
    if (seen := window(first)) is not None and all(d is None for d in seen):
        return Progress(first, read([], lost=True), done=True)
    looks = walk_windows(window, design, question, margin, higher)
    verdict = read(looks, higher, question=question, margin=margin)
    if looks and (looks[-1].decided or looks[-1].final):
        return Progress(design.looks[len(looks) - 1], verdict, done=True)
    return Progress(design.looks[len(looks)], verdict, done=False)

