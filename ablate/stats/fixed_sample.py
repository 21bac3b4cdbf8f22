"""Effects of a variant against its baseline at fixed seeds: seed means with Student-t intervals, the paired
and Welch t-tests, and for tiny samples a bootstrap percentile interval with an exact permutation test.

Rules (every report repeats them in its method note, ``ablate.report.compute.statistics.METHOD_NOTE``):

* A variant's value is the mean over its seeds with a 95% Student-t interval
  ``mean +- t(0.975, n-1) * s / sqrt(n)`` (``scipy.stats.t``); one seed gives the mean only.
* An effect is ``mean(variant) - mean(baseline)``. When one side's seeds are all among the other's, the
  comparison is paired by seed on the seeds both ran (a shared seed means the same data order and the same
  initial weights in every shared parameter, so pairing removes that noise); otherwise the groups are
  independent. A full-factorial main effect or interaction is a mean of per-pair differences
  (``compare_differences``).
* With >= 4 observations (pairs, or in the smaller group): paired t-test (Student 1908;
  ``scipy.stats.ttest_1samp`` on the per-seed differences, t-interval) or Welch's t-test (Welch 1947;
  ``scipy.stats.ttest_ind(equal_var=False)``, Welch-Satterthwaite interval).
* With 2 or 3 observations (tiny samples), or when every observation is the same so that t is undefined:
  a bootstrap percentile interval (Efron 1979; ``scipy.stats.bootstrap(method='percentile')``, 9,999
  resamples from a fixed seed, so reports stay deterministic; paired: the per-seed differences are
  resampled, independent: each group is resampled) and a permutation p-value
  (``scipy.stats.permutation_test``: sign flips of the differences when paired, relabelings of the pooled
  values otherwise), exact because 2-3 seeds give few permutations. With 2-3 seeds on each side such a test
  cannot reach p < 0.05 (2 paired seeds have 4 sign patterns, so p >= 0.5; 3 have 8, p >= 0.25; 3 + 3
  independent runs, 20 relabelings, p >= 0.1), and a constant difference from 2 seeds is never
  "significant" (a t-test would give p = 0 there, its standard error being 0).
* With 1 observation in either group: the difference only, no interval, no p-value.

Which verdict an effect gives is decided in ``ablate.stats.verdict`` (``fixed_reading``); the family's
correction is ``ablate.stats.multiplicity``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

import numpy as np
from scipy import stats

from ablate.stats.verdict import ALPHA, SIGN_FLIP_PAIRS

CONFIDENCE = 0.95
TINY = SIGN_FLIP_PAIRS  # at most this many observations: bootstrap interval and permutation test, no t-test
RESAMPLES = 9999  # bootstrap resamples; a permutation test is exact up to this many permutations
RESAMPLE_SEED = 0  # fixed: the same runs give the same intervals


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


def needed_for_significance(effect: Effect, alpha: float = ALPHA) -> int:
    """How many observations the report's tests need before p < alpha is possible at all."""
    if effect.n_min <= TINY:
        return TINY + 1  # from there on a t-test
    n = effect.n_min  # identical paired differences (t undefined): sign flips, smallest p = 2 / 2**n
    while 2.0 / 2**n >= alpha:
        n += 1
    return n
