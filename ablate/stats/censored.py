"""Steps to a target loss when some runs never reach it: a censoring-aware paired comparison.

A run that ends without reaching the target is censored at its last step: its steps-to-target is "more
than the budget", not the budget. Setting it to the last step (Muon's study entered two AdamW runs at 600)
shortens the slower side and biases the difference towards 0; dropping it biases towards the faster side.
So each seed's pair is scored as Gehan's (1965) generalised Wilcoxon does for censored data: +1 where the
variant reached the target strictly before the baseline (the baseline later or never), -1 the other way,
0 where both never reached it or both at the same step, or where a censored run stopped before the other
reached (no order is known). The test is the paired sign-flip permutation of the scores (exact over every
flip for up to ``EXACT`` pairs, else ``RESAMPLES`` random flips from a fixed seed), two-sided; the report
states each side's "did not reach" count beside it.

Pure numpy.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

EXACT = 12
RESAMPLES = 20_000
REACHES_FIRST, REACHES_LATER, NO_ORDER = "reaches first", "reaches later", "no order decided"


@dataclass(frozen=True)
class Run:
    """One run's steps-to-target: the step it reached the target at (interpolated between evaluations), or
    its last evaluation's step if it never did."""

    steps: float
    reached: bool


def score(variant: Run, baseline: Run) -> int:
    """+1: the variant known to reach first; -1: the baseline; 0: no order known (module doc)."""
    if variant.reached and (not baseline.reached and baseline.steps >= variant.steps
                            or baseline.reached and variant.steps < baseline.steps):
        return 1
    if baseline.reached and (not variant.reached and variant.steps >= baseline.steps
                             or variant.reached and baseline.steps < variant.steps):
        return -1
    return 0


@dataclass(frozen=True)
class CensoredComparison:
    scores: tuple[int, ...]  # per pair
    statistic: int  # the sum of the scores: > 0, the variant reaches first more often
    p: float  # two-sided, sign-flip permutation
    variant_not_reached: int
    baseline_not_reached: int

    def as_dict(self) -> dict[str, object]:
        return {"scores": list(self.scores), "statistic": self.statistic, "p": self.p,
                "variant_did_not_reach": self.variant_not_reached,
                "baseline_did_not_reach": self.baseline_not_reached}

    def answer(self, alpha: float) -> str:
        """'reaches first' (the variant), 'reaches later', or 'no order decided': the two-sided test at
        ``alpha`` (the level a family's correction gives this comparison)."""
        if self.p < alpha and self.statistic != 0:
            return REACHES_FIRST if self.statistic > 0 else REACHES_LATER
        return NO_ORDER


def compare(variant: Sequence[Run], baseline: Sequence[Run], seed: int = 0) -> CensoredComparison:
    """The censoring-aware paired comparison of runs paired by seed (the same order on both sides)."""
    if len(variant) != len(baseline):
        raise ValueError("steps to target: the two sides must be paired by seed (as many runs on each)")
    scores = np.asarray([score(v, b) for v, b in zip(variant, baseline, strict=True)])
    observed = int(scores.sum())
    nonzero = np.abs(scores[scores != 0])
    if len(nonzero) == 0:
        p = 1.0
    elif len(nonzero) <= EXACT:
        sums = [abs(int(np.dot(flip, nonzero))) for flip in itertools.product((-1, 1), repeat=len(nonzero))]
        p = float(np.mean(np.asarray(sums) >= abs(observed)))
    else:
        flips = np.random.default_rng(seed).choice((-1, 1), size=(RESAMPLES, len(nonzero)))
        p = float((1 + np.sum(np.abs(flips @ nonzero) >= abs(observed))) / (1 + RESAMPLES))
    return CensoredComparison(tuple(int(s) for s in scores), observed, p,
                              sum(not v.reached for v in variant), sum(not b.reached for b in baseline))
