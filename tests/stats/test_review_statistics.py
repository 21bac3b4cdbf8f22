"""The review's other statistics: seeds a new study needs at the observed effect and across its interval
(ablate.stats.replication_size.py), borderline verdicts with their leave-one-seed-out range
(ablate/stats/borderline.py), steps-to-target with runs that never reach it (ablate/stats/censored.py), and
muP's shift interval from few seeds by t, not a bootstrap (ablate/stats/best_rate_shift.py)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from ablate.stats.best_rate_shift import transfer
from ablate.stats.borderline import borderline, leave_one_out
from ablate.stats.censored import Run, compare, score
from ablate.stats.replication_size import power_at, seeds_across, seeds_for
from tests.stats.test_best_rate_shift import search


def test_seeds_for_reaches_the_power_it_promises_by_simulation() -> None:
    """At the returned n a simulated paired t test decides "beyond the margin" about 80% of the time."""
    n = seeds_for(0.07, 0.038, 0.05, "beyond", margin=0.05)
    assert n is not None and power_at(n, 0.07, 0.038, 0.05, "beyond", 0.05) >= 0.8
    assert power_at(n - 1, 0.07, 0.038, 0.05, "beyond", 0.05) < 0.8
    rng = np.random.default_rng(0)
    d = 0.07 + 0.038 * rng.standard_normal((4000, n))
    t = (d.mean(axis=1) - 0.05) / (d.std(axis=1, ddof=1) / math.sqrt(n))
    rate = float(np.mean(t > stats.t.ppf(0.975, n - 1)))
    assert rate == pytest.approx(0.8, abs=0.03)


def test_seeds_across_the_interval_say_where_no_number_would_do() -> None:
    """rope-margin's claim (better by more than 0.05) at its observed -0.070 [-0.099, -0.040], paired sd
    0.038 on 15 seeds: far more seeds at the observed effect than an assumed 0.083 needs, and none at the
    interval's end inside the margin."""
    s = seeds_across(-0.070, -0.099, -0.040, 0.038, 15, 0.05, "beyond", margin=0.05)
    assumed = seeds_for(-0.083, 0.038, 0.05, "beyond", margin=0.05)
    assert s.observed is not None and assumed is not None and s.observed > 2 * assumed
    assert s.at_lo is not None and s.at_lo < s.observed and s.at_hi is None  # -0.040 is inside 0.05
    assert s.power_here < 0.8
    # equivalence: an observed effect of 0 needs few seeds, one near the margin many, one past it none
    assert seeds_for(0.0, 0.01, 0.05, "within", 0.03) < seeds_for(0.02, 0.01, 0.05, "within", 0.03)
    assert seeds_for(0.031, 0.01, 0.05, "within", 0.03) is None


def test_a_bound_within_the_declared_fraction_of_its_margin_is_borderline() -> None:
    assert borderline(0.0298, 0.03)  # GQA: inside +-0.03 by 0.0002
    assert borderline(-0.0302, 0.03)  # just outside is as fragile
    assert not borderline(0.02, 0.03) and not borderline(0.0298, 0.03, fraction=0.001)
    loo = leave_one_out([0.01, 0.02, 0.015, 0.05, 0.012], 0.95)
    assert loo is not None and loo.n == 5
    # leaving out the outlier 0.05 pulls the upper end down the most
    assert loo.hi_range[0] < loo.hi_range[1] and loo.lo_range[0] <= loo.lo_range[1]
    assert leave_one_out([0.1, 0.2], 0.95) is None


def test_a_run_that_never_reaches_the_target_is_censored_not_set_to_its_last_step() -> None:
    assert score(Run(300, True), Run(600, False)) == 1  # the baseline never reached it in 600
    assert score(Run(600, False), Run(300, True)) == -1
    assert score(Run(600, False), Run(600, False)) == 0  # neither: no order known
    assert score(Run(200, False), Run(300, True)) == 0  # stopped at 200 before the other reached at 300
    assert score(Run(250, True), Run(250, True)) == 0
    # Muon's study: every Muon run reaches, two of three AdamW runs never do
    c = compare([Run(310, True), Run(330, True), Run(300, True)],
                [Run(600, False), Run(560, True), Run(600, False)])
    assert c.statistic == 3 and c.baseline_not_reached == 2 and c.variant_not_reached == 0
    assert c.p == pytest.approx(0.25)  # 3 pairs: the exact sign-flip p can go no lower
    with pytest.raises(ValueError, match="paired by seed"):
        compare([Run(1, True)], [])


def test_the_shift_from_three_seeds_is_a_jackknife_t_interval_that_covers() -> None:
    """muP's 3-seed searches: a bootstrap of 3 seeds has 10 distinct resamples and covered far below its
    level; the jackknife t interval (t on 2 df) covers the true shift at about its 90%."""
    sims, inside = 150, 0
    optimum = {32: 4e-3, 64: 4e-3, 128: 4e-3}  # the true shift is 0
    for k in range(sims):
        t = transfer(search(optimum, noise=0.01, seeds=3, seed=100 + k), level=0.9)
        inside += t.low <= 0.0 <= t.high
    assert inside / sims >= 0.9 - 3 * math.sqrt(0.9 * 0.1 / sims), inside / sims


def test_an_effect_the_other_way_settles_a_direction_claim_for_no_number_of_seeds() -> None:
    """modern-axes' SwiGLU "better" at +0.26 BLEU [-0.96, +1.48]: its lower end is worse, where no study
    would show it better."""
    s = seeds_across(0.26, -0.96, 1.48, 0.673, 8, 0.05, "beyond", direction=1)
    assert s.at_lo is None and s.at_hi is not None and s.observed is not None and s.observed > s.at_hi
    assert seeds_for(-0.5, 1.0, 0.05, "beyond", direction=1) is None
    assert seeds_for(-0.5, 1.0, 0.05, "beyond", direction=-1) == seeds_for(0.5, 1.0, 0.05, "beyond")
