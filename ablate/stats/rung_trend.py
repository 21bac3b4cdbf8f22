"""Verdicts read from the measured rungs: a monotone trend test over the rungs, and the rung-by-rung rules
of "reverses" and "holds".

A fitted line's ends are not rungs: in simulated ladders with the committed ladder's rungs, seeds and
noise, a gap that shrinks towards 0 and never crosses read "reverses" from the line's ends in 37-99% of
ladders. So a ladder's trend words come from what was measured at its rungs (ablate/stats/transfer.py's
``decide`` puts them together):

* **reverses**: at least the two smallest and the two largest rungs are each decided (their per-rung
  verdicts, in the ladder's family), the two smallest with one sign and the two largest with the other
  (:func:`reverses`): never from fewer than four rungs;
* **holds**: every rung's gap minus the smallest rung's lies within ``+-margin``, each difference's Welch
  interval at ``1 - alpha / (K - 1)`` (Bonferroni over the K - 1 differences; :func:`holds`);
* **grows** / **shrinks** need the monotone trend test (:func:`monotone_trend`) to reject no trend, after
  Holm's correction over the ladder's comparisons.

The trend test is Jonckheere's (1954) for ordered alternatives on the seed-level differences, with the
rungs in order of compute: ``J = sum_{i<j} sum_{a in i, b in j} sign(y_b - y_a)``, scaled to [-1, 1] by
the number of cross-rung pairs (+1: every seed of every larger rung above every seed of every smaller one).
Its null distribution comes from resampling seeds (Efron & Tibshirani 1993, section 16.4, a bootstrap test
under the null): each rung's deviations from its own mean, drawn with replacement and scaled by
``sqrt(n / (n - 1))``, so every rung keeps its own spread while all share one level; and, since rungs also
scatter about any smooth trend, each replicate adds a rung effect ``u_r ~ N(0, tau^2)`` with ``tau^2`` the
rung-level variance estimated from the data (ablate/stats/ladder_fit.py). Where seeds explain the rungs
(``tau^2 = 0``) the test is the seed-level test; where rungs scatter, a trend must stand out against that
scatter. The p-value is two-sided: ``(1 + #{|J*| >= |J|}) / (1 + R)``.

Every rule's error rates, measured by simulation under the model and misspecified, are in docs/ladders.md
(scripts/ladder_error_rates.py); tests/stats/test_rung_trend.py asserts them on smaller runs.

Pure numpy/scipy.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from scipy import stats

TREND_REPLICATES = 2000
TREND_SEED = 0


@dataclass(frozen=True)
class Trend:
    """The monotone trend test of one comparison's gap over its rungs."""

    statistic: float  # Jonckheere's J over the cross-rung pairs, in [-1, 1]
    p: float  # two-sided, from the resampling (NaN: fewer than two rungs with two seeds)
    tau2: float  # the rung-level variance the null carried
    replicates: int

    @property
    def direction(self) -> int:
        """+1: the gap rises with compute; -1: it falls; 0: no order at all."""
        return 1 if self.statistic > 0 else -1 if self.statistic < 0 else 0

    def as_dict(self) -> dict[str, float]:
        return {"J": self.statistic, "p": self.p, "tau2": self.tau2, "replicates": self.replicates}


def _jonckheere(groups: Sequence[np.ndarray]) -> np.ndarray:
    """J (scaled) for each replicate: ``groups[k]`` (R, n_k) in order of compute."""
    total = np.zeros(groups[0].shape[0])
    pairs = 0
    for lo, hi in itertools.combinations(range(len(groups)), 2):
        a, b = groups[lo], groups[hi]
        total += np.sign(b[:, None, :] - a[:, :, None]).sum(axis=(1, 2))
        pairs += a.shape[1] * b.shape[1]
    return total / max(1, pairs)


def monotone_trend(rungs: Sequence[Sequence[float]], tau2: float = 0.0, replicates: int = TREND_REPLICATES,
                   seed: int = TREND_SEED) -> Trend:
    """The monotone trend test (module doc) of the seed-level values at each rung, in order of compute;
    rungs with fewer than two values stay out."""
    groups = [np.asarray(r, dtype=float) for r in rungs if len(r) >= 2]
    if len(groups) < 2:
        return Trend(math.nan, math.nan, tau2, 0)
    observed = float(_jonckheere([g[None, :] for g in groups])[0])
    rng = np.random.default_rng(seed)
    drawn = []
    for g in groups:
        dev = (g - g.mean()) * math.sqrt(len(g) / (len(g) - 1))
        idx = rng.integers(0, len(g), size=(replicates, len(g)))
        drawn.append(dev[idx])
    if tau2 > 0:
        shift = rng.normal(0.0, math.sqrt(tau2), size=(replicates, len(groups)))
        drawn = [d + shift[:, k:k + 1] for k, d in enumerate(drawn)]
    null = _jonckheere(drawn)
    p = (1.0 + float(np.sum(np.abs(null) >= abs(observed) - 1e-12))) / (1.0 + replicates)
    return Trend(observed, p, tau2, replicates)


def rung_signs(rungs: Sequence[Sequence[float]], alpha: float) -> list[int]:
    """Each rung's decided sign on its own seeds, for a comparison judged alone: a paired t test at
    ``alpha / K`` (Bonferroni over its K rungs); +1 / -1 where decided, else 0. A ladder's report passes
    its own per-rung verdicts (Holm over every comparison at every rung) instead."""
    level = alpha / max(1, len(rungs))
    out = []
    for r in rungs:
        v = np.asarray(r, dtype=float)
        if len(v) < 2:
            out.append(0)
            continue
        sd = float(v.std(ddof=1))
        if sd == 0:
            out.append(int(np.sign(v.mean())))
            continue
        t = float(v.mean()) / (sd / math.sqrt(len(v)))
        p = 2.0 * float(stats.t.sf(abs(t), len(v) - 1))
        out.append(int(np.sign(t)) if p < level else 0)
    return out


def reverses(signs: Sequence[int]) -> bool:
    """The two smallest rungs decided with one sign and the two largest with the other (module doc)."""
    return (len(signs) >= 4 and signs[0] != 0 and signs[0] == signs[1]
            and signs[-1] == signs[-2] == -signs[0])


def holds(rungs: Sequence[Sequence[float]], alpha: float, margin: float | None) -> tuple[bool, float]:
    """Whether every rung's gap minus the smallest rung's lies within ``+-margin`` (module doc), and the
    largest end of those intervals in absolute value (NaN without a margin or two rungs of two seeds)."""
    groups = [np.asarray(r, dtype=float) for r in rungs if len(r) >= 2]
    if margin is None or len(groups) < 2:
        return False, math.nan
    level = 1.0 - alpha / (len(groups) - 1)
    first = groups[0]
    widest = 0.0
    for g in groups[1:]:
        va, vb = first.var(ddof=1) / len(first), g.var(ddof=1) / len(g)
        se = math.sqrt(va + vb)
        denominator = va * va / (len(first) - 1) + vb * vb / (len(g) - 1)
        df = (va + vb) ** 2 / denominator if denominator > 0 else math.inf
        half = float(stats.t.ppf(1.0 - (1.0 - level) / 2.0, df)) * se if se > 0 else 0.0
        diff = float(g.mean() - first.mean())
        widest = max(widest, abs(diff - half), abs(diff + half))
    return widest <= margin, widest
