"""The noise a ladder really has: a lack-of-fit test for a curve through the rung means, and the rung-level
variance component every ladder interval carries.

Seeds measure the noise of a rung's mean; they say nothing of how far the rungs themselves scatter about
a smooth curve in compute (a rung changes shape, batch and data at once, and its learning rate suits it
more or less well). A fit that treats seed noise as its only error gives intervals that a ladder's own
residuals contradict (reports/ladder-kdocs's gap lines: lack-of-fit F(2, 20) = 11.6 for SwiGLU's, 254 for
RoPE's). So every fit of a ladder is checked and widened here:

* **The lack-of-fit test** (Draper & Smith, *Applied Regression Analysis*, section 2.1) of a model with
  ``p`` parameters fitted to the means of ``K`` rungs with ``n_r`` seeds each:
  ``F = [SS_lof / (K - p)] / [SS_pe / (N - K)]``, with ``SS_lof = sum_r n_r (mean_r - fit_r)^2`` and the
  pure error ``SS_pe = sum_r sum_i (y_ri - mean_r)^2`` (seeds within rungs), referred to
  ``F(K - p, N - K)``. Where it rejects, the curve does not describe the rungs and no trend read from it
  is a verdict.
* **The rung-level variance** ``tau^2``: the rung means are modelled as ``mean_r = f(x_r) + u_r + e_r``,
  ``u_r ~ N(0, tau^2)`` a random effect per rung and ``e_r`` the seed noise, ``Var e_r = s_r^2 / n_r`` from
  the rung's own seeds. For a fit linear in its parameters (weights ``W = diag(n_r)``, residual maker
  ``M = I - X (X'WX)^-1 X'W``) the weighted residual sum of squares has expectation
  ``sum_r (M'WM)_rr s_r^2 / n_r + tau^2 tr(M'WM)``: the moment estimator (DerSimonian & Laird 1986, in its
  meta-regression form, Raudenbush 2009) solves it for ``tau^2``, truncated at 0 where the seeds explain
  the scatter. Its degrees of freedom are ``K - p``: with four rungs and a line, two. Where seeds cannot
  separate it from curvature this is the residual variance about the fit, which is what an interval that
  must hold the next rung needs.

A fitted value ``c' m`` (``m`` the rung means) then has variance ``sum_r c_r^2 (s_r^2 / n_r + tau^2)``,
referred to t with Satterthwaite's degrees of freedom (each rung's seed term on ``n_r - 1``, the rung term on
``K - p``): :func:`variance_df`.

Pure numpy/scipy; decides nothing (ablate/stats/transfer.py and ablate/stats/rung_trend.py do).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from scipy import stats


@dataclass(frozen=True)
class LackOfFit:
    """The lack-of-fit F test of one fit over its rungs."""

    f: float  # NaN where it cannot be tested (no df left over the rungs or within them)
    df1: int  # K - p
    df2: int  # N - K
    p: float

    @property
    def testable(self) -> bool:
        return math.isfinite(self.p)

    def rejects(self, alpha: float) -> bool:
        return self.testable and self.p < alpha

    def as_dict(self) -> dict[str, float]:
        return {"F": self.f, "df1": self.df1, "df2": self.df2, "p": self.p}


def lack_of_fit(values: Sequence[Sequence[float]], fitted: Sequence[float], params: int) -> LackOfFit:
    """The lack-of-fit F test of a fit with ``params`` parameters: ``values`` each rung's seeds, ``fitted``
    the fit at each rung (module doc)."""
    groups = [np.asarray(v, dtype=float) for v in values]
    k, n = len(groups), sum(len(g) for g in groups)
    df1, df2 = k - params, n - k
    if df1 < 1 or df2 < 1:
        return LackOfFit(math.nan, df1, df2, math.nan)
    ss_lof = float(sum(len(g) * (g.mean() - f) ** 2 for g, f in zip(groups, fitted, strict=True)))
    ss_pe = float(sum(((g - g.mean()) ** 2).sum() for g in groups))
    if ss_pe <= 0:
        return LackOfFit(math.inf if ss_lof > 0 else math.nan, df1, df2, 0.0 if ss_lof > 0 else math.nan)
    f = (ss_lof / df1) / (ss_pe / df2)
    return LackOfFit(f, df1, df2, float(stats.f.sf(f, df1, df2)))


def rung_variance(design: np.ndarray, means: np.ndarray, weights: np.ndarray, seed_var: np.ndarray) -> float:
    """The moment estimator of ``tau^2`` (module doc) for the weighted least-squares fit of ``means`` (K,) on
    the ``design`` (K, p) with ``weights`` (K,), each mean's seed variance ``seed_var`` (K,); 0 where the
    fit leaves no degrees of freedom."""
    k, p = design.shape
    if k <= p:
        return 0.0
    w = np.diag(weights)
    hat = design @ np.linalg.solve(design.T @ w @ design, design.T @ w)  # (K, K)
    m = np.eye(k) - hat
    mwm = m.T @ w @ m
    resid = m @ means
    q = float(resid @ w @ resid)
    expected_seed = float(np.diag(mwm) @ seed_var)
    trace = float(np.trace(mwm))
    return max(0.0, (q - expected_seed) / trace) if trace > 0 else 0.0


def variance_df(coef: np.ndarray, seed_var: np.ndarray, seed_df: np.ndarray, tau2: float, tau_df: float,
                extra: Sequence[tuple[float, float]] = ()) -> tuple[np.ndarray, np.ndarray]:
    """The variance and Satterthwaite degrees of freedom of fitted values ``coef @ means``: ``coef`` (K,)
    or (G, K), each rung's seed variance of its mean (df ``seed_df``) and the rung variance ``tau2`` (df
    ``tau_df``) per rung; ``extra`` adds independent (variance, df) terms (a new rung's noise)."""
    c = np.atleast_2d(coef)
    seed_parts = c * c * seed_var[None, :]  # (G, K)
    rung_part = (c * c).sum(axis=1) * tau2  # (G,)
    var = seed_parts.sum(axis=1) + rung_part
    denominator = np.where(seed_df > 0, seed_parts ** 2 / np.maximum(seed_df, 1), 0.0).sum(axis=1)
    if tau2 > 0 and tau_df > 0:
        denominator = denominator + rung_part ** 2 / tau_df
    for v, d in extra:
        var = var + v
        denominator = denominator + (v * v / d if d > 0 else 0.0)
    with np.errstate(divide="ignore", invalid="ignore"):
        df = np.where(denominator > 0, var * var / np.where(denominator > 0, denominator, 1.0), np.inf)
    return var, df
