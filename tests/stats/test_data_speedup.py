"""The speedup as Wen et al. (2025) measure it (ablate/stats/data_speedup.py): the data a tuned baseline
needs to reach a variant's final loss, its interval's coverage, extrapolation flagged, the trend with size."""

from __future__ import annotations

import math

import numpy as np
import pytest

from ablate.stats.data_speedup import Budget, RungBudgets, Speedup, data_speedup, speedup_trend
from ablate.stats.ladder_fit import LackOfFit

D1 = 1e6


def rung(rng: np.random.Generator, speedup: float, sd: float = 0.01, seeds: int = 4, name: str = "r",
         budgets: tuple[float, ...] = (1, 2, 4)) -> RungBudgets:
    """A baseline whose loss falls 0.1 per doubling of data; a variant at D1 whose loss the baseline
    reaches at ``speedup`` x D1."""
    base = tuple(Budget(D1 * m, tuple(3.0 - 0.1 * math.log2(m) + sd * rng.standard_normal(seeds)), m)
                 for m in budgets)
    variant = tuple(3.0 - 0.1 * math.log2(speedup) + sd * rng.standard_normal(seeds))
    return RungBudgets(name, 1e12, base, D1, variant)


def test_a_known_speedup_is_recovered_inside_its_interval() -> None:
    s = data_speedup(rung(np.random.default_rng(0), 1.5))
    assert s.value == pytest.approx(1.5, rel=0.1) and s.lo < 1.5 < s.hi and s.beyond == 0
    assert s.slope == pytest.approx(-0.1, abs=0.01) and s.tokens_needed == pytest.approx(1.5 * D1, rel=0.1)
    assert not s.lack_of_fit.rejects(0.05)


def test_a_speedup_beyond_the_budgets_is_flagged_an_extrapolation() -> None:
    s = data_speedup(rung(np.random.default_rng(1), 6.0))
    assert s.beyond == 1 and s.value > 4
    slower = data_speedup(rung(np.random.default_rng(2), 0.7))
    assert slower.beyond == -1 and slower.value < 1


def test_the_interval_covers_the_true_speedup_at_its_level() -> None:
    rng = np.random.default_rng(3)
    sims = 600
    inside = sum(s.lo <= 1.3 <= s.hi for s in (data_speedup(rung(rng, 1.3, sd=0.02))
                                               for _ in range(sims)))
    assert inside / sims >= 0.95 - 3 * math.sqrt(0.95 * 0.05 / sims), inside / sims


def test_fewer_than_three_budgets_is_refused_with_the_rung_named() -> None:
    with pytest.raises(ValueError, match="rung r: a speedup needs the baseline at 3 or more data budgets"):
        data_speedup(rung(np.random.default_rng(4), 1.5, budgets=(1, 2)))


def _speedup(value: float, half: float = 0.05) -> Speedup:
    return Speedup("r", value, value * 2 ** -half, value * 2 ** half, math.nan, 0,
                   LackOfFit(math.nan, 0, 0, math.nan), -0.1)


def test_a_speedup_falling_towards_one_with_size_shrinks() -> None:
    """Wen et al.'s Muon: 1.4x at the smallest size, 1.1x at the largest."""
    trend = speedup_trend([_speedup(v) for v in (1.4, 1.3, 1.2, 1.1)], [1e10, 1e11, 1e12, 1e13])
    assert trend is not None and trend.verdict == "shrinks" and trend.hi < 0
    flat = speedup_trend([_speedup(v, 0.3) for v in (1.3, 1.35, 1.25, 1.3)], [1e10, 1e11, 1e12, 1e13])
    assert flat is not None and flat.verdict == "not settled"
    assert speedup_trend([_speedup(1.3)] * 2, [1e10, 1e11]) is None
