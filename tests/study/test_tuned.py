"""Each variant at its own best (ablate/study/variant_searches.py): a synthetic study with a known answer,
where the variant needs 3x the baseline's learning rate. Training is replaced by a known function of the
spec."""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from ablate.launch.local_study import main_ablate
from ablate.run.rundir import RunResult
from ablate.spec.experiment import ExperimentSpec
from ablate.study.designs import plan_study
from ablate.study.variant_searches import tune_variants, tuned_cells, variants
from tests.factories import STUDY_CELL, write_tiny_spec

BASE_LR = 1e-3
STUDY = f"""ablation:
  axes: {{model.norm: [builtin, custom]}}
  seeds: [0, 1]
  tune:
    space:
      train.optimizer.lr: {{choice: [{BASE_LR / 3}, {BASE_LR}, {3 * BASE_LR}, {9 * BASE_LR}]}}
    trials: 4
    sampler: grid
    fidelity: {{steps: 5}}
"""


def score(spec: ExperimentSpec) -> float:
    """1 at the variant's best learning rate (3x the baseline's for norm=custom), 0 a factor 3 away."""
    best = 3 * BASE_LR if spec.model.norm == "custom" else BASE_LR
    return 1.0 - (math.log(spec.train.optimizer.lr / best) / math.log(3)) ** 2


def fake_training(monkeypatch: pytest.MonkeyPatch, fake: Callable[..., RunResult]) -> None:
    """Every cell and trial trains through ``fake``, with no data prepared."""
    monkeypatch.setattr("ablate.run.runner.run_experiment", fake)
    monkeypatch.setattr("ablate.study.search.cached_data", lambda spec: None)
    # a dry run's wall-time probe would train through `fake` too: with training faked it measures nothing
    monkeypatch.setattr("ablate.launch.wall_time.probe", lambda spec, sharing: None)


@pytest.fixture
def trained(monkeypatch: pytest.MonkeyPatch) -> list[ExperimentSpec]:
    runs: list[ExperimentSpec] = []

    def fake(spec: ExperimentSpec, **kwargs: Any) -> RunResult:
        runs.append(spec)
        return RunResult("finished", {"val/exact_match": score(spec)}, spec.spec_hash, str(kwargs["run_dir"]))

    fake_training(monkeypatch, fake)
    return runs


def interrupt_once(monkeypatch: pytest.MonkeyPatch, before: int) -> list[float]:
    """Training replaced by `score`, with one Ctrl-C once ``before`` trials have run; the learning rate of
    each trial trained (nan for the interrupted one)."""
    runs: list[float] = []

    def fake(spec: ExperimentSpec, **kwargs: Any) -> RunResult:
        if len(runs) == before:
            runs.append(math.nan)
            raise KeyboardInterrupt
        runs.append(spec.train.optimizer.lr)
        return RunResult("finished", {"val/exact_match": score(spec)}, spec.spec_hash, str(kwargs["run_dir"]))

    fake_training(monkeypatch, fake)
    return runs


def test_worse_at_the_baselines_settings_equal_at_its_own_best(workdir: Path, trained: list[ExperimentSpec],
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    path = write_tiny_spec(workdir, STUDY_CELL, {"name": "lr3x", "train.max_steps": 20},
                           extra=STUDY + "  metric: val/exact_match\n", filename="lr3x.yaml")
    plan = plan_study(str(path))
    tuned = tune_variants(plan)
    base, variant = tuned["baseline"], tuned["norm=custom"]
    # the same budget for both, every trial at the fidelity, with the tuning seed: the first seed after the
    # study's evaluation seeds (0 and 1), so no verdict is judged on the seed its setting was chosen on
    assert len(trained) == 8 and {s.train.max_steps for s in trained} == {5}
    assert {s.seed for s in trained} == {2}
    assert base.study != variant.study and len(base.scores) == len(variant.scores) == 4
    # at the baseline's settings (each search's first trial): the variant is worse
    assert base.at_baseline == pytest.approx(1.0) and variant.at_baseline == pytest.approx(0.0)
    # at its own best: equal, at 3x the learning rate
    assert base.best == {"train.optimizer.lr": BASE_LR}
    assert variant.best == {"train.optimizer.lr": 3 * BASE_LR}
    assert base.value == pytest.approx(variant.value) == pytest.approx(1.0)
    # the study's seeds at each variant's own best, at the cell's length
    cells = tuned_cells(plan, tuned)
    assert [(c.label, c.seed) for c in cells] == [(c.label, c.seed) for c in plan.cells]
    assert {c.spec.train.max_steps for c in cells} == {20}
    at_base = {(c.label, c.seed): score(c.spec) for c in plan.cells}
    at_own = {(c.label, c.seed): score(c.spec) for c in cells}
    for seed in plan.seeds:
        assert at_base[("norm=custom", seed)] - at_base[("baseline", seed)] == pytest.approx(-1.0)
        assert at_own[("norm=custom", seed)] - at_own[("baseline", seed)] == pytest.approx(0.0)
    # the baseline's own best is its settings: the same cells (and hashes) as at the baseline's settings
    keys = [c.key for c in cells if c.label == "baseline"]
    assert keys == [c.key for c in plan.cells if c.label == "baseline"]
    assert variants(plan) == {"baseline": {}, "norm=custom": {"model.norm": "custom"}}
    # rerunning trains nothing: the searches are complete in the store
    again = tune_variants(plan_study(str(path)))
    assert len(trained) == 8 and again == tuned
    assert main_ablate(str(path), dry_run=True) == 0  # the dry run says where the searches stand
    out = capsys.readouterr().out
    assert "tuning so far:\n  baseline: 4 of 4 trials done; best 1 at train.optimizer.lr=0.001" in out
    assert "  norm=custom: 4 of 4 trials done; best 1 at train.optimizer.lr=0.003" in out


def test_a_study_on_steps_to_target_searches_for_the_fewest_steps(workdir: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """val/steps_to_target is lower-is-better everywhere a study reads it: the plan, each variant's search
    (the rate that reaches the target first wins) and the rounds' paired differences."""
    def fake(spec: ExperimentSpec, **kwargs: Any) -> RunResult:
        steps = 20.0 - 10.0 * score(spec)  # 10 steps at the variant's best rate, 20 a factor 3 away
        return RunResult("finished", {"val/steps_to_target": steps}, spec.spec_hash, str(kwargs["run_dir"]))

    fake_training(monkeypatch, fake)
    path = write_tiny_spec(workdir, STUDY_CELL, {"name": "steps", "train.max_steps": 20,
                                                 "eval.target_loss": 1.0},
                           extra=STUDY + "  metric: val/steps_to_target\n", filename="steps.yaml")
    plan = plan_study(str(path))
    assert plan.direction == "minimize"
    tuned = tune_variants(plan)
    assert tuned["baseline"].best == {"train.optimizer.lr": BASE_LR}
    assert tuned["norm=custom"].best == {"train.optimizer.lr": 3 * BASE_LR}
    assert tuned["baseline"].value == pytest.approx(tuned["norm=custom"].value) == pytest.approx(10.0)


def test_the_own_best_arm_counts_steps_to_the_tuned_baselines_own_loss(
        workdir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A tuned steps-to-target study: the own-best arm's target is fixed before its seeds run, at the tuned
    baseline's final val/loss in its best search trial, and every cell of the arm (the baseline's too)
    trains with it, so the arm's rounds read each cell's steps at that target, not at the spec's."""
    trained: list[ExperimentSpec] = []

    def fake(spec: ExperimentSpec, **kwargs: Any) -> RunResult:
        trained.append(spec)
        loss = 3.0 - 0.5 * score(spec) + 0.01 * spec.seed  # the best rate ends lowest
        return RunResult("finished", {"val/steps_to_target": 20.0 - 10.0 * score(spec), "val/loss": loss},
                         spec.spec_hash, str(kwargs.get("run_dir", workdir)))

    fake_training(monkeypatch, fake)
    path = write_tiny_spec(workdir, STUDY_CELL, {"name": "steps", "train.max_steps": 20,
                                                 "eval.target_loss": 2.9},
                           extra=STUDY + "  metric: val/steps_to_target\n", filename="steps.yaml")
    plan = plan_study(str(path))
    tuned = tune_variants(plan)
    # the baseline's best trial (its own rate, tuning seed 2) ended at 2.52; the variant's loss is not used
    assert tuned["baseline"].loss == pytest.approx(2.52) and tuned["norm=custom"].loss == pytest.approx(2.52)
    cells = tuned_cells(plan, tuned)
    assert {c.spec.eval.target_loss for c in cells} == {2.52}
    assert all(c.overrides["eval.target_loss"] == 2.52 for c in cells)
    # a field of the arm, not of any variant: no cell lists it as a change from the baseline
    assert all("eval.target_loss" not in [f for f, _, _ in c.diff] for c in cells)
    assert [f for f, _, _ in next(c for c in cells if c.label == "norm=custom").diff] == [
        "model.norm", "train.optimizer.lr"]
    # the baseline's cells count steps to another target than at the baseline's settings: cells of their own
    own_keys = {c.key for c in cells if c.label == "baseline"}
    assert own_keys.isdisjoint(c.key for c in plan.cells)
    # any worker rebuilds a cell, target and all, from what its trial records
    cell = cells[1]
    assert plan.rebuild(cell.attrs()).spec.spec_hash == cell.spec.spec_hash
    # the whole study: the arm's cells train with the tuned target, the baseline's settings with the spec's
    assert main_ablate(str(path)) == 0
    cell_runs = [s for s in trained if s.train.max_steps == 20]
    assert {s.eval.target_loss for s in cell_runs} == {2.9, 2.52}
    assert {(s.seed, s.model.norm) for s in cell_runs if s.eval.target_loss == 2.52} == {
        (0, "builtin"), (1, "builtin"), (0, "custom"), (1, "custom")}


def test_a_study_that_decides_on_another_metric_keeps_its_cells_as_they_are() -> None:
    """Only steps to a target have an arm's target: other metrics, or a baseline search with no loss,
    add nothing to the own-best cells."""
    from ablate.study.tuned_target import arm_fields
    from ablate.study.variant_searches import Tuned

    tuned = {"baseline": Tuned("baseline", "s", {}, 1.0, 1.0, loss=2.5)}
    assert arm_fields("val/steps_to_target", tuned) == {"eval.target_loss": 2.5}
    assert arm_fields("val/loss", tuned) == {}
    assert arm_fields("val/steps_to_target", {"baseline": Tuned("baseline", "s", {}, 1.0, 1.0)}) == {}


def test_a_trial_recorded_before_its_loss_attribute_reads_it_from_its_mlflow_run(workdir: Path) -> None:
    import optuna

    from ablate.study import optuna_attrs
    from ablate.study.tuned_target import trial_loss
    from ablate.tracking.read import client as mlflow_client

    client = mlflow_client()  # the store ablate reads, as a study's trials wrote to it
    run = client.create_run(client.create_experiment("old-search")).info.run_id
    client.log_metric(run, "final/val/loss", 4.075)
    dist = optuna.distributions.FloatDistribution(0, 1)

    def trial(**attrs: object) -> optuna.trial.FrozenTrial:
        return optuna.trial.create_trial(params={"x": 0.5}, distributions={"x": dist}, value=1.0,
                                         user_attrs=attrs)

    assert trial_loss(trial(**{optuna_attrs.FINAL_LOSS: 3.9, optuna_attrs.RUN_ID: run})) == 3.9
    assert trial_loss(trial(**{optuna_attrs.RUN_ID: run})) == pytest.approx(4.075)
    assert trial_loss(trial(**{optuna_attrs.RUN_ID: "0" * 32})) is None
    assert trial_loss(trial()) is None


def test_each_search_is_a_child_run_of_the_study_reopened_on_rerun(workdir: Path,
                                                                   trained: list[ExperimentSpec]) -> None:
    from mlflow import MlflowClient

    from ablate.tracking import Tracker, record

    path = write_tiny_spec(workdir, STUDY_CELL, {"name": "nested", "train.max_steps": 20},
                           extra=STUDY, filename="nested.yaml")
    plan = plan_study(str(path))
    parent = Tracker.start(plan.spec, run_name="nested", tags={record.KIND: "ablation",
                                                               record.VARIANT: "study"})
    assert parent.run_id is not None
    tuned = tune_variants(plan, parent=parent.run_id)
    tune_variants(plan_study(str(path)), parent=parent.run_id)  # a rerun: no new search runs
    parent.end("finished")
    from ablate.tracking.mlflow_store import resolve_tracking_uri

    # the store this study wrote to (an earlier test may have pointed MLflow's global client elsewhere)
    client = MlflowClient(resolve_tracking_uri(plan.spec.tracking.uri))
    exp = client.get_experiment_by_name(plan.name)
    assert exp is not None
    runs = client.search_runs([exp.experiment_id])
    children = [r for r in runs if r.data.tags.get("mlflow.parentRunId") == parent.run_id]
    assert sorted(r.data.tags[record.VARIANT] for r in children) == ["baseline", "norm=custom"]
    assert {r.data.tags[record.KIND] for r in children} == {"search"} and len(runs) == 3
    assert {r.data.tags[record.OPTUNA_STUDY] for r in children} == {t.study for t in tuned.values()}
    assert {r.info.status for r in children} == {"FINISHED"}
    assert len(trained) == 8


def test_an_interrupted_search_resumes_and_ends_with_the_same_budget(
        workdir: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    runs = interrupt_once(monkeypatch, before=2)  # Ctrl-C in the third trial
    path = write_tiny_spec(workdir, STUDY_CELL, {"name": "resumed", "train.max_steps": 20},
                           extra=STUDY, filename="resumed.yaml")
    with pytest.raises(KeyboardInterrupt):
        tune_variants(plan_study(str(path)))
    # the interrupted trial failed and its retry waits in its slot: it is not a trial done
    capsys.readouterr()
    assert main_ablate(str(path), dry_run=True) == 0
    out = capsys.readouterr().out
    assert "  baseline: 2 of 4 trials done" in out and "own best: waits for every search to finish" in out
    tuned = tune_variants(plan_study(str(path)))
    assert len(runs) == 9  # 2 + the interrupted one + its retry and the 5 left: 8 trials trained in all
    assert [len(t.scores) for t in tuned.values()] == [4, 4]
    assert tuned["norm=custom"].best == {"train.optimizer.lr": 3 * BASE_LR}
    assert main_ablate(str(path), dry_run=True) == 0
    out = capsys.readouterr().out
    assert "  baseline: 4 of 4 trials done" in out and "  norm=custom: 4 of 4 trials done" in out


def test_a_search_complete_before_an_interrupt_ends_finished_with_its_best_settings(
        workdir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Ctrl-C in the second variant's search: the baseline's search, complete by then, is a finished run
    with its best settings (a partial export's report reads them); the interrupted one is neither."""
    from mlflow import MlflowClient

    from ablate.tracking import Tracker, record
    from ablate.tracking.mlflow_store import resolve_tracking_uri

    interrupt_once(monkeypatch, before=5)  # the second trial of norm=custom's, after the baseline's four
    path = write_tiny_spec(workdir, STUDY_CELL, {"name": "halfway", "train.max_steps": 20},
                           extra=STUDY, filename="halfway.yaml")
    plan = plan_study(str(path))
    parent = Tracker.start(plan.spec, run_name="halfway", tags={record.KIND: "ablation",
                                                                record.VARIANT: "study"})
    with pytest.raises(KeyboardInterrupt):
        tune_variants(plan, parent=parent.run_id)
    parent.end("interrupted")
    client = MlflowClient(resolve_tracking_uri(plan.spec.tracking.uri))
    exp = client.get_experiment_by_name(plan.name)
    assert exp is not None
    searches = {r.data.tags[record.VARIANT]: r for r in client.search_runs([exp.experiment_id])
                if r.data.tags.get(record.KIND) == "search"}
    base, custom = searches["baseline"], searches["norm=custom"]
    assert base.info.status == "FINISHED"
    assert json.loads(base.data.tags[record.BEST_SETTINGS]) == {"train.optimizer.lr": BASE_LR}
    assert custom.info.status == "KILLED" and record.BEST_SETTINGS not in custom.data.tags


def test_a_variants_search_run_is_not_read_as_a_cell_of_the_study() -> None:
    import pandas as pd

    from ablate.report.compute.loaded_study import build_study

    rows = [{"run_id": f"{variant}-{seed}", "status": "FINISHED", "start_time": pd.Timestamp(seed, unit="s"),
             "tags.ablate.variant": variant, "tags.ablate.seed": str(seed), "tags.ablate.status": "finished",
             "tags.ablate.kind": "cell", "metrics.val/exact_match": value}
            for variant, values in (("baseline", [0.5, 0.6]), ("norm=custom", [0.4, 0.5]))
            for seed, value in enumerate(values)]
    # the search run: no seed tag (read as seed 0), started last, finished: it must not replace seed 0's cell
    rows.append({"run_id": "search", "status": "FINISHED", "start_time": pd.Timestamp(99, unit="s"),
                 "tags.ablate.variant": "norm=custom", "tags.ablate.kind": "search",
                 "tags.ablate.status": "finished", "metrics.val/exact_match": 0.9})
    parent = {"run_id": "p", "experiment_id": "1", "run_name": "s", "status": "FINISHED", "params": {},
              "metrics": {}, "tags": {"ablate.study": "s", "ablate.kind": "ablation"}}
    study = build_study(parent, pd.DataFrame(rows))
    assert study.kind == "ablation" and sorted(r.run_id for r in study.runs) == [
        "baseline-0", "baseline-1", "norm=custom-0", "norm=custom-1"]
