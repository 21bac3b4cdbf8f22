"""What a ladder's design can settle before it runs: the power of the transfer verdict's own rules,
measured by simulating them with the rung-level variance the verdict carries.

A ladder's "grows" and "shrinks" come from the monotone trend test over its rungs, against seed noise and a
rung effect of variance ``tau^2`` (ablate/stats/rung_trend.py, ablate/stats/transfer.py ``transfer``). A
plan sized on a fitted line's change with seed noise alone over-promised: a change as large as its
"detectable" one was decided about two times in three, and the trend test has less power still where a
noisy small rung carries little. So the plan measures the rules themselves (:func:`rule_power`): ladders
simulated with the plan's rungs, seeds and each rung's pilot sd (ablate/stats/ladder_rates.py ``ladder``),
a true gap 0 at the smallest rung changing linearly in log compute by ``d`` at the largest, and a rung
effect ``N(0, tau^2)``; each judged by ``transfer`` at the plan's level. The smallest ``d`` that reads
"grows" in :data:`POWER` of them is found by bisection, every ``d`` on the same draws (common random
numbers, so the share rises with ``d``). Beside it, the share of "holds" when the gap does not move.

``tau^2`` comes from the pilot ladder's own gaps about their line where three or more of its rungs have
pairs (:func:`rung_noise`, ladder_fit.py's estimate); elsewhere it is 0, and the plan says the figure
counts seed noise only.

Pure numpy/scipy.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from ablate.stats.ladder_rates import Scenario, ladder
from ablate.stats.transfer import GapRung, fit_line, transfer
from ablate.stats.vocabulary import Transfer

POWER = 0.8
SIMS = 200  # ladders per change tried: the share's sd about 0.03 at 80%
REPLICATES = 200  # trend-test resamples per ladder
SEED = 0
GROWTHS = 8  # doublings of the change tried before the plan says no change reads grows at these seeds
STEPS = 7  # bisection steps after that: the change to 1/128 of the bracket


@dataclass(frozen=True)
class ChangePower:
    """What a ladder's seeds can tell of one comparison's change over the ladder, before it runs."""

    detectable: float  # the smallest linear change read as "grows" in POWER of the ladders (inf: none)
    holds: float | None  # the share of "holds" when the gap does not move (None: no margin)
    tau: float  # the rung effect's sd the simulation carried


def rung_noise(gaps: Sequence[GapRung]) -> tuple[float, str]:
    """The gap's rung-level variance over the ladder's rungs with pairs, and the words for it."""
    line = fit_line(gaps) if sum(g.n >= 2 for g in gaps) >= 3 else None
    if line is None:
        return 0.0, "seed noise only: fewer than 3 rungs with pairs estimate no rung variance"
    if line.tau2 <= 0:
        return 0.0, "seed noise only: the rungs scatter about the gap's line no more than the seeds explain"
    return float(line.tau2), f"sd with the rung-level variance, rung sd {math.sqrt(line.tau2):.3g}"


def _share(verdict: Transfer, change: float, compute: tuple[float, ...], sds: tuple[float, ...], seeds: int,
           alpha: float, margin: float | None, tau: float, sims: int) -> float:
    span = math.log10(compute[-1] / compute[0])
    scenario = Scenario("plan", lambda x: change * x / span, tau)
    rng = np.random.default_rng(SEED)
    hits = 0
    for _ in range(sims):
        v = transfer(ladder(rng, scenario, compute, sds, seeds), alpha, margin, replicates=REPLICATES)
        hits += v is not None and v.verdict == verdict
    return hits / sims


def rule_power(computes: Sequence[float], sds: Sequence[float], seeds: int, alpha: float,
               margin: float | None, tau: float = 0.0, sims: int = SIMS) -> ChangePower:
    """The smallest change over the ladder its verdict reads as "grows" in :data:`POWER` of simulated
    ladders, and the share of "holds" for a gap that does not move (module doc). ``computes`` and ``sds``
    per rung, ``seeds`` pairs a rung, ``alpha`` the transfer verdicts' level."""
    order = np.argsort(np.asarray(computes, dtype=float))
    compute = tuple(float(computes[i]) for i in order)
    sd = tuple(float(sds[i]) for i in order)
    if len(compute) < 2 or seeds < 2 or compute[0] >= compute[-1]:
        return ChangePower(math.inf, None, tau)

    def power(change: float) -> float:
        return _share(Transfer.GROWS, change, compute, sd, seeds, alpha, margin, tau, sims)

    # a start near where seed noise alone would put it: the spread of the rungs' means
    high = 2.0 * math.sqrt(max(s * s / seeds for s in sd) + tau * tau)
    for _ in range(GROWTHS):
        if power(high) >= POWER:
            break
        high *= 2.0
    else:
        detectable = math.inf
        high = math.nan
    low = 0.0
    if math.isfinite(high):
        for _ in range(STEPS):
            mid = (low + high) / 2.0
            low, high = (low, mid) if power(mid) >= POWER else (mid, high)
        detectable = high
    held = None if margin is None else _share(Transfer.HOLDS, 0.0, compute, sd, seeds, alpha, margin, tau,
                                              sims)
    return ChangePower(detectable, held, tau)
