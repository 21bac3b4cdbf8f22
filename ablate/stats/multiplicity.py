"""A family's multiple-comparison corrections: Holm's step-down adjusted p-values (Holm 1979, "A simple
sequentially rejective multiple test procedure") and Bonferroni's (each p times the family's size, or each
test at alpha / m). Every verdict a report states is one family (``ablate.stats.verdict.one_family``)."""

from __future__ import annotations

import math
from collections.abc import Sequence


def holm(pvalues: Sequence[float]) -> list[float]:
    """Holm-Bonferroni adjusted p-values (NaN entries stay NaN and do not count as tests)."""
    idx = [i for i, p in enumerate(pvalues) if not math.isnan(p)]
    order = sorted(idx, key=lambda i: (pvalues[i], i))
    m = len(order)
    out = [math.nan] * len(pvalues)
    running = 0.0
    for rank, i in enumerate(order):
        running = max(running, min(1.0, (m - rank) * pvalues[i]))
        out[i] = running
    return out


def bonferroni(pvalues: Sequence[float]) -> list[float]:
    """Bonferroni adjusted p-values: min(1, m p) over the m non-NaN entries (NaN entries stay NaN)."""
    m = sum(not math.isnan(p) for p in pvalues)
    return [p if math.isnan(p) else min(1.0, m * p) for p in pvalues]


def bonferroni_level(alpha: float, family: int) -> float:
    """The level each of ``family`` tests is held to so that the family's error stays at ``alpha``."""
    return alpha / max(1, family)
