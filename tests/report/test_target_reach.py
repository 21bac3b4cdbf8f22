"""Steps to a target loss in a report (ablate/report/compute/target_reach.py, its section
reaching_target.py): in the arm where every variant runs at its own best, the target is the tuned
baseline's own final loss (mean over its seeds), not the spec's untuned one; a run that never reaches its
arm's target is censored, counted as "did not reach" and compared by the censoring-aware test."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from ablate.report.compute import target_reach
from ablate.report.compute.loaded_study import Run, Study
from ablate.report.section_api import Inputs
from ablate.report.sections import reaching_target
from ablate.spec import metricnames
from ablate.tracking import record

STEPS = list(range(50, 650, 50))  # evaluations every 50 steps of a 600-step run
SPEC_TARGET = 4.39


def _history(final: float, start: float = 6.0) -> list[tuple[int, float]]:
    """val/loss falling linearly from ``start`` at step 50 to ``final`` at step 600."""
    return [(s, start + (final - start) * (s - 50) / 550) for s in STEPS]


def _run(run_id: str, variant: str, seed: int, final: float, logged_steps: float) -> Run:
    return Run(run_id, variant, seed, "finished", "h", 0.0, {"eval.target_loss": str(SPEC_TARGET)},
               {metricnames.VAL_LOSS: final, metricnames.VAL_STEPS_TO_TARGET: logged_steps}, {})


def _study(runs: list[Run]) -> Study:
    return Study("steps", "ablation", {"tags": {}, "params": {}, "run_id": "p"}, runs,
                 ["baseline", "muon"], "baseline", "loss", metricnames.VAL_STEPS_TO_TARGET)


# the untuned baseline at the baseline's settings: two of three seeds never reach the spec's 4.39
UNTUNED = {0: 4.38, 1: 4.41, 2: 4.42}
# the tuned baseline (its own best rate): final losses 4.00, 4.02, 3.98, mean 4.00
TUNED = {0: 4.00, 1: 4.02, 2: 3.98}
MUON = {0: 3.80, 1: 3.81, 2: 3.79}


@pytest.fixture
def study(monkeypatch: pytest.MonkeyPatch) -> Study:
    histories: dict[str, list[tuple[int, float]]] = {}

    def made(run_id: str, variant: str, seed: int, final: float) -> Run:
        histories[run_id] = _history(final)
        steps = target_reach.first_reach([(s, {metricnames.VAL_LOSS: v}) for s, v in histories[run_id]],
                                         SPEC_TARGET)
        return _run(run_id, variant, seed, final, 600.0 if steps is None else steps)

    base = [made(f"b{s}", "baseline", s, v) for s, v in UNTUNED.items()]
    muon = [made(f"m{s}", "muon", s, v) for s, v in MUON.items()]
    tuned = [made(f"t{s}", "baseline", s, v) for s, v in TUNED.items()]
    monkeypatch.setattr(target_reach, "metric_history", lambda run_id, key: histories[run_id])
    # muon's search kept its rate: the two arms share its cells, one Run object each
    at_baseline = _study(base + muon)
    at_baseline.arms[record.OWN_BEST_ARM] = _study(tuned + muon)
    return at_baseline


def test_the_tuned_arms_target_is_the_tuned_baselines_own_final_loss(study: Study) -> None:
    targets = {t.arm: t for t in target_reach.targets(study)}
    assert targets[record.BASELINE_ARM].target == SPEC_TARGET
    own = targets[record.OWN_BEST_ARM]
    assert own.target == pytest.approx(4.00)
    assert "tuned baseline's own final val/loss" in own.source and "0, 1, 2" in own.source
    # at the spec's untuned target every tuned run reaches it early; at its own final loss the tuned
    # baseline reaches it at the end, or (seed 1, final 4.02) never
    logged = {r.seed: r.metrics[metricnames.VAL_STEPS_TO_TARGET] for r in
              study.arms[record.OWN_BEST_ARM].finished("baseline")}
    assert all(v < 500 for v in logged.values())
    again = target_reach.retarget(study)
    steps = {r.seed: r.metrics[metricnames.VAL_STEPS_TO_TARGET] for r in
             again.arms[record.OWN_BEST_ARM].finished("baseline")}
    assert steps[0] == pytest.approx(600.0) and steps[1] == 600.0 and 550 < steps[2] < 600
    # muon's shared cells are read at the tuned target in that arm only; the baseline's settings keep the
    # spec's
    def muon(s: Study) -> dict[int, float]:
        return {r.seed: r.metrics[metricnames.VAL_STEPS_TO_TARGET] for r in s.finished("muon")}

    assert all(muon(again.arms[record.OWN_BEST_ARM])[s] > muon(again)[s] for s in MUON)
    assert muon(again) == muon(study)


def test_runs_that_never_reach_are_censored_and_counted_per_arm(study: Study) -> None:
    targets = {t.arm: t for t in target_reach.targets(study)}
    base = targets[record.BASELINE_ARM]
    assert base.not_reached("baseline") == 2 and base.not_reached("muon") == 0
    # censored at the last evaluation, not "reached there"
    assert base.reach["baseline"][1] == target_reach.Reach(600, False)
    # muon reached first on every seed: +3, the exact sign-flip p of 3 pairs is 2/8
    c = base.comparisons["muon"]
    assert (c.statistic, c.baseline_not_reached, c.p) == (3, 2, 0.25)
    assert c.answer(base.level) == "no order decided"
    own = targets[record.OWN_BEST_ARM]
    assert own.not_reached("baseline") == 1 and own.comparisons["muon"].statistic == 3


def test_the_section_states_each_arms_target_and_the_runs_that_did_not_reach(study: Study,
                                                                                tmp_path: Path) -> None:
    part = reaching_target.part(Inputs(target_reach.retarget(study), tmp_path))
    assert part is not None
    text = "\n".join(str(b) for s in part.sections for b in s.blocks)
    assert "Steps to val/loss 4.39 at the baseline's settings" in text
    assert "Steps to val/loss 4 each at its own best: the target is the tuned baseline's own final" in text
    assert "1 of 3 (2 did not reach)" in text and "2 of 3 (1 did not reach)" in text
    data = part.data["steps_to_target"]
    assert data[record.OWN_BEST_ARM]["did_not_reach"] == {"baseline": 1, "muon": 0}
    assert data[record.BASELINE_ARM]["comparisons"]["muon"]["answer"] == "no order decided"


def test_a_study_without_steps_to_a_target_has_no_section(study: Study, tmp_path: Path) -> None:
    plain = dataclasses.replace(study, runs=[dataclasses.replace(r, metrics={metricnames.VAL_LOSS: 4.0})
                                             for r in study.runs], arms={})
    assert target_reach.targets(plain) == []
    assert reaching_target.part(Inputs(plain, tmp_path)) is None
    assert target_reach.retarget(plain) is plain


def test_an_arm_without_a_variant_to_compare_still_states_its_target(study: Study, tmp_path: Path) -> None:
    # the variant's runs withdrawn (a superseded version): the baseline's reach stands alone
    alone = dataclasses.replace(study, runs=study.finished("baseline"),
                                arms={record.OWN_BEST_ARM: dataclasses.replace(
                                    study.arms[record.OWN_BEST_ARM],
                                    runs=study.arms[record.OWN_BEST_ARM].finished("baseline"))})
    part = reaching_target.part(Inputs(target_reach.retarget(alone), tmp_path))
    assert part is not None
    text = "\n".join(str(b) for s in part.sections for b in s.blocks)
    assert "the baseline reached it in 1 of 3 runs (2 did not reach); no variant has runs paired" in text
    assert target_reach.targets(alone)[1].reach["baseline"][1] == target_reach.Reach(600.0, False)


def test_an_arm_whose_cells_carry_the_tuned_target_is_read_as_they_logged_it(
        study: Study, monkeypatch: pytest.MonkeyPatch) -> None:
    """Cells that trained with the arm's own target (the tuned baseline's best trial's loss, fixed before
    they ran: ablate/study/tuned_target.py) logged their steps to it, as the arm's rounds read them: the
    report reads the same numbers, and an earlier run of the arm at the spec's target is left out, not
    mixed in."""
    def at_own(run: Run, steps: float) -> Run:
        return dataclasses.replace(run, run_id=run.run_id + "-own", start_time=1.0,
                                   params={"eval.target_loss": "4.01"},
                                   metrics={**run.metrics, metricnames.VAL_STEPS_TO_TARGET: steps})

    old = study.arms[record.OWN_BEST_ARM]
    new = [at_own(r, 500.0 + r.seed) for r in old.finished("baseline")] + [
        at_own(r, 300.0 + r.seed) for r in old.finished("muon")]
    study.arms[record.OWN_BEST_ARM] = dataclasses.replace(old, runs=old.runs + new)
    monkeypatch.setattr(target_reach, "metric_history", lambda run_id, key: _history(4.0))
    again = target_reach.retarget(study)
    arm = again.arms[record.OWN_BEST_ARM]
    assert sorted(r.run_id for r in arm.runs) == sorted(r.run_id for r in new)
    # steps as logged: the cells' own count at 4.01, not read again
    assert {r.seed: r.metrics[metricnames.VAL_STEPS_TO_TARGET] for r in arm.finished("muon")} == {
        0: 300.0, 1: 301.0, 2: 302.0}
    assert len(arm.withdrawn) == 6 and all("not to the arm's target 4.01" in why for _, why in arm.withdrawn)
    own = {t.arm: t for t in target_reach.targets(again)}[record.OWN_BEST_ARM]
    assert own.target == 4.01 and "fixed before the arm's seeds ran" in own.source
    # the spec's arm keeps its target and its runs
    assert again.runs == study.runs
    # an arm recorded before its cells carried the target: read again, and the source says the rounds did not
    legacy = {t.arm: t for t in target_reach.targets(target_reach.retarget(dataclasses.replace(
        study, arms={record.OWN_BEST_ARM: old})))}[record.OWN_BEST_ARM]
    assert legacy.target == pytest.approx(4.00) and "its rounds decided on those" in legacy.source


def test_a_search_on_an_evaluation_seed_is_flagged_in_the_own_best_section(study: Study) -> None:
    from ablate.report.sections.own_best import shared_seed
    from ablate.study.recorded_study import TuneRecord

    def tuned_on(seed: int) -> TuneRecord:
        return TuneRecord(space={}, baseline={}, trials=5, sampler="grid", seed=seed, pruner="none")

    caveat = str(shared_seed(study, tuned_on(1)))
    assert "seed 1, which is also one of this study's evaluation seeds" in caveat
    assert shared_seed(study, tuned_on(3)) is None  # after the evaluation seeds 0-2
