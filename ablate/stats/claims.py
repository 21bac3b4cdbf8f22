"""Published results judged: whether a study reproduces, contradicts or has not settled a claim it checks
(``ablation.expect``), on the evidence its verdicts rest on (:class:`Evidence`: the sequential interval of a
study with adaptive seeds, else the fixed-sample effect with its Holm-adjusted significance), by
:func:`judge`'s rules. Part of the statistics floor: pure arithmetic on numbers, nothing of ablate but the
spec's claim.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from ablate.spec.study_sections import Expectation
from ablate.stats.borderline import FRACTION, LeaveOneOut, borderline
from ablate.stats.replication_size import SeedsAcross
from ablate.stats.verdict import (
    EQUIVALENCE_PAIRS,
    equivalent,
    is_margin_claim,
    margin_reading,
    none_margin,
    within,
)
from ablate.stats.vocabulary import Outcome

REPRODUCED, CONTRADICTED, OPEN = Outcome.REPRODUCED, Outcome.CONTRADICTED, Outcome.NOT_SETTLED


@dataclass(frozen=True)
class Evidence:
    """What the runs say about one variant against the baseline on ``metric``."""

    metric: str
    diff: float  # variant - baseline (NaN: nothing to compare)
    lo: float  # the interval the verdict rests on (NaN: none)
    hi: float
    interval: str  # e.g. 'repeated 95% CI' or '95% CI'
    n: int  # pairs or seeds behind it
    significant: bool  # the interval excludes zero by the report's own test
    differing: int  # paired seeds whose values differ from the baseline's (for 'identical')
    identical: bool  # paired, at least one pair, every pair exactly equal
    min_effect: float | None  # the study's smallest effect worth knowing
    diverged: int  # the variant's runs that diverged
    runs: int
    base_diverged: int
    max_reached: int | None = None  # seeds.max of an adaptive study whose last planned look this is
    # seeds.max a new study would need to settle the claim at the spread these seeds showed (its power
    # plan, ablate/stats/power.py; None: more than its limit, or not computed)
    seeds_needed: int | None = None
    # the seeds a new study needs at the observed effect and at each end of its interval
    # (ablate/stats/replication_size.py): preferred over seeds_needed, which assumes a true effect
    seeds_across: SeedsAcross | None = None
    # the interval's ends with each seed left out (ablate/stats/borderline.py), for a borderline verdict
    leave_one_out: LeaveOneOut | None = None


def claim_margin(claim: Expectation, min_effect: float | None) -> float | None:
    """The equivalence margin of an ``effect: none`` claim: its own, else the study's min_effect."""
    return none_margin("none", claim.margin, min_effect)


def judge(claim: Expectation, ev: Evidence | None, higher_is_better: bool, unit: str = ""
          ) -> tuple[Outcome, str]:
    """(outcome, why) of one claim on its evidence. ``worse`` / ``better`` are reproduced by a significant
    difference that way, contradicted by one the other way, by identical seeds or by an interval inside
    +-min_effect; ``none`` by an interval within +-margin (reproduced) or wholly beyond it (contradicted);
    ``identical`` by every paired seed equal (or any differing). A variant that diverged in at least half
    its runs while the baseline never did failed to train: it reproduces ``worse``, contradicts the rest.
    ``unit``: the metric's, for the margin a reproduced direction clears. No evidence (``ev`` None: no run
    of the variant yet) settles nothing. A verdict on a margin whose deciding bound lies within
    ``borderline.FRACTION`` of it says so, with the interval's ends over the seeds left out one at a time
    (ablate/stats/borderline.py)."""
    if ev is None:
        return OPEN, "the study has no runs of this variant yet"
    outcome, why = _judge(claim, ev, higher_is_better, unit)
    margin = claim_margin(claim, ev.min_effect) if claim.effect == "none" else claim.margin
    return outcome, why + _borderline(ev, margin, claim.effect == "none")


def _borderline(ev: Evidence, margin: float | None, within_claim: bool) -> str:
    """' (borderline: ...)' where the interval's deciding end lies within FRACTION of the margin: for a
    "none" claim the end farthest from 0 (it must stay inside), unless the interval lies wholly beyond
    the margin (then the end nearest 0); for a claim of a difference beyond the margin, the end nearest
    0 (it must clear the margin)."""
    if margin is None or not _has_ci(ev):
        return ""
    near, far = sorted((ev.lo, ev.hi), key=abs)
    beyond = (ev.lo > 0 or ev.hi < 0) and abs(near) > margin
    bound = far if within_claim and not beyond else near
    if not borderline(bound, margin):
        return ""
    loo = ev.leave_one_out
    moved = ("" if loo is None else f"; with one seed left out its interval's ends range over "
             f"[{loo.lo_range[0]:+.4g}, {loo.lo_range[1]:+.4g}] and [{loo.hi_range[0]:+.4g}, "
             f"{loo.hi_range[1]:+.4g}]")
    return (f" (borderline: the deciding bound {bound:+.4g} lies within {FRACTION:.0%} of the ±{margin:g} "
            f"margin{moved})")


def _judge(claim: Expectation, ev: Evidence, higher_is_better: bool, unit: str) -> tuple[Outcome, str]:
    failed = ev.runs > 0 and 2 * ev.diverged >= ev.runs and ev.base_diverged == 0
    if claim.effect == "identical":
        return _judge_identical(ev, failed)
    if claim.effect == "none":
        return _judge_none(claim, ev, failed, higher_is_better)
    if is_margin_claim(claim.effect, claim.margin):
        return _judge_margin(claim, ev, failed, higher_is_better, unit)
    wanted_better = claim.effect == "better"
    if failed:
        return (CONTRADICTED if wanted_better else REPRODUCED), "it failed to train (diverged)"
    if ev.significant:
        found_better = _found_better(ev, higher_is_better)
        found = "better" if found_better else "worse"
        if found_better != wanted_better:
            return CONTRADICTED, f"significantly {found}"
        return REPRODUCED, f"significantly {found}{_how_much(ev, unit)}"
    if ev.identical:
        return CONTRADICTED, "identical to the baseline in every paired seed"
    m, has_ci = ev.min_effect, _has_ci(ev)
    if has_ci and m is not None and -m <= ev.lo and ev.hi <= m:
        return CONTRADICTED, f"no effect as large as ±{m:g}"
    if not has_ci:
        return OPEN, _too_few(ev)
    return OPEN, ("no significant difference at the study's maximum of "
                  f"{ev.max_reached} seeds ({_new_study(ev)})" if ev.max_reached
                  else "no significant difference yet")


def _judge_identical(ev: Evidence, failed: bool) -> tuple[Outcome, str]:
    if ev.identical:
        return REPRODUCED, f"the same value in all {ev.n} paired seeds"
    if ev.differing:
        return CONTRADICTED, f"{ev.differing} paired seed(s) differ from the baseline"
    if failed:
        return CONTRADICTED, "it diverged where the baseline did not"
    return OPEN, "no seed where both it and the baseline finished"


def _judge_none(claim: Expectation, ev: Evidence, failed: bool, higher_is_better: bool
                ) -> tuple[Outcome, str]:
    margin = claim_margin(claim, ev.min_effect)
    assert margin is not None  # the spec refuses 'none' without one
    has_ci = _has_ci(ev)
    if ev.identical:
        return REPRODUCED, "identical to the baseline in every paired seed"
    if failed:
        return CONTRADICTED, "it diverged where the baseline did not"
    if has_ci and equivalent(ev.lo, ev.hi, margin, ev.n):
        return REPRODUCED, f"the interval lies within ±{margin:g}"
    if has_ci and within(ev.lo, ev.hi, margin):  # too few pairs to call it no effect (stats/verdict.py)
        return OPEN, (f"the interval lies within ±{margin:g}, but {ev.n} paired seeds are too few to call "
                      f"it no effect (at least {EQUIVALENCE_PAIRS}): {_more_seeds(ev)}")
    if has_ci and (ev.lo > margin or ev.hi < -margin):
        return CONTRADICTED, f"the interval lies beyond ±{margin:g}"
    if has_ci and ev.significant:  # a difference, though perhaps one smaller than the margin
        found = "better" if _found_better(ev, higher_is_better) else "worse"
        # Adaptive seeds (evidence with a min_effect) go on for a `none` claim until its interval lies
        # within the margin or wholly beyond it (answers()), up to the maximum.
        more = (f"the study's maximum of {ev.max_reached} seeds is reached ({_new_study(ev)})"
                if ev.max_reached
                else f"the study adds seeds until it lies within ±{margin:g} or wholly beyond"
                if ev.min_effect is not None else "more seeds would tell")
        return OPEN, f"significantly {found}, but the interval still reaches within ±{margin:g}: {more}"
    return OPEN, (f"the interval reaches beyond ±{margin:g}: {_more_seeds(ev)}" if has_ci else _too_few(ev))


def _judge_margin(claim: Expectation, ev: Evidence, failed: bool, higher_is_better: bool, unit: str
                  ) -> tuple[Outcome, str]:
    """A claim of superiority (or inferiority) by a margin: reproduced when the whole interval lies beyond
    the margin the claimed way, contradicted as stated when its far bound falls short of it (saying whether
    the direction held), open otherwise; a variant that failed to train contradicts ``better`` by any
    margin and reproduces ``worse``."""
    margin = claim.margin
    assert margin is not None
    by = f"{claim.effect} by more than {margin:g}{' ' + unit if unit else ''}"
    if failed:
        outcome = REPRODUCED if claim.effect == "worse" else CONTRADICTED
        return outcome, "it failed to train (diverged)"
    if ev.identical:
        return CONTRADICTED, f"as stated ({by}): identical to the baseline in every paired seed"
    if not _has_ci(ev):
        return OPEN, _too_few(ev)
    beyond, short = margin_reading(ev.lo, ev.hi, claim.effect, margin, higher_is_better)
    if beyond:
        return REPRODUCED, f"{by}: the whole interval lies beyond {margin:g}"
    if short:
        if ev.significant:
            found = "better" if _found_better(ev, higher_is_better) else "worse"
            held = (f"significantly {found}, by less than {margin:g}" if found == claim.effect
                    else f"significantly {found}: the direction did not hold either")
        else:
            held = f"by less than {margin:g}, its direction open"
        return CONTRADICTED, f"as stated ({by}): {held}"
    reach = f"the interval reaches both sides of {margin:g}"
    if ev.max_reached:
        return OPEN, f"{reach}: the study's maximum of {ev.max_reached} seeds is reached ({_new_study(ev)})"
    return OPEN, f"{reach}: {_more_seeds(ev)}"


def _has_ci(ev: Evidence) -> bool:
    return math.isfinite(ev.lo) and math.isfinite(ev.hi)


def _how_much(ev: Evidence, unit: str) -> str:
    """Whether a reproduced direction also clears the study's min_effect, in the metric's unit."""
    m = ev.min_effect
    if m is None or not _has_ci(ev):
        return ""
    if min(abs(ev.lo), abs(ev.hi)) >= m:
        return f", by at least {m:g} {unit}"
    return f" in direction only: its interval does not clear the {m:g} {unit} this study cares about"


def _more_seeds(ev: Evidence) -> str:
    if ev.max_reached:  # only a new study could settle it: this one's design never moves
        return f"the study's maximum of {ev.max_reached} seeds is reached ({_new_study(ev)})"
    return "more seeds would tell"


def _new_study(ev: Evidence) -> str:
    a = ev.seeds_across
    if a is not None:
        rung = (f"; the sd carries the ladder's rung-level variance, rung sd {math.sqrt(a.rung_var):.3g}"
                if a.rung_var > 0 else "")
        return (f"{a.words()} (a paired t test at 80% power; these seeds had {a.power_here:.0%} at the "
                f"observed effect{rung})")
    if ev.seeds_needed is not None:
        return f"a new study with seeds.max {ev.seeds_needed} would tell"
    return "a new study would need more than 100 seeds at this spread"


def _found_better(ev: Evidence, higher_is_better: bool) -> bool:
    return (ev.diff > 0) == higher_is_better


def _too_few(ev: Evidence) -> str:
    if ev.n:
        return "too few paired seeds for an interval yet"
    return "no seed where both it and the baseline finished"
