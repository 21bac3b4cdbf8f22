"""The one place verdicts are decided (ablate/stats/verdict.py): each reading from the looks that give it."""

from __future__ import annotations

import math

import pytest

from ablate.stats.sequential import Design, walk
from ablate.stats.verdict import (
    Fixed,
    Look,
    Reading,
    State,
    agrees,
    at_scale,
    fixed_reading,
    holm_significant,
    one_family,
    read,
)

DESIGN = Design((3, 4, 5, 6, 7, 8), 0.05, 0.5, family=5)


def _look(state: State, diff: float = -1.0, *, final: bool = False, decided: bool = False, k: int = 1
          ) -> Look:
    return Look(3 + k, k, diff, diff - 0.5, diff + 0.5, 0.4, 1.0, state, final, decided)


def test_an_answered_effect_reads_its_direction_by_the_metrics_sense() -> None:
    worse = _look("effect", -1.0, decided=True)
    assert read([worse], higher=True).reading == Reading.WORSE
    assert read([worse], higher=False).reading == Reading.BETTER  # a loss that fell
    assert read([worse]).decided and read([worse]).direction == "worse"


def test_an_effect_whose_claim_is_still_open_is_not_decided_but_keeps_its_words() -> None:
    """presets-multi30k's c-lightning-2024 at 5 seeds: worse, but its none claim's question is open."""
    verdict = read(walk([-1.5, -0.6, -1.3, -0.9, -1.25], DESIGN, "none", 0.5), higher=True)
    assert verdict.reading == Reading.CLAIM_OPEN and verdict.answer == "worse"
    assert not verdict.decided and verdict.direction is None and verdict.progress == "undecided"


def test_a_none_claim_answered_inside_its_own_margin_reads_no_effect() -> None:
    """The interval lies within the claim's margin though not within min_effect: the state stays 'open',
    the claim's question is answered, and every section reads no effect (the study, the arms, the forest
    plot's answer used to disagree here)."""
    inside = _look("open", 0.1, decided=True)
    verdict = read([inside])
    assert verdict.reading == Reading.NO_EFFECT and verdict.answer == "no effect"
    assert verdict.decided and verdict.direction == "none" and verdict.progress == "no_effect"


def test_open_readings_are_told_apart() -> None:
    assert read([_look("open")]).reading == Reading.OPEN
    assert read([_look("open", final=True)]).reading == Reading.OPEN_AT_MAX
    assert read([_look("open", final=True)]).settled and not read([_look("open")]).settled
    earlier, now = _look("effect", k=1), _look("open", k=2)
    reopened = read([earlier, now])
    assert reopened.reading == Reading.REOPENED and reopened.earlier == earlier and reopened.answer == "open"
    assert read([_look("untestable")]).reading == Reading.UNTESTABLE
    assert read([_look("open")], lost=True).reading == Reading.NO_PAIRS
    assert read([]).reading == Reading.WAITING
    identical = read([_look("identical", 0.0, decided=True)])
    assert identical.reading == Reading.IDENTICAL and not identical.decided
    assert identical.progress == "identical"


def test_the_test_split_agrees_only_where_validation_answered() -> None:
    worse = read([_look("effect", decided=True)])  # [-1.5, -0.5]
    open_ = read([_look("open", 0.2)])  # [-0.3, +0.7]: over 0
    better = read([_look("effect", 1.0, decided=True)])  # [+0.5, +1.5]
    # an open test reading neither confirms nor excludes the validation verdict: not flagged
    assert agrees(worse, worse) is True and agrees(worse, open_) is None
    assert agrees(worse, better) is False  # its interval excludes the direction validation states
    # validation open: flagged only where the test interval excludes 0
    assert agrees(open_, worse) is False and agrees(open_, open_) is None and agrees(worse, None) is None


def test_a_fixed_seed_lists_verdicts() -> None:
    assert fixed_reading(math.nan, math.nan, 0.0, False, True) == Fixed.NO_RUNS
    assert fixed_reading(0.0, 1.0, 0.5, True, True) == Fixed.IDENTICAL
    assert fixed_reading(-1.0, math.nan, 0.0, False, True) == Fixed.TOO_FEW
    assert fixed_reading(-1.0, 0.01, 0.0, False, True) == Fixed.WORSE
    assert fixed_reading(-1.0, 0.01, 0.0, False, False) == Fixed.BETTER
    assert fixed_reading(-1.0, 0.01, 0.0, False, None) == Fixed.SIGNIFICANT
    assert fixed_reading(-1.0, 0.5, 0.5, False, True) == Fixed.NOT_TESTABLE
    assert fixed_reading(-1.0, 0.2, 0.001, False, True) == Fixed.NO_DETECTABLE
    assert holm_significant(-1.0, 0.04) and not holm_significant(-1.0, 0.06)


@pytest.mark.parametrize(("small", "lo", "hi", "p", "outcome"), [
    ("better", 0.5, 1.5, 0.01, "transfers"), ("better", -1.5, -0.5, 0.01, "reverses"),
    ("better", -0.5, 1.5, 0.2, "not settled"), ("none", -0.3, 0.3, 0.9, "transfers"),
    ("none", 0.6, 1.2, 0.01, "reverses"), ("none", 0.2, 0.8, 0.05, "not settled"),
    ("worse", math.nan, math.nan, math.nan, "not settled")])
def test_a_verdict_at_a_larger_scale(small: str, lo: float, hi: float, p: float, outcome: str) -> None:
    diff = (lo + hi) / 2
    assert at_scale(small, diff, lo, hi, p, 0.95, True, 0.5) == outcome  # type: ignore[arg-type]


def test_a_studys_comparisons_are_one_family() -> None:
    # every comparison; a tuned study's own-best comparisons join them, those reading the same cells once
    assert [one_family(n) for n in (0, 1, 5)] == [1, 1, 5]
    assert one_family(6, 2) == 8 and one_family(6, 6) == 12
