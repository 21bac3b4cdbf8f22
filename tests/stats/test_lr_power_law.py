"""The best learning rate's power law in parameters across a ladder's rungs (ablate/stats/lr_power_law.py):
exact on an exact law, an interval that covers the true exponent at about its level, and a grid centred on
a prediction."""

from __future__ import annotations

import math

import numpy as np
import pytest

from ablate.stats.lr_power_law import centred_grid, fit_rate_law


def test_an_exact_power_law_is_recovered_and_predicts_a_new_size() -> None:
    params = [1e3, 4e3, 2e4, 1e5]
    best = [0.5 * n**-0.35 for n in params]
    law = fit_rate_law(params, best)
    assert law is not None
    assert law.exponent == pytest.approx(-0.35) and math.exp(law.intercept) == pytest.approx(0.5)
    assert law.predict(1e6) == pytest.approx(0.5 * 1e6**-0.35)
    assert law.exponent_low == pytest.approx(-0.35) and law.exponent_high == pytest.approx(-0.35)


def test_two_rungs_give_a_line_without_an_interval_and_one_gives_none() -> None:
    law = fit_rate_law([1e3, 1e4], [1e-2, 5e-3])
    assert law is not None and law.exponent == pytest.approx(math.log10(0.5))
    assert law.exponent_low is None and law.interval(1e5) is None
    assert fit_rate_law([1e3], [1e-2]) is None and fit_rate_law([1e3, 1e3], [1e-2, 2e-2]) is None


def test_the_exponents_interval_covers_the_true_one_at_about_its_level() -> None:
    """5 rungs, best rates scattered by a grid-sized factor (log sd 0.2): the 90% interval covers the true
    exponent in 86-94% of 2,000 simulated ladders, and one more rung's best falls inside the prediction
    interval about as often."""
    rng = np.random.default_rng(0)
    params = np.geomspace(1e3, 3e5, 5)
    covered = predicted = 0
    trials = 2000
    for _ in range(trials):
        noisy = 0.3 * params**-0.3 * np.exp(rng.normal(0, 0.2, len(params)))
        law = fit_rate_law(list(params), list(noisy), level=0.9)
        assert law is not None and law.exponent_low is not None and law.exponent_high is not None
        covered += law.exponent_low <= -0.3 <= law.exponent_high
        low, high = law.interval(1e6) or (0.0, 0.0)
        predicted += low <= 0.3 * 1e6**-0.3 * math.exp(rng.normal(0, 0.2)) <= high
    assert 0.86 <= covered / trials <= 0.94
    assert 0.86 <= predicted / trials <= 0.94


def test_a_grid_is_moved_to_a_prediction_with_its_count_and_spacing() -> None:
    grid = centred_grid([1e-3, 2e-3, 4e-3, 8e-3], 1e-3)
    assert len(grid) == 4
    assert [b / a for a, b in zip(grid, grid[1:], strict=False)] == pytest.approx([2.0, 2.0, 2.0])
    assert math.sqrt(grid[0] * grid[-1]) == pytest.approx(1e-3)
    with pytest.raises(ValueError):
        centred_grid([0.0, 1e-3], 1e-3)
