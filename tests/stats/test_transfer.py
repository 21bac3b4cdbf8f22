"""The transfer verdict of a ladder (ablate/stats/transfer.py): read from the measured rungs, the line
beside it with its lack-of-fit test and rung-level variance, crossovers recovered, the verdict's error
rates by simulation, the backtests' coverage, DataDecide's decision accuracy and the signal-to-noise.
The misspecified error rates (rung scatter, curvature, a gap decaying to 0) are in
tests/stats/test_rung_trend.py."""

from __future__ import annotations

import math
from collections import Counter

import numpy as np
import pytest

from ablate.stats.backtest import rolling
from ablate.stats.transfer import (
    GapRung,
    Transfer,
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
        v = transfer(gaps(rng, p, q, seeds), alpha=0.05, margin=margin, replicates=300)
        assert v is not None
        found[v.verdict] += 1
    return found


def test_a_known_crossover_is_recovered_with_an_interval_around_it() -> None:
    rng = np.random.default_rng(0)
    # the true gap -0.15 - 0.2 x crosses 0 at x = -0.75; the two smallest rungs are above it, the two
    # largest below, each decided on 30 pairs
    v = transfer(gaps(rng, -0.15, -0.2, seeds=30), alpha=0.05, margin=0.05, target=1e12, reach=4.0)
    assert v is not None and v.verdict == Transfer.REVERSES and v.signs == (1, 1, -1, -1)
    crossing = COMPUTE[-1] * 10 ** -0.75
    assert v.trend_based and v.crossover is not None and v.crossover.bounded
    assert v.crossover.lo < crossing < v.crossover.hi
    assert math.log10(v.crossover.compute / crossing) == pytest.approx(0.0, abs=0.15)
    # 3.3x beyond the largest rung, within the 4x the backtests reached: predicted, with its interval
    assert v.prediction is not None and v.beyond == pytest.approx(1e12 / COMPUTE[-1])
    expected = -0.15 - 0.2 * math.log10(1e12 / COMPUTE[-1])
    assert v.prediction.lo < expected < v.prediction.hi
    far = transfer(gaps(rng, -0.15, -0.2, seeds=30), alpha=0.05, target=1e13, reach=4.0)
    assert far is not None and far.prediction is None and far.withheld == "beyond the backtests"


def test_the_lack_of_fit_test_reproduces_the_referee_and_withholds_the_line() -> None:
    """The committed ladder's RoPE gap (reports/ladder-kdocs): F(2, 20) = 254 against the seeds, so the line
    says nothing (no slope, crossover or prediction) and the rung-level variance is the residual scatter."""
    compute = (9.05e10, 4.27e11, 1.3e12, 5.2e12)
    means, sds = (-0.024, -0.113, -0.211, -0.215), (0.005, 0.0057, 0.0062, 0.0044)
    z = np.array([-1.2, -0.6, 0.0, 0.6, 1.2, 0.0])
    z = (z - z.mean()) / z.std(ddof=1)  # six values with mean 0 and sd 1: each rung's mean and sd exactly
    rungs = [GapRung(f"r{i}", c, tuple(float(v) for v in m + sd * z))
             for i, (c, m, sd) in enumerate(zip(compute, means, sds, strict=True))]
    v = transfer(rungs, alpha=0.05 / 3, margin=0.02, target=5e13, reach=10.0)
    assert v is not None and v.lack_of_fit.df1 == 2 and v.lack_of_fit.df2 == 20
    assert v.lack_of_fit.f == pytest.approx(254, rel=0.02) and v.lack_of_fit.p < 1e-10
    assert not v.trend_based and v.prediction is None and v.withheld == "lack of fit"
    assert math.sqrt(v.tau2) == pytest.approx(0.035, abs=0.002)
    # the change over the line now carries that scatter on 2 df: no longer +-0.008 wide
    assert v.change.hi - v.change.lo > 0.3


def test_a_gap_that_does_not_move_is_rarely_called_a_trend() -> None:
    """The gap is 0.05 at every rung: grows, shrinks or reverses is a false verdict, at most alpha of the
    time (within three binomial standard errors over 300 ladders)."""
    sims = 300
    found = rates(0.05, 0.0, sims, seed=1)
    false = (found[Transfer.GROWS] + found[Transfer.SHRINKS] + found[Transfer.REVERSES]) / sims
    assert false <= 0.05 + 3 * math.sqrt(0.05 * 0.95 / sims), found


def test_a_growing_gap_is_called_grows_and_never_the_other_way() -> None:
    sims = 200
    found = rates(0.15, 0.1, sims, seed=2, seeds=8)  # 0.003 at the smallest rung, 0.15 at the largest
    assert found[Transfer.GROWS] / sims > 0.5, found
    assert (found[Transfer.SHRINKS] + found[Transfer.REVERSES]) / sims <= 0.02, found


def test_a_shrinking_gap_is_called_shrinks_and_a_flat_one_holds_with_enough_seeds() -> None:
    sims = 200
    shrinking = rates(0.03, -0.1, sims, seed=3, seeds=8)  # 0.18 at the smallest rung, 0.03 at the largest
    assert shrinking[Transfer.SHRINKS] / sims > 0.5 and shrinking[Transfer.GROWS] / sims <= 0.02, shrinking
    flat = rates(0.05, 0.0, sims, seed=4, seeds=20, margin=0.12)
    assert flat[Transfer.HOLDS] / sims > 0.5, flat


@pytest.mark.slow
def test_the_false_trend_rate_stays_at_alpha_closely() -> None:
    sims = 3000
    found = rates(0.0, 0.0, sims, seed=5, seeds=3)
    false = (found[Transfer.GROWS] + found[Transfer.SHRINKS] + found[Transfer.REVERSES]) / sims
    assert false <= 0.05 + 3 * math.sqrt(0.05 * 0.95 / sims), found


def test_the_rolling_backtests_hold_the_next_rung_at_their_level() -> None:
    compute = np.geomspace(1e10, 3e11, 6)
    sds = (0.08, 0.07, 0.06, 0.05, 0.05, 0.04)
    rng = np.random.default_rng(6)
    sims, inside, total = 300, 0, 0
    for _ in range(sims):
        x = np.log10(compute / compute[-1])
        rungs = [GapRung(f"r{i}", float(c), tuple(float(v) for v in g + sd * rng.standard_normal(4)))
                 for i, (c, g, sd) in enumerate(zip(compute, 0.05 + 0.03 * x, sds, strict=True))]
        tests = rolling(rungs, alpha=0.05)
        # origins 3, 4, 5: fit r0-r2 -> r3, r0-r3 -> r4, r0-r4 -> r5
        assert [t.rung for t in tests] == ["r3", "r4", "r5"] and tests[0].fitted == ("r0", "r1", "r2")
        inside += sum(t.inside for t in tests)
        total += len(tests)
    # at least the nominal 95% (the rung variance, estimated on 1-3 df, only widens the interval)
    assert inside / total >= 0.95 - 3 * math.sqrt(0.95 * 0.05 / total), inside / total


def test_a_rung_without_two_pairs_stays_out_and_is_named() -> None:
    rng = np.random.default_rng(8)
    rungs = gaps(rng, 0.05, 0.0)
    rungs[1] = GapRung("r1", rungs[1].compute, rungs[1].differences[:1])
    v = transfer(rungs, margin=0.05, replicates=200)
    assert v is not None and v.left_out == ("r1",) and v.rungs == ("r0", "r2", "r3")
    assert transfer(rungs[:1]) is None and rolling(rungs[1:], 0.05) == []


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
