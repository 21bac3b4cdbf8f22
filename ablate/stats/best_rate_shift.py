"""Whether the best learning rate moves with the width: the question of muP's learning-rate transfer (Yang
et al. 2022, "Tensor Programs V", figure 1), decided from a learning-rate search at several widths.

Input: one value of the deciding metric (lower is better, a validation loss) per (width, learning rate,
seed), every setting run on the same seeds. For each width the best learning rate is the vertex of the
parabola through the seed-mean metric, in log2 of the rate, at the best grid rate and its two neighbours
(the grid rate itself at an end of the grid, where no vertex can be placed: the search did not bracket the
optimum, and the result says so). The shift is the best log2 rate at the widest width minus that at the
narrowest. Its interval comes from resampling the seeds with replacement, each seed with all its cells (one
seed's cells share the data order and the initial draw), ``resamples`` times, and taking the central
``level`` quantiles. With ``SMALL`` seeds or fewer a bootstrap has too few distinct resamples to be an
interval (3 seeds give 10, and the percentile interval is about 3x too narrow): the interval is then the
jackknife's (Quenouille 1956, Tukey 1958), ``shift +- t_{n-1} se_jack`` with ``se_jack^2 = (n - 1) / n
sum_i (shift_(i) - mean_i shift_(i))^2`` over the shifts with each seed left out in turn.

The verdict, fixed before the data: ``stable`` when the interval lies inside +-``margin`` (log2 units: 1 is a
factor 2, one step of a grid a factor 2 apart), ``drifts`` when the interval excludes 0, else ``not
settled``. (Both can hold only for a shift inside the margin yet away from 0; then ``stable`` wins: muP's
claim is about a shift too small to matter.) An end width whose best rate is at an end of the grid is
only a bound: its optimum lies at or beyond that end. Then ``stable`` is never read (two optima past the
same end may be any distance apart), and ``drifts`` only where the bound cannot undo it: the narrowest
width past the top end (or the widest past the bottom end) can only make a negative shift more negative,
and the opposite ends a positive one more positive; otherwise ``not settled``. Imports numpy and scipy.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
from scipy import stats

Cell = tuple[int, float, int]  # (width, learning rate, seed)
SMALL = 5  # seeds at or below which the interval is the jackknife's t, not a bootstrap


@dataclass(frozen=True)
class Transfer:
    """The best log2 learning rate per width, its shift from the narrowest to the widest width with its
    bootstrap interval, and the verdict."""

    widths: tuple[int, ...]
    best_log2_lr: tuple[float, ...]  # per width, from all seeds
    bracketed: tuple[bool, ...]  # per width: the best grid rate is inside the grid (a vertex was fitted)
    grid_log2: tuple[float, float]  # the searched log2 rates' lowest and highest
    shift: float
    low: float
    high: float
    level: float
    margin: float
    seeds: int

    @property
    def verdict(self) -> str:
        ends = (0, len(self.widths) - 1)
        if all(self.bracketed[i] for i in ends) and -self.margin <= self.low and self.high <= self.margin:
            return "stable"
        if (self.low > 0 and self._bound_allows(+1)) or (self.high < 0 and self._bound_allows(-1)):
            return "drifts"
        return "not settled"

    def _bound_allows(self, sign: int) -> bool:
        """Whether the end widths' unbracketed optima (each only a bound) can only push the shift further in
        the direction ``sign``: the shift is the widest's best minus the narrowest's."""
        top = self.grid_log2[1]
        for i, towards in ((0, -1), (len(self.widths) - 1, +1)):  # how a farther optimum moves the shift
            if self.bracketed[i]:
                continue
            beyond = +1 if self.best_log2_lr[i] >= top else -1  # past the top end, or the bottom one
            if towards * beyond != sign:
                return False
        return True

    def best_lr(self, width: int) -> float:
        return float(2.0 ** self.best_log2_lr[self.widths.index(width)])


def vertex(log2_lrs: Sequence[float], values: Sequence[float]) -> tuple[float, bool]:
    """(log2 rate of the minimum, bracketed): the parabola through the best grid point and its neighbours,
    or the best grid point itself at an end of the grid (bracketed False)."""
    i = int(np.argmin(values))
    if i == 0 or i == len(values) - 1:
        return float(log2_lrs[i]), False
    x = np.asarray(log2_lrs[i - 1:i + 2], dtype=float)
    y = np.asarray(values[i - 1:i + 2], dtype=float)
    a, b, _ = np.polyfit(x, y, 2)
    if a <= 0:  # three points with no upward curvature: the grid point is the estimate
        return float(x[1]), True
    return float(min(max(-b / (2 * a), x[0]), x[2])), True  # kept between the neighbours


def _best(values: Mapping[Cell, float], widths: Sequence[int], lrs: Sequence[float], seeds: Sequence[int]
          ) -> tuple[list[float], list[bool]]:
    best, bracketed = [], []
    logs = [math.log2(lr) for lr in lrs]
    for w in widths:
        means = [float(np.mean([values[(w, lr, s)] for s in seeds])) for lr in lrs]
        x, inside = vertex(logs, means)
        best.append(x)
        bracketed.append(inside)
    return best, bracketed


def transfer(values: Mapping[Cell, float], *, margin: float = 1.0, level: float = 0.9, resamples: int = 2000,
             seed: int = 0) -> Transfer:
    """The learning-rate transfer of one parametrisation's search (every width x rate x seed present)."""
    widths = sorted({w for w, _, _ in values})
    lrs = sorted({lr for _, lr, _ in values})
    seeds = sorted({s for _, _, s in values})
    missing = [(w, lr, s) for w in widths for lr in lrs for s in seeds if (w, lr, s) not in values]
    if missing:
        raise ValueError(f"the search is incomplete: no value for (width, lr, seed) {missing[:3]}")
    if len(widths) < 2 or len(lrs) < 3 or len(seeds) < 2:
        raise ValueError("a transfer needs 2 widths or more, 3 learning rates or more and 2 seeds or more")
    best, bracketed = _best(values, widths, lrs, seeds)
    if len(seeds) <= SMALL:
        low, high = _jackknife(values, widths, lrs, seeds, best[-1] - best[0], level)
    else:
        rng = np.random.default_rng(seed)
        shifts = []
        for _ in range(resamples):
            drawn = [seeds[i] for i in rng.integers(0, len(seeds), len(seeds))]
            b, _ = _best(values, [widths[0], widths[-1]], lrs, drawn)
            shifts.append(b[1] - b[0])
        low, high = np.quantile(shifts, [(1 - level) / 2, (1 + level) / 2])
    return Transfer(tuple(widths), tuple(best), tuple(bracketed), (math.log2(lrs[0]), math.log2(lrs[-1])),
                    best[-1] - best[0], float(low), float(high), level, margin, len(seeds))


def _jackknife(values: Mapping[Cell, float], widths: Sequence[int], lrs: Sequence[float],
               seeds: Sequence[int], shift: float, level: float) -> tuple[float, float]:
    """The jackknife t interval of the shift (module doc)."""
    n = len(seeds)
    left = []
    for i in range(n):
        b, _ = _best(values, [widths[0], widths[-1]], lrs, [s for k, s in enumerate(seeds) if k != i])
        left.append(b[1] - b[0])
    se = math.sqrt((n - 1) / n * float(np.sum((np.asarray(left) - np.mean(left)) ** 2)))
    half = float(stats.t.ppf((1 + level) / 2, n - 1)) * se
    return shift - half, shift + half
