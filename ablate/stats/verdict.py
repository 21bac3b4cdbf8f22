"""Every verdict ablate states, and the one place each is decided.

A study decides with these rules which comparisons get more seeds and which are rerun at a larger scale;
the report states the same verdicts in every section (the opening lines, the summary, Adaptive seeds, the
forest plot, the arms, At a larger scale), rendering them without deciding anything again. A change to a
rule is a change here and nowhere else:

* :func:`one_family`: how many verdicts share the study's alpha (both arms of a tuned study together).
* the pairs a comparison is judged on, a diverged cell counted against its side: ``ablate.stats.pairing``.
* :func:`answers`: whether a look answers a comparison's own question (its claim's, else an effect or no
  effect as large as min_effect): the group-sequential walk stops there; :func:`interval_answers`, the
  same rule on the interval's bounds (floats, or the power simulation's arrays).
* :func:`read`: what a comparison's looks say, as one :class:`Verdict` (:class:`Reading`: better, worse,
  within the margin, identical, open, open at its maximum, reopened, untestable, an effect read while the
  claim's own question is still open).
* :func:`held_out_reading`: what the test split, on the same seeds and look, says beside the validation
  verdict: agrees, open, disagrees (its interval excludes what validation states) or an effect where
  validation is open; :func:`agrees` reduces it to the flag the report shows.
* :func:`fixed_reading`: a fixed seed list's verdict (one look, the report's Effects table).
* :func:`at_scale`: whether a decided verdict transfers, reverses or is not settled at a larger setting.
* ``ablate.stats.claims.judge``: whether a study reproduces, contradicts or has not settled a published
  result.

Pure arithmetic on numbers the statistics computed (``ablate.stats.sequential`` for the looks,
``ablate.report`` for the fixed-sample effects), in the words of ``ablate.stats.vocabulary``: it imports
nothing of ablate but the spec's claim and that vocabulary.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ablate.stats.vocabulary import (
    Answer,
    Direction,
    Fixed,
    HeldOut,
    Question,
    Reading,
    ScaleOutcome,
    State,
)

ALPHA = 0.05  # the overall two-sided level of every verdict (a study's family shares it)

# The fewest paired seeds a "no effect" verdict rests on. An interval inside +-margin from 2 or 3 pairs
# rests on 1 or 2 degrees of freedom of their spread, and a lucky small spread is then likely; the report's
# own fixed-sample tests cannot test so few either (a permutation test over 3 pairs cannot reach p < 0.05).
# With fewer pairs such a comparison stays open (adaptive seeds add more): a comparison too small to test
# is never also called "no effect". An effect verdict (an interval excluding 0) is not held back: it says
# the sign, which more seeds would not turn.
EQUIVALENCE_PAIRS = 4

# At most this many pairs, a fixed-sample comparison is tested exactly: sign flips of the per-seed differences
# (ablate/report/compute/statistics.py), whose smallest two-sided p is 2 / 2^n (3 pairs: 0.25).
SIGN_FLIP_PAIRS = 3


def sign_flip_floor(pairs: int) -> float:
    """The smallest two-sided p an exact sign-flip test of ``pairs`` paired differences can give."""
    return min(1.0, 2.0 / 2**pairs)


@dataclass(frozen=True)
class Look:
    """One comparison at one look: the mean difference, its repeated confidence interval, the state."""

    n: int  # pairs with a finite difference
    look: int  # 1-based index of the planned look
    diff: float
    lo: float
    hi: float
    sd: float
    detectable: float  # smallest effect found with 80% power at this n and spread (NaN below 2 pairs)
    state: State
    final: bool  # the last planned look: an open comparison stays undecided
    decided: bool = False  # the comparison's own question is answered (see answers())


def answers(state: State, lo: float, hi: float, question: Question, margin: float | None,
            *, higher: bool = True, n: int = EQUIVALENCE_PAIRS) -> bool:
    """Whether a look over ``n`` pairs answers the comparison's question: a ``none`` claim needs its
    interval within ``+-margin`` (from at least EQUIVALENCE_PAIRS pairs) or wholly beyond it (an interval
    that excludes 0 but still reaches inside the margin answers a question nobody asked); a ``better`` /
    ``worse`` claim with a margin (superiority by that margin) its interval wholly beyond the margin in the
    claimed direction or its far bound short of it (:func:`margin_reading`; ``higher``: the metric grows as
    things improve); any other comparison an effect or no effect as large as min_effect."""
    if state in (State.IDENTICAL, State.UNTESTABLE):
        return state == State.IDENTICAL
    if margin is not None and question in ("none", "better", "worse"):
        return bool(interval_answers(lo, hi, question, margin, None, higher=higher, n=n))
    return state in (State.EFFECT, State.NO_EFFECT)


def is_margin_claim(question: Question, margin: float | None) -> bool:
    """A ``better`` / ``worse`` claim that names a margin: superiority (or inferiority) by more than it."""
    return question in ("better", "worse") and margin is not None


def claimed(lo: Any, hi: Any, question: Question, higher: bool) -> tuple[Any, Any]:
    """The interval in the claim's own direction: positive is the way a ``better`` (or ``worse``) claim
    says the variant moves, on a metric that grows (``higher``) or shrinks as things improve."""
    if (question == "worse") == higher:  # better on a loss, worse on BLEU: the claim points below 0
        return -hi, -lo
    return lo, hi


def margin_reading(lo: Any, hi: Any, question: Question, margin: float, higher: bool = True
                   ) -> tuple[Any, Any]:
    """A margin claim's rule on an interval (floats or arrays): (beyond, short): the whole interval lies
    beyond ``margin`` in the claimed direction (the claim reproduced), or its far bound falls short of it
    (the claim contradicted as stated, whatever the direction)."""
    c_lo, c_hi = claimed(lo, hi, question, higher)
    return c_lo > margin, c_hi < margin


def interval_answers(lo: Any, hi: Any, question: Question, margin: float | None,
                     min_effect: float | None, *, higher: bool = True, n: Any = EQUIVALENCE_PAIRS) -> Any:
    """:func:`answers` read off the interval and its pairs ``n`` alone (a look's state comes from the same
    bounds), with comparisons, ``&`` and ``|`` only: one rule for a look's floats and the power
    simulation's arrays. A margin claim's reading needs no least number of pairs: either way it states
    where the interval lies against the margin, not that there is no effect."""
    if question == "none" and margin is not None:
        return equivalent(lo, hi, margin, n) | (lo > margin) | (hi < -margin)
    if is_margin_claim(question, margin):
        assert margin is not None
        beyond, short = margin_reading(lo, hi, question, margin, higher)
        return beyond | short
    read = (lo > 0.0) | (hi < 0.0)
    if min_effect is not None:
        read = read | equivalent(lo, hi, min_effect, n)
    return read


def within(lo: Any, hi: Any, width: float) -> Any:
    """Intervals wholly inside +-width (floats or arrays alike)."""
    return (-width <= lo) & (hi <= width)


def equivalent(lo: Any, hi: Any, width: float, n: Any) -> Any:
    """An interval from ``n`` pairs that shows no effect as large as ``width``: inside +-width, from at least
    EQUIVALENCE_PAIRS pairs (floats or arrays alike)."""
    return within(lo, hi, width) & (n >= EQUIVALENCE_PAIRS)


# ---------------------------------------------------------------- the family
def one_family(comparisons: int, own_best_distinct: int = 0, rungs: int = 0) -> int:
    """How many verdicts share the study's alpha (Bonferroni): every comparison a report gives a verdict
    on, at the baseline's settings and at each variant's own best alike; an own-best comparison that reads
    the very cells of its baseline's-settings one (neither search moved the settings) is the same test and
    counts once (``own_best_distinct`` counts the others). Before the searches have run, a tuned study counts
    every own-best comparison (``own_best_distinct = comparisons``): the design is fixed before its data.
    On a ladder (``rungs`` > 0) every comparison is made at every rung, and all of those verdicts are one
    family. The confirm arm's transfers, and a ladder's transfer verdicts, are families of their own."""
    return max(1, (comparisons + own_best_distinct) * max(1, rungs))


def family_confidence(family: int, alpha: float = ALPHA) -> float:
    """The confidence each of a family's ``family`` intervals is read at, so that the chance of calling any
    of them wrongly stays at ``alpha`` (Bonferroni: 1 - alpha / family)."""
    return 1 - alpha / max(1, family)


def reopened(looks: Sequence[Look]) -> Look | None:
    """The latest earlier look that read an effect or no effect where the last look reads neither: a
    ``none`` claim's comparison that excluded 0 kept getting seeds, and the seeds since widened its
    interval back over 0. Every look's interval is valid (they cover the true effect simultaneously), so
    the earlier reading is evidence a reader should see beside the open one, not an error."""
    if not looks or looks[-1].state in (State.EFFECT, State.NO_EFFECT, State.IDENTICAL):
        return None
    return next((lk for lk in reversed(looks[:-1]) if lk.state in (State.EFFECT, State.NO_EFFECT)), None)


@dataclass(frozen=True)
class Verdict:
    """One comparison's verdict: the reading, the look it rests on, and an earlier look it reopened."""

    reading: Reading
    look: Look | None  # the deciding look, else the latest one (None before the first)
    better: bool | None = None  # the direction of an effect the look reads (None: it reads none)
    earlier: Look | None = None  # an earlier look that read an effect the later seeds reopened

    @property
    def answer(self) -> Answer:
        """The look's answer in one word: better / worse / no effect / identical / short of its margin /
        open."""
        if self.reading in (Reading.BETTER, Reading.WORSE, Reading.NO_EFFECT, Reading.IDENTICAL,
                            Reading.SHORT):
            return Answer(self.reading.value)
        if self.reading == Reading.CLAIM_OPEN:  # what the look reads, though the question goes on
            return Answer.NO_EFFECT if self.better is None else Answer.BETTER if self.better else Answer.WORSE
        return Answer.OPEN

    @property
    def decided(self) -> bool:
        """An effect or no effect that answers the comparison's question: what a larger scale confirms."""
        return self.reading in (Reading.BETTER, Reading.WORSE, Reading.NO_EFFECT)

    @property
    def settled(self) -> bool:
        """Answered, or undecided at the last planned look: no later round can change it."""
        return self.answer != Answer.OPEN or (self.look is not None and self.look.final)

    @property
    def direction(self) -> Direction | None:
        """A decided verdict as the larger scale checks it (None: not decided)."""
        if not self.decided:
            return None
        if self.reading == Reading.NO_EFFECT:
            return Direction.NONE
        return Direction.BETTER if self.better else Direction.WORSE

    @property
    def progress(self) -> State:
        """The study's one-word state of a comparison whose rounds are over (the dry run's column)."""
        if self.decided:
            return State.NO_EFFECT if self.reading == Reading.NO_EFFECT else State.EFFECT
        if self.reading == Reading.SHORT:  # no effect as large as the claim's margin, the claimed way
            return State.NO_EFFECT
        if self.reading == Reading.IDENTICAL:
            return State.IDENTICAL
        if self.reading == Reading.NO_PAIRS:
            return State.NO_PAIRS
        return State.UNDECIDED


def read(looks: Sequence[Look], higher: bool = True, lost: bool = False, question: Question = None,
         margin: float | None = None) -> Verdict:
    """The verdict of a comparison's looks (``sequential.walk``: up to the one that decided its claim's
    question); ``higher``: the metric grows as things improve; ``lost``: no seed has a pair; ``question``
    and ``margin``: its claim's (a margin claim answered short of its margin without an effect either way
    reads so; with one, the effect)."""
    look = looks[-1] if looks else None
    earlier = reopened(looks)
    if lost:
        return Verdict(Reading.NO_PAIRS, look, None, earlier)
    if look is None:
        return Verdict(Reading.WAITING, None)
    better = (look.diff > 0) == higher if look.state == State.EFFECT else None
    if look.state == State.IDENTICAL:
        reading = Reading.IDENTICAL
    elif look.decided and is_margin_claim(question, margin) and better is None:
        reading = Reading.SHORT  # short of the margin with no effect either way (an effect reads as one)
    elif look.decided:  # decided while 'open': a none claim's interval within its own margin
        reading = Reading.NO_EFFECT if better is None else Reading.BETTER if better else Reading.WORSE
    elif look.state in (State.EFFECT, State.NO_EFFECT):
        reading = Reading.CLAIM_OPEN
    elif look.state == State.UNTESTABLE:
        reading = Reading.UNTESTABLE
    elif earlier is not None:
        reading = Reading.REOPENED
    else:
        reading = Reading.OPEN_AT_MAX if look.final else Reading.OPEN
    return Verdict(reading, look, better, earlier)


def held_out_reading(val: Verdict | None, test: Verdict | None, margin: float | None = None
                     ) -> HeldOut | None:
    """The test split beside a validation verdict (None: nothing to compare). It disagrees only where its
    interval excludes what validation states: the direction of an effect (the whole interval on the other
    side of 0), no effect within +-``margin`` (the interval wholly beyond it), or identity (an interval away
    from 0); where validation is open, an interval that excludes 0 is flagged too. A test reading that is
    merely open is worded as open, never as a disagreement."""
    t = None if test is None else test.look
    if t is None or val is None or val.look is None or math.isnan(t.lo) or math.isnan(t.hi):
        return None
    away = t.lo > 0.0 or t.hi < 0.0
    if val.answer == Answer.OPEN:
        return HeldOut.UNSETTLED_EFFECT if away else None
    if test is not None and test.answer == val.answer:
        return HeldOut.AGREES
    v = val.look
    if val.answer in (Answer.BETTER, Answer.WORSE):
        excluded = t.hi <= 0.0 if v.diff > 0 else t.lo >= 0.0
    elif val.answer == Answer.NO_EFFECT and margin is not None:
        excluded = t.lo > margin or t.hi < -margin
    elif val.answer == Answer.SHORT:  # short of a claim's margin: the test split only agrees or not
        excluded = False
    else:  # identical, or no effect without a margin to judge by
        excluded = away
    return HeldOut.DISAGREES if excluded else HeldOut.OPEN


def agrees(val: Verdict | None, test: Verdict | None, margin: float | None = None) -> bool | None:
    """False where the test split flags the validation verdict (it disagrees, or finds an effect where
    validation is open: :func:`held_out_reading`), True where it agrees, None otherwise."""
    says = held_out_reading(val, test, margin)
    if says in (HeldOut.DISAGREES, HeldOut.UNSETTLED_EFFECT):
        return False
    return True if says == HeldOut.AGREES else None


# ---------------------------------------------------------------- a fixed seed list: one look
def fixed_reading(diff: float, p: float, p_min: float, identical: bool, higher: bool | None,
                  alpha: float = ALPHA) -> Fixed:
    """The verdict of one fixed-sample test (``p`` NaN: no test; ``higher`` None: no reference)."""
    if math.isnan(diff):
        return Fixed.NO_RUNS
    if identical:
        return Fixed.IDENTICAL
    if math.isnan(p):
        return Fixed.TOO_FEW
    if p < alpha:
        if higher is None:
            return Fixed.SIGNIFICANT
        return Fixed.BETTER if (diff > 0) == higher else Fixed.WORSE
    if p_min >= alpha:  # the test could not have said anything else
        return Fixed.NOT_TESTABLE
    return Fixed.NO_DETECTABLE


def holm_significant(diff: float, p_holm: float, alpha: float = ALPHA) -> bool:
    """A fixed seed list's comparisons are one family: a published claim is judged significant by the
    Holm-adjusted p of the Effects table, not the comparison's own p."""
    return fixed_reading(diff, p_holm, 0.0, False, True, alpha) in (Fixed.BETTER, Fixed.WORSE)


# ---------------------------------------------------------------- at a larger scale
def at_scale(small: Direction, diff: float, lo: float, hi: float, p: float, confidence: float,
             higher: bool, margin: float | None, n: int = EQUIVALENCE_PAIRS) -> ScaleOutcome:
    """Whether a decided verdict (``small``) transfers to the larger setting's paired effect (``diff``,
    its interval at ``confidence``, its p; NaN: no test): an effect transfers when the larger scale's test
    is significant the same way and reverses when significant the other way; no effect transfers when the
    interval lies within +-margin and reverses when it lies wholly beyond it."""
    if math.isnan(lo) or math.isnan(hi):
        return ScaleOutcome.NOT_SETTLED
    if small == Direction.NONE:
        m = float(margin)  # type: ignore[arg-type]
        if equivalent(lo, hi, m, n):
            return ScaleOutcome.TRANSFERS
        return ScaleOutcome.REVERSES if lo > m or hi < -m else ScaleOutcome.NOT_SETTLED
    if not math.isnan(p) and p < 1 - confidence and (lo > 0 or hi < 0):  # as the study's verdicts
        direction = Direction.BETTER if (diff > 0) == higher else Direction.WORSE
        return ScaleOutcome.TRANSFERS if direction == small else ScaleOutcome.REVERSES
    return ScaleOutcome.NOT_SETTLED


def none_margin(question: Question, margin: float | None, min_effect: float | None) -> float | None:
    """The margin a verdict of no effect is judged by: a ``none`` claim's own, else the study's min_effect."""
    return margin if question == "none" and margin is not None else min_effect
