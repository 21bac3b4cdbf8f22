"""The fits of a ladder (ablate/stats/ladder_law.py): known exponents recovered from synthetic ladders, and
intervals at their nominal coverage by simulation."""

from __future__ import annotations

import math

import numpy as np
import pytest

from ablate.stats.ladder_law import Rung, fit, seed_draws

E, A, ALPHA = 2.0, 1.5, 0.3
C0 = 1e11


def truth(c: np.ndarray | float) -> np.ndarray:
    return E + A * (np.asarray(c, dtype=float) / C0) ** -ALPHA


def ladder(rng: np.random.Generator, computes: np.ndarray, seeds: int, sd: float) -> list[Rung]:
    return [Rung(float(c), tuple(float(v) for v in truth(c) + sd * rng.standard_normal(seeds)))
            for c in computes]


def test_a_saturating_power_law_recovers_its_exponent_and_floor() -> None:
    rng = np.random.default_rng(0)
    found = fit(ladder(rng, np.geomspace(1e9, 1e13, 6), 6, 0.002))
    assert found is not None and found.form == "power_law" and not found.note
    assert found.params["alpha"] == pytest.approx(ALPHA, abs=0.01)
    assert found.params["E"] == pytest.approx(E, abs=0.02)
    # A is the reducible part at the fit's own C0 (the rungs' geometric mean): compare the curves
    assert found.predict(3e12) == pytest.approx(float(truth(3e12)), abs=0.005)
    lo, hi = found.intervals["alpha"]
    assert lo < ALPHA < hi and hi - lo < 0.02


def test_fewer_than_four_rungs_are_fitted_log_linear() -> None:
    rng = np.random.default_rng(1)
    rungs = [Rung(c, tuple(1.0 - 0.2 * math.log10(c / 1e10) + 0.01 * rng.standard_normal(4)))
             for c in (1e10, 1e11, 1e12)]
    found = fit(rungs)
    assert found is not None and found.form == "log_linear"
    assert found.params["b"] == pytest.approx(-0.2, abs=0.02)


def test_a_ladder_that_does_not_saturate_says_so_and_is_fitted_log_linear() -> None:
    """A metric that falls faster per decade at larger compute has no saturating power law: the exponent
    runs to its lower bound, and the fit is log-linear with the reason."""
    c = np.geomspace(1e9, 1e12, 4)
    rungs = [Rung(float(x), (3.0 - 0.1 * k * k, 3.0 - 0.1 * k * k + 0.01)) for k, x in enumerate(c)]
    found = fit(rungs)
    assert found is not None and found.form == "log_linear" and "lower bound" in found.note


def test_one_rung_is_no_fit() -> None:
    assert fit([Rung(1e10, (1.0, 1.1))]) is None
    assert fit([Rung(1e10, (1.0, 1.1)), Rung(1e11, ())]) is None


def _coverage(sims: int, replicates: int) -> dict[str, float]:
    rng = np.random.default_rng(7)
    computes = np.geomspace(1e10, 1e12, 5)
    hits = {"alpha": 0, "E": 0, "curve": 0}
    at = 3e11
    for _ in range(sims):
        rungs = ladder(rng, computes, 5, 0.03)
        draws = seed_draws([r.n for r in rungs], replicates, seed=int(rng.integers(1 << 31)))
        found = fit(rungs, draws)
        assert found is not None and found.form == "power_law"
        hits["alpha"] += found.intervals["alpha"][0] <= ALPHA <= found.intervals["alpha"][1]
        hits["E"] += found.intervals["E"][0] <= E <= found.intervals["E"][1]
        lo, hi = found.band([at])
        hits["curve"] += bool(lo[0] <= float(truth(at)) <= hi[0])
    return {k: v / sims for k, v in hits.items()}


def test_intervals_cover_the_truth_at_their_nominal_level() -> None:
    """95% intervals from resampling 5 seeds within each of 5 rungs: over 120 simulated ladders, each
    covers the true exponent, floor and curve in 0.95 of them, within three binomial standard errors."""
    sims = 120
    coverage = _coverage(sims, replicates=500)
    tolerance = 3 * math.sqrt(0.95 * 0.05 / sims)
    for name, rate in coverage.items():
        assert abs(rate - 0.95) <= tolerance, (name, rate)


@pytest.mark.soak  # the close coverage check (the nominal one stays in the default suite)
def test_intervals_cover_the_truth_at_their_nominal_level_closely() -> None:
    sims = 600
    coverage = _coverage(sims, replicates=1000)
    tolerance = 3 * math.sqrt(0.95 * 0.05 / sims)
    for name, rate in coverage.items():
        assert abs(rate - 0.95) <= tolerance, (name, rate)
