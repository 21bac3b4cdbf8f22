"""How a comparison's gap moves with training compute: the transfer verdict of a ladder, its prediction at
a target compute, and the backtest that checks whether the smaller rungs predicted the largest.

The data of one comparison are its paired differences (variant - baseline, per seed, ablate/stats/
pairing.py) at each rung, and each rung's training compute ``C`` (the baseline's, FLOPs). The gap is
fitted as a line in log-compute, ``g(x) = p + q x`` with ``x = log10(C / C_top)`` (``C_top``: the largest
rung's compute), by least squares over every pair (rung means weighted by their pairs). Its uncertainty is
the sampling error of the rung means, each rung with its own spread (noise changes with scale): any
fitted value is a linear combination ``sum_r c_r mean_r``, whose variance is ``sum_r c_r^2 s_r^2 / n_r``,
referred to a t distribution with Satterthwaite's degrees of freedom (Welch's test, for a line). A rung
with fewer than two pairs has no spread of its own and stays out of the fit (the verdict says which rungs
it used).

The verdict (:class:`Transfer`), at level ``1 - alpha`` (``alpha`` the study's, shared by the ladder's
comparisons, Bonferroni), reads the fitted gap at the smallest and the largest rung and its change over
the ladder, ``delta = g(x_top) - g(x_bottom)``:

* **reverses**: the gap at the smallest rung and at the largest are both decided, with opposite signs;
  the crossover is where the fitted gap is 0, and its interval the compute where the gap's interval
  holds 0 (Fieller's interval for the root of a line);
* **holds**: the change over the ladder lies within ``+-margin`` (the gap, whatever its size, moves less
  than the margin over the ladder's range);
* **grows**: the change is decided and has the sign of the gap at the largest rung, which is decided;
* **shrinks**: the change is decided and has the opposite sign of the gap at the smallest rung, which is
  decided; the crossover, where the line reaches 0 beyond the largest rung, is an extrapolation;
* **not settled**: none of these.

The prediction at the target compute is the fitted gap there, with a prediction interval for the gap a
study would measure there on as many seeds as the largest rung had (the line's own error plus that
rung's noise over its seeds): always an extrapolation, ``target / C_top`` times beyond the largest rung.

The backtest (:func:`backtest`) fits the same line without the largest rung and predicts the largest:
the measured gap falls inside the prediction interval or not. Beside it, the decision accuracy of
DataDecide (Magnusson et al. 2025): over every pair of variants, how often the smaller rungs order the
pair as the largest rung does; and each rung's signal-to-noise ratio in the sense of "Signal and Noise"
(Heineman et al. 2025): the spread between the variants' means (their largest difference) over the
spread between seeds (the pooled sd within variants).

Pure numpy/scipy, the one place a transfer verdict is decided; tests/stats/test_transfer.py checks the
error rates by simulation.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum

import numpy as np
from scipy import stats

ALPHA = 0.05
CROSSOVER_REACH = 4.0  # decades beyond the ladder (either way) a crossover's interval is followed
_GRID = 2001


class Transfer(StrEnum):
    GROWS = "grows"
    SHRINKS = "shrinks"
    HOLDS = "holds"
    REVERSES = "reverses"
    NOT_SETTLED = "not settled"


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
    """The gap's line in x = log10(C / C_top): its fit over the rungs it used."""

    rungs: tuple[GapRung, ...]  # the rungs it used, in order of compute
    top: float  # C_top: the compute x is measured from
    coef_mean: np.ndarray  # weights: fitted value = (coef_mean + x * coef_slope) @ means
    coef_slope: np.ndarray

    @property
    def means(self) -> np.ndarray:
        return np.asarray([r.mean for r in self.rungs])

    @property
    def variances(self) -> np.ndarray:
        """Each rung mean's sampling variance, s_r^2 / n_r."""
        return np.asarray([r.sd ** 2 / r.n for r in self.rungs])

    @property
    def dfs(self) -> np.ndarray:
        return np.asarray([r.n - 1 for r in self.rungs], dtype=float)

    def x(self, compute: float) -> float:
        return math.log10(compute / self.top)

    def coefficients(self, x: float) -> np.ndarray:
        return self.coef_mean + x * self.coef_slope

    def at(self, x: float, level: float, extra: tuple[float, float] | None = None) -> Estimate:
        """The fitted gap at x with its interval; ``extra`` (variance, df) adds an independent term (a new
        measurement's noise: a prediction interval)."""
        return _estimate(self.coefficients(x), self, level, extra)

    @property
    def slope(self) -> float:
        return float(self.coef_slope @ self.means)


def _estimate(c: np.ndarray, line: Line, level: float, extra: tuple[float, float] | None = None
              ) -> Estimate:
    value = float(c @ line.means)
    parts = c * c * line.variances
    var = float(parts.sum())
    denominator = float(np.sum(np.where(line.dfs > 0, parts * parts / np.maximum(line.dfs, 1), 0.0)))
    if extra is not None:
        var += extra[0]
        denominator += extra[0] ** 2 / extra[1] if extra[1] > 0 else 0.0
    if var == 0.0:
        return Estimate(value, value, value, math.inf)
    df = var * var / denominator if denominator > 0 else math.inf
    half = float(stats.t.ppf(1.0 - (1.0 - level) / 2.0, df)) * math.sqrt(var)
    return Estimate(value, value - half, value + half, df)


def fit_line(rungs: Sequence[GapRung]) -> Line | None:
    """The gap's least-squares line over the rungs with two or more pairs (None: fewer than 2 such rungs,
    or all at one compute)."""
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
    return Line(used, top, mean, slope)


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


@dataclass(frozen=True)
class TransferVerdict:
    """One comparison's transfer verdict."""

    verdict: Transfer
    level: float
    margin: float | None
    bottom: Estimate  # the fitted gap at the smallest rung it used
    top: Estimate  # ... and at the largest
    change: Estimate  # top - bottom
    per_decade: float  # the slope: gap change per 10x compute
    rungs: tuple[str, ...]  # the rungs the fit used
    left_out: tuple[str, ...]  # rungs with fewer than two pairs
    crossover: Crossover | None  # with reverses and shrinks
    prediction: Estimate | None  # the gap predicted at the target (an extrapolation)
    target: float | None
    beyond: float | None  # target / largest rung's compute

    def as_dict(self) -> dict[str, object]:
        def est(e: Estimate | None) -> dict[str, float] | None:
            return None if e is None else {"value": e.value, "lo": e.lo, "hi": e.hi, "df": e.df}

        cross = None if self.crossover is None else {"compute": self.crossover.compute,
                                                     "lo": self.crossover.lo, "hi": self.crossover.hi}
        return {"verdict": self.verdict.value, "level": self.level, "margin": self.margin,
                "bottom": est(self.bottom), "top": est(self.top), "change": est(self.change),
                "per_decade": self.per_decade, "rungs": list(self.rungs), "left_out": list(self.left_out),
                "crossover": cross, "prediction": est(self.prediction), "target": self.target,
                "extrapolated_x": self.beyond}


def decide(bottom: Estimate, top: Estimate, change: Estimate, margin: float | None) -> Transfer:
    """The verdict from the fitted gap at both ends and its change (module doc)."""
    b, t, c = bottom.decided, top.decided, change.decided
    if b and t and b == -t:
        return Transfer.REVERSES
    if margin is not None and -margin <= change.lo and change.hi <= margin:
        return Transfer.HOLDS
    if c and t == c:
        return Transfer.GROWS
    if c and b == -c:
        return Transfer.SHRINKS
    return Transfer.NOT_SETTLED


def transfer(rungs: Sequence[GapRung], alpha: float = ALPHA, margin: float | None = None,
             target: float | None = None) -> TransferVerdict | None:
    """The transfer verdict of one comparison over its rungs (None: fewer than two rungs with two pairs)."""
    line = fit_line(rungs)
    if line is None:
        return None
    level = 1.0 - alpha
    x_bottom = line.x(line.rungs[0].compute)
    bottom, top = line.at(x_bottom, level), line.at(0.0, level)
    change = _estimate(line.coefficients(0.0) - line.coefficients(x_bottom), line, level)
    verdict = decide(bottom, top, change, margin)
    crossover = _crossover(line, level) if verdict in (Transfer.REVERSES, Transfer.SHRINKS) else None
    prediction = beyond = None
    if target is not None:
        beyond = target / line.top
        prediction = line.at(math.log10(beyond), level, _new_noise(line, line.rungs[-1].n))
    used = tuple(r.name for r in line.rungs)
    left_out = tuple(r.name for r in rungs if r.name not in used)
    return TransferVerdict(verdict, level, margin, bottom, top, change, line.slope, used, left_out,
                           crossover, prediction, target, beyond)


def _new_noise(line: Line, n: int) -> tuple[float, float]:
    """The variance (and df) of a new measurement's mean over ``n`` seeds at the line's largest rung's
    spread: what a prediction interval adds to the line's own error."""
    last = line.rungs[-1]
    return last.sd ** 2 / max(1, n), float(last.n - 1)


def _holds_zero(line: Line, grid: np.ndarray, level: float) -> np.ndarray:
    """Whether the gap's interval at each x of ``grid`` holds 0 (:func:`_estimate`, for many x at once)."""
    c = line.coef_mean[None, :] + grid[:, None] * line.coef_slope[None, :]  # (G, K)
    value = c @ line.means
    parts = c * c * line.variances[None, :]
    var = parts.sum(axis=1)
    denominator = np.where(line.dfs > 0, parts * parts / np.maximum(line.dfs, 1), 0.0).sum(axis=1)
    with np.errstate(divide="ignore", invalid="ignore"):
        df = np.where(denominator > 0, var * var / denominator, np.inf)
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
    holds = _holds_zero(line, grid, level)
    i = int(np.argmin(np.abs(grid - root)))
    lo_i, hi_i = i, i
    while lo_i > 0 and holds[lo_i - 1]:
        lo_i -= 1
    while hi_i < len(grid) - 1 and holds[hi_i + 1]:
        hi_i += 1
    lo = 0.0 if lo_i == 0 else line.top * 10 ** float(grid[lo_i])
    hi = math.inf if hi_i == len(grid) - 1 else line.top * 10 ** float(grid[hi_i])
    return Crossover(line.top * 10 ** root, lo, hi)


# ---------------------------------------------------------------- the backtest
@dataclass(frozen=True)
class Backtest:
    """The gap's line without the largest rung, predicting it."""

    rung: str  # the largest rung, left out
    predicted: Estimate  # its gap predicted from the others (a prediction interval)
    measured: float  # its measured gap (the mean over its pairs)
    n: int  # its pairs

    @property
    def inside(self) -> bool:
        return self.predicted.holds(self.measured)

    def as_dict(self) -> dict[str, object]:
        p = self.predicted
        return {"rung": self.rung, "predicted": {"value": p.value, "lo": p.lo, "hi": p.hi, "df": p.df},
                "measured": self.measured, "pairs": self.n, "inside": self.inside}


def backtest(rungs: Sequence[GapRung], alpha: float = ALPHA) -> Backtest | None:
    """Leave the largest rung out, fit the rest, predict it (None: fewer than two rungs with two pairs
    below it)."""
    ordered = sorted((r for r in rungs if r.n >= 2 and r.compute > 0), key=lambda r: r.compute)
    if len(ordered) < 3:
        return None
    last = ordered[-1]
    line = fit_line(ordered[:-1])
    if line is None:
        return None
    # the prediction's noise is the fitted rungs' own (the largest of them), over the left-out rung's pairs
    predicted = line.at(line.x(last.compute), 1.0 - alpha, _new_noise(line, last.n))
    return Backtest(last.name, predicted, last.mean, last.n)


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


# ---------------------------------------------------------------- what a ladder's design can settle
POWER = 0.8


@dataclass(frozen=True)
class ChangePower:
    """What a ladder's seeds can tell of one comparison's change over the ladder, before it runs."""

    se: float  # the standard error of the change (the gap at the largest rung minus at the smallest)
    detectable: float  # the smallest true change found (grows or shrinks) with probability POWER
    holds: float | None  # the chance of a "holds" verdict when the true change is 0 (None: no margin)


def change_power(computes: Sequence[float], sds: Sequence[float], seeds: Sequence[int], alpha: float,
                 margin: float | None) -> ChangePower:
    """The power of the change over a ladder of rungs at ``computes`` whose paired differences have sd
    ``sds`` (a pilot's, per rung) on ``seeds`` pairs each, tested at ``alpha`` (the transfer verdicts'
    level): the normal approximation of the line's Welch test (module doc), with its t quantile at the
    Satterthwaite df the plan's seeds give."""
    rungs = [GapRung(str(i), float(c), tuple([0.0] * max(2, n)))
             for i, (c, n) in enumerate(zip(computes, seeds, strict=True))]
    line = fit_line(rungs)
    if line is None:
        return ChangePower(math.nan, math.nan, None)
    order = np.argsort(np.asarray(computes, dtype=float))
    var = np.asarray([float(sds[i]) ** 2 / max(2, seeds[i]) for i in order])
    dfs = np.asarray([max(1, seeds[i] - 1) for i in order], dtype=float)
    c = line.coefficients(0.0) - line.coefficients(line.x(line.rungs[0].compute))
    parts = c * c * var
    total = float(parts.sum())
    df = total * total / float((parts * parts / dfs).sum()) if total > 0 else math.inf
    se = math.sqrt(total)
    crit = float(stats.t.ppf(1.0 - alpha / 2.0, df))
    detectable = (crit + float(stats.t.ppf(POWER, df))) * se
    holds = None
    if margin is not None:
        slack = margin - crit * se  # |estimate| must stay below this for the interval to sit inside
        holds = max(0.0, 2.0 * float(stats.norm.cdf(slack / se)) - 1.0) if se > 0 else 1.0
    return ChangePower(se, detectable, holds)
