"""A family's corrections (ablate/stats/multiplicity.py) against hand-computed values, and the sequential
design's per-comparison level read through Bonferroni's."""

from __future__ import annotations

import math

import pytest

from ablate.stats.multiplicity import bonferroni, bonferroni_level, holm
from ablate.stats.sequential import Design


def test_holm_steps_down_and_stays_monotone() -> None:
    # sorted 0.01, 0.02, 0.04 over m = 3: 3 x 0.01 = 0.03, 2 x 0.02 = 0.04, 1 x 0.04 = 0.04
    assert holm([0.04, 0.01, 0.02]) == pytest.approx([0.04, 0.03, 0.04])
    # a larger raw p early in the order keeps the running maximum: 0.5 x 2 = 1.0 caps the next one too
    assert holm([0.5, 0.6]) == pytest.approx([1.0, 1.0])


def test_nan_entries_are_no_tests() -> None:
    adjusted = holm([math.nan, 0.01, 0.02])
    assert math.isnan(adjusted[0]) and adjusted[1:] == pytest.approx([0.02, 0.02])
    bonf = bonferroni([0.01, math.nan, 0.3])
    assert bonf[0] == pytest.approx(0.02) and math.isnan(bonf[1]) and bonf[2] == pytest.approx(0.6)


def test_bonferroni_caps_at_one_and_holm_never_exceeds_it() -> None:
    ps = [0.001, 0.2, 0.03, 0.6]
    assert bonferroni(ps) == pytest.approx([0.004, 0.8, 0.12, 1.0])
    assert all(h <= b + 1e-12 for h, b in zip(holm(ps), bonferroni(ps), strict=True))


def test_a_designs_level_is_its_alpha_shared_by_its_family() -> None:
    assert bonferroni_level(0.05, 4) == pytest.approx(0.0125) and bonferroni_level(0.05, 0) == 0.05
    assert Design((3, 5), 0.05, None, 4).level == pytest.approx(0.0125)
