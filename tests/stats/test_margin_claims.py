"""Claims decided by the margin they name: ``expect: {effect: better, margin: X}`` is superiority by more
than X, reproduced when the whole interval lies beyond X the claimed way, contradicted as stated when its
far bound falls short of X, open otherwise; the study stops when that rule answers, and its plan's power is
the power of that rule (predicted against an independent simulation of the study, within 3 points)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from ablate.spec.load import SpecError
from ablate.spec.study_sections import Expectation
from ablate.stats.claims import CONTRADICTED, OPEN, REPRODUCED, Evidence, judge
from ablate.stats.power import claim_power, claim_truth, seeds_needed, simulate
from ablate.stats.sequential import Design, planned_looks, walk
from ablate.stats.verdict import Reading, answers, margin_reading, read
from ablate.study.designs import plan_study
from ablate.study.sizing import claim_text
from tests.study.test_adaptive_seeds import write


def evidence(lo: float, hi: float, significant: bool | None = None) -> Evidence:
    diff = (lo + hi) / 2
    sig = (lo > 0 or hi < 0) if significant is None else significant
    return Evidence("val/loss", diff, lo, hi, "95% CI", 6, sig, 6, False, None, 0, 6, 0)


BETTER_LOSS = Expectation(variant="v", effect="better", margin=0.05, source="s")  # on a loss: below -0.05


@pytest.mark.parametrize(("lo", "hi", "outcome", "words"), [
    (-0.14, -0.06, REPRODUCED, "better by more than 0.05"),
    (-0.04, -0.01, CONTRADICTED, "significantly better, by less than 0.05"),  # the direction held
    (-0.03, 0.02, CONTRADICTED, "by less than 0.05, its direction open"),
    (0.01, 0.04, CONTRADICTED, "significantly worse: the direction did not hold either"),
    (-0.143, -0.023, OPEN, "reaches both sides of 0.05"),  # sized-axes' RoPE: direction only, not the margin
])
def test_a_margin_claim_is_judged_by_its_own_rule(lo: float, hi: float, outcome: str, words: str) -> None:
    found, why = judge(BETTER_LOSS, evidence(lo, hi), higher_is_better=False, unit="nats")
    assert found == outcome and words in why, why
    # the same claim on a metric that grows as things improve, mirrored
    bleu = Expectation(variant="v", effect="better", margin=0.05, source="s")
    assert judge(bleu, evidence(-hi, -lo), higher_is_better=True, unit="BLEU")[0] == outcome
    worse = Expectation(variant="v", effect="worse", margin=0.05, source="s")
    assert judge(worse, evidence(-hi, -lo), higher_is_better=False)[0] == outcome


def test_a_direction_only_claim_is_never_worded_with_a_margin() -> None:
    assert claim_text("positions=rope", "better", None, 0.05) == "positions=rope better than the baseline"
    assert claim_text("positions=rope", "better", 0.05, None) == (
        "positions=rope better than the baseline by more than 0.05")
    assert claim_text("norm=rms", "none", None, 0.5) == "norm=rms ≈ baseline (±0.5)"


def test_the_walk_goes_on_until_the_margin_rule_answers() -> None:
    design = Design(planned_looks(3, 12), 0.05, None, 1)
    rng = np.random.default_rng(0)
    diffs = list(-0.08 + 0.03 * rng.standard_normal(12))  # lower is better: 0.08 better, margin 0.05
    direction = walk(diffs, design, "better", None, higher=False)
    by_margin = walk(diffs, design, "better", 0.05, higher=False)
    assert direction[-1].decided and by_margin[-1].decided
    assert len(by_margin) > len(direction)  # excluding 0 came first; clearing 0.05 took more seeds
    last = by_margin[-1]
    assert margin_reading(last.lo, last.hi, "better", 0.05, higher=False) == (True, False)
    assert read(by_margin, higher=False, question="better", margin=0.05).reading == Reading.BETTER
    # an interval that excludes 0 but reaches across the margin does not answer the margin claim
    assert not answers(direction[-1].state, direction[-1].lo, direction[-1].hi, "better", 0.05, higher=False)


def test_short_of_the_margin_with_no_effect_either_way_reads_so() -> None:
    design = Design((4,), 0.05, None, 1)
    looks = walk([0.01, -0.01, 0.0, 0.005], design, "better", 0.5, higher=True)
    verdict = read(looks, higher=True, question="better", margin=0.5)
    assert verdict.reading == Reading.SHORT and verdict.answer == "short of its margin"


def _simulated_power(design: Design, truth: float, sd: float, margin: float, studies: int, seed: int
                     ) -> float:
    """The fraction of independently simulated studies (their own random seeds) whose sequential walk, as
    the study runs it, ends with the claim reproduced."""
    rng = np.random.default_rng(seed)
    hits = 0
    for _ in range(studies):
        diffs = list(truth + sd * rng.standard_normal(design.looks[-1]))
        last = walk(diffs, design, "better", margin, higher=True)[-1]
        hits += margin_reading(last.lo, last.hi, "better", margin, True)[0]
    return hits / studies


@pytest.mark.parametrize("looks", [(6,), planned_looks(3, 10)])
def test_the_margin_rules_predicted_power_matches_a_simulated_study(looks: tuple[int, ...]) -> None:
    design = Design(looks, 0.05, 0.05, family=2)
    sd, margin = 0.04, 0.05
    truth = claim_truth(design, "better", margin)
    assert truth == pytest.approx(0.10)  # the margin plus min_effect
    predicted = claim_power(design, sd, "better", margin)
    assert predicted is not None and 0.05 < predicted < 0.99
    simulated = _simulated_power(design, truth, sd, margin, studies=1500, seed=11)
    assert abs(predicted - simulated) <= 0.03, (predicted, simulated)


@pytest.mark.slow
def test_clearing_a_margin_takes_more_seeds_than_excluding_zero() -> None:
    """sized-axes' RoPE comparison at its own found effect and spread (-0.083 nats, paired sd 0.022): its
    design (looks at 3..18 seeds, 2 comparisons) stops later when it must clear 0.05 than when it must
    exclude 0, and the margin claim needs more seeds than the direction to reach 80%."""
    design = Design(planned_looks(3, 18), 0.05, 0.083 - 0.05, family=2)
    by_rule = simulate(design, 0.083, 0.022, "better", 0.05)
    by_direction = simulate(design, 0.083, 0.022, "better")
    assert by_rule.mean_seeds > by_direction.mean_seeds + 1.0, (by_rule, by_direction)
    by_margin = seeds_needed(design, 0.022, "better", 0.05)  # at the truth 0.05 + min_effect: 0.083
    direction = seeds_needed(Design(planned_looks(3, 18), 0.05, 0.083, family=2), 0.022, "better", None)
    assert by_margin is not None and direction is not None and by_margin > direction


def test_the_spec_takes_a_margin_on_better_and_refuses_one_on_identical(tmp_path: Path) -> None:
    folder = tmp_path
    seeds = "  seeds: {min: 2, max: 4}\n  min_effect: 0.05"
    path = write(folder, "m", seeds)
    text = path.read_text().replace("effect: identical, source", "effect: better, margin: 0.1, source")
    path.write_text(text)
    assert plan_study(str(path)).ablation.expect[0].margin == 0.1
    path.write_text(text.replace("effect: better, margin: 0.1", "effect: identical, margin: 0.1"))
    with pytest.raises(SpecError, match="an identity check has no margin"):
        plan_study(str(path))
