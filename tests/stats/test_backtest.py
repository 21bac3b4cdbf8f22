"""Rolling backtests' coverage and reach, and a comparison's decision accuracy and signal-to-noise with
their seed-bootstrap intervals (ablate/stats/backtest.py)."""

from __future__ import annotations

import numpy as np
import pytest

from ablate.stats.backtest import Backtest, coverage, decision_accuracy, reach, rolling, signal_to_noise
from ablate.stats.transfer import Estimate, GapRung


def _test(inside: bool, ratio: float) -> Backtest:
    return Backtest(("a", "b", "c"), "d", Estimate(0.0, -1.0, 1.0, 5.0), 0.5 if inside else 2.0, 6, ratio)


def test_coverage_counts_inside_with_an_exact_interval_and_reach_is_the_farthest() -> None:
    tests = [_test(True, 2.0), _test(True, 4.0), _test(False, 3.0), _test(True, 2.5)]
    cov = coverage(tests, 0.983)
    assert (cov.inside, cov.total, cov.share) == (3, 4, 0.75) and cov.nominal == 0.983
    assert cov.lo == pytest.approx(0.1941, abs=1e-3) and cov.hi == pytest.approx(0.9937, abs=1e-3)
    assert reach(tests) == 4.0 and reach([]) is None and coverage([], 0.95).total == 0


def test_rolling_needs_three_rungs_to_fit() -> None:
    rungs = [GapRung(f"r{i}", 10.0 ** (10 + i), (0.01 * i, 0.01 * i + 0.002, 0.01 * i - 0.001))
             for i in range(4)]
    tests = rolling(rungs, 0.05)
    assert [(t.fitted, t.rung) for t in tests] == [(("r0", "r1", "r2"), "r3")]
    assert tests[0].reach == pytest.approx(10.0) and rolling(rungs[:3], 0.05) == []


def test_decision_accuracy_of_one_comparison_and_its_interval() -> None:
    rng = np.random.default_rng(0)
    # clearly negative at every rung: every resample agrees with the largest rung
    clear = [tuple(-0.1 + 0.01 * rng.standard_normal(6)) for _ in range(4)]
    a = decision_accuracy(clear)
    assert (a.value, a.lo, a.hi) == (1.0, 1.0, 1.0)
    # SwiGLU's pattern: better at the two smallest, about 0 at m, worse at l: a third agree, and the
    # interval is not a point
    swiglu = [tuple(m + s * rng.standard_normal(6)) for m, s in
              ((-0.077, 0.018), (-0.021, 0.003), (0.004, 0.01), (0.013, 0.006))]
    b = decision_accuracy(swiglu)
    assert b.value == pytest.approx(1 / 3) and b.lo <= 1 / 3 <= b.hi and b.hi > b.lo


def test_signal_to_noise_of_one_comparison() -> None:
    base, variant = [1.0, 2.0, 3.0], [2.0, 3.0, 4.0]  # gap 1, sd 1 on both sides
    s = signal_to_noise(base, variant)
    assert s.value == pytest.approx(1.0) and s.lo <= 1.0 <= s.hi
    assert np.isnan(signal_to_noise([1.0], [2.0]).value)
