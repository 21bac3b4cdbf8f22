"""The group-sequential verdicts of adaptive seeds (ablate/stats/sequential.py) on simulated metric streams.

Each repetition is one comparison: per-seed differences drawn from a normal law with a known true effect,
walked through the planned looks exactly as a study does. Pure numpy: 2000 repetitions take about a second.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from ablate.stats.power import simulate
from ablate.stats.sequential import Design, evaluate, nominal_level, planned_looks, run_sequence

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


# ---------------------------------------------------------------- a study's comparisons are one family
FAMILY = 6  # the modern-axes study: six variants against one baseline


def _any_false_effect(design: Design, seed: int, studies: int = REPS) -> float:
    """Share of simulated null studies (FAMILY comparisons, no true effect anywhere) in which at least one
    comparison is decided as an effect."""
    rng = np.random.default_rng(seed)
    hits = 0
    for _ in range(studies):
        rows = rng.normal(0.0, 1.0, size=(FAMILY, LOOKS[-1]))
        looks = [run_sequence(list(row), design) for row in rows]
        hits += any(lk is not None and lk.state == "effect" for lk in looks)
    return hits / studies


def test_family_wise_false_positive_rate_stays_at_alpha_with_bonferroni_inside_the_design() -> None:
    corrected = _any_false_effect(Design(LOOKS, 0.05, None, family=FAMILY), seed=11)
    uncorrected = _any_false_effect(Design(LOOKS, 0.05, None, family=1), seed=11)
    assert corrected <= 0.05 + SLACK
    assert uncorrected > 0.15  # six comparisons each at the full alpha: about 1 - 0.95^6 = 26%
    assert Design(LOOKS, 0.05, family=FAMILY).nominal == nominal_level(LOOKS, 0.05 / FAMILY)
    assert "over 6 comparisons (Bonferroni: each at 0.008333)" in Design(LOOKS, family=FAMILY).describe()


def test_a_none_claim_gets_seeds_until_its_interval_is_inside_or_beyond_the_margin() -> None:
    # Significant at the first look, but the interval straddles the 0.5 margin: a plain comparison stops
    # there ("effect"), a none-claim's question is not answered, so it takes the next looks' seeds.
    stream = [0.35, 0.45, 0.40, 0.38, 0.42, 0.41, 0.39, 0.40]
    design = Design(LOOKS, 0.05, 0.5)
    plain = run_sequence(stream, design)
    asked = run_sequence(stream, design, "none")
    assert plain is not None and plain.look == 1 and plain.state == "effect" and plain.decided
    assert plain.hi > 0.5  # ... straddling the margin
    assert asked is not None and asked.decided and asked.look > 1
    assert -0.5 <= asked.lo and asked.hi <= 0.5  # settled: no effect as large as the margin
    # a claim margin of its own is what counts, not the study's min_effect; inside it from 3 pairs is too
    # few to call it no effect (EQUIVALENCE_PAIRS): the first look with 4 decides
    wide = run_sequence(stream, design, "none", margin=2.0)
    assert wide is not None and wide.look == 2 and wide.n == 4 and wide.decided


def test_no_comparison_is_called_no_effect_from_fewer_than_four_pairs() -> None:
    """At 3 paired seeds a tight interval inside +-min_effect stays open: the report's own tests cannot
    test 3 seeds, and a report said "no effect" beside "too few seeds to conclude"; an effect that clear
    is still one (its sign is known)."""
    design = Design((3, 4, 5), 0.05, 0.5)
    tight = [0.01, -0.01, 0.0, 0.005, -0.005]
    three = evaluate(tight[:3], design, 1)
    assert (three.state, three.decided) == ("open", False) and -0.5 < three.lo and three.hi < 0.5
    four = evaluate(tight[:4], design, 2)
    assert (four.state, four.decided) == ("no_effect", True)
    assert evaluate([5.0, 5.1, 4.9], design, 1).state == "effect"
    assert evaluate(tight[:3], design, 1, "none", 0.5).decided is False  # a none claim alike
    # the power simulation runs the same rule: a null comparison never ends "no effect" at its first look
    assert simulate(Design((3,), 0.05, 0.5), 0.0, 0.001).within == 0.0
    assert simulate(Design((4,), 0.05, 0.5), 0.0, 0.001).within > 0.9


def test_claim_aware_stopping_keeps_each_question_at_its_error_rate() -> None:
    """Simulated: a none-claim whose true effect is 0 is called 'beyond the margin' (a false contradiction)
    in at most alpha of the runs; a better-claim with no true effect is falsely reproduced in at most
    alpha/2 (one side of a two-sided test); and a none-claim with a true effect of twice the margin is
    settled beyond it in most runs."""
    design = Design(LOOKS, 0.05, 0.5)
    none_null = [run_sequence(list(row), design, "none") for row in _streams(0.0, 21, sd=0.6)]
    beyond = sum(lk is not None and (lk.lo > 0.5 or lk.hi < -0.5) for lk in none_null)
    assert beyond / REPS <= 0.05 + SLACK
    better_null = [run_sequence(list(row), design, "better") for row in _streams(0.0, 22, sd=0.6)]
    false_better = sum(lk is not None and lk.state == "effect" and lk.lo > 0 for lk in better_null)
    assert false_better / REPS <= 0.025 + SLACK
    none_large = [run_sequence(list(row), design, "none") for row in _streams(1.0, 23, sd=0.3)]
    assert sum(lk is not None and lk.decided and lk.lo > 0.5 for lk in none_large) / REPS > 0.8
