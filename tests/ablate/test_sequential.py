"""The group-sequential verdicts of adaptive seeds (ablate/study/sequential.py) on simulated metric streams.

Each repetition is one comparison: per-seed differences drawn from a normal law with a known true effect,
walked through the planned looks exactly as a study does. Pure numpy: 2000 repetitions take about a second.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from ablate.study.sequential import Design, evaluate, nominal_level, planned_looks, run_sequence

REPS = 2000
LOOKS = planned_looks(3, 8)  # the example: seeds {min: 3, max: 8}
# The design spends exactly alpha in expectation, so the observed rate over REPS repetitions scatters around
# it with standard deviation sqrt(alpha (1 - alpha) / REPS) = 0.0049: allow three of those above alpha.
SLACK = 3 * math.sqrt(0.05 * 0.95 / REPS)


def _streams(effect: float, seed: int, sd: float = 1.0) -> np.ndarray:
    return np.random.default_rng(seed).normal(effect, sd, size=(REPS, LOOKS[-1]))  # (reps, max seeds)


def _verdicts(effect: float, seed: int, design: Design) -> list:
    return [run_sequence(list(row), design) for row in _streams(effect, seed)]


def test_looks_and_nominal_level() -> None:
    assert LOOKS == (3, 4, 5, 6, 7, 8)
    assert planned_looks(3, 8, 2) == (3, 5, 7, 8)  # max is always a look
    assert nominal_level((5,), 0.05) == 0.05  # one look: the ordinary paired t-test
    p = nominal_level(LOOKS, 0.05)
    assert 0.01 < p < 0.05  # six looks must each test at a stricter level than 5%
    with pytest.raises(ValueError):
        planned_looks(1, 4)


@pytest.mark.parametrize("seed", [1, 2])
def test_false_positive_rate_under_optional_stopping_stays_at_alpha(seed: int) -> None:
    design = Design(LOOKS)
    found = [v for v in _verdicts(0.0, seed, design) if v.state == "effect"]
    assert len(found) / REPS <= 0.05 + SLACK
    # The same streams tested naively at 5% at every look would be wrong far more often: what the
    # calibration is for (and proof that this test can fail).
    rows = _streams(0.0, seed)
    naive = np.zeros(REPS, dtype=bool)
    for n in LOOKS:
        naive |= stats.ttest_1samp(rows[:, :n], 0.0, axis=1).pvalue < 0.05
    assert naive.mean() > 0.08


def test_repeated_intervals_cover_the_true_effect_at_the_stopping_look() -> None:
    design = Design(LOOKS, min_effect=0.5)
    verdicts = _verdicts(0.3, 3, design)
    missed = sum(not (v.lo <= 0.3 <= v.hi) for v in verdicts)
    assert missed / REPS <= 0.05 + SLACK


def test_a_real_effect_is_found_with_fewer_seeds_than_the_maximum() -> None:
    design = Design(LOOKS)
    verdicts = _verdicts(1.5, 4, design)  # a true effect of 1.5 seed-to-seed standard deviations
    found = [v for v in verdicts if v.state == "effect"]
    assert len(found) / REPS > 0.8
    assert all(v.diff > 0 for v in found)  # the sign is right whenever it is called
    seeds_used = np.mean([v.n for v in verdicts])
    assert seeds_used < LOOKS[-1] - 1.5  # on average well below the fixed design's 8 seeds
    # A fixed 8-seed design spends 8 seeds on every comparison; this one stops at the first decisive look.
    assert min(v.n for v in found) == LOOKS[0]


def test_min_effect_stops_a_null_comparison_early_and_rarely_rejects_a_real_one() -> None:
    design = Design(LOOKS, min_effect=1.5)
    null = _verdicts(0.0, 5, design)  # seed-to-seed sd 1: by 8 seeds the interval is about +-1.14 wide
    assert sum(v.state == "no_effect" for v in null) / REPS > 0.5
    assert np.mean([v.n for v in null]) < LOOKS[-1]
    real = _verdicts(1.5, 6, design)  # a true effect as large as min_effect: "no effect" would be wrong
    assert sum(v.state == "no_effect" for v in real) / REPS <= 0.05 + SLACK


def test_degenerate_streams() -> None:
    design = Design(LOOKS)
    same = run_sequence([0.0] * 8, design)
    assert same is not None and same.state == "identical" and same.n == 3 and same.detectable == 0.0
    assert run_sequence([0.1, 0.2], design) is None  # the first look needs 3 seeds
    lost = evaluate([math.nan, math.nan, 0.4], design, 1)
    assert lost.state == "untestable" and lost.n == 1
    wide = run_sequence([1.0, -1.0, 1.2, -0.9, 1.1, -1.0, 0.9, -1.1], design)
    assert wide is not None and wide.state == "open" and wide.final and wide.n == 8
    assert wide.detectable > abs(wide.diff)
