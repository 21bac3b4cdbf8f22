"""A variant's metric against training compute: the fit a ladder's report draws and extrapolates.

The data are one variant's cells at each rung of a ladder: the rung's training compute ``C`` (FLOPs,
ablate/engine/compute.py) and the metric of each seed there. The fit is

* with 4 or more rungs, the saturating power law of the scaling-law literature (Kaplan et al. 2020,
  Hoffmann et al. 2022): ``L(C) = E + A (C / C0)^(-alpha)``, ``alpha > 0``: ``E`` the level the metric
  approaches with unbounded compute, ``A`` the reducible part at the reference compute ``C0`` (the
  geometric mean of the rungs'), ``alpha`` the exponent (``A < 0`` for a metric that grows towards ``E``,
  such as BLEU);
* with fewer rungs (three points cannot tell a power law from a line), log-linear:
  ``L(C) = a + b log10(C / C0)``.

Both are fitted by least squares to the rung means weighted by their seeds (every seed counts once). The
power law is linear in ``(E, A)`` once ``alpha`` is fixed, so ``alpha`` is profiled: the residual sum of
squares on a grid of ``ALPHA_GRID`` exponents (log-spaced over ``ALPHA_RANGE``), refined by a parabola
through the best grid point and its neighbours. A best exponent at the grid's lower edge means the rungs
show no saturation at all (the metric still falls as fast per decade at the largest rung, or faster): the
power law degenerates into a line in log-compute with an unbounded ``E``, so the fit is log-linear
instead and says why (``note``); at the upper edge the curve saturates within the ladder and the fit says
its exponent is only bounded (``at_edge``).

Intervals come from resampling seeds within each rung (``BOOTSTRAP`` replicates from a fixed seed: the
report is deterministic): each replicate draws every rung's seeds with replacement, with the deviations
from the rung mean scaled by ``sqrt(n / (n - 1))`` so a replicate's spread is the sample sd's, refits, and
gives a percentile interval, widened about the estimate by ``t(df) / z`` with ``df`` the seeds' degrees of
freedom within rungs (``sum(n_r - 1)``): the percentile interval of a mean of few seeds is too narrow by
about that ratio. A simulation in tests/stats/test_ladder_law.py checks that the intervals cover the true
exponent and the true curve at their nominal level. Seeds are drawn jointly for every variant (a seed's
cells share their data order and initialisation), so that the gaps between fits keep their pairing.

Rungs scatter about any smooth curve by more than their seeds say (reports/ladder-kdocs's power laws left a
lack-of-fit chi-square of 20-116 while their exponents carried +-0.01 intervals). So every fit reports its
lack-of-fit F test and carries the rung-level variance ``tau^2`` estimated from its residuals
(ablate/stats/ladder_fit.py; for the power law, on its Gauss-Newton design at the fitted exponent): each
replicate adds a rung effect ``N(0, tau^2)`` to every rung mean, and where ``tau^2 > 0`` the widening's
degrees of freedom are the rungs' left over the fit's parameters (``K - p``), not the seeds'.

Pure numpy/scipy: no verdict is decided here (ablate/stats/transfer.py decides how a gap moves).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal

import numpy as np
from scipy import stats

from ablate.stats.ladder_fit import LackOfFit, lack_of_fit, rung_variance

POWER_LAW_RUNGS = 4  # the fewest rungs a saturating power law (3 parameters) is fitted to
ALPHA_RANGE = (1e-3, 3.0)
ALPHA_GRID = 400
BOOTSTRAP = 2000
BOOTSTRAP_SEED = 0
LEVEL = 0.95

Form = Literal["power_law", "log_linear"]


@dataclass(frozen=True)
class Rung:
    """One variant's cells at one rung: its training compute and each seed's metric (seed order)."""

    compute: float
    values: tuple[float, ...]
    seeds: tuple[int, ...] = ()

    @property
    def n(self) -> int:
        return len(self.values)

    @property
    def mean(self) -> float:
        return float(np.mean(self.values)) if self.values else math.nan


@dataclass(frozen=True)
class Fit:
    """A fitted curve and its parameters' percentile intervals (from the seed resampling)."""

    form: Form
    params: dict[str, float]  # power law: E, A, alpha; log-linear: a, b (per decade of compute)
    intervals: dict[str, tuple[float, float]]
    c0: float  # the reference compute (geometric mean of the rungs')
    rungs: int  # rungs the fit used
    seeds: int  # seeds the fit used, over every rung
    df: int  # degrees of freedom of the seeds within rungs
    level: float = LEVEL
    at_edge: bool = False  # the power law's best exponent at the upper edge of ALPHA_RANGE
    note: str = ""  # why the form is not the one the rungs' count asks for
    replicates: np.ndarray = field(default_factory=lambda: np.zeros((0, 3)), repr=False, compare=False)
    lack_of_fit: LackOfFit = LackOfFit(math.nan, 0, 0, math.nan)
    tau2: float = 0.0  # the rung-level variance every interval carries

    def predict(self, compute: float | np.ndarray) -> np.ndarray:
        """The fitted metric at ``compute`` (FLOPs)."""
        return curve(self.form, self.params, self.c0, compute)

    def band(self, compute: Sequence[float] | np.ndarray, level: float | None = None
             ) -> tuple[np.ndarray, np.ndarray]:
        """The percentile interval of the fitted metric at each ``compute`` over the replicates (widened
        by t/z as the parameters' intervals are)."""
        c = np.asarray(compute, dtype=float)
        est = self.predict(c)
        if not len(self.replicates):
            return np.full_like(est, math.nan), np.full_like(est, math.nan)
        reps = np.stack([curve(self.form, _params(self.form, row), self.c0, c) for row in self.replicates])
        return widened(est, reps, self.df, level or self.level)

    def as_dict(self) -> dict[str, object]:
        """What report.json keeps of the fit."""
        return {"form": self.form, "params": dict(self.params),
                "intervals": {k: list(v) for k, v in self.intervals.items()}, "c0": self.c0,
                "rungs": self.rungs, "seeds": self.seeds, "df": self.df, "level": self.level,
                "at_edge": self.at_edge, "note": self.note, "formula": formula(self.form),
                "lack_of_fit": self.lack_of_fit.as_dict(), "rung_variance": self.tau2}


def formula(form: Form) -> str:
    return ("L(C) = E + A (C / C0)^(-alpha)" if form == "power_law" else "L(C) = a + b log10(C / C0)")


def curve(form: Form, params: dict[str, float], c0: float, compute: float | np.ndarray) -> np.ndarray:
    c = np.asarray(compute, dtype=float)
    if form == "power_law":
        return params["E"] + params["A"] * (c / c0) ** (-params["alpha"])
    return params["a"] + params["b"] * np.log10(c / c0)


def _params(form: Form, row: np.ndarray) -> dict[str, float]:
    keys = ("E", "A", "alpha") if form == "power_law" else ("a", "b")
    return {k: float(v) for k, v in zip(keys, row, strict=False)}


def widened(est: np.ndarray | float, reps: np.ndarray, df: int, level: float
            ) -> tuple[np.ndarray, np.ndarray]:
    """The percentile interval of ``reps`` (replicates along axis 0), widened about ``est`` by
    ``t(df) / z`` (module doc); NaN where the replicates are not finite."""
    tail = (1.0 - level) / 2.0
    with np.errstate(invalid="ignore"):
        lo = np.nanquantile(reps, tail, axis=0)
        hi = np.nanquantile(reps, 1.0 - tail, axis=0)
    ratio = float(stats.t.ppf(1.0 - tail, df) / stats.norm.ppf(1.0 - tail)) if df >= 1 else math.inf
    e = np.asarray(est, dtype=float)
    return e - (e - lo) * ratio, e + (hi - e) * ratio


# ---------------------------------------------------------------- the fit on rung means
def _wls_line(x: np.ndarray, y: np.ndarray, w: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Weighted least squares of y = p + q x for many replicates at once: x (K,) or (R, K), y (R, K),
    w (K,); returns (p, q, rss), each (R,)."""
    sw = w.sum()
    xm = (w * x).sum(axis=-1) / sw
    ym = (y * w).sum(axis=-1) / sw
    dx = x - (xm[..., None] if np.ndim(xm) else xm)
    dy = y - ym[:, None]
    sxx = (w * dx * dx).sum(axis=-1)
    q = np.where(sxx > 0, (w * dx * dy).sum(axis=-1) / np.where(sxx > 0, sxx, 1.0), 0.0)
    p = ym - q * xm
    resid = y - p[:, None] - q[:, None] * x
    return p, q, (w * resid * resid).sum(axis=-1)


def _grid_rss(basis: np.ndarray, y: np.ndarray, w: np.ndarray) -> np.ndarray:
    """The weighted residual sum of squares of y = p + q basis_g for every replicate (rows of ``y``, (R, K))
    and every grid point (rows of ``basis``, (G, K)) at once: (R, G)."""
    sw = w.sum()
    bm = (basis * w).sum(axis=1) / sw  # (G,)
    db = basis - bm[:, None]  # (G, K)
    sbb = (w * db * db).sum(axis=1)  # (G,)
    ym = (y * w).sum(axis=1) / sw  # (R,)
    dy = y - ym[:, None]  # (R, K)
    syy = (w * dy * dy).sum(axis=1)  # (R,)
    sby = (dy * w) @ db.T  # (R, G)
    with np.errstate(divide="ignore", invalid="ignore"):
        explained = np.where(sbb > 0, sby * sby / np.where(sbb > 0, sbb, 1.0), 0.0)
    return syy[:, None] - explained


def _power_law(logc: np.ndarray, means: np.ndarray, w: np.ndarray) -> tuple[np.ndarray, int]:
    """(R, 3) rows of (E, A, alpha) fitting each row of ``means`` (R, K) at ln(C/C0) ``logc`` (K,); and
    where the first row's exponent sits: -1 at the grid's lower edge, +1 at its upper edge, else 0."""
    alphas = np.geomspace(*ALPHA_RANGE, ALPHA_GRID)
    basis = np.exp(-alphas[:, None] * logc[None, :])  # (G, K): (C/C0)^-alpha
    rss = _grid_rss(basis, means, w)  # (R, G)
    best = rss.argmin(axis=1)
    # A parabola through the best grid point and its neighbours, in log(alpha).
    la = np.log(alphas)
    inner = np.clip(best, 1, len(alphas) - 2)
    r0, r1, r2 = (rss[np.arange(len(means)), inner + k] for k in (-1, 0, 1))
    denom = r0 - 2.0 * r1 + r2
    shift = np.where(denom > 0, 0.5 * (r0 - r2) / np.where(denom > 0, denom, 1.0), 0.0)
    step = la[1] - la[0]
    edge = (best == 0) | (best == len(alphas) - 1)
    log_alpha = np.where(edge, la[best], la[inner] + np.clip(shift, -1.0, 1.0) * step)
    alpha = np.exp(log_alpha)
    x = np.exp(-alpha[:, None] * logc[None, :])  # (R, K)
    e, a, _ = _wls_line(x, means, w)
    where = 0 if not edge[0] else (-1 if best[0] == 0 else 1)
    return np.stack([e, a, alpha], axis=1), where


def _log_linear(log10c: np.ndarray, means: np.ndarray, w: np.ndarray) -> np.ndarray:
    a, b, _ = _wls_line(log10c, means, w)
    return np.stack([a, b], axis=1)


# ---------------------------------------------------------------- resampling seeds within rungs
def resampled_means(rungs: Sequence[Rung], draws: Sequence[np.ndarray]) -> np.ndarray:
    """(R, K) rung means of each replicate: ``draws[k]`` (R, n_k) indices into rung k's seeds, the
    deviations scaled by sqrt(n / (n - 1)) (module doc)."""
    out = []
    for rung, idx in zip(rungs, draws, strict=True):
        v = np.asarray(rung.values, dtype=float)
        scale = math.sqrt(rung.n / (rung.n - 1)) if rung.n > 1 else 0.0
        out.append(v.mean() + scale * (v[idx] - v.mean()).mean(axis=1))
    return np.stack(out, axis=1)


def seed_draws(counts: Sequence[int], replicates: int = BOOTSTRAP, seed: int = BOOTSTRAP_SEED
               ) -> list[np.ndarray]:
    """Indices resampling each rung's seeds with replacement: one (replicates, n) array per rung. The same
    draws serve every variant of a ladder (seeds are paired across variants within a rung)."""
    rng = np.random.default_rng(seed)
    return [rng.integers(0, n, size=(replicates, n)) if n > 0 else np.zeros((replicates, 0), int)
            for n in counts]


def fit(rungs: Sequence[Rung], draws: Sequence[np.ndarray] | None = None, level: float = LEVEL,
        form: Form | None = None) -> Fit | None:
    """The fit of one variant's rungs (module doc); None with fewer than 2 rungs holding a seed. ``draws``:
    the ladder's shared seed draws (``seed_draws`` over these rungs' seed counts by default)."""
    kept = [i for i, r in enumerate(rungs) if r.n > 0 and math.isfinite(r.compute) and r.compute > 0]
    used = [rungs[i] for i in kept]
    if len(used) < 2:
        return None
    chosen: Form = form or ("power_law" if len(used) >= POWER_LAW_RUNGS else "log_linear")
    c = np.asarray([r.compute for r in used])
    c0 = float(np.exp(np.log(c).mean()))
    w = np.asarray([r.n for r in used], dtype=float)
    means = np.asarray([[r.mean for r in used]])
    if draws is None:
        draws = seed_draws([r.n for r in used])
    else:
        draws = [draws[i] for i in kept]
    reps = resampled_means(used, draws)
    df = int(sum(r.n - 1 for r in used))
    note = ""
    at_edge = False
    if chosen == "power_law":
        point, edge = _power_law(np.log(c / c0), means, w)
        if edge < 0:
            chosen, note = "log_linear", ("the power law's exponent ran to its lower bound (no saturation "
                                          "within the ladder): fitted log-linear instead")
        at_edge = edge > 0
    if chosen == "power_law":
        boot, _ = _power_law(np.log(c / c0), reps, w)
    else:
        point = _log_linear(np.log10(c / c0), means, w)
        boot = _log_linear(np.log10(c / c0), reps, w)
    params = _params(chosen, point[0])
    fitted = curve(chosen, params, c0, c)
    lof = lack_of_fit([r.values for r in used], list(fitted), len(params))
    seed_var = np.asarray([np.var(r.values, ddof=1) / r.n if r.n > 1 else 0.0 for r in used])
    tau2 = rung_variance(_design(chosen, params, c / c0), means[0], w, seed_var)
    if tau2 > 0:
        # every replicate's rungs also scatter about the curve (module doc); drawn apart from the seeds'
        shift = np.random.default_rng(BOOTSTRAP_SEED + 1).normal(0.0, math.sqrt(tau2), reps.shape)
        reps = reps + shift
        boot = (_power_law(np.log(c / c0), reps, w)[0] if chosen == "power_law"
                else _log_linear(np.log10(c / c0), reps, w))
        df = max(1, len(used) - len(params))
    lo, hi = widened(point[0], boot, max(df, 1), level)
    intervals = {k: (float(a), float(b)) for k, a, b in zip(params, lo, hi, strict=True)}
    return Fit(chosen, params, intervals, c0, len(used), int(w.sum()), df, level, at_edge, note, boot, lof,
               tau2)


def _design(form: Form, params: dict[str, float], ratio: np.ndarray) -> np.ndarray:
    """The fit's design at its parameters (K, p): log-linear's [1, log10 ratio]; the power law's Jacobian
    [1, ratio^-alpha, -A ratio^-alpha ln ratio] (Gauss-Newton's linearisation)."""
    if form == "log_linear":
        return np.stack([np.ones_like(ratio), np.log10(ratio)], axis=1)
    base = ratio ** (-params["alpha"])
    return np.stack([np.ones_like(ratio), base, -params["A"] * base * np.log(ratio)], axis=1)
