"""Verdicts checked at a larger scale (ablate/report/compute/scale_outcomes.py): a synthetic pair whose sign
flips between two fidelities is reported as reversed; one that holds transfers; noise is not settled."""

from __future__ import annotations

import pytest

from ablate.report.compute.scale_outcomes import Rerun, check_transfer, check_transfers

SEEDS = range(8)
BASE = {s: 20.0 + 0.1 * s for s in SEEDS}
NOISE = [0.05, -0.04, 0.03, -0.02, 0.04, -0.05, 0.01, -0.03]


def shifted(by: float) -> dict[int, float]:
    return {s: BASE[s] + by + NOISE[s] for s in SEEDS}


def test_a_sign_that_flips_at_the_larger_scale_is_reversed() -> None:
    # the study said better (higher BLEU); at the larger scale the variant is 1 BLEU worse on every seed
    t = check_transfer(Rerun("positions=alibi", "better", BASE, shifted(-1.0)), higher_is_better=True)
    assert t.outcome == "reverses" and t.effect.paired and t.effect.hi < 0


def test_the_same_direction_transfers_and_a_loss_reads_the_other_way() -> None:
    assert check_transfer(Rerun("v", "better", BASE, shifted(+1.0)), True).outcome == "transfers"
    assert check_transfer(Rerun("v", "worse", BASE, shifted(-1.0)), True).outcome == "transfers"
    # a loss: lower is better, so a higher value is worse
    assert check_transfer(Rerun("v", "worse", BASE, shifted(+1.0)), False).outcome == "transfers"
    assert check_transfer(Rerun("v", "better", BASE, shifted(+1.0)), False).outcome == "reverses"


def test_noise_or_too_few_seeds_is_not_settled() -> None:
    assert check_transfer(Rerun("v", "better", BASE, shifted(0.0)), True).outcome == "not settled"
    three = {s: BASE[s] for s in range(3)}
    worse = {s: BASE[s] - 1.0 for s in range(3)}  # consistent, but 3 pairs cannot reach p < 0.05
    t = check_transfer(Rerun("v", "better", three, worse), True)
    assert t.outcome == "not settled" and t.effect.p_min >= 0.05
    assert check_transfer(Rerun("v", "better", {0: 1.0}, {0: 2.0}), True).outcome == "not settled"


def test_no_effect_transfers_within_its_margin_and_reverses_beyond_it() -> None:
    assert check_transfer(Rerun("v", "none", BASE, shifted(0.0), margin=0.5), True).outcome == "transfers"
    assert check_transfer(Rerun("v", "none", BASE, shifted(2.0), margin=0.5), True).outcome == "reverses"
    assert check_transfer(Rerun("v", "none", BASE, shifted(0.5), margin=0.5), True).outcome == "not settled"
    with pytest.raises(ValueError):
        check_transfer(Rerun("v", "none", BASE, shifted(0.0)), True)


def test_several_verdicts_are_one_family() -> None:
    verdicts = [Rerun(f"v{i}", "better", BASE, shifted(1.0)) for i in range(5)]
    checked = check_transfers(verdicts, True, alpha=0.05)
    assert [t.confidence for t in checked] == pytest.approx([0.99] * 5)
    one = check_transfer(verdicts[0], True)
    assert checked[0].effect.hi - checked[0].effect.lo > one.effect.hi - one.effect.lo  # wider intervals
    assert {t.outcome for t in checked} == {"transfers"}
