"""How a comparison's gap moves with training compute: the transfer verdict of a ladder, read from its
measured rungs, and the line in log-compute beside it where the rungs follow one.

The data of one comparison are its paired differences (variant - baseline, per seed, ablate/stats/
pairing.py) at each rung, and each rung's training compute ``C`` (the baseline's, FLOPs).

**The verdict** (:func:`decide`) comes from the rungs as measured (ablate/stats/rung_trend.py): each rung's
decided sign (its verdict in the ladder's family), Jonckheere's monotone trend test over the rungs (seed
resampling with the rung-level variance in its null, Holm over the ladder's comparisons), and the rungs'
differences from the smallest:

* **reverses**: the two smallest rungs and the two largest are each decided, with opposite signs;
* **holds**: every rung's gap minus the smallest rung's lies within ``+-margin``;
* **shrinks**: the trend test rejects, moving away from the side the smallest rung decided (towards 0 or
  past it);
* **grows**: the trend test rejects, moving the way the largest rung decided;
* **not settled**: none of these.

**The line** ``g(x) = p + q x``, ``x = log10(C / C_top)``, is fitted by least squares over every pair
(rung means weighted by their pairs). Any fitted value is a linear combination ``sum_r c_r mean_r`` with
variance ``sum_r c_r^2 (s_r^2 / n_r + tau^2)``: each rung's own seed spread plus the rung-level variance
``tau^2`` estimated from the scatter about the line (ablate/stats/ladder_fit.py), referred to t with
Satterthwaite's degrees of freedom. Its lack-of-fit F test is reported; where it rejects (at the study's
alpha), the gap does not follow a trend in log compute over these rungs and nothing is read from the line
(no slope, crossover or prediction). Otherwise the crossover of a reversing or shrinking gap is where the
line is 0, its interval the compute where the gap's interval holds 0 (Fieller's interval for the root of a
line); and the gap at the target compute is predicted with a prediction interval for a gap measured there
on as many seeds as the largest rung had (the line's error, that rung's seed noise and a new rung's own
effect ``tau^2``), only as far beyond the largest rung as the rolling backtests reached
(ablate/stats/backtest.py), and always worded as an extrapolation.

Beside them, the decision accuracy of DataDecide (Magnusson et al. 2025): over every pair of variants, how
often the smaller rungs order the pair as the largest rung does; and each rung's signal-to-noise ratio in
the sense of "Signal and Noise" (Heineman et al. 2025): the spread between the variants' means (their
largest difference) over the spread between seeds (the pooled sd within variants).

Pure numpy/scipy, the one place a transfer verdict is decided; tests/stats/test_transfer.py and
tests/stats/test_rung_trend.py check the error rates by simulation.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np
from scipy import stats

from ablate.stats.ladder_fit import LackOfFit, lack_of_fit, rung_variance, variance_df
from ablate.stats.rung_trend import TREND_REPLICATES, Trend, holds, monotone_trend, reverses, rung_signs
from ablate.stats.vocabulary import Transfer

ALPHA = 0.05
CROSSOVER_REACH = 4.0  # decades beyond the ladder (either way) a crossover's interval is followed
_GRID = 2001


@dataclass(frozen=True)
class GapRung:
    """One comparison's pairs at one rung."""

    name: str
    compute: float  # the rung's training compute (FLOPs)
    differences: tuple[float, ...]  # variant - baseline, per paired seed (finite)

    @property
    def n(self) -> int:
        return len(self.differences)

    @property
    def mean(self) -> float:
        return float(np.mean(self.differences)) if self.differences else math.nan

    @property
    def sd(self) -> float:
        return float(np.std(self.differences, ddof=1)) if self.n > 1 else math.nan


@dataclass(frozen=True)
class Estimate:
    """A fitted (or predicted) gap with its interval at the verdict's level."""

    value: float
    lo: float
    hi: float
    df: float

    @property
    def decided(self) -> int:
        """+1 / -1 where the interval excludes 0 above / below it, else 0."""
        return 1 if self.lo > 0 else -1 if self.hi < 0 else 0

    def holds(self, value: float) -> bool:
        return self.lo <= value <= self.hi


@dataclass(frozen=True)
class Line:
    """The gap's line in x = log10(C / C_top): its fit over the rungs it used, its lack-of-fit test and the
    rung-level variance every interval read from it carries (ablate/stats/ladder_fit.py)."""

    rungs: tuple[GapRung, ...]  # the rungs it used, in order of compute
    top: float  # C_top: the compute x is measured from
    coef_mean: np.ndarray  # weights: fitted value = (coef_mean + x * coef_slope) @ means
    coef_slope: np.ndarray
    tau2: float = 0.0  # the rung-level variance (0: the seeds explain the scatter about the line)
    lack_of_fit: LackOfFit = LackOfFit(math.nan, 0, 0, math.nan)

    @property
    def means(self) -> np.ndarray:
        return np.asarray([r.mean for r in self.rungs])

    @property
    def variances(self) -> np.ndarray:
        """Each rung mean's sampling variance over its seeds, s_r^2 / n_r."""
        return np.asarray([r.sd ** 2 / r.n for r in self.rungs])

    @property
    def dfs(self) -> np.ndarray:
        return np.asarray([r.n - 1 for r in self.rungs], dtype=float)

    @property
    def tau_df(self) -> float:
        """The rung variance's degrees of freedom: the rungs less the line's two parameters."""
        return float(len(self.rungs) - 2)

    def x(self, compute: float) -> float:
        return math.log10(compute / self.top)

    def coefficients(self, x: float) -> np.ndarray:
        return self.coef_mean + x * self.coef_slope

    def at(self, x: float, level: float, extra: Sequence[tuple[float, float]] = ()) -> Estimate:
        """The fitted gap at x with its interval; ``extra`` (variance, df) terms add independent noise (a
        new measurement's: a prediction interval)."""
        return _estimate(self.coefficients(x), self, level, extra)

    def var_df(self, coef: np.ndarray, extra: Sequence[tuple[float, float]] = ()
               ) -> tuple[np.ndarray, np.ndarray]:
        return variance_df(coef, self.variances, self.dfs, self.tau2, self.tau_df, extra)

    def new_rung(self, n: int) -> list[tuple[float, float]]:
        """What a gap measured at a new rung on ``n`` pairs adds to the line's error: the largest fitted
        rung's seed noise over ``n`` pairs and the new rung's own effect, each with its df."""
        last = self.rungs[-1]
        return [(last.sd ** 2 / max(1, n), float(last.n - 1)), (self.tau2, self.tau_df)]

    @property
    def slope(self) -> float:
        return float(self.coef_slope @ self.means)


def _estimate(c: np.ndarray, line: Line, level: float, extra: Sequence[tuple[float, float]] = ()
              ) -> Estimate:
    value = float(c @ line.means)
    v, d = line.var_df(c, extra)
    var, df = float(v[0]), float(d[0])
    if var == 0.0:
        return Estimate(value, value, value, math.inf)
    half = float(stats.t.ppf(1.0 - (1.0 - level) / 2.0, df)) * math.sqrt(var)
    return Estimate(value, value - half, value + half, df)


def fit_line(rungs: Sequence[GapRung]) -> Line | None:
    """The gap's least-squares line over the rungs with two or more pairs, with its lack-of-fit test and
    rung-level variance (None: fewer than 2 such rungs, or all at one compute)."""
    used = tuple(sorted((r for r in rungs if r.n >= 2 and r.compute > 0), key=lambda r: r.compute))
    if len(used) < 2:
        return None
    top = used[-1].compute
    x = np.asarray([math.log10(r.compute / top) for r in used])
    w = np.asarray([r.n for r in used], dtype=float)
    xm = float((w * x).sum() / w.sum())
    sxx = float((w * (x - xm) ** 2).sum())
    if sxx <= 0:
        return None
    slope = w * (x - xm) / sxx  # slope = slope @ means
    mean = w / w.sum() - xm * slope  # intercept at x = 0: mean_w - xm * slope
    means = np.asarray([r.mean for r in used])
    fitted = (mean + x[:, None] * slope[None, :]) @ means
    seed_var = np.asarray([r.sd ** 2 / r.n for r in used])
    tau2 = rung_variance(np.stack([np.ones_like(x), x], axis=1), means, w, seed_var)
    lof = lack_of_fit([r.differences for r in used], list(fitted), 2)
    return Line(used, top, mean, slope, tau2, lof)


@dataclass(frozen=True)
class Crossover:
    """Where the fitted gap crosses 0, and the compute over which its interval holds 0."""

    compute: float  # NaN: the fitted line never crosses (flat)
    lo: float  # the interval's ends in FLOPs: 0 / inf where it runs past CROSSOVER_REACH decades
    hi: float

    @property
    def open_below(self) -> bool:
        """Its interval runs past CROSSOVER_REACH decades below the ladder."""
        return self.lo <= 0.0

    @property
    def open_above(self) -> bool:
        """Its interval runs past CROSSOVER_REACH decades above the largest rung."""
        return not math.isfinite(self.hi)

    @property
    def bounded(self) -> bool:
        return not (self.open_below or self.open_above)


# Why a trend read from the line (its slope, crossover, prediction) is not given.
Withheld = Literal["", "lack of fit", "beyond the backtests", "no backtest", "no target"]


@dataclass(frozen=True)
class TransferVerdict:
    """One comparison's transfer verdict: the verdict from the measured rungs, and the line's reading
    beside it where the line describes the rungs."""

    verdict: Transfer
    level: float
    margin: float | None
    bottom: Estimate  # the measured gap at the smallest rung it used (its own t interval at ``level``)
    top: Estimate  # ... and at the largest
    change: Estimate  # the line's change over the ladder (top - bottom), rung variance included
    per_decade: float  # the line's slope: gap change per 10x compute
    rungs: tuple[str, ...]  # the rungs the fit used
    left_out: tuple[str, ...]  # rungs with fewer than two pairs
    crossover: Crossover | None  # with reverses and shrinks, where the line describes the rungs
    prediction: Estimate | None  # the gap predicted at the target (an extrapolation), where allowed
    target: float | None
    beyond: float | None  # target / largest rung's compute
    lack_of_fit: LackOfFit = LackOfFit(math.nan, 0, 0, math.nan)
    tau2: float = 0.0  # the rung-level variance in every interval of the line
    trend: Trend | None = None
    trend_p: float = math.nan  # the trend test's p, Holm-adjusted over the ladder's comparisons
    signs: tuple[int, ...] = ()  # each used rung's decided sign (its verdict in the ladder's family)
    holds_bound: float = math.nan  # the largest |end| of the rung-minus-smallest intervals
    trend_based: bool = True  # the line is not rejected by its lack-of-fit test
    withheld: Withheld = ""  # why no prediction at the target
    reach: float | None = None  # how far beyond their fitted rungs the backtests reached (ratio)

    def as_dict(self) -> dict[str, object]:
        def est(e: Estimate | None) -> dict[str, float] | None:
            return None if e is None else {"value": e.value, "lo": e.lo, "hi": e.hi, "df": e.df}

        cross = None if self.crossover is None else {"compute": self.crossover.compute,
                                                     "lo": self.crossover.lo, "hi": self.crossover.hi}
        return {"verdict": self.verdict.value, "level": self.level, "margin": self.margin,
                "bottom": est(self.bottom), "top": est(self.top), "change": est(self.change),
                "per_decade": self.per_decade, "rungs": list(self.rungs), "left_out": list(self.left_out),
                "crossover": cross, "prediction": est(self.prediction), "target": self.target,
                "extrapolated_x": self.beyond, "lack_of_fit": self.lack_of_fit.as_dict(),
                "rung_variance": self.tau2, "trend": None if self.trend is None else self.trend.as_dict(),
                "trend_p_holm": self.trend_p, "rung_signs": list(self.signs),
                "holds_bound": self.holds_bound, "trend_based": self.trend_based,
                "prediction_withheld": self.withheld, "backtest_reach": self.reach}


def decide(signs: Sequence[int], trend_direction: int, trend_significant: bool, holds: bool) -> Transfer:
    """The verdict from the measured rungs (ablate/stats/rung_trend.py): ``signs`` each rung's decided
    sign in order of compute, the monotone trend test's direction and whether it rejected (after Holm),
    and whether every rung stays within the margin of the smallest."""
    if reverses(signs):
        return Transfer.REVERSES
    if holds:
        return Transfer.HOLDS
    if trend_significant and trend_direction:
        if signs and signs[0] == -trend_direction:
            return Transfer.SHRINKS  # away from the smallest rung's decided side (past 0 or not)
        if signs and signs[-1] == trend_direction:
            return Transfer.GROWS
    return Transfer.NOT_SETTLED


def _measured(r: GapRung, level: float) -> Estimate:
    half = float(stats.t.ppf(1.0 - (1.0 - level) / 2.0, r.n - 1)) * r.sd / math.sqrt(r.n)
    return Estimate(r.mean, r.mean - half, r.mean + half, float(r.n - 1))


def transfer(rungs: Sequence[GapRung], alpha: float = ALPHA, margin: float | None = None,
             target: float | None = None, signs: Mapping[str, int] | None = None,
             trend_p: float | None = None, trend_alpha: float | None = None, reach: float | None = None,
             lof_alpha: float = ALPHA, replicates: int = TREND_REPLICATES) -> TransferVerdict | None:
    """The transfer verdict of one comparison over its rungs (None: fewer than two rungs with two pairs).

    ``alpha``: the level of its intervals (the ladder's Bonferroni share); ``signs``: each rung's decided
    sign by name, from the ladder's family (else each rung's own t test, :func:`rung_trend.rung_signs`);
    ``trend_p``: the trend test's Holm-adjusted p over the ladder's comparisons, judged at ``trend_alpha``
    (else this comparison's own p at ``alpha``); ``reach``: the farthest the rolling backtests predicted
    beyond their fitted rungs (a ratio of compute; None: none ran), beyond which no prediction is given;
    ``lof_alpha``: the lack-of-fit test's level."""
    line = fit_line(rungs)
    if line is None:
        return None
    level = 1.0 - alpha
    values = [r.differences for r in line.rungs]
    x_bottom = line.x(line.rungs[0].compute)
    change = _estimate(line.coefficients(0.0) - line.coefficients(x_bottom), line, level)
    trend_based = not line.lack_of_fit.rejects(lof_alpha)
    trend = monotone_trend(values, line.tau2, replicates)
    p = trend.p if trend_p is None else trend_p
    decided = tuple(rung_signs(values, alpha) if signs is None
                    else [signs.get(r.name, 0) for r in line.rungs])
    ok, bound = holds(values, alpha, margin)
    verdict = decide(decided, trend.direction, p < (alpha if trend_alpha is None else trend_alpha), ok)
    crossover = (_crossover(line, level) if trend_based and verdict in (Transfer.REVERSES, Transfer.SHRINKS)
                 else None)
    prediction = beyond = None
    withheld: Withheld = "no target"
    if target is not None:
        beyond = target / line.top
        withheld = ("lack of fit" if not trend_based else "no backtest" if reach is None
                    else "beyond the backtests" if beyond > reach * (1 + 1e-9) else "")
        if not withheld:
            prediction = line.at(math.log10(beyond), level, line.new_rung(line.rungs[-1].n))
    used = tuple(r.name for r in line.rungs)
    left_out = tuple(r.name for r in rungs if r.name not in used)
    return TransferVerdict(verdict, level, margin, _measured(line.rungs[0], level),
                           _measured(line.rungs[-1], level), change, line.slope, used, left_out, crossover,
                           prediction, target, beyond, line.lack_of_fit, line.tau2, trend, p, decided, bound,
                           trend_based, withheld, reach)


def _holds_zero(line: Line, grid: np.ndarray, level: float) -> np.ndarray:
    """Whether the gap's interval at each x of ``grid`` holds 0 (:func:`_estimate`, for many x at once)."""
    c = line.coef_mean[None, :] + grid[:, None] * line.coef_slope[None, :]  # (G, K)
    value = c @ line.means
    var, df = line.var_df(c)
    half = stats.t.ppf(1.0 - (1.0 - level) / 2.0, df) * np.sqrt(var)
    return np.asarray(np.abs(value) <= half)


def _crossover(line: Line, level: float) -> Crossover:
    """The root of the fitted line and the connected set of x around it where the interval holds 0."""
    slope = line.slope
    at0 = float(line.coef_mean @ line.means)
    if slope == 0.0:
        return Crossover(math.nan, 0.0, math.inf)
    root = -at0 / slope
    x_lo = line.x(line.rungs[0].compute) - CROSSOVER_REACH
    x_hi = CROSSOVER_REACH
    if not x_lo <= root <= x_hi:
        return Crossover(line.top * 10 ** root, 0.0 if root < x_lo else line.top * 10 ** x_lo,
                         math.inf if root > x_hi else line.top * 10 ** x_hi)
    grid = np.linspace(x_lo, x_hi, _GRID)
    zero = _holds_zero(line, grid, level)
    i = int(np.argmin(np.abs(grid - root)))
    lo_i, hi_i = i, i
    while lo_i > 0 and zero[lo_i - 1]:
        lo_i -= 1
    while hi_i < len(grid) - 1 and zero[hi_i + 1]:
        hi_i += 1
    lo = 0.0 if lo_i == 0 else line.top * 10 ** float(grid[lo_i])
    hi = math.inf if hi_i == len(grid) - 1 else line.top * 10 ** float(grid[hi_i])
    return Crossover(line.top * 10 ** root, lo, hi)


def decision_accuracy(means: Mapping[str, Sequence[float]]) -> list[float]:
    """DataDecide's decision accuracy of each smaller rung: ``means`` maps each variant to its mean metric
    at every rung (in order of compute, the largest last); for each rung but the largest, the share of
    pairs of variants it orders as the largest rung does (a tie at either counts half). NaN where a pair
    has no value."""
    names = list(means)
    rungs = len(next(iter(means.values()), []))
    out: list[float] = []
    for r in range(rungs - 1):
        scores = []
        for a, b in itertools.combinations(names, 2):
            small, large = means[a][r] - means[b][r], means[a][-1] - means[b][-1]
            if not (math.isfinite(small) and math.isfinite(large)):
                continue
            scores.append(0.5 if small == 0 or large == 0 else float((small > 0) == (large > 0)))
        out.append(float(np.mean(scores)) if scores else math.nan)
    return out


def signal_to_noise(values: Mapping[str, Sequence[float]]) -> tuple[float, float, float]:
    """(signal, noise, their ratio) at one rung: ``values`` maps each variant to its seeds' metric; signal
    is the largest difference between the variants' means, noise the pooled sd of seeds within variants."""
    groups = [np.asarray(v, dtype=float) for v in values.values() if len(v)]
    groups = [g[np.isfinite(g)] for g in groups]
    groups = [g for g in groups if len(g)]
    if len(groups) < 2:
        return math.nan, math.nan, math.nan
    means = [float(g.mean()) for g in groups]
    signal = max(means) - min(means)
    df = sum(len(g) - 1 for g in groups)
    if df == 0:
        return signal, math.nan, math.nan
    noise = math.sqrt(sum(((g - g.mean()) ** 2).sum() for g in groups) / df)
    return signal, noise, (signal / noise if noise > 0 else math.inf)
