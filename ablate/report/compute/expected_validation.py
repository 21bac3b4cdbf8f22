"""Expected validation performance (Dodge et al. 2019, "Show Your Work", section 3): from the N validation
scores a variant's search observed, the expected best score of a search with n trials, n = 1..N, and its
spread. It tells whether a ranking of variants depends on the tuning budget: two curves that cross do.

The closed form treats the N observed trials as the distribution a trial is drawn from (with
replacement). With the scores sorted from worst to best, v_(1) <= ... <= v_(N) (for a score to minimize,
from highest to lowest), the best of n draws is v_(i) with probability

    P(max_n = v_(i)) = (i/N)^n - ((i-1)/N)^n

so that E[max_n] = sum_i v_(i) P(max_n = v_(i)) and Var[max_n] = sum_i (v_(i) - E[max_n])^2 P(...). Ties need
no special case: tied scores' probabilities add up to that of their common value.

Pure arithmetic: which trials count (a pruned trial has no final score; a diverged one may count as the
worst) is the caller's choice, made before the scores reach here.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class EVPPoint:
    """The best validation score expected of a search with ``n`` trials, its standard deviation, and the
    band mean +- std clipped to the observed scores (as Dodge et al. plot it)."""

    n: int
    mean: float
    std: float
    low: float
    high: float


def max_probabilities(count: int, n: int) -> list[float]:
    """P(the best of n draws is the i-th worst of ``count`` scores), i = 1..count: (i/N)^n - ((i-1)/N)^n."""
    if count < 1:
        raise ValueError("expected validation performance needs at least one observed score")
    if n < 1:
        raise ValueError(f"the number of trials must be at least 1, found {n}")
    return [(i / count) ** n - ((i - 1) / count) ** n for i in range(1, count + 1)]


def _ordered(scores: Sequence[float], maximize: bool) -> list[float]:
    values = [float(s) for s in scores]
    if not values:
        raise ValueError("expected validation performance needs at least one observed score")
    bad = [s for s in values if not math.isfinite(s)]
    if bad:
        raise ValueError(f"scores must be finite, found {bad[0]}: drop the trial or give it a finite worst "
                         "value before computing the curve")
    return sorted(values, reverse=not maximize)  # worst first, best last


def expected_best(scores: Sequence[float], n: int, maximize: bool = True) -> tuple[float, float]:
    """(E, Var) of the best score of ``n`` trials drawn with replacement from ``scores``."""
    ordered = _ordered(scores, maximize)
    probs = max_probabilities(len(ordered), n)
    mean = math.fsum(p * v for p, v in zip(probs, ordered, strict=True))
    var = math.fsum(p * (v - mean) ** 2 for p, v in zip(probs, ordered, strict=True))
    return mean, max(0.0, var)


def evp_curve(scores: Sequence[float], maximize: bool = True, upto: int | None = None) -> list[EVPPoint]:
    """The curve n = 1..``upto`` (default: the number of scores), each with its mean, std and band."""
    ordered = _ordered(scores, maximize)
    lo, hi = min(ordered), max(ordered)
    points = []
    for n in range(1, (upto if upto is not None else len(ordered)) + 1):
        mean, var = expected_best(ordered, n, maximize)
        std = math.sqrt(var)
        points.append(EVPPoint(n, mean, std, max(lo, mean - std), min(hi, mean + std)))
    return points


def leaders(curves: dict[str, list[EVPPoint]], maximize: bool = True) -> list[tuple[int, str]]:
    """The variant with the best expected score at each budget n = 1..(the shortest curve), as (n, label)
    where the leader changes: one entry means the ranking's winner does not depend on the budget. Ties go
    to the label listed first."""
    if not curves:
        return []
    labels = list(curves)
    out: list[tuple[int, str]] = []
    for i in range(min(len(c) for c in curves.values())):
        means = [curves[label][i].mean for label in labels]
        best = labels[means.index(max(means) if maximize else min(means))]
        if not out or out[-1][1] != best:
            out.append((curves[labels[0]][i].n, best))
    return out
