"""The speedup as Wen et al. (2025, "Fantastic Pretraining Optimizers and Where to Find Them") measure it:
for a variant at one rung, how much data the tuned baseline needs to reach the variant's final loss, over
the data the variant used; and how that speedup moves with model size.

At each rung the baseline is trained at three or more data budgets (e.g. 1x, 2x, 4x a tokens-per-parameter
ratio), each evaluated at the end of its own schedule (never at an intermediate checkpoint of a longer
run). Its final loss is fitted against tokens, log-linear in ``D``, ``L(D) = a + b log2(D / D_1)`` with
``D_1`` the smallest budget (over a 4x range a power law in ``D`` is this line to within its curvature;
the lack-of-fit F test, ablate/stats/ladder_fit.py, says where it is not), by least squares on the
budgets' means weighted by their seeds. The tokens the baseline needs to reach the variant's mean final
loss ``L_v`` are ``D* = D_1 2^((L_v - a) / b)``, and the **speedup** is ``D* / D_v`` (``D_v`` the tokens the
variant trained on): 1.4 means the baseline needs 40% more data for the variant's loss. Where ``D*`` falls
outside the budgets trained, the speedup is an extrapolation and says so (``beyond``).

Its interval is on ``g = log2 speedup = (L_v - a) / b + log2(D_1 / D_v)`` by the delta method: ``Var g =
(Var L_v + Var a + g'^2 Var b - 2 g' Cov(a, b)) / b^2`` with ``g' = (L_v - a) / b``, the line's covariance
from the seeds' pooled variance within budgets and ``Var L_v`` from the variant's own seeds, referred to t
with Satterthwaite's degrees of freedom: with a few seeds a side a bootstrap percentile interval is too
narrow (a 4-seed simulation covered 89% at a nominal 95%; tests/stats/test_data_speedup.py).

**The trend with size** (:func:`speedup_trend`): ``log2 speedup`` against ``log10`` of the rungs' compute,
a weighted line whose rung means carry their bootstrap variance plus the rung-level variance estimated
from the scatter about the line (ablate/stats/ladder_fit.py): its slope (log2 speedup per 10x compute) with
a t interval, and whether the speedup **shrinks** towards 1 (no gain) or **grows** with size, decided where
the interval excludes 0, Wen et al.'s headline (Muon's 1.4x at 0.1B falling to 1.1x at 1.2B).

Pure numpy/scipy.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from scipy import stats

from ablate.stats.ladder_fit import LackOfFit, lack_of_fit, rung_variance, variance_df

MIN_BUDGETS = 3
LEVEL = 0.95


@dataclass(frozen=True)
class Budget:
    """The baseline's runs at one data budget of a rung: each seed's final loss at the end of its schedule."""

    tokens: float
    values: tuple[float, ...]
    multiplier: float = 1.0  # the budget as a multiple of the rung's base tokens (for the report)


@dataclass(frozen=True)
class RungBudgets:
    """One rung's input: the tuned baseline at three or more budgets, the tuned variant at its own."""

    name: str
    compute: float  # the rung's compute at its base budget (FLOPs), the trend's x
    baseline: tuple[Budget, ...]
    variant_tokens: float
    variant: tuple[float, ...]  # the variant's final loss per seed


@dataclass(frozen=True)
class Speedup:
    rung: str
    value: float  # D* / D_v
    lo: float
    hi: float
    tokens_needed: float  # D*
    beyond: int  # 0: D* within the budgets trained; +1 above the largest; -1 below the smallest
    lack_of_fit: LackOfFit
    slope: float  # b: the baseline's loss change per doubling of data
    level: float = LEVEL

    @property
    def line_fits(self) -> bool:
        """The loss-against-tokens line is not rejected by its lack-of-fit test (at 1 - level)."""
        return not self.lack_of_fit.rejects(1.0 - self.level)

    def as_dict(self) -> dict[str, object]:
        return {"rung": self.rung, "speedup": self.value, "lo": self.lo, "hi": self.hi,
                "tokens_needed": self.tokens_needed, "beyond": self.beyond,
                "lack_of_fit": self.lack_of_fit.as_dict(), "loss_per_doubling": self.slope,
                "level": self.level}


def _line(x: np.ndarray, y: np.ndarray, w: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(a, b) of the weighted least-squares line y = a + b x, for each row of y (R, K)."""
    xm = (w * x).sum() / w.sum()
    ym = (y * w).sum(axis=1) / w.sum()
    b = ((y - ym[:, None]) * w * (x - xm)).sum(axis=1) / (w * (x - xm) ** 2).sum()
    return ym - b * xm, b


def _log2_speedup(a: np.ndarray, b: np.ndarray, lv: np.ndarray, d1: float, dv: float) -> np.ndarray:
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.asarray(np.where(b < 0, (lv - a) / b + math.log2(d1 / dv), np.nan))


def data_speedup(r: RungBudgets, level: float = LEVEL) -> Speedup:
    """The variant's speedup at one rung (module doc). Raises ValueError with fewer than ``MIN_BUDGETS``
    budgets of two seeds, or a variant without two seeds."""
    budgets = sorted((b for b in r.baseline if len(b.values) >= 2), key=lambda b: b.tokens)
    if len({b.tokens for b in budgets}) < MIN_BUDGETS or len(r.variant) < 2:
        raise ValueError(f"rung {r.name}: a speedup needs the baseline at {MIN_BUDGETS} or more data budgets "
                         f"of two seeds and the variant on two seeds (found {len(budgets)} budgets, "
                         f"{len(r.variant)} variant seeds)")
    d1 = budgets[0].tokens
    x = np.asarray([math.log2(b.tokens / d1) for b in budgets])
    w = np.asarray([len(b.values) for b in budgets], dtype=float)
    means = np.asarray([[float(np.mean(b.values)) for b in budgets]])
    a, b = _line(x, means, w)
    lv = np.asarray([float(np.mean(r.variant))])
    point = float(_log2_speedup(a, b, lv, d1, r.variant_tokens)[0])
    lof = lack_of_fit([b.values for b in budgets], list(a[0] + b[0] * x), 2)

    lo, hi = _delta_interval(budgets, x, w, float(a[0]), float(b[0]), r.variant, level)
    lo, hi = lo + math.log2(d1 / r.variant_tokens), hi + math.log2(d1 / r.variant_tokens)
    needed = r.variant_tokens * 2.0 ** point if math.isfinite(point) else math.nan
    beyond = 0 if not math.isfinite(needed) else (1 if needed > budgets[-1].tokens
                                                  else -1 if needed < d1 else 0)
    return Speedup(r.name, 2.0 ** point, 2.0 ** lo, 2.0 ** hi, needed, beyond, lof, float(b[0]), level)


def _delta_interval(budgets: Sequence[Budget], x: np.ndarray, w: np.ndarray, a: float, b: float,
                    variant: Sequence[float], level: float) -> tuple[float, float]:
    """The delta-method t interval of ``(L_v - a) / b`` (module doc); NaN where the loss does not fall."""
    if b >= 0:
        return math.nan, math.nan
    df_pe = sum(len(bud.values) - 1 for bud in budgets)
    pooled = sum(float(np.var(bud.values, ddof=1)) * (len(bud.values) - 1) for bud in budgets) / df_pe
    design = np.stack([np.ones_like(x), x], axis=1)
    cov = pooled * np.linalg.inv(design.T @ np.diag(w) @ design)  # (a, b)
    v = np.asarray(variant, dtype=float)
    var_v = float(v.var(ddof=1)) / len(v)
    g = (float(v.mean()) - a) / b
    line = float(cov[0, 0] + g * g * cov[1, 1] + 2 * g * cov[0, 1])  # Var(a + g b), the line at L_v
    var = (var_v + line) / (b * b)
    denominator = (var_v / b / b) ** 2 / (len(v) - 1) + (line / b / b) ** 2 / df_pe
    df = var * var / denominator if denominator > 0 else math.inf
    half = float(stats.t.ppf(1.0 - (1.0 - level) / 2.0, df)) * math.sqrt(var)
    return g - half, g + half


@dataclass(frozen=True)
class SpeedupTrend:
    """How log2 speedup moves per 10x compute over the rungs."""

    per_decade: float
    lo: float
    hi: float
    df: float
    tau2: float
    verdict: str  # "shrinks" (towards 1x), "grows" (away from 1x), "not settled"

    def as_dict(self) -> dict[str, object]:
        return {"log2_speedup_per_decade": self.per_decade, "lo": self.lo, "hi": self.hi, "df": self.df,
                "rung_variance": self.tau2, "verdict": self.verdict}


def speedup_trend(speedups: Sequence[Speedup], computes: Sequence[float], level: float = LEVEL
                  ) -> SpeedupTrend | None:
    """The speedup's trend with size (module doc); None with fewer than 3 rungs of a finite interval."""
    z = float(stats.norm.ppf(1.0 - (1.0 - level) / 2.0))
    kept = [(s, c) for s, c in zip(speedups, computes, strict=True)
            if all(math.isfinite(v) and v > 0 for v in (s.value, s.lo, s.hi)) and c > 0]
    if len(kept) < 3:
        return None
    y = np.asarray([math.log2(s.value) for s, _ in kept])
    x = np.asarray([math.log10(c) for _, c in kept])
    # each rung's sampling variance from its interval's half-width (log2 scale), on many df (a bootstrap)
    var = np.asarray([((math.log2(s.hi) - math.log2(s.lo)) / (2 * z)) ** 2 for s, _ in kept])
    w = 1.0 / np.maximum(var, 1e-12)
    design = np.stack([np.ones_like(x), x], axis=1)
    tau2 = rung_variance(design, y, w, var)
    xm = float((w * x).sum() / w.sum())
    coef = w * (x - xm) / float((w * (x - xm) ** 2).sum())  # slope = coef @ y
    slope = float(coef @ y)
    v, d = variance_df(coef, var, np.full(len(y), 1e6), tau2, float(len(y) - 2))
    half = float(stats.t.ppf(1.0 - (1.0 - level) / 2.0, float(d[0]))) * math.sqrt(float(v[0]))
    lo, hi = slope - half, slope + half
    mean_log = float((w * y).sum() / w.sum())  # which side of 1x the speedups lie on
    verdict = "not settled"
    if lo > 0 or hi < 0:
        verdict = "grows" if (slope > 0) == (mean_log > 0) else "shrinks"
    return SpeedupTrend(slope, lo, hi, float(d[0]), tau2, verdict)
