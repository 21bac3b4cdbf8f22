"""Honest extrapolation for a ladder: rolling-origin backtests of each gap's line, their empirical coverage
and reach, and DataDecide's decision accuracy and the signal-to-noise ratio per comparison, each with a
seed-bootstrap interval.

**Rolling-origin backtests** (Tashman 2000, "Out-of-sample tests of forecasting accuracy"): for every k that
leaves at least ``MIN_FIT`` rungs to fit, the gap's line (ablate/stats/transfer.py, its rung-level
variance included) is fitted to the rungs 1..k and predicts rung k+1 with a prediction interval at the
ladder's level for a gap measured there on that rung's pairs. The share of measured gaps inside their
intervals, over every comparison and origin, is the backtests' **empirical coverage**, beside its nominal
level, with an exact (Clopper-Pearson) interval; their **reach** is the farthest any backtest predicted
beyond its largest fitted rung (a ratio of compute), and no prediction at the target is given farther
beyond the ladder's largest rung than that.

**Decision accuracy** of one comparison (after DataDecide, Magnusson et al. 2025): the share of the smaller
rungs whose measured gap has the sign of the largest rung's; **signal-to-noise** (Heineman et al. 2025) of
one comparison at one rung: the gap between the two variants' means over the pooled sd of seeds within the
two. Both come with a percentile interval from resampling seeds within each rung (the same seed indices for
both variants of a pair), ``BOOTSTRAP`` replicates from a fixed seed.

Pure numpy/scipy.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from scipy import stats

from ablate.stats.transfer import Estimate, GapRung, fit_line

MIN_FIT = 3  # the fewest rungs a backtest fits: a line and one degree of freedom for its scatter
BOOTSTRAP = 2000
BOOTSTRAP_SEED = 0
LEVEL = 0.95


@dataclass(frozen=True)
class Backtest:
    """One rolling-origin backtest: the line over ``fitted`` predicting the next rung."""

    fitted: tuple[str, ...]  # the rungs the line was fitted to, in order of compute
    rung: str  # the rung it predicted
    predicted: Estimate  # a prediction interval for that rung's measured gap
    measured: float  # the rung's measured gap (the mean over its pairs)
    n: int  # its pairs
    reach: float  # the predicted rung's compute over the largest fitted rung's

    @property
    def inside(self) -> bool:
        return self.predicted.holds(self.measured)

    def as_dict(self) -> dict[str, object]:
        p = self.predicted
        return {"fitted": list(self.fitted), "rung": self.rung,
                "predicted": {"value": p.value, "lo": p.lo, "hi": p.hi, "df": p.df},
                "measured": self.measured, "pairs": self.n, "inside": self.inside, "reach": self.reach}


def rolling(rungs: Sequence[GapRung], alpha: float, min_fit: int = MIN_FIT) -> list[Backtest]:
    """Every rolling-origin backtest of one comparison (module doc), in order of origin; [] with fewer
    than ``min_fit + 1`` rungs of two pairs."""
    ordered = sorted((r for r in rungs if r.n >= 2 and r.compute > 0), key=lambda r: r.compute)
    out = []
    for k in range(min_fit, len(ordered)):
        line = fit_line(ordered[:k])
        if line is None:
            continue
        nxt = ordered[k]
        predicted = line.at(line.x(nxt.compute), 1.0 - alpha, line.new_rung(nxt.n))
        out.append(Backtest(tuple(r.name for r in ordered[:k]), nxt.name, predicted, nxt.mean, nxt.n,
                            nxt.compute / ordered[k - 1].compute))
    return out


@dataclass(frozen=True)
class Coverage:
    """The backtests' empirical coverage against their nominal level."""

    inside: int
    total: int
    nominal: float
    lo: float  # Clopper-Pearson interval of the coverage at LEVEL
    hi: float

    @property
    def share(self) -> float:
        return self.inside / self.total if self.total else math.nan

    def as_dict(self) -> dict[str, float]:
        return {"inside": self.inside, "total": self.total, "share": self.share, "nominal": self.nominal,
                "lo": self.lo, "hi": self.hi}


def coverage(tests: Sequence[Backtest], nominal: float, level: float = LEVEL) -> Coverage:
    k, n = sum(t.inside for t in tests), len(tests)
    if n == 0:
        return Coverage(0, 0, nominal, math.nan, math.nan)
    tail = (1.0 - level) / 2.0
    lo = float(stats.beta.ppf(tail, k, n - k + 1)) if k > 0 else 0.0
    hi = float(stats.beta.ppf(1.0 - tail, k + 1, n - k)) if k < n else 1.0
    return Coverage(k, n, nominal, lo, hi)


def reach(tests: Sequence[Backtest]) -> float | None:
    """The farthest the backtests predicted beyond their fitted rungs (None: no backtest ran)."""
    return max((t.reach for t in tests), default=None)


# ---------------------------------------------------------------- decision accuracy and SNR, per comparison
@dataclass(frozen=True)
class Interval:
    value: float
    lo: float
    hi: float

    def as_dict(self) -> dict[str, float]:
        return {"value": self.value, "lo": self.lo, "hi": self.hi}


def _percentile(value: float, reps: np.ndarray, level: float) -> Interval:
    reps = reps[np.isfinite(reps)]
    if not len(reps) or not math.isfinite(value):
        return Interval(value, math.nan, math.nan)
    tail = (1.0 - level) / 2.0
    return Interval(value, float(np.quantile(reps, tail)), float(np.quantile(reps, 1.0 - tail)))


def _accuracy(means: np.ndarray) -> np.ndarray:
    """(R,) share of the smaller rungs (columns but the last of ``means`` (R, K)) with the largest's sign; a
    zero at either end counts half."""
    small, large = np.sign(means[:, :-1]), np.sign(means[:, -1:])
    agree = np.where((small == 0) | (large == 0), 0.5, (small == large).astype(float))
    return np.asarray(agree.mean(axis=1))


def decision_accuracy(rungs: Sequence[Sequence[float]], level: float = LEVEL, replicates: int = BOOTSTRAP,
                      seed: int = BOOTSTRAP_SEED) -> Interval:
    """One comparison's decision accuracy (module doc): ``rungs`` its paired differences at each rung, in
    order of compute (the largest last), with a seed-bootstrap interval."""
    groups = [np.asarray(r, dtype=float) for r in rungs]
    if len(groups) < 2 or any(len(g) == 0 for g in groups):
        return Interval(math.nan, math.nan, math.nan)
    value = float(_accuracy(np.asarray([[g.mean() for g in groups]]))[0])
    rng = np.random.default_rng(seed)
    reps = np.stack([g[rng.integers(0, len(g), size=(replicates, len(g)))].mean(axis=1) for g in groups],
                    axis=1)
    return _percentile(value, _accuracy(reps), level)


def _snr(base: np.ndarray, variant: np.ndarray) -> np.ndarray:
    """(R,) |mean gap| over the pooled sd within the two, for rows of seeds (R, n)."""
    n = base.shape[1]
    pooled = np.sqrt((base.var(axis=1, ddof=1) + variant.var(axis=1, ddof=1)) / 2.0)
    gap = np.abs(variant.mean(axis=1) - base.mean(axis=1))
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.asarray(np.where(pooled > 0, gap / pooled, np.inf)) if n > 1 else np.full(len(base), np.nan)


def signal_to_noise(base: Sequence[float], variant: Sequence[float], level: float = LEVEL,
                    replicates: int = BOOTSTRAP, seed: int = BOOTSTRAP_SEED) -> Interval:
    """One comparison's signal-to-noise at one rung (module doc): the two variants' values paired by seed
    (the same order), with a bootstrap interval resampling seeds (pairs kept together)."""
    b, v = np.asarray(base, dtype=float), np.asarray(variant, dtype=float)
    if len(b) < 2 or len(b) != len(v):
        return Interval(math.nan, math.nan, math.nan)
    value = float(_snr(b[None, :], v[None, :])[0])
    idx = np.random.default_rng(seed).integers(0, len(b), size=(replicates, len(b)))
    return _percentile(value, _snr(b[idx], v[idx]), level)
