"""The transfer verdict of a ladder (ablate/stats/transfer.py): crossovers recovered, the verdict's error
rates by simulation, the backtest's coverage, DataDecide's decision accuracy and the signal-to-noise."""

from __future__ import annotations

import math
from collections import Counter

import numpy as np
import pytest

from ablate.stats.transfer import (
    GapRung,
    Transfer,
    backtest,
    change_power,
    decision_accuracy,
    signal_to_noise,
    transfer,
)

COMPUTE = np.geomspace(1e10, 3e11, 4)
SDS = (0.08, 0.06, 0.05, 0.04)  # noise changes with scale


def gaps(rng: np.random.Generator, p: float, q: float, seeds: int = 4) -> list[GapRung]:
    """A comparison whose true gap is p + q log10(C / C_top), each rung with its own noise."""
    x = np.log10(COMPUTE / COMPUTE[-1])
    return [GapRung(f"r{i}", float(c), tuple(float(v) for v in p + q * xx + sd * rng.standard_normal(seeds)))
            for i, (c, xx, sd) in enumerate(zip(COMPUTE, x, SDS, strict=True))]


def rates(p: float, q: float, sims: int, seed: int, seeds: int = 4, margin: float | None = 0.05
          ) -> Counter[Transfer]:
    rng = np.random.default_rng(seed)
    found: Counter[Transfer] = Counter()
    for _ in range(sims):
        v = transfer(gaps(rng, p, q, seeds), alpha=0.05, margin=margin)
        assert v is not None
        found[v.verdict] += 1
    return found


def test_a_known_crossover_is_recovered_with_an_interval_around_it() -> None:
    rng = np.random.default_rng(0)
    # the true gap -0.06 - 0.08 x crosses 0 at x = -0.75: 10^-0.75 of the largest rung's compute
    v = transfer(gaps(rng, -0.06, -0.08, seeds=12), alpha=0.05, margin=0.05, target=1e13)
    assert v is not None and v.verdict == Transfer.REVERSES
    crossing = COMPUTE[-1] * 10 ** -0.75
    assert v.crossover is not None and v.crossover.bounded
    assert v.crossover.lo < crossing < v.crossover.hi
    assert math.log10(v.crossover.compute / crossing) == pytest.approx(0.0, abs=0.15)
    assert v.prediction is not None and v.beyond == pytest.approx(1e13 / COMPUTE[-1])
    expected = -0.06 - 0.08 * math.log10(1e13 / COMPUTE[-1])
    assert v.prediction.lo < expected < v.prediction.hi


def test_a_gap_that_does_not_move_is_rarely_called_a_trend() -> None:
    """The gap is 0.05 at every rung: grows, shrinks or reverses is a false verdict, at most alpha of the
    time (within three binomial standard errors over 1,000 ladders)."""
    sims = 1000
    found = rates(0.05, 0.0, sims, seed=1)
    false = (found[Transfer.GROWS] + found[Transfer.SHRINKS] + found[Transfer.REVERSES]) / sims
    assert false <= 0.05 + 3 * math.sqrt(0.05 * 0.95 / sims), found


def test_a_growing_gap_is_called_grows_and_never_the_other_way() -> None:
    sims = 400
    found = rates(0.15, 0.1, sims, seed=2, seeds=8)  # 0.003 at the smallest rung, 0.15 at the largest
    assert found[Transfer.GROWS] / sims > 0.5, found
    assert (found[Transfer.SHRINKS] + found[Transfer.REVERSES]) / sims <= 0.02, found


def test_a_shrinking_gap_is_called_shrinks_and_a_flat_one_holds_with_enough_seeds() -> None:
    sims = 300
    shrinking = rates(0.03, -0.1, sims, seed=3, seeds=8)  # 0.18 at the smallest rung, 0.03 at the largest
    assert shrinking[Transfer.SHRINKS] / sims > 0.5 and shrinking[Transfer.GROWS] / sims <= 0.02, shrinking
    flat = rates(0.05, 0.0, sims, seed=4, seeds=20, margin=0.12)
    assert flat[Transfer.HOLDS] / sims > 0.5, flat


@pytest.mark.slow
def test_the_false_trend_rate_stays_at_alpha_closely() -> None:
    sims = 5000
    found = rates(0.0, 0.0, sims, seed=5, seeds=3)
    false = (found[Transfer.GROWS] + found[Transfer.SHRINKS] + found[Transfer.REVERSES]) / sims
    assert false <= 0.05 + 3 * math.sqrt(0.05 * 0.95 / sims), found


def test_the_backtest_interval_holds_the_left_out_rung_at_its_level() -> None:
    rng = np.random.default_rng(6)
    sims = 600
    inside = 0
    for _ in range(sims):
        test = backtest(gaps(rng, 0.05, 0.03), alpha=0.05)
        assert test is not None and test.rung == "r3" and test.n == 4
        inside += test.inside
    assert abs(inside / sims - 0.95) <= 3 * math.sqrt(0.95 * 0.05 / sims) + 0.01


def test_a_rung_without_two_pairs_stays_out_and_is_named() -> None:
    rng = np.random.default_rng(8)
    rungs = gaps(rng, 0.05, 0.0)
    rungs[1] = GapRung("r1", rungs[1].compute, rungs[1].differences[:1])
    v = transfer(rungs, margin=0.05)
    assert v is not None and v.left_out == ("r1",) and v.rungs == ("r0", "r2", "r3")
    assert transfer(rungs[:1]) is None and backtest(rungs[2:]) is None


def test_decision_accuracy_counts_pairs_ordered_as_at_the_largest_rung() -> None:
    # rungs in order of compute; at the largest, a < b < c
    means = {"a": [1.0, 3.0, 1.0], "b": [2.0, 2.0, 2.0], "c": [3.0, 1.0, 3.0]}
    accuracy = decision_accuracy(means)
    assert accuracy == [1.0, 0.0]
    assert decision_accuracy({"a": [1.0, 1.0], "b": [1.0, 2.0]}) == [0.5]  # a tie counts half


def test_signal_to_noise_is_the_largest_gap_over_the_pooled_seed_sd() -> None:
    signal, noise, snr = signal_to_noise({"a": [1.0, 3.0], "b": [4.0, 6.0], "c": [2.0, 4.0]})
    assert signal == pytest.approx(3.0) and noise == pytest.approx(math.sqrt(2.0))
    assert snr == pytest.approx(3.0 / math.sqrt(2.0))


def test_change_power_grows_with_seeds_and_predicts_the_simulated_rate() -> None:
    few = change_power(COMPUTE, SDS, [4] * 4, 0.05, 0.05)
    many = change_power(COMPUTE, SDS, [16] * 4, 0.05, 0.05)
    assert many.detectable < few.detectable and many.se == pytest.approx(few.se / 2, rel=0.01)
    # a change as large as the detectable one over the ladder is found (grows) about 80% of the time
    x_span = math.log10(COMPUTE[-1] / COMPUTE[0])
    q = many.detectable / x_span
    found = rates(0.3, q, 400, seed=9, seeds=16)
    assert abs(found[Transfer.GROWS] / 400 - 0.8) < 0.08, found
