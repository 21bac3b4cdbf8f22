"""Expected validation performance (ablate/report/compute/expected_validation.py) against Dodge et al.'s
closed form worked by hand, and against enumerating every draw of n trials (with replacement) for small N and
n."""

from __future__ import annotations

import itertools
import math
import statistics
from fractions import Fraction

import pytest

from ablate.report.compute.expected_validation import evp_curve, expected_best, max_probabilities


def test_the_closed_form_on_three_known_scores() -> None:
    # sorted 1 < 2 < 3, n = 2: P(max = 1) = 1/9, P(max = 2) = 4/9 - 1/9 = 3/9, P(max = 3) = 1 - 4/9 = 5/9
    assert max_probabilities(3, 2) == pytest.approx([1 / 9, 3 / 9, 5 / 9])
    mean, var = expected_best([3.0, 1.0, 2.0], 2)
    assert mean == pytest.approx(22 / 9)  # (1 + 6 + 15) / 9
    assert var == pytest.approx(38 / 81)  # (1 + 12 + 45) / 9 - (22/9)^2
    # a loss: the best is the lowest; worst first [3, 2, 1] -> (3 + 6 + 5) / 9
    mean, var = expected_best([3.0, 1.0, 2.0], 2, maximize=False)
    assert mean == pytest.approx(14 / 9)
    assert var == pytest.approx(38 / 81)


def test_one_trial_expects_the_mean_and_many_approach_the_best() -> None:
    scores = [0.2, 0.9, 0.4, 0.5]
    mean, var = expected_best(scores, 1)
    assert mean == pytest.approx(statistics.fmean(scores))
    assert var == pytest.approx(statistics.pvariance(scores))
    assert expected_best(scores, 500)[0] == pytest.approx(0.9)
    assert expected_best(scores, 500, maximize=False)[0] == pytest.approx(0.2)


def _brute(scores: list[float], n: int, maximize: bool) -> tuple[Fraction, Fraction]:
    best = max if maximize else min
    draws = [Fraction(best(d)) for d in itertools.product(scores, repeat=n)]
    mean = sum(draws, Fraction(0)) / len(draws)
    return mean, sum(((d - mean) ** 2 for d in draws), Fraction(0)) / len(draws)


@pytest.mark.parametrize(
    "scores", [[0.5], [0.25, 0.75], [0.5, 0.125, 0.5, 0.875], [3.0, -1.0, 2.5, 0.0, 7.0]])
@pytest.mark.parametrize("maximize", [True, False])
def test_matches_enumerating_every_draw(scores: list[float], maximize: bool) -> None:
    for n in range(1, 5):
        mean, var = expected_best(scores, n, maximize)
        exact_mean, exact_var = _brute(scores, n, maximize)
        assert mean == pytest.approx(float(exact_mean), abs=1e-12)
        assert var == pytest.approx(float(exact_var), abs=1e-12)


def test_the_curve_rises_for_a_score_to_maximize_and_its_band_stays_within_the_scores() -> None:
    scores = [0.1, 0.7, 0.3, 0.65, 0.2, 0.5]
    curve = evp_curve(scores)
    assert [p.n for p in curve] == list(range(1, len(scores) + 1))
    means = [p.mean for p in curve]
    assert means == sorted(means) and means[-1] < max(scores)
    for p in curve:
        assert min(scores) <= p.low <= p.mean <= p.high <= max(scores)
        assert p.std == pytest.approx(math.sqrt(expected_best(scores, p.n)[1]))
    falling = [p.mean for p in evp_curve(scores, maximize=False, upto=10)]
    assert len(falling) == 10 and falling == sorted(falling, reverse=True)


def test_ranking_can_depend_on_the_budget() -> None:
    # steady: every trial 0.6; risky: half the trials fail (0.0), half excel (0.9). At one trial the steady
    # variant is expected better; from two trials on the risky one is: the curves cross.
    steady, risky = [0.6] * 4, [0.0, 0.9, 0.0, 0.9]
    assert expected_best(steady, 1)[0] > expected_best(risky, 1)[0]
    assert expected_best(steady, 2)[0] < expected_best(risky, 2)[0]
    assert expected_best(steady, 3)[1] == 0.0


@pytest.mark.parametrize("scores,n", [([], 1), ([1.0, math.nan], 1), ([1.0, math.inf], 1), ([1.0], 0)])
def test_refuses_what_has_no_curve(scores: list[float], n: int) -> None:
    with pytest.raises(ValueError):
        expected_best(scores, n)


def test_leaders_say_where_the_budget_changes_the_winner() -> None:
    from ablate.report.compute.expected_validation import leaders

    steady, risky = [0.6] * 4, [0.0, 0.9, 0.0, 0.9]
    assert leaders({"steady": evp_curve(steady), "risky": evp_curve(risky)}) == [(1, "steady"), (2, "risky")]
    assert leaders({"a": evp_curve([0.5, 0.7]), "b": evp_curve([0.1, 0.2, 0.3])}) == [(1, "a")]
    # a loss: the lowest expected value leads
    assert leaders({"a": evp_curve([1.0, 2.2], maximize=False), "b": evp_curve([1.5, 1.6], maximize=False)},
                   maximize=False) == [(1, "b"), (2, "a")]
    assert leaders({}) == []
