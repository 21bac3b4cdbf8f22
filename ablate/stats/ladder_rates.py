"""The error rates of a ladder's transfer rules, measured by simulating ladders: under the model (a gap
constant or linear in log compute, seed noise only) and misspecified (a rung effect of sd 0.005-0.015
nats, curvature, a gap decaying to 0 that never crosses, a gap that crosses).

Each simulated ladder has the committed ladder's rungs (reports/ladder-kdocs: compute 9.05e10 to 5.2e12
FLOPs), its pairs per rung and a paired sd per rung typical of it (``SDS``); each comparison is judged
alone (its rungs' signs at ``alpha / K``, its trend test at ``alpha``), at the transfer verdicts' level
(``ALPHA``: 0.05 over 3 comparisons). :func:`simulate` counts the verdicts and the rolling backtests'
coverage; scripts/ladder_error_rates.py prints the table docs/ladders.md quotes and
tests/stats/test_rung_trend.py asserts smaller runs of it.

Pure numpy/scipy.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from ablate.stats.backtest import rolling
from ablate.stats.transfer import GapRung, Transfer, transfer

COMPUTE = (9.05e10, 4.27e11, 1.3e12, 5.2e12)
SDS = (0.010, 0.004, 0.006, 0.005)  # paired sd per rung, nats (the committed ladder's, pooled)
# A six-rung ladder over two decades from the same smallest rung (what a re-run ladder would have).
COMPUTE_6 = tuple(float(c) for c in np.geomspace(9.05e10, 9.05e12, 6))
SDS_6 = (0.010, 0.006, 0.005, 0.005, 0.005, 0.005)
SEEDS = 6
ALPHA = 0.05 / 3
MARGIN = 0.02
# The fair ladder as committed (reports/ladder-fair4-kdocs): 6 rungs over 3.5 decades, 4 seeds a rung, each
# rung's paired sd pooled over its 2 comparisons (l1's 0.093: 8-wide models at 1e5 tokens), its verdicts
# at 0.05 over its 2 comparisons.
COMPUTE_FAIR4 = (8.77e8, 1.27e10, 7.62e10, 3.05e11, 9.51e11, 2.5e12)
SDS_FAIR4 = (0.093, 0.025, 0.0053, 0.0072, 0.0074, 0.0078)
SEEDS_FAIR4 = 4
ALPHA_FAIR4 = 0.05 / 2


def _x(compute: tuple[float, ...]) -> np.ndarray:
    """log10 compute over the smallest rung's: 0 at the bottom, 1.76 at the top of the committed ladder."""
    c = np.asarray(compute)
    return np.asarray(np.log10(c / c[0]))


@dataclass(frozen=True)
class Scenario:
    """A true gap at each rung (``gap(x)``, x in decades above the smallest rung) and a rung effect's sd."""

    name: str
    gap: Callable[[np.ndarray], np.ndarray]
    scatter: float = 0.0
    right: tuple[Transfer, ...] = ()  # the verdicts that are right here (the rest are errors or not settled)
    wrong: tuple[Transfer, ...] = ()  # the verdicts that are wrong here


def true_ends(s: Scenario, compute: tuple[float, ...]) -> tuple[float, float]:
    """The scenario's true gap at the smallest and the largest rung of ``compute`` (a scenario is written in
    decades above the smallest rung, so its ends depend on the ladder's span)."""
    gap = s.gap(_x(compute))
    return float(gap[0]), float(gap[-1])


def _const(v: float) -> Callable[[np.ndarray], np.ndarray]:
    return lambda x: np.full_like(x, v)


TRENDS = (Transfer.GROWS, Transfer.SHRINKS, Transfer.REVERSES)
SCENARIOS = (
    Scenario("constant -0.05", _const(-0.05), wrong=TRENDS),
    Scenario("constant 0", _const(0.0), right=(Transfer.HOLDS,), wrong=TRENDS),
    Scenario("constant -0.05, rung sd 0.005", _const(-0.05), 0.005, wrong=TRENDS),
    Scenario("constant -0.05, rung sd 0.010", _const(-0.05), 0.010, wrong=TRENDS),
    Scenario("constant -0.05, rung sd 0.015", _const(-0.05), 0.015, wrong=TRENDS),
    Scenario("linear, grows -0.02 -> -0.11", lambda x: -0.02 - 0.05 * x, right=(Transfer.GROWS,),
             wrong=(Transfer.SHRINKS, Transfer.REVERSES, Transfer.HOLDS)),
    Scenario("curved, grows then levels off (-0.02 -> -0.21)",
             lambda x: -0.21 * (1 - np.exp(-2.0 * x)) - 0.02, right=(Transfer.GROWS,),
             wrong=(Transfer.SHRINKS, Transfer.REVERSES, Transfer.HOLDS)),
    Scenario("decays to 0, never crosses (-0.08 -> -0.001)", lambda x: -0.08 * 10 ** (-x),
             right=(Transfer.SHRINKS,), wrong=(Transfer.GROWS, Transfer.REVERSES, Transfer.HOLDS)),
    Scenario("decays to 0, rung sd 0.010", lambda x: -0.08 * 10 ** (-x), 0.010,
             right=(Transfer.SHRINKS,), wrong=(Transfer.GROWS, Transfer.REVERSES, Transfer.HOLDS)),
    Scenario("crosses (-0.06 -> +0.046)", lambda x: -0.06 + 0.06 * x,
             right=(Transfer.REVERSES, Transfer.SHRINKS), wrong=(Transfer.GROWS, Transfer.HOLDS)),
)


@dataclass
class Rates:
    """What :func:`simulate` found over ``sims`` ladders of one scenario."""

    scenario: Scenario
    sims: int
    verdicts: Counter[Transfer] = field(default_factory=Counter)
    inside: int = 0  # rolling backtests whose interval held the measured gap
    backtests: int = 0
    trend_based: int = 0  # ladders whose line the lack-of-fit test did not reject

    def share(self, *verdicts: Transfer) -> float:
        return sum(self.verdicts[v] for v in verdicts) / self.sims

    @property
    def wrong(self) -> float:
        return self.share(*self.scenario.wrong)

    @property
    def right(self) -> float:
        return self.share(*self.scenario.right)

    @property
    def coverage(self) -> float:
        return self.inside / self.backtests if self.backtests else math.nan


def ladder(rng: np.random.Generator, s: Scenario, compute: tuple[float, ...] = COMPUTE,
           sds: tuple[float, ...] = SDS, seeds: int = SEEDS) -> list[GapRung]:
    """One simulated comparison: each rung's pairs around the true gap plus that rung's own effect."""
    truth = s.gap(_x(compute)) + s.scatter * rng.standard_normal(len(compute))
    return [GapRung(f"r{i}", c, tuple(float(v) for v in g + sd * rng.standard_normal(seeds)))
            for i, (c, g, sd) in enumerate(zip(compute, truth, sds, strict=True))]


def simulate(s: Scenario, sims: int, seed: int = 0, replicates: int = 400, alpha: float = ALPHA,
             margin: float | None = MARGIN, seeds: int = SEEDS, compute: tuple[float, ...] = COMPUTE,
             sds: tuple[float, ...] = SDS) -> Rates:
    """The verdicts of ``sims`` simulated ladders of scenario ``s`` and their backtests' coverage."""
    rng = np.random.default_rng(seed)
    out = Rates(s, sims)
    for _ in range(sims):
        rungs = ladder(rng, s, compute, sds, seeds)
        v = transfer(rungs, alpha, margin, replicates=replicates)
        if v is None:
            continue
        out.verdicts[v.verdict] += 1
        out.trend_based += v.trend_based
        for b in rolling(rungs, alpha):
            out.backtests += 1
            out.inside += b.inside
    return out
