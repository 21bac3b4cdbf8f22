"""The dry run says, one plain line per comparison, where a study's design cannot decide it (ablate/study/
sizing.py ``reach_lines``), with the smallest design that could: fixed seeds too few for the report's exact
test, a ``none`` claim under 4 pairs, a claim its pilot-sized plan does not settle at seeds.max."""

from __future__ import annotations

from pathlib import Path

from ablate.study.designs import plan_study
from ablate.study.sizing import reach_lines, study_plan
from tests.factories import STUDY_CELL, write_tiny_spec


def lines_of(folder: Path, name: str, ablation: str) -> list[str]:
    plan = plan_study(str(write_tiny_spec(folder, STUDY_CELL, {"name": name}, extra=ablation,
                                          filename=f"{name}.yaml")))
    return reach_lines(plan, study_plan(plan))


def test_three_fixed_seeds_cannot_decide_anything_and_say_what_could(tmp_path: Path) -> None:
    lines = lines_of(tmp_path, "three", """
ablation:
  axes: {model.norm: [builtin, rms], model.ffn: [swiglu]}
  seeds: [0, 1, 2]
""")
    assert lines == [
        f"  cannot decide {label} against the baseline: 3 fixed seeds: the exact sign-flip test's smallest p "
        "is 0.25, never below alpha 0.05, so the report can only say 'not testable'; the smallest design "
        "that could: seeds: {min: 4, max: 4}; a pilot (ablation.pilot) says how many it needs"
        for label in ("norm=rms", "ffn=swiglu")]
    # four fixed seeds: a t-test, which can decide
    assert lines_of(tmp_path, "four", """
ablation:
  axes: {model.norm: [builtin, rms]}
  seeds: [0, 1, 2, 3]
""") == []


def test_a_none_claim_under_four_pairs_is_said_and_the_others_are_not(tmp_path: Path) -> None:
    lines = lines_of(tmp_path, "none3", """
ablation:
  axes: {model.norm: [builtin, rms], model.ffn: [swiglu]}
  seeds: {min: 2, max: 3}
  min_effect: 0.1
  expect:
    - {variant: norm=rms, effect: none, margin: 0.1, source: a paper}
""")
    assert lines == ["  cannot decide norm=rms ≈ baseline (±0.1): at most 3 paired seeds: a none claim needs "
                     "4 at least to be called no effect; the smallest design that could: seeds: {min: 4, "
                     "max: 4}; a pilot (ablation.pilot) says how many it needs"]
