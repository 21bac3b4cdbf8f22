"""Statistics for ablation reports: seed means with t-intervals, effects against a baseline, Pareto fronts.

Rules (repeated in every report's method note, see ``METHOD_NOTE``):

* A variant's value is the mean over its seeds with a 95% Student-t interval
  ``mean +- t(0.975, n-1) * s / sqrt(n)`` (``scipy.stats.t``); one seed gives the mean only.
* An effect is ``mean(variant) - mean(baseline)``. When both groups hold exactly the same seeds, the
  comparison is paired by seed (a shared seed means the same data order and the same initial weights in
  every shared parameter, so pairing removes that noise); otherwise the groups are independent. A
  full-factorial main effect or interaction is a mean of per-pair differences (``compare_differences``).
* With >= 4 observations (pairs, or in the smaller group): paired t-test (``scipy.stats.ttest_1samp`` on
  the per-seed differences, t-interval) or Welch's t-test (``scipy.stats.ttest_ind(equal_var=False)``,
  Welch-Satterthwaite interval).
* With 2 or 3 observations (tiny samples), or when every observation is the same so that t is undefined:
  a bootstrap percentile interval (``scipy.stats.bootstrap(method='percentile')``, 9,999 resamples from a
  fixed seed, so reports stay deterministic; paired: the per-seed differences are resampled, independent:
  each group is resampled) and a permutation p-value (``scipy.stats.permutation_test``: sign flips of the
  differences when paired, relabelings of the pooled values otherwise), exact because 2-3 seeds give few
  permutations. With 2-3 seeds on each side such a test cannot reach p < 0.05 (2 paired seeds have 4 sign
  patterns, so p >= 0.5; 3 have 8, p >= 0.25; 3 + 3 independent runs, 20 relabelings, p >= 0.1): the
  verdict says so, and a constant difference from 2 seeds is never "significant" (a t-test would give
  p = 0 there, its standard error being 0).
* With 1 observation in either group: the difference only, no interval, no p-value, "too few seeds".
* A verdict calls an effect significant at p < 0.05 (unadjusted); the Holm-adjusted p over all
  comparisons in the report is shown next to it for readers who test every axis at once.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

import numpy as np
from scipy import stats

from ablate.stats.verdict import ALPHA, SIGN_FLIP_PAIRS, Fixed, fixed_reading

CONFIDENCE = 0.95
TINY = SIGN_FLIP_PAIRS  # at most this many observations: bootstrap interval and permutation test, no t-test
RESAMPLES = 9999  # bootstrap resamples; a permutation test is exact up to this many permutations
RESAMPLE_SEED = 0  # fixed: the same runs give the same intervals

METHOD_NOTE = (
    "Each cell is the mean over seeds of finished runs with a 95% Student-t interval "
    "(mean ± t(0.975, n−1)·s/√n); diverged, failed and pruned runs are counted, not averaged. "
    "An effect is mean(variant) − mean(baseline). When one side's seeds are all among the other's (an "
    "adaptive study runs the baseline on every seed any comparison needed) the comparison is paired by "
    "seed on the seeds both ran (same data order, same initial weights in shared parameters): paired "
    "t-test on the per-seed differences, n the pairs. Otherwise Welch's t-test with the "
    "Welch–Satterthwaite interval. The t-tests need at "
    f"least {TINY + 1} observations (pairs, or runs in the smaller group). With 2 or 3 (or when every "
    "difference is the same, which leaves t undefined) the interval is a bootstrap percentile interval "
    f"({RESAMPLES:,} resamples, fixed seed; paired: per-seed differences resampled) and the p-value an "
    "exact permutation test (sign flips of the per-seed differences, or relabelings of independent "
    "groups). Such a test cannot reach p < 0.05 with 2–3 seeds a side (2 paired seeds: p ≥ 0.5; "
    "3: p ≥ 0.25), so those verdicts say “not testable” and why. With 1 run: the difference "
    "alone, no interval and no p-value (too few seeds). A full-factorial main effect pairs cells that "
    "differ only in that axis (same other-axis values, same seed); an interaction is the difference of "
    "two such differences; both are tested on their matched sets with the same rules. "
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
    test: str  # 'paired t-test' | "Welch's t-test" | 'exact permutation (sign flips)' | ... | 'none'
    n_base: int
    n_variant: int
    paired: bool
    interval: str = "t"  # 't' (Student / Welch) | 'bootstrap' (percentile) | 'none'
    p_min: float = 0.0  # the smallest p the test can give at these sample sizes (permutation tests)
    identical: bool = False  # paired, and every per-seed difference is exactly 0 (e.g. mask -inf vs -1e9)

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


# ---------------------------------------------------------------- resampling (tiny samples)
def _mean(x: np.ndarray, axis: int = -1) -> np.ndarray:
    return np.mean(x, axis=axis)


def _mean_diff(a: np.ndarray, b: np.ndarray, axis: int = -1) -> np.ndarray:
    return np.mean(a, axis=axis) - np.mean(b, axis=axis)


def bootstrap_interval(samples: tuple[np.ndarray, ...], confidence: float = CONFIDENCE
                       ) -> tuple[float, float]:
    """Percentile interval of the mean (one sample) or of the difference of means (two, resampled apart)."""
    statistic = _mean if len(samples) == 1 else _mean_diff
    res = stats.bootstrap(samples, statistic, n_resamples=RESAMPLES, vectorized=True, method="percentile",
                          confidence_level=confidence, rng=RESAMPLE_SEED)
    return float(res.confidence_interval.low), float(res.confidence_interval.high)


def permutation_p(samples: tuple[np.ndarray, ...]) -> tuple[float, float, bool]:
    """(two-sided p, smallest attainable p, exact) of a permutation test of a zero mean (one sample: sign
    flips of the differences) or of equal means (two independent samples: relabelings)."""
    one = len(samples) == 1
    # sign patterns of the differences, or ways to relabel the pooled values into the two groups
    count = 2 ** len(samples[0]) if one else math.comb(len(samples[0]) + len(samples[1]), len(samples[0]))
    res = stats.permutation_test(samples, _mean if one else _mean_diff, vectorized=True,
                                 permutation_type="samples" if one else "independent",
                                 n_resamples=RESAMPLES, alternative="two-sided", rng=RESAMPLE_SEED)
    exact = count <= RESAMPLES  # scipy enumerates every permutation then
    p_min = min(1.0, 2.0 / count) if exact else 2.0 / (RESAMPLES + 1)
    return float(res.pvalue), p_min, exact


def _resampled(diff: float, samples: tuple[np.ndarray, ...], n_base: int, n_variant: int, paired: bool,
               confidence: float) -> Effect:
    lo, hi = bootstrap_interval(samples, confidence)
    p, p_min, exact = permutation_p(samples)
    how = "sign flips" if paired else "relabelings"
    test = f"{'exact ' if exact else ''}permutation ({how})"
    return Effect(diff, lo, hi, p, test, n_base, n_variant, paired, "bootstrap", p_min)


# ---------------------------------------------------------------- effects
def compare_differences(differences: Sequence[float], confidence: float = CONFIDENCE) -> Effect:
    """The mean of paired differences (variant - baseline per seed or per matched cell) and its test."""
    d = _finite(differences)
    n = len(d)
    if n == 0:
        return Effect(math.nan, math.nan, math.nan, math.nan, "none", 0, 0, True, "none")
    diff = float(np.mean(d))
    if n == 1:
        return Effect(diff, math.nan, math.nan, math.nan, "none", 1, 1, True, "none")
    sd = float(np.std(d, ddof=1))
    if n <= TINY or sd == 0.0:  # tiny, or identical differences (t undefined): resample
        e = _resampled(diff, (d,), n, n, True, confidence)
        return replace(e, identical=bool(np.all(d == 0.0)))
    half = float(stats.t.ppf(0.5 + confidence / 2, n - 1) * sd / math.sqrt(n))
    p = float(stats.ttest_1samp(d, 0.0).pvalue)
    return Effect(diff, diff - half, diff + half, p, "paired t-test", n, n, True)


def compare(base: Mapping[int, float], variant: Mapping[int, float],
            confidence: float = CONFIDENCE) -> Effect:
    """Effect of ``variant`` against ``base``; both map seed -> value (non-finite values are dropped)."""
    b = {s: float(v) for s, v in base.items() if math.isfinite(float(v))}
    v = {s: float(x) for s, x in variant.items() if math.isfinite(float(x))}
    nb, nv = len(b), len(v)
    if nb == 0 or nv == 0:
        return Effect(math.nan, math.nan, math.nan, math.nan, "none", nb, nv, False, "none")
    # Paired by seed whenever one side's seeds are all among the other's (an adaptive study gives the
    # baseline every seed any comparison needed): the controlled comparison is on the seeds both ran, and
    # the baseline's extra seeds stay out of it rather than unpairing it. A single shared seed is paired too:
    # its difference alone (no interval), the same number the adaptive summary shows for it.
    common = sorted(set(b) & set(v))
    if common and len(common) == min(nb, nv):
        xb, xv = np.array([b[s] for s in common]), np.array([v[s] for s in common])
        e = compare_differences(xv - xb, confidence)
        return replace(e, diff=float(xv.mean() - xb.mean()), n_base=len(common), n_variant=len(common))
    xb = np.array([b[s] for s in sorted(b)])
    xv = np.array([v[s] for s in sorted(v)])
    diff = float(xv.mean() - xb.mean())
    if min(nb, nv) == 1:
        return Effect(diff, math.nan, math.nan, math.nan, "none", nb, nv, False, "none")
    vb, vv = float(np.var(xb, ddof=1)) / nb, float(np.var(xv, ddof=1)) / nv
    se = math.sqrt(vb + vv)
    if min(nb, nv) <= TINY or se == 0.0:
        return _resampled(diff, (xv, xb), nb, nv, False, confidence)
    df = (vb + vv) ** 2 / (vb**2 / (nb - 1) + vv**2 / (nv - 1))
    half = float(stats.t.ppf(0.5 + confidence / 2, df) * se)
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
            alpha: float = ALPHA, noun: str = "seed", reference: str | None = "the baseline") -> str:
    """One plain-language line of the verdict ``ablate.stats.verdict.fixed_reading`` decides, e.g.
    'post_norm: -1.20 BLEU [-1.90, -0.50], significant at 5% (...)'.

    ``noun`` names an observation ('seed', or 'pair' for matched factorial cells); ``reference`` is what a
    significant effect is better or worse than (None: no direction, e.g. an interaction).
    """
    said = fixed_reading(effect.diff, effect.p, effect.p_min, effect.identical,
                         higher_is_better if reference else None, alpha)
    if said == Fixed.NO_RUNS:
        return f"{label}: no finished runs to compare"
    d = fmt(effect.diff, decimals, signed=True)
    if said == Fixed.IDENTICAL:
        same = f"identical to {reference}" if reference else "exactly 0"
        every = f"both {noun}s" if effect.n_min == 2 else f"all {effect.n_min} {noun}s"
        return f"{label}: {same} in {every}: no effect at all on this metric"
    if said == Fixed.TOO_FEW:
        return (f"{label}: {d} {unit}; too few seeds to test (one run on a side), "
                f"repeat with >= {TINY + 1} seeds to conclude")
    ci = fmt_interval(effect.lo, effect.hi, decimals)
    boot = effect.interval == "bootstrap"
    shown = f"{d} {unit} {ci}" + (" (bootstrap interval)" if boot else "")
    n = effect.n_min
    many = f"{n} {noun}{'s' if n != 1 else ''}"
    if said in (Fixed.BETTER, Fixed.WORSE, Fixed.SIGNIFICANT):
        direction = f": {said.value} than {reference}" if reference else ""
        return f"{label}: {shown}, significant at 5% ({effect.test}, p={fmt_p(effect.p)}){direction}"
    if said == Fixed.NOT_TESTABLE:
        need = needed_for_significance(effect, alpha)
        # Not "no detectable effect": a -30 BLEU gap over 3 seeds would read as "no effect" to a skimmer.
        return (f"{label}: {d} {unit}, not testable with {many} ({'bootstrap interval ' * boot}{ci}, "
                f"{effect.test} p={fmt_p(effect.p)}; p < 0.05 is out of reach with {many}, the smallest "
                f"possible p is {fmt_p(effect.p_min)}: use >= {need} {noun}s)")
    return f"{label}: {shown}, no detectable effect with {many} ({effect.test}, p={fmt_p(effect.p)})"


UNTESTABLE_CAPTION = ("; grey, hollow and dotted: not testable, its exact test cannot reach p < 0.05 at "
                      "these seeds, so its interval decides nothing (the smallest p it can give is written "
                      "on it)")


def untestable_note(effect: Effect) -> str | None:
    """'not testable: p ≥ 0.25 with 3 seeds' where the verdict is "not testable" (fixed_reading: its test
    cannot reach p < ALPHA at these sample sizes), else None: the figures say it as the text does."""
    if fixed_reading(effect.diff, effect.p, effect.p_min, effect.identical, None) != Fixed.NOT_TESTABLE:
        return None
    return f"not testable: p ≥ {effect.p_min:.2g} with {effect.n_min} seeds"


def needed_for_significance(effect: Effect, alpha: float = ALPHA) -> int:
    """How many observations the report's tests need before p < alpha is possible at all."""
    if effect.n_min <= TINY:
        return TINY + 1  # from there on a t-test
    n = effect.n_min  # identical paired differences (t undefined): sign flips, smallest p = 2 / 2**n
    while 2.0 / 2**n >= alpha:
        n += 1
    return n


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


def fmt_interval(lo: float, hi: float, decimals: int) -> str:
    """'[-4.09, -1.05]', both ends signed; '—' where the interval is undefined (NaN: too few seeds)."""
    if math.isnan(lo) or math.isnan(hi):
        return "—"
    return f"[{fmt(lo, decimals, signed=True)}, {fmt(hi, decimals, signed=True)}]"


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
