"""The words of every verdict ablate states: one set of enums, each answering one question.

Every report section, ``ablate status`` and the dry run print a verdict with these members (a section reads
them through ``ablate.report.compute.comparisons``); none spells a state as a bare string. One word is
spelled one way wherever it appears: "better" is ``Reading.BETTER``, ``Answer.BETTER`` and ``Fixed.BETTER``
alike, and a value is never changed, because reports, ``report.json`` and the store's records hold them.

================ ============================================ ======================================
enum             the question it answers                      decided by
================ ============================================ ======================================
``Question``     what a published claim says a variant does   the spec (``ablation.expect``)
``State``        what a look's interval shows, and where a    ``sequential.evaluate``, ``Progress``
                 comparison's rounds stand
``Reading``      what a comparison's looks say                ``verdict.read``
``Answer``       that reading in one word                     ``Verdict.answer``
``Direction``    a decided verdict as a larger scale checks   ``Verdict.direction``
``HeldOut``      the test split beside the validation verdict ``verdict.held_out_reading``
``Fixed``        a fixed seed list's verdict (one look)       ``verdict.fixed_reading``
``ScaleOutcome`` whether a verdict holds at a larger setting  ``verdict.at_scale``
``Outcome``      what a study says of a published result      ``claims.judge``
``Transfer``     how a gap moves along a ladder's rungs       ``transfer``, ``rung_trend``
``Tuning``       what tuning each variant did to a verdict    ``report.compute.arm_verdicts``
================ ============================================ ======================================

Imports nothing: the statistics floor's modules (``verdict``, ``sequential``, ``claims``, ``transfer``) take
their words from here.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Literal

# The question a study's claim asks of a comparison (ablation.expect's effect, in the spec's words); None:
# no claim.
Question = Literal["better", "worse", "none", "identical"] | None


class State(StrEnum):
    """A comparison in one word: what its latest look's interval shows (``sequential.evaluate``: effect, no
    effect, identical, open, untestable), and where its rounds of adaptive seeds stand (the dry run's and
    ``ablate status``' column, ``sequential.Progress.state``: the verdict once its rounds are over, no pairs
    or undecided among them, else open or waiting)."""

    EFFECT = "effect"  # the repeated interval excludes 0
    NO_EFFECT = "no_effect"  # it lies within +-min_effect
    IDENTICAL = "identical"  # every pair's difference is exactly 0
    OPEN = "open"  # neither: a look read, more seeds to come
    UNTESTABLE = "untestable"  # fewer than two finite pairs at the look
    NO_PAIRS = "no_pairs"  # its rounds over without a seed where both it and the baseline finished
    UNDECIDED = "undecided"  # open at the last planned look: no more seeds
    WAITING = "waiting"  # before its first look


class Reading(StrEnum):
    """What a comparison's looks say."""

    BETTER = "better"  # an effect, the comparison's question answered
    WORSE = "worse"
    NO_EFFECT = "no effect"  # the interval within +-min_effect (or a none claim's own margin)
    IDENTICAL = "identical"  # every paired seed gives exactly the baseline's value
    OPEN = "open"  # undecided, its rounds continue
    OPEN_AT_MAX = "open at its maximum"  # undecided at the last planned look
    REOPENED = "reopened"  # undecided now, where an earlier look read an effect or no effect
    UNTESTABLE = "untestable"  # fewer than two finite pairs at the look
    NO_PAIRS = "no pairs"  # no seed where both it and the baseline finished: nothing to test
    CLAIM_OPEN = "claim open"  # an effect (or no effect) read while the claim's own question is open
    SHORT = "short of its margin"  # a margin claim answered: the interval's far bound short of its margin
    WAITING = "waiting"  # before the first planned look


class Answer(StrEnum):
    """A comparison's verdict in one word, as every section, the status and the dry run print it
    (``Verdict.answer``)."""

    BETTER = "better"
    WORSE = "worse"
    NO_EFFECT = "no effect"
    IDENTICAL = "identical"
    SHORT = "short of its margin"  # a margin claim answered without an effect as large as its margin
    OPEN = "open"  # not answered (yet): open, open at its maximum, reopened, untestable, no pairs, waiting


class Direction(StrEnum):
    """A decided verdict as a larger scale checks it: an effect either way, or no effect."""

    BETTER = "better"
    WORSE = "worse"
    NONE = "none"


class HeldOut(StrEnum):
    """What the test split, on the validation verdict's seeds and look, says beside it."""

    AGREES = "agrees"  # the same answer
    OPEN = "open"  # its interval neither confirms nor excludes the validation verdict: worded as open
    DISAGREES = "disagrees"  # its interval excludes the direction (or the margin) validation states
    UNSETTLED_EFFECT = "effect where validation is open"  # validation open, the test interval excludes 0


class Fixed(StrEnum):
    """A fixed-sample comparison's verdict (the Effects table; significant at p < ALPHA unadjusted, the
    Holm-adjusted p beside it)."""

    NO_RUNS = "no finished runs"
    IDENTICAL = "identical"
    TOO_FEW = "too few seeds"  # one run on a side: no test at all
    BETTER = "better"
    WORSE = "worse"
    SIGNIFICANT = "significant"  # significant without a direction (an interaction)
    NOT_TESTABLE = "not testable"  # p < ALPHA out of reach at these sample sizes
    NO_DETECTABLE = "no detectable effect"


class ScaleOutcome(StrEnum):
    """Whether a decided verdict holds at a larger setting."""

    TRANSFERS = "transfers"
    REVERSES = "reverses"
    NOT_SETTLED = "not settled"


class Outcome(StrEnum):
    """What a study says of a published result it checks (``ablation.expect``)."""

    REPRODUCED = "reproduced"
    CONTRADICTED = "contradicted"
    NOT_SETTLED = "not settled"


class Transfer(StrEnum):
    """How a comparison's gap moves along a ladder's rungs (``ablate.stats.transfer``)."""

    GROWS = "grows"
    SHRINKS = "shrinks"
    HOLDS = "holds"
    REVERSES = "reverses"
    NOT_SETTLED = "not settled"


class Tuning(StrEnum):
    """What tuning each variant did to a comparison's verdict (the report's own-best table)."""

    CHANGED = "changed"  # the verdict at each variant's own best differs from the baseline's settings'
    PENDING = "pending"  # an arm's rounds continue
    SAME_CELLS = "same_cells"  # neither search moved the settings: both arms are the same cells
    HOLDS = "holds"


# Every enum above: what tests/stats/test_vocabulary.py checks, and what no module of report/ or the CLI
# spells as a bare string.
VERDICT_WORDS: tuple[type[StrEnum], ...] = (State, Reading, Answer, Direction, HeldOut, Fixed, ScaleOutcome,
                                            Outcome, Transfer, Tuning)
