"""The lack-of-fit test and the rung-level variance (ablate/stats/ladder_fit.py), and the ladder curves that
carry them (ablate/stats/ladder_law.py)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from ablate.stats import ladder_law
from ablate.stats.ladder_fit import lack_of_fit, rung_variance, variance_df


def test_lack_of_fit_is_the_textbook_f_test() -> None:
    # three rungs of two seeds, a constant fit (p = 1): SS_lof = 2 * (1 + 0 + 1) = 4 on 2 df,
    # SS_pe = 3 * 0.5 = 1.5 on 3 df: F = 2 / 0.5 = 4
    values = [(0.5, 1.5), (1.5, 2.5), (2.5, 3.5)]
    lof = lack_of_fit(values, [2.0, 2.0, 2.0], params=1)
    assert (lof.df1, lof.df2) == (2, 3) and lof.f == pytest.approx(4.0)
    assert lof.p == pytest.approx(0.1424, abs=1e-3) and not lof.rejects(0.05)
    assert not lack_of_fit(values[:2], [1.0, 2.0], params=2).testable  # no df over the rungs


def test_the_rung_variance_is_recovered_on_average_and_zero_without_scatter() -> None:
    rng = np.random.default_rng(0)
    x = np.linspace(0, 1.8, 6)
    design = np.stack([np.ones_like(x), x], axis=1)
    w = np.full(6, 6.0)
    seed_var = np.full(6, 0.01 ** 2 / 6)
    found, none = [], []
    for _ in range(2000):
        noise = rng.normal(0, 0.01 / math.sqrt(6), 6)
        found.append(rung_variance(design, 0.1 * x + rng.normal(0, 0.02, 6) + noise, w, seed_var))
        none.append(rung_variance(design, 0.1 * x + noise, w, seed_var))
    # truncated at 0, so biased upwards a little; within 15% of tau^2 = 4e-4
    assert np.mean(found) == pytest.approx(0.02 ** 2, rel=0.15)
    assert np.mean(np.asarray(none) == 0.0) > 0.5 and np.mean(none) < 0.1 * 0.02 ** 2


def test_variance_df_adds_the_rung_term_with_its_own_df() -> None:
    coef = np.array([0.5, 0.5])
    var, df = variance_df(coef, np.array([1.0, 1.0]), np.array([5.0, 5.0]), 0.0, 2.0)
    assert var[0] == pytest.approx(0.5) and df[0] == pytest.approx(10.0)
    var, df = variance_df(coef, np.array([1.0, 1.0]), np.array([5.0, 5.0]), 2.0, 2.0)
    # 0.5 from the seeds plus (0.25 + 0.25) * 2 = 1.0 from the rungs; Satterthwaite: 1.5^2 / (0.05 + 0.5)
    assert var[0] == pytest.approx(1.5) and df[0] == pytest.approx(1.5 ** 2 / (2 * 0.25 ** 2 / 5 + 1.0 / 2))


def test_a_power_law_whose_rungs_scatter_widens_its_intervals() -> None:
    """A curve through rungs that scatter by 0.03 about it (seeds sd 0.005) rejects its lack of fit and
    carries the scatter: the exponent's interval is several times wider than the seeds alone give."""
    compute = np.geomspace(1e10, 1e12, 5)
    true = 3.0 + 1.2 * (compute / 1e11) ** -0.3
    rng = np.random.default_rng(3)
    shift = np.array([0.03, -0.03, 0.02, -0.03, 0.03])
    z = rng.standard_normal((5, 6))
    clean = [ladder_law.Rung(float(c), tuple(t + 0.005 * zz))
             for c, t, zz in zip(compute, true, z, strict=True)]
    noisy = [ladder_law.Rung(float(c), tuple(t + s + 0.005 * zz))
             for c, t, s, zz in zip(compute, true, shift, z, strict=True)]
    a, b = ladder_law.fit(clean), ladder_law.fit(noisy)
    assert a is not None and b is not None and a.form == b.form == "power_law"
    assert not a.lack_of_fit.rejects(0.05) and b.lack_of_fit.rejects(0.05)
    assert b.tau2 > 0.02 ** 2 and b.df == 2  # K - p: 5 rungs, 3 parameters
    wa, wb = (f.intervals["alpha"][1] - f.intervals["alpha"][0] for f in (a, b))
    assert wb > 3 * wa
