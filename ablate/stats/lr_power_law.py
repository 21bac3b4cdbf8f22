"""How a tuned setting scales with model size across a ladder's rungs: the best learning rate's power law in
parameters, ``lr*(N) = c N^b``, fitted as a line in log-log (least squares on one best rate a rung), with a
t interval on the exponent and a prediction interval at a new size, and the grid a larger rung would be
tuned on, centred on that prediction.

The best rate of a grid search is known only to the grid's resolution, and a rung whose best sat at an edge
of its grid knows only a bound: such a rung is flagged by the study (ablate/study/ladder_tuning.py) and
left out of the fit here when the caller says so. With 2 rungs the line goes through both points and has no
interval; the interval needs 3 or more (n - 2 degrees of freedom). The residual scatter of the rungs' best
rates about the line is what the interval carries: it includes the grid's resolution and the tuning noise,
both of which vary from rung to rung. Wen et al. 2025 tune every optimizer at every scale for this reason;
DeepSeek LLM (2024, section 3.1) fits the best rate as a power law in compute the same way.

Pure: numpy and scipy only.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from scipy import stats as sps


@dataclass(frozen=True)
class RateLaw:
    """``lr*(N) = exp(intercept) N^exponent``, fitted on ``n`` rungs; the exponent's interval at ``level``
    (None below 3 rungs) and the residual sd in natural-log units."""

    exponent: float
    intercept: float
    n: int
    level: float
    exponent_low: float | None
    exponent_high: float | None
    resid_sd: float | None
    _mean_log_n: float
    _sxx: float

    def predict(self, params: float) -> float:
        return math.exp(self.intercept + self.exponent * math.log(params))

    def interval(self, params: float) -> tuple[float, float] | None:
        """Where one more rung's best rate at ``params`` should fall (a prediction interval), or None below
        3 rungs."""
        if self.resid_sd is None:
            return None
        t = float(sps.t.ppf(0.5 + self.level / 2, self.n - 2))
        x = math.log(params)
        half = t * self.resid_sd * math.sqrt(1 + 1 / self.n + (x - self._mean_log_n) ** 2 / self._sxx)
        centre = self.intercept + self.exponent * x
        return math.exp(centre - half), math.exp(centre + half)


def fit_rate_law(params: Sequence[float], best: Sequence[float], level: float = 0.95) -> RateLaw | None:
    """The power law of the best rates ``best`` against the rungs' parameter counts ``params`` (one each, in
    any order), or None below 2 distinct sizes."""
    if len(params) != len(best):
        raise ValueError("one best rate per rung")
    x = np.log(np.asarray(params, dtype=float))
    y = np.log(np.asarray(best, dtype=float))
    n = len(x)
    if n < 2 or np.ptp(x) == 0:
        return None
    xm, ym = float(x.mean()), float(y.mean())
    sxx = float(((x - xm) ** 2).sum())
    slope = float(((x - xm) * (y - ym)).sum() / sxx)
    intercept = ym - slope * xm
    if n < 3:
        return RateLaw(slope, intercept, n, level, None, None, None, xm, sxx)
    resid = y - (intercept + slope * x)
    sd = math.sqrt(float((resid**2).sum()) / (n - 2))
    t = float(sps.t.ppf(0.5 + level / 2, n - 2))
    half = t * sd / math.sqrt(sxx)
    return RateLaw(slope, intercept, n, level, slope - half, slope + half, sd, xm, sxx)


def centred_grid(template: Sequence[float], centre: float) -> list[float]:
    """A grid with ``template``'s number of points and log spacing, moved so that its geometric middle is
    ``centre`` (a larger rung's grid around the rate the rungs below predict for it)."""
    if not template or any(v <= 0 for v in template):
        raise ValueError("a learning-rate grid is positive")
    logs = [math.log(v) for v in sorted(template)]
    middle = (logs[0] + logs[-1]) / 2
    shift = math.log(centre) - middle
    return [math.exp(v + shift) for v in logs]
