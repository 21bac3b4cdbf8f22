"""Verdicts checked at a larger scale (``ablation.confirm``): each comparison the study decided is
rerun at the larger setting, paired by seed, and the report says whether the verdict **transfers** (same
direction, significant by the test the study's verdicts use, ablate/stats/fixed_sample.py),
**reverses** (significant the other way) or is **not settled at that scale** (not significant, or too few
seeds to test: with 3 seeds or fewer the exact permutation test cannot reach p < 0.05).

A verdict of no effect (``none``: the study's interval lay within +-margin) transfers when the larger
scale's interval lies within +-margin too, and reverses when it lies wholly outside it (an effect larger
than the margin appeared).

Several verdicts checked at once are one family (``ablate.stats.verdict.one_family``): `check_transfers`
widens each interval to 1 - alpha/k (``family_confidence``: Bonferroni over the k verdicts), so that the
chance of calling any of them wrongly stays at alpha.

The rule is ``ablate.stats.verdict.at_scale``'s; this module computes the paired effect it is applied to
(ablate/stats/fixed_sample.py's `compare`) and the family's confidence.
ablate/report/compute/arm_verdicts.py reads the confirmation runs into it and
ablate/report/sections/larger_scale.py is the report's section.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from ablate.stats.fixed_sample import Effect, compare
from ablate.stats.verdict import ALPHA, Direction, ScaleOutcome, at_scale, family_confidence, one_family


@dataclass(frozen=True)
class Transfer:
    """One verdict at the larger scale: the study's (``small``), the outcome, and the effect (variant -
    baseline, paired by seed) with the interval it was judged by."""

    label: str
    small: Direction
    outcome: ScaleOutcome
    effect: Effect
    confidence: float

    @property
    def transferred(self) -> bool:
        """The verdict holds at the larger scale."""
        return self.outcome == ScaleOutcome.TRANSFERS


@dataclass(frozen=True)
class Rerun:
    """A decided comparison of the study and its runs at the larger scale (seed -> metric value)."""

    label: str
    small: Direction
    base: Mapping[int, float]
    variant: Mapping[int, float]
    margin: float | None = None  # for small == "none": the largest difference that counts as none


def check_transfer(verdict: Rerun, higher_is_better: bool, confidence: float = 1 - ALPHA) -> Transfer:
    """Whether one verdict transfers, reverses or is not settled at the larger scale (decided by
    ``ablate.stats.verdict.at_scale`` on the paired effect there)."""
    if verdict.small == Direction.NONE and (verdict.margin is None or verdict.margin <= 0):
        raise ValueError(f"{verdict.label}: a verdict of no effect needs its margin (> 0)")
    e = compare(verdict.base, verdict.variant, confidence)
    outcome = at_scale(verdict.small, e.diff, e.lo, e.hi, e.p, confidence, higher_is_better, verdict.margin,
                       e.n_min)
    return Transfer(verdict.label, verdict.small, outcome, e, confidence)


def check_transfers(verdicts: Sequence[Rerun], higher_is_better: bool, alpha: float = ALPHA
                    ) -> list[Transfer]:
    """Every verdict at the larger scale, as one family (``ablate.stats.verdict``'s one_family and
    family_confidence: each at 1 - alpha/k)."""
    confidence = family_confidence(one_family(len(verdicts)), alpha)
    return [check_transfer(v, higher_is_better, confidence) for v in verdicts]
