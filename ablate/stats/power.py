"""Power of an adaptive study, by simulating the procedure it runs: what a design can settle before its
first cell.

A study with ``ablation.seeds: {min, max, step}`` looks at each comparison after ``min`` seeds, then after
every ``step`` more, and stops a comparison at the first look that answers its own question
(ablate/stats/sequential.py: Pocock's boundaries on the paired t statistic, every comparison at
``alpha / family``, a ``none`` claim decided only inside or wholly beyond its margin). Its power has no
closed form once there are several looks, so it is simulated: ``PATHS`` paired differences per seed,
``N(effect, sd)``, walked through the very looks, boundaries and stopping rule the study applies (one look
is the ordinary paired t-test, whose power is the noncentral t's: a test checks the simulation against it).

The paired t statistic's law depends on the effect only through ``effect / sd``, and a margin or
min_effect likewise only through their ratio to sd, so one matrix of standard normal draws (a fixed seed:
the plan is deterministic) serves every effect size and noise level: common random numbers also make
power increase smoothly in the effect, which the searches below rely on.

What it answers, each at ``POWER`` (80%):

* the minimal detectable effect of a comparison: the smallest true effect that ends in an effect verdict
  of the right sign with probability 0.8;
* the seeds a claim needs: the smallest ``max`` (``min`` and ``step`` kept) at which a ``better`` or
  ``worse`` claim whose true effect is ``min_effect`` ends in that effect, a ``none`` claim whose true
  effect is 0 ends inside its ``+-margin``, or a margin claim (``better`` / ``worse`` by more than its
  margin) whose true effect is its margin plus ``min_effect`` (twice its margin without one) ends with its
  interval wholly beyond the margin, with probability 0.8.

Effects are simulated in the claim's own direction: a positive difference is the way a ``better`` (or
``worse``) claim says the variant moves.

The noise is a pilot's paired sd, which is itself an estimate: plans size on its upper 80% confidence bound
(``upper_sd``), so that the predicted power is not optimistic.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache

import numpy as np
from scipy import stats

from ablate.stats.sequential import (
    CALIBRATION_PATHS,
    CALIBRATION_SEED,
    POWER,
    Design,
    Question,
    planned_looks,
)
from ablate.stats.verdict import equivalent, interval_answers, is_margin_claim

PATHS = 20_000  # Monte Carlo error of a power near 0.8: sqrt(.8 * .2 / 2e4) = 0.003
SIMULATION_SEED = 1
SD_CONFIDENCE = 0.8  # the upper confidence bound of the pilot's sd that plans size on
MOST_SEEDS = 100  # the largest seeds.max a spec accepts: beyond it a plan only says "more than"


def upper_sd(sd: float, df: int, confidence: float = SD_CONFIDENCE) -> float:
    """The upper ``confidence`` bound of a normal population's sd from a sample sd with ``df`` degrees of
    freedom: ``sd * sqrt(df / chi2_{1 - confidence}(df))`` (the chi-square interval for a variance)."""
    if df < 1 or not math.isfinite(sd):
        return math.nan
    return sd * math.sqrt(df / float(stats.chi2.ppf(1.0 - confidence, df)))


@dataclass(frozen=True)
class Outcomes:
    """How one comparison's sequential test ends over the simulated studies (rates in [0, 1])."""

    positive: float  # an effect verdict above 0 (interval wholly above 0; with a none claim beyond margin)
    negative: float  # an effect verdict below 0
    within: float  # decided inside +-margin (a none claim) or +-min_effect (no effect that large)
    open: float  # still undecided at the last look
    mean_seeds: float  # seeds the comparison runs, on average
    beyond: float = 0.0  # a margin claim decided with its interval wholly beyond its margin (reproduced)

    @property
    def settled(self) -> float:
        return 1.0 - self.open


@lru_cache(maxsize=8)
def _draws(seeds: int) -> np.ndarray:
    """(PATHS, seeds) standard normal draws from the fixed seed: the same paths for every plan."""
    return np.random.default_rng(SIMULATION_SEED).standard_normal((PATHS, seeds))


def simulate(design: Design, effect: float, sd: float, question: Question = None,
             margin: float | None = None) -> Outcomes:
    """The outcomes of one comparison whose per-seed paired differences are ``N(effect, sd)``, judged as
    the study judges them (ablate/stats/sequential.py ``evaluate`` and ``answers``, look by look, stopping
    at the first look that answers ``question``)."""
    looks = np.asarray(design.looks)
    x = effect + sd * _draws(int(looks[-1]))  # (paths, max seeds)
    s1 = np.cumsum(x, axis=1)[:, looks - 1]  # (paths, looks): running sums at each look
    s2 = np.cumsum(x * x, axis=1)[:, looks - 1]
    mean = s1 / looks
    spread = np.sqrt(np.maximum(s2 - looks * mean**2, 0.0) / (looks - 1))
    crit = np.asarray([design.critical(int(n)) for n in looks])
    half = crit * spread / np.sqrt(looks)
    lo, hi = mean - half, mean + half
    own = is_margin_claim(question, margin)
    # a none claim's margin defaults to min_effect; a better / worse claim's is its own or none at all
    width = margin if margin is not None or question in ("better", "worse") else design.min_effect
    answers = interval_answers(lo, hi, question, width, design.min_effect, n=looks)  # (paths, looks)
    answered = answers.any(axis=1)
    stop = np.where(answered, answers.argmax(axis=1), len(looks) - 1)  # the deciding look, else the last
    rows = np.arange(len(stop))
    lo_s, hi_s = lo[rows, stop], hi[rows, stop]
    inside = np.zeros_like(answered)  # a none claim answered inside its margin reads none, not an effect
    if question == "none" and width is not None:
        inside = equivalent(lo_s, hi_s, width, looks[stop])
    positive = answered & (lo_s > 0.0) & ~inside
    negative = answered & (hi_s < 0.0) & ~inside
    small = answered & ~positive & ~negative
    beyond = answered & (lo_s > margin) if own and margin is not None else np.zeros_like(answered)
    return Outcomes(float(positive.mean()), float(negative.mean()), float(small.mean()),
                    float((~answered).mean()), float(looks[stop].mean()), float(beyond.mean()))


def seeds_to_settle(design: Design, sd: float, question: Question, margin: float | None, step: int = 1,
                    most: int = MOST_SEEDS) -> int | None:
    """The seeds.max that settles a comparison: its claim's (`seeds_needed`); without a claim, either way
    (an effect of min_effect found, and a true zero read as no effect as large as min_effect, each with
    probability POWER: the larger of the two), since a comparison without a claim may end in either."""
    if question is None and design.min_effect is not None:
        both = [seeds_needed(design, sd, None, margin, step, most),
                seeds_needed(design, sd, "none", design.min_effect, step, most)]
        return None if None in both else max(n for n in both if n is not None)
    return seeds_needed(design, sd, question, margin, step, most)


def claim_power(design: Design, sd: float, question: Question, margin: float | None) -> float | None:
    """The chance the claim's own question is answered the way a true claim would be: a ``better`` /
    ``worse`` claim (or none) whose true effect is ``min_effect`` ends in that effect; a ``none`` claim whose
    true effect is 0 ends inside its margin; a margin claim whose true effect is its margin plus min_effect
    (twice its margin without one) ends wholly beyond its margin. None when the design gives no size to test
    (no min_effect)."""
    truth = claim_truth(design, question, margin)
    if truth is None:
        return None
    if question == "none":
        width = design.min_effect if margin is None else margin
        return simulate(design, truth, sd, "none", width).within
    found = simulate(design, truth, sd, question, margin)
    return found.beyond if is_margin_claim(question, margin) else found.positive


def claim_truth(design: Design, question: Question, margin: float | None) -> float | None:
    """The true effect a claim's power is read at (0 for a ``none`` claim, min_effect for the others), None
    where the design gives nothing to size: an identity check, or no min_effect / margin."""
    if question == "identical":
        return None  # an implementation check: every seed equal, decided at the first look
    if question == "none":
        return None if (design.min_effect if margin is None else margin) is None else 0.0
    if is_margin_claim(question, margin):  # true by the smallest effect worth knowing beyond its margin
        assert margin is not None
        return margin + (design.min_effect if design.min_effect is not None else margin)
    return design.min_effect


def expected_truth(design: Design, question: Question, margin: float | None) -> float:
    """The true effect a comparison's expected seeds (its cost) are read at: its claim's own (claim_truth)
    where it makes a claim that can be sized, else 0: with nothing to go by, the null, under which a
    comparison runs longest."""
    truth = claim_truth(design, question, margin) if question is not None else None
    return 0.0 if truth is None else truth


def detectable(design: Design, sd: float, question: Question = None, margin: float | None = None) -> float:
    """The smallest true effect that ends in an effect verdict of its sign with probability POWER, under the
    comparison's own stopping rule (bisection on the effect; the common draws make power monotone in it)."""
    def power(effect: float) -> float:
        return simulate(design, effect, sd, question, margin).positive

    lo, hi = 0.0, sd
    while power(hi) < POWER:
        lo, hi = hi, 2.0 * hi
        if hi > 1e3 * sd:
            return math.inf
    for _ in range(30):
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if power(mid) < POWER else (lo, mid)
        if hi - lo < 1e-3 * sd:
            break
    return hi


def with_max(design: Design, maximum: int, step: int = 1) -> Design:
    """The same design (first look, step, level, family) with another last look."""
    return Design(planned_looks(design.looks[0], maximum, step), design.alpha, design.min_effect,
                  design.family)


def seeds_needed(design: Design, sd: float, question: Question, margin: float | None, step: int = 1,
                 most: int = MOST_SEEDS) -> int | None:
    """The smallest ``max`` whose design answers the claim with probability POWER (see claim_power), else
    None when even ``most`` seeds do not ("about": each candidate maximum's Pocock level comes from one
    shared calibration, ``search_levels``, not the study's own 200,000-path one). More looks only add
    chances to decide, so the answer is found by bisection; the fixed-sample normal approximation is a
    lower bound (t quantiles exceed z, and looking several times costs seeds), so a claim it already puts
    beyond ``most`` is not simulated."""
    if claim_truth(design, question, margin) is None:
        return None
    first = design.looks[0]
    if _fixed_sample_guess(design, sd, question, margin) > most:
        return None
    levels = search_levels(first, step, most, design.level)

    def enough(maximum: int) -> bool:
        candidate = _Calibrated(planned_looks(first, maximum, step), design.alpha, design.min_effect,
                                design.family, levels[maximum])
        power = claim_power(candidate, sd, question, margin)
        return power is not None and power >= POWER

    if enough(first):
        return first
    if not enough(most):
        return None
    lo, hi = first, most
    guess = _fixed_sample_guess(design, sd, question, margin)
    if first < guess < most:  # bracket the answer near the lower bound first
        lo, hi = (lo, guess) if enough(guess) else (guess, hi)
    while hi - lo > 1:  # enough(hi), not enough(lo)
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if enough(mid) else (mid, hi)
    return hi


@dataclass(frozen=True)
class _Calibrated(Design):
    """A design whose per-look level was calibrated elsewhere (search_levels)."""

    p_star: float = 0.0

    @property
    def nominal(self) -> float:
        return self.p_star


SEARCH_PATHS = 50_000


@lru_cache(maxsize=16)
def search_levels(first: int, step: int, most: int, level: float) -> dict[int, float]:
    """Pocock's per-look level for every maximum from ``first`` to ``most`` at once, from one simulation
    of null paths (the calibration of ablate/stats/sequential.py nominal_level, with the running minimum of
    the per-look p-values read at each candidate maximum): what the search for seeds needs."""
    rng = np.random.default_rng(CALIBRATION_SEED)
    n = np.arange(first, most + 1)  # every seed count a last look may have
    x = rng.standard_normal((SEARCH_PATHS, most))
    s1 = np.cumsum(x, axis=1)[:, n - 1]
    s2 = np.cumsum(x * x, axis=1)[:, n - 1]
    mean = s1 / n
    t = mean / np.sqrt((s2 - n * mean**2) / (n - 1) / n)
    p = 2.0 * stats.t.sf(np.abs(t), n - 1)  # (paths, candidate seed counts)
    on_grid = ((n - first) % step) == 0
    grid_min = np.minimum.accumulate(np.where(on_grid, p, 1.0), axis=1)  # smallest p over grid looks <= n
    target = level - 2.0 * math.sqrt(level * (1.0 - level) / CALIBRATION_PATHS)
    levels = {}
    for i, maximum in enumerate(n):
        smallest = np.minimum(grid_min[:, i], p[:, i])  # the last look is always a look
        levels[int(maximum)] = _level_at(first, int(maximum), level, smallest, target)
    return levels


def _level_at(first: int, maximum: int, level: float, smallest: np.ndarray, target: float) -> float:
    """One look is the ordinary t-test (its level unchanged); several: the target quantile."""
    return level if maximum == first else float(np.quantile(smallest, target))


def _fixed_sample_guess(design: Design, sd: float, question: Question, margin: float | None) -> int:
    """Seeds a single look would need (the normal approximation): where the search for max starts."""
    z_level = float(stats.norm.ppf(1.0 - design.level / 2.0))
    if question == "none":
        width = design.min_effect if margin is None else margin
        assert width is not None
        # the interval's half-width must fall inside the margin, on both sides at once
        z_power, effect = float(stats.norm.ppf(1.0 - (1.0 - POWER) / 2.0)), width
    elif is_margin_claim(question, margin):  # the interval must clear the margin: the distance to it counts
        truth = claim_truth(design, question, margin)
        assert truth is not None and margin is not None
        z_power, effect = float(stats.norm.ppf(POWER)), truth - margin
    else:
        assert design.min_effect is not None
        z_power, effect = float(stats.norm.ppf(POWER)), design.min_effect
    return max(2, math.ceil(((z_level + z_power) * sd / effect) ** 2))


def fixed_sample_power(n: int, effect: float, sd: float, level: float) -> float:
    """The closed form for one look: the two-sided paired t-test's power at n pairs, from the noncentral t
    (noncentrality ``effect * sqrt(n) / sd``, df n - 1)."""
    crit = float(stats.t.ppf(1.0 - level / 2.0, n - 1))
    nc = effect * math.sqrt(n) / sd
    return float(stats.nct.sf(crit, n - 1, nc) + stats.nct.cdf(-crit, n - 1, nc))
