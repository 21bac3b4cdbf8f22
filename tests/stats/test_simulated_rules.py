"""A ladder's plan measures its transfer verdict's own rules by simulation (ablate/stats/simulated_rules.py):
the change it promises to find is found at the promised rate by ladders simulated apart from it, under
the rung variance it carried and under shapes it did not assume; rung variance and few seeds cost power."""

from __future__ import annotations

import math

import numpy as np
import pytest

from ablate.stats.ladder_rates import COMPUTE_6, SDS_6, Scenario, ladder
from ablate.stats.simulated_rules import POWER, rule_power, rung_noise
from ablate.stats.transfer import GapRung, transfer
from ablate.stats.vocabulary import Transfer

ALPHA = 0.05
SPAN = math.log10(COMPUTE_6[-1] / COMPUTE_6[0])


def grows_share(gap: Scenario, seeds: int, sims: int = 300, seed: int = 11) -> float:
    """How often ladders drawn apart from the plan's (another seed) read "grows"."""
    rng = np.random.default_rng(seed)
    hits = 0
    for _ in range(sims):
        v = transfer(ladder(rng, gap, COMPUTE_6, SDS_6, seeds), ALPHA, 0.02, replicates=200)
        hits += v is not None and v.verdict == Transfer.GROWS
    return hits / sims


def test_the_promised_change_reads_grows_at_the_promised_rate_and_rung_variance_costs_power() -> None:
    plain = rule_power(COMPUTE_6, SDS_6, 4, ALPHA, 0.02)
    scattered = rule_power(COMPUTE_6, SDS_6, 4, ALPHA, 0.02, tau=0.01)
    assert math.isfinite(plain.detectable) and scattered.detectable > 1.5 * plain.detectable
    # on seed noise alone, twice the seeds find a smaller change; a rung effect no number of seeds averages
    # away: doubling them buys little
    assert rule_power(COMPUTE_6, SDS_6, 8, ALPHA, 0.02).detectable < 0.75 * plain.detectable
    assert rule_power(COMPUTE_6, SDS_6, 8, ALPHA, 0.02, tau=0.01).detectable > 0.75 * scattered.detectable
    d = scattered.detectable
    # under the model it assumed (linear in log compute, rung sd 0.01): about 80% on fresh draws
    linear = grows_share(Scenario("linear", lambda x: d * x / SPAN, 0.01), 4)
    assert POWER - 0.08 < linear < POWER + 0.08, linear
    # misspecified: the same end-to-end change reached early and levelled off, or held back to the top
    # rungs, is found less often than promised (the curve about the line reads as rung variance in the
    # trend test's null): the plan's figure is for a change spread evenly over log compute
    early = grows_share(Scenario("levels off", lambda x: d * (1 - np.exp(-3 * x / SPAN)) / (1 - np.exp(-3)),
                                 0.01), 4)
    late = grows_share(Scenario("late", lambda x: d * (x / SPAN) ** 4, 0.01), 4)
    assert early < linear - 0.05 and late < linear - 0.15, (early, linear, late)


def test_a_gap_that_does_not_move_reads_holds_at_the_stated_rate() -> None:
    plan = rule_power(COMPUTE_6, SDS_6, 8, ALPHA, 0.03)
    assert plan.holds is not None and 0.3 < plan.holds <= 1.0
    rng = np.random.default_rng(5)
    held = sum(v is not None and v.verdict == Transfer.HOLDS for v in
               (transfer(ladder(rng, Scenario("flat", lambda x: 0 * x), COMPUTE_6, SDS_6, 8), ALPHA, 0.03,
                         replicates=200) for _ in range(300))) / 300
    assert held == pytest.approx(plan.holds, abs=0.08)
    assert rule_power(COMPUTE_6, SDS_6, 8, ALPHA, None).holds is None


def test_the_rung_variance_comes_from_three_rungs_with_pairs_or_is_said_to_be_absent() -> None:
    rng = np.random.default_rng(3)
    shifts = [0.0, 0.03, -0.03, 0.02]
    scattered = [GapRung(f"r{i}", c, tuple(s + 0.002 * rng.standard_normal(6)))
                 for i, (c, s) in enumerate(zip(COMPUTE_6, shifts, strict=False))]
    tau2, words = rung_noise(scattered)
    assert 0.01 < math.sqrt(tau2) < 0.05 and "rung sd" in words
    assert rung_noise(scattered[:2]) == (0.0, "seed noise only: fewer than 3 rungs with pairs estimate no "
                                              "rung variance")
