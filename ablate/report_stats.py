"""Statistics for ablation reports: seed means with t-intervals, effects against a baseline, Pareto fronts.

Rules (repeated in every report's method note, see ``METHOD_NOTE``):

* A variant's value is the mean over its seeds with a 95% Student-t interval
  ``mean +- t(0.975, n-1) * s / sqrt(n)`` (``scipy.stats.t``); one seed gives the mean only.
* An effect is ``mean(variant) - mean(baseline)``. When both groups hold exactly the same seeds, the
  comparison is paired by seed (a shared seed means the same data order and the same initial weights in
  every shared parameter, so pairing removes that noise); otherwise the groups are independent.
* With >= 2 observations (pairs, or per group): paired t-test (``scipy.stats.ttest_rel``, t-interval on
  the per-seed differences) or Welch's t-test (``scipy.stats.ttest_ind(equal_var=False)``,
  Welch-Satterthwaite interval). Two seeds leave 1 degree of freedom (t = 12.7): wide, honest intervals,
  and verdicts from 2 seeds say they are indicative only.
* No bootstrap for small groups: resampling 2 values yields at most 3 distinct means, understates the
  spread and calls noise significant (measured on real 2-seed runs: p < 0.001 for a 0.03 loss wobble).
* With 1 observation in either group: the difference only, no interval, no p-value, "too few seeds".
* A verdict calls an effect significant at p < 0.05 (unadjusted); the Holm-adjusted p over all
  comparisons in the report is shown next to it for readers who test every axis at once.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
from scipy import stats

CONFIDENCE = 0.95
ALPHA = 0.05

METHOD_NOTE = (
    "Each cell is the mean over seeds of finished runs with a 95% Student-t interval "
    "(mean ± t(0.975, n−1)·s/√n); diverged, failed and pruned runs are counted, not averaged. "
    "An effect is mean(variant) − mean(baseline). When both hold the same seeds the comparison is paired "
    "by seed (same data order, same initial weights in shared parameters): paired t-test on the per-seed "
    "differences. Otherwise Welch's t-test with the Welch–Satterthwaite interval. Two seeds leave 1 degree "
    "of freedom: the intervals are wide and such verdicts are indicative only (no bootstrap: resampling 2 "
    "values understates the spread). With 1 run: the difference alone, no interval and no p-value (too few "
    "seeds). "
    "Significant means p < 0.05 unadjusted; the Holm-adjusted p over all comparisons is listed too."
)


@dataclass(frozen=True)
class Summary:
    """Mean of n values with the half-width of its t-interval (NaN below two values)."""

    n: int
    mean: float
    half_width: float
    std: float

    @property
    def lo(self) -> float:
        return self.mean - self.half_width

    @property
    def hi(self) -> float:
        return self.mean + self.half_width


@dataclass(frozen=True)
class Effect:
    """variant - baseline on one metric."""

    diff: float
    lo: float
    hi: float
    p: float  # NaN when no test was possible
    test: str  # 'paired t-test' | "Welch's t-test" | 'none'
    n_base: int
    n_variant: int
    paired: bool

    @property
    def n_min(self) -> int:
        return min(self.n_base, self.n_variant)

    @property
    def tested(self) -> bool:
        return not math.isnan(self.p)


def _finite(values: Sequence[float]) -> np.ndarray:
    x = np.asarray([float(v) for v in values], dtype=float)
    return x[np.isfinite(x)]


def mean_ci(values: Sequence[float], confidence: float = CONFIDENCE) -> Summary:
    x = _finite(values)
    n = len(x)
    if n == 0:
        return Summary(0, math.nan, math.nan, math.nan)
    mean = float(np.mean(x))
    if n == 1:
        return Summary(1, mean, math.nan, math.nan)
    std = float(np.std(x, ddof=1))
    half = float(stats.t.ppf(0.5 + confidence / 2, n - 1) * std / math.sqrt(n))
    return Summary(n, mean, half, std)


def compare(base: Mapping[int, float], variant: Mapping[int, float],
            confidence: float = CONFIDENCE) -> Effect:
    """Effect of ``variant`` against ``base``; both map seed -> value (non-finite values are dropped)."""
    b = {s: float(v) for s, v in base.items() if math.isfinite(float(v))}
    v = {s: float(x) for s, x in variant.items() if math.isfinite(float(x))}
    nb, nv = len(b), len(v)
    if nb == 0 or nv == 0:
        return Effect(math.nan, math.nan, math.nan, math.nan, "none", nb, nv, False)
    paired = set(b) == set(v)
    xb = np.array([b[s] for s in sorted(b)])
    xv = np.array([v[s] for s in sorted(v)])
    diff = float(xv.mean() - xb.mean())
    n = min(nb, nv)
    if n == 1:
        return Effect(diff, math.nan, math.nan, math.nan, "none", nb, nv, paired)
    q = 0.5 + confidence / 2
    if paired:
        d = xv - xb  # per seed: both arrays are in seed order over the same seeds
        sd = float(np.std(d, ddof=1))
        if sd == 0.0:  # identical differences: scipy would warn and return NaN
            return Effect(diff, diff, diff, 1.0 if diff == 0 else 0.0, "paired t-test", nb, nv, True)
        half = float(stats.t.ppf(q, n - 1) * sd / math.sqrt(n))
        p = float(stats.ttest_rel(xv, xb).pvalue)
        return Effect(diff, diff - half, diff + half, p, "paired t-test", nb, nv, True)
    vb, vv = float(np.var(xb, ddof=1)) / nb, float(np.var(xv, ddof=1)) / nv
    se = math.sqrt(vb + vv)
    if se == 0.0:
        return Effect(diff, diff, diff, 1.0 if diff == 0 else 0.0, "Welch's t-test", nb, nv, False)
    df = (vb + vv) ** 2 / (vb**2 / (nb - 1) + vv**2 / (nv - 1))
    half = float(stats.t.ppf(q, df) * se)
    p = float(stats.ttest_ind(xv, xb, equal_var=False).pvalue)
    return Effect(diff, diff - half, diff + half, p, "Welch's t-test", nb, nv, False)


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


def verdict(label: str, effect: Effect, unit: str, higher_is_better: bool, decimals: int = 2,
            alpha: float = ALPHA) -> str:
    """One plain-language line, e.g. 'post_norm: -1.20 BLEU [-1.90, -0.50], significant at 5% (...)'."""
    if math.isnan(effect.diff):
        return f"{label}: no finished runs to compare"
    d = fmt(effect.diff, decimals, signed=True)
    if not effect.tested:
        return (f"{label}: {d} {unit}; too few seeds to test (one run on a side), "
                "repeat with >= 3 seeds to conclude")
    ci = f"[{fmt(effect.lo, decimals, signed=True)}, {fmt(effect.hi, decimals, signed=True)}]"
    seeds = f"{effect.n_min} seed{'s' if effect.n_min != 1 else ''}"
    if effect.p < alpha:
        better = (effect.diff > 0) == higher_is_better
        direction = "better" if better else "worse"
        caveat = "; 2 seeds: indicative only" if effect.n_min < 3 else ""
        return (f"{label}: {d} {unit} {ci}, significant at 5% ({effect.test}, p={fmt_p(effect.p)}{caveat}): "
                f"{direction} than the baseline")
    return f"{label}: {d} {unit} {ci}, no detectable effect with {seeds} ({effect.test}, p={fmt_p(effect.p)})"


def pareto_front(cost: Sequence[float], quality: Sequence[float], higher_quality_is_better: bool = True
                 ) -> list[bool]:
    """True for points no other point beats (cost no higher and quality no worse, one strictly)."""
    pts = [(float(c), float(q) if higher_quality_is_better else -float(q)) for c, q in zip(cost, quality,
                                                                                           strict=True)]
    out = []
    for i, (c, q) in enumerate(pts):
        if not (math.isfinite(c) and math.isfinite(q)):
            out.append(False)
            continue
        dominated = any(j != i and math.isfinite(c2) and math.isfinite(q2) and c2 <= c and q2 >= q
                        and (c2 < c or q2 > q) for j, (c2, q2) in enumerate(pts))
        out.append(not dominated)
    return out


# ---------------------------------------------------------------- fixed formatting (deterministic text)
def fmt(value: float, decimals: int, signed: bool = False) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "—"
    if math.isinf(value):
        return "inf" if value > 0 else "-inf"
    text = f"{value:{'+' if signed else ''},.{decimals}f}"
    if text.lstrip("+-").strip("0.,") == "":  # '-0.00' and '+0.00' read as plain zero
        text = f"{0.0:.{decimals}f}"
    return text


def fmt_summary(s: Summary, decimals: int) -> str:
    """'12.34 ± 0.56' (n >= 2), '12.34' (n = 1), '—' (no runs)."""
    if s.n == 0:
        return "—"
    if s.n == 1 or math.isnan(s.half_width):
        return fmt(s.mean, decimals)
    return f"{fmt(s.mean, decimals)} ± {fmt(s.half_width, decimals)}"


def fmt_p(p: float) -> str:
    if math.isnan(p):
        return "—"
    return "<0.001" if p < 0.001 else f"{p:.3f}"
