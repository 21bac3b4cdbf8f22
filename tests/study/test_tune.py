"""Optuna searches: the space, pruning, failures, parallel workers and dead workers on real stores.

Real Optuna stores (journal file, PostgreSQL), real MLflow sqlite in a temporary folder, tiny synthetic
specs (d_model 16, 1+1 layers, a few dozen steps).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import optuna
import pytest
import yaml
from mlflow import MlflowClient
from optuna.trial import FrozenTrial, TrialState

from ablate.launch.local_workers import threads_per_worker, usable_cores
from ablate.launch.tune_command import main_tune
from ablate.spec.load import SpecError, load_spec
from ablate.study.derived_specs import derive, plan_search
from ablate.study.optuna_attrs import HEARTBEAT, OWNER
from ablate.study.optuna_store import Store, claim, open_study, reclaim
from ablate.study.search import _fill, sample, search_name
from tests.factories import STUDY_CELL, write_tiny_spec

# A search trial: a study cell with a higher learning rate and no BLEU during training.
SEARCH_TRIAL = {"train.optimizer": {"lr": 0.01}, "eval.bleu_during_training": False}


def write_spec(folder: Path, name: str, search: str, steps: int = 30) -> Path:
    changes = {"name": name, "train.max_steps": steps}
    return write_tiny_spec(folder, STUDY_CELL, SEARCH_TRIAL, changes, extra=search, filename=f"{name}.yaml")


def load(path: Path, storage: str | None = None) -> optuna.Study:
    plan = plan_search(str(path))
    return optuna.load_study(study_name=search_name(plan, Store(storage)), storage=Store(storage).storage)


def mlflow_runs(experiment: str) -> tuple[list, list]:
    client = MlflowClient(os.environ["MLFLOW_TRACKING_URI"])
    exp = client.get_experiment_by_name(experiment)
    assert exp is not None
    runs = client.search_runs([exp.experiment_id], max_results=1000)
    return ([r for r in runs if "mlflow.parentRunId" not in r.data.tags],
            [r for r in runs if "mlflow.parentRunId" in r.data.tags])


def assert_trials_match_runs(study: optuna.Study, experiment: str, runs: int) -> list[FrozenTrial]:
    """One parent with exactly `runs` children; every trial its worker told (finished, pruned, diverged,
    failed: all but a killed attempt, whose retry resumes its run) knows its own child run, tagged with
    that trial's number and outcome. Returns those trials."""
    parents, children = mlflow_runs(experiment)
    assert len(parents) == 1 and parents[0].data.tags["ablate.kind"] == "search"
    assert study.user_attrs["ablate.parent_run_id"] == parents[0].info.run_id
    assert len(children) == runs, sorted(r.data.tags.get("ablate.trial", "?") for r in children)
    by_id = {r.info.run_id: r for r in children}
    told = [t for t in study.get_trials() if t.user_attrs.get("status", "killed") != "killed"]
    for t in told:
        run = by_id[t.user_attrs["mlflow_run_id"]]
        assert run.data.tags["mlflow.parentRunId"] == parents[0].info.run_id
        assert run.data.tags["ablate.trial"] == str(t.number)
        assert run.data.tags["ablate.status"] == t.user_attrs["status"]
    assert len({t.user_attrs["mlflow_run_id"] for t in told}) == len(told)  # no two trials share a run
    return told


# ---------------------------------------------------------------- the space (nothing trains)
def test_space_errors_name_the_dimension(tmp_path: Path) -> None:
    path = write_spec(tmp_path, "bad", """
search:
  space:
    model.d_model: {choice: [16, 15]}
    train.schedule.warmup_steps: {low: 0, high: 100}
    train.optimizer.lr: {low: 1e-4, high: 1e-2, log: true, when: {train.schedul.name: inverse_sqrt}}
  objectives: [{metric: val/loss, direction: minimize}]
""")
    with pytest.raises(SpecError) as err:
        plan_search(str(path))
    text = str(err.value)
    assert "search.space.train.schedule.warmup_steps: train.schedule.warmup_steps is an integer field" in text
    assert "search.space.train.optimizer.lr.when: 'train.schedul.name' is not a spec field" in text
    assert f"{path}:" in text
    fixed = path.read_text().replace("{low: 0, high: 100}", "{low: 0, high: 100, int: true}").replace(
        "schedul.name", "schedule.name")
    path.write_text(fixed)
    with pytest.raises(SpecError, match=r"search.space.model.d_model: model.d_model=15 gives an invalid"):
        plan_search(str(path))
    path.write_text(fixed.replace("16, 15", "16, 32").replace("val/loss, direction: minimize",
                                                              "val/bleu, direction: maximize"))
    with pytest.raises(SpecError, match=r"search.objectives.0.metric: val/bleu needs text data"):
        plan_search(str(path))


def test_conditional_and_component_dimensions_sample_valid_specs(tmp_path: Path) -> None:
    path = write_spec(tmp_path, "cond", """
search:
  space:
    model.residual: {choice: [pre_norm, post_norm]}
    train.optimizer.betas: {choice: [[0.9, 0.98], [0.9, 0.999]]}
    train.schedule.warmup_steps: {low: 0, high: 50, int: true, when: {train.schedule.name: inverse_sqrt}}
    train.schedule.name: {choice: [inverse_sqrt, constant]}
""")
    plan = plan_search(str(path))
    assert plan.order.index("train.schedule.name") < plan.order.index("train.schedule.warmup_steps")
    assert plan.baseline_point() == ({
        "model.residual": "pre_norm", "train.optimizer.betas": "[0.9, 0.98]",
        "train.schedule.name": "inverse_sqrt", "train.schedule.warmup_steps": 10}, [])
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=1))
    seen = set()
    for _ in range(24):
        trial = study.ask()
        values = sample(trial, plan)
        spec = plan.spec_for(values, "test")
        # The warm-up is sampled exactly when the schedule has one.
        assert ("train.schedule.warmup_steps" in values) == (spec.train.schedule.name == "inverse_sqrt")
        assert spec.train.optimizer.betas in ((0.9, 0.98), (0.9, 0.999))
        seen.add((spec.model.residual, spec.train.schedule.name))
        study.tell(trial, 0.0)
    assert len(seen) == 4


def test_the_recipe_axes_are_searched_by_name_with_their_own_options(tmp_path: Path) -> None:
    """Optimizer, schedule, loss and parametrisation are dimensions like any component: each sampled name
    gives a valid spec, and a variant's own option is sampled only where its variant is chosen (``when``);
    the baseline's Adam options stay out of the optimizers that do not take them."""
    path = write_spec(tmp_path, "recipe", """
search:
  space:
    train.optimizer.name: {choice: [adam, adamw, muon]}
    train.optimizer.muon_update_rms: {choice: [original, match_adamw], when: {train.optimizer.name: muon}}
    train.schedule.name: {choice: [inverse_sqrt, cosine, wsd]}
    train.schedule.wsd_decay_fraction: {low: 0.1, high: 0.5, when: {train.schedule.name: wsd}}
    train.loss.name: {choice: [cross_entropy, z_loss]}
    model.attention: {choice: [sdpa, softcap]}
    model.kv_heads: {choice: [1, 2]}
""")
    plan = plan_search(str(path))
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=2))
    seen = set()
    for _ in range(40):
        trial = study.ask()
        values = sample(trial, plan)
        spec = plan.spec_for(values, "test")
        opt, sched = spec.train.optimizer, spec.train.schedule
        assert opt.name == values["train.optimizer.name"] and sched.name == values["train.schedule.name"]
        assert ("train.optimizer.muon_update_rms" in values) == (opt.name == "muon")
        if opt.name == "muon":
            assert opt.muon_update_rms == values["train.optimizer.muon_update_rms"]
        else:
            assert opt.muon_update_rms is None  # another variant's option is left out, not defaulted
        if sched.name == "wsd":
            assert 0.1 <= sched.wsd_decay_fraction <= 0.5
        assert spec.train.loss.name == values["train.loss.name"] and spec.model.kv_heads in (1, 2)
        seen.add((opt.name, sched.name, spec.train.loss.name))
        study.tell(trial, 0.0)
    assert len({s[0] for s in seen}) == 3 and len({s[1] for s in seen}) == 3


def test_first_trial_is_the_whole_baseline_even_outside_the_ranges(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """lr 0.01 is above its range and warm-up 10 off its step: the first trial still runs exactly the
    baseline spec (Optuna takes enqueued values it would not sample), and a note says so."""
    path = write_spec(tmp_path, "outside", """
search:
  trials: 3
  space:
    train.optimizer.lr: {low: 1.0e-4, high: 1.0e-3, log: true}
    train.schedule.warmup_steps: {low: 0, high: 40, step: 20, int: true}
    model.residual: {choice: [pre_norm, post_norm]}
""")
    plan = plan_search(str(path))
    store = Store(str(tmp_path / "journal.log"))
    study = open_study(store, search_name(plan, store), plan.directions)
    assert study is not None
    assert _fill(study, store, plan, 3) == 3
    out = capsys.readouterr().out
    assert "search.space.train.optimizer.lr: the baseline's 0.01 is outside [0.0001, 0.001]" in out
    assert "search.space.train.schedule.warmup_steps: the baseline's 10 is outside [0, 40, step 20]" in out
    trial, _ = claim(study, store)
    assert trial is not None and trial.number == 0 and trial.user_attrs["ablate.baseline"] is True
    values = sample(trial, plan)
    assert values == {"train.optimizer.lr": 0.01, "train.schedule.warmup_steps": 10,
                      "model.residual": "pre_norm"}
    assert plan.spec_for(values, "test").spec_hash == derive(plan.data, plan.smap, {}, "test").spec_hash
    assert not any(t.user_attrs.get("ablate.baseline") for t in study.get_trials()[1:])


def test_baseline_no_choice_holds_is_no_trial_and_a_note(tmp_path: Path,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    path = write_spec(tmp_path, "nochoice", """
search:
  trials: 2
  space:
    train.optimizer.lr: {low: 1.0e-4, high: 1.0e-2, log: true}
    model.residual: {choice: [post_norm]}
""")
    plan = plan_search(str(path))
    params, notes = plan.baseline_point()
    assert params is None and len(notes) == 1
    assert notes[0].startswith("search.space.model.residual has no choice pre_norm (the baseline's)")
    store = Store(str(tmp_path / "journal.log"))
    study = open_study(store, search_name(plan, store), plan.directions)
    assert study is not None and _fill(study, store, plan, 2) == 2
    assert f"note: {notes[0]}" in capsys.readouterr().out
    trials = study.get_trials()  # two plain slots: nothing enqueued half-baseline, nothing tagged baseline
    assert len(trials) == 2 and not any(t.user_attrs or t.system_attrs.get("fixed_params") for t in trials)


def test_experiment_searches_plan() -> None:
    root = Path(__file__).resolve().parents[2] / "experiments" / "search"
    quick, multi = plan_search(str(root / "quick.yaml")), plan_search(str(root / "multi30k.yaml"))
    assert any(k.startswith("model.") and p.choice for k, p in quick.space.items())  # a component choice
    assert quick.space["train.schedule.warmup_steps"].when == {"train.schedule.name": "inverse_sqrt"}
    assert quick.spec.data.source == "synthetic" and quick.metrics == ["val/loss"]
    assert multi.metrics == ["val/bleu", "train/tokens_per_s"]
    assert multi.directions == ["maximize", "maximize"]
    for plan in (quick, multi):  # the baseline is a point of the space: trial 0 runs it, no note
        params, notes = plan.baseline_point()
        assert params is not None and set(params) == {n for n in plan.order if plan.active(n, {})} - {
            n for n in plan.order if not plan.active(n, params)} and notes == []


@pytest.mark.parametrize("name", ["ped_anova", "fanova"])
def test_importances_name_their_evaluator(tmp_path: Path, name: str) -> None:
    from ablate.study.tune_results import importances

    plan = plan_search(str(write_spec(tmp_path, "imp", f"""
search:
  importance: {name}
  space:
    train.optimizer.lr: {{low: 1.0e-4, high: 1.0e-2, log: true}}
    model.residual: {{choice: [pre_norm, post_norm]}}
""")))
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=0))
    for _ in range(16):  # the loss depends on the residual choice only
        trial = study.ask()
        study.tell(trial, 1.0 if sample(trial, plan)["model.residual"] == "post_norm" else 0.0)
    evaluator, found = importances(study, plan)
    names = {"ped_anova": "PedAnovaImportanceEvaluator", "fanova": "FanovaImportanceEvaluator"}
    assert evaluator == names[name]
    assert max(found["val/loss"], key=found["val/loss"].get) == "model.residual"


# ---------------------------------------------------------------- searching
@pytest.mark.slow
def test_search_prunes_survives_crashes_and_divergence_and_reproduces_its_best(
        workdir: Path, crashing_ffn: str, capsys: pytest.CaptureFixture[str]) -> None:
    """Grid over lr {0.01, 1e-6, 100} x ffn {linear, crash}: the baseline (lr 0.01, linear), a grid point,
    runs first and only once; 1e-6 is pruned against it, 100 diverges (counted as pruned), the crashing FFN
    fails (its trials keep their MLflow runs); the study ends."""
    path = write_spec(workdir, "grid", f"""
search:
  trials: 20
  sampler: grid
  pruner: {{name: median, startup_trials: 1, warmup_steps: 0}}
  objectives: [{{metric: val/loss, direction: minimize}}]
  space:
    train.optimizer.lr: {{choice: [0.01, 1.0e-6, 100.0]}}
    model.ffn: {{choice: [linear, {crashing_ffn}]}}
""")
    assert main_tune(str(path)) == 0
    out = capsys.readouterr().out
    study = load(path)
    trials = study.get_trials()
    assert len(trials) == 6  # the 6 grid points, the baseline's first (the grid caps --trials)
    assert trials[0].params == {"train.optimizer.lr": 0.01, "model.ffn": "linear"}
    assert trials[0].user_attrs["ablate.baseline"] is True
    assert len({tuple(sorted(t.params.items())) for t in trials}) == 6  # no point twice
    assert not any(t.user_attrs.get("ablate.baseline") for t in trials[1:])
    by_status: dict[str, list] = {}
    for t in trials:
        by_status.setdefault(t.user_attrs["status"], []).append(t)
    assert {t.state for t in by_status["failed"]} == {TrialState.FAIL} and len(by_status["failed"]) == 3
    assert all("boom" in t.user_attrs["error"] for t in by_status["failed"])
    assert [t.params["train.optimizer.lr"] for t in by_status["diverged"]] == [100.0]
    assert by_status["diverged"][0].state == TrialState.PRUNED
    pruned = by_status["pruned"]
    assert [t.params["train.optimizer.lr"] for t in pruned] == [1e-6] and pruned[0].state == TrialState.PRUNED
    finished = by_status["finished"]
    assert len(finished) == 1 and finished[0].state == TrialState.COMPLETE
    # One number: what Optuna stores is the run's final/ metric in MLflow; the dashboard names it.
    client = MlflowClient(os.environ["MLFLOW_TRACKING_URI"])
    final = client.get_run(finished[0].user_attrs["mlflow_run_id"]).data.metrics["final/val/loss"]
    assert final == finished[0].value and study.metric_names == ["final/val/loss"]
    assert f"trial {finished[0].number}: finished final/val/loss {final:.4g}" in out
    assert study.study_name == "grid"  # readable; the identity hash is an attribute
    # A pruned trial stops at its first evaluation: fewer logged steps than a finished one.
    steps = {t.number: sorted(m.step for m in client.get_metric_history(t.user_attrs["mlflow_run_id"],
                                                                         "train/loss"))
             for t in pruned + finished}  # train/loss: logged while training, not by the final evaluation
    assert max(steps[pruned[0].number]) <= 10 < max(steps[finished[0].number])
    assert len(steps[pruned[0].number]) < len(steps[finished[0].number])
    assert sorted(pruned[0].intermediate_values) == [10]
    assert_trials_match_runs(study, "grid", runs=6)  # the 3 crashed trials too

    # Results: the best trial printed, logged on the parent, best.yaml runnable, importances named.
    best = study.best_trial
    assert f"trial {best.number}: final/val/loss {best.value:.4g}" in out
    assert "PedAnovaImportanceEvaluator" in out
    parent = mlflow_runs("grid")[0][0]
    assert parent.info.status == "FINISHED"
    assert parent.data.metrics["best/val/loss"] == pytest.approx(best.value)
    assert parent.data.tags["ablate.best_trial"] == str(best.number)
    assert parent.data.params["best.model.ffn"] == "linear"
    artifacts = {a.path for a in client.list_artifacts(parent.info.run_id)}
    assert {"best.yaml", "importance.json", "figures", "trials.json"} <= artifacts
    # The parent shows every trial: its state, its final/ value and what it sampled, in its description
    # (MLflow's run page) and as a table artifact.
    table = json.loads(Path(client.download_artifacts(parent.info.run_id, "trials.json", str(workdir)))
                       .read_text())
    rows = [dict(zip(table["columns"], row, strict=True)) for row in table["data"]]
    assert [r["trial"] for r in rows] == [t.number for t in trials]
    assert [r["state"] for r in rows] == [t.state.name.lower() for t in trials]
    assert rows[best.number]["final/val/loss"] == pytest.approx(best.value, abs=1e-4)
    assert [r["model.ffn"] for r in rows] == [t.params["model.ffn"] for t in trials]
    assert rows[best.number]["run"] == best.user_attrs["mlflow_run_id"][:8]
    note = parent.data.tags["mlflow.note.content"]
    assert "| trial | state | final/val/loss |" in note and note.count("\n| ") == len(trials) + 1
    figures = {Path(a.path).name for a in client.list_artifacts(parent.info.run_id, "figures")}
    assert {"optimization_history.png", "param_importances.png", "parallel_coordinate.png"} <= figures
    best_yaml = workdir / "runs" / "grid" / study.study_name / "best.yaml"
    assert yaml.safe_load(best_yaml.read_text())["search"] is None

    # `ablate run best.yaml` retrains the best trial to the same metric (same seed, fresh run dir).
    from ablate.run.runner import run_experiment

    spec = load_spec(best_yaml, ["train.out_dir=rerun", "tracking.enabled=false"])
    assert run_experiment(spec, quiet=True).metrics["val/loss"] == pytest.approx(best.value, rel=1e-5)


@pytest.mark.soak
@pytest.mark.slow
def test_two_local_workers_complete_n_trials_once(workdir: Path) -> None:
    path = write_spec(workdir, "two", """
search:
  trials: 5
  sampler: random
  pruner: {name: none}
  objectives: [{metric: val/loss, direction: minimize}, {metric: train/tokens_per_s, direction: maximize}]
  space:
    train.optimizer.lr: {low: 1e-3, high: 3e-2, log: true}
    model.residual: {choice: [pre_norm, post_norm]}
""", steps=10)
    assert main_tune(str(path), workers=2) == 0
    study = load(path)
    trials = study.get_trials()
    assert [t.number for t in trials] == [0, 1, 2, 3, 4]
    assert {t.state for t in trials} == {TrialState.COMPLETE}
    assert len(assert_trials_match_runs(study, "two", runs=5)) == 5  # one child run per trial, none extra
    # Each of the 2 workers trained on its share of the cores (the run tags torch's thread count).
    _, children = mlflow_runs("two")
    assert {r.data.tags["ablate.device"].rsplit(", ", 1)[1] for r in children} == {
        f"{threads_per_worker(2)} threads)"}
    client = MlflowClient(os.environ["MLFLOW_TRACKING_URI"])
    parent = mlflow_runs("two")[0][0]
    assert "pareto.json" in {a.path for a in client.list_artifacts(parent.info.run_id)}
    figures = {Path(a.path).name for a in client.list_artifacts(parent.info.run_id, "figures")}
    assert "pareto_front.png" in figures
    assert main_tune(str(path), workers=2) == 0  # rerun: the study is complete, nothing new runs
    assert len(load(path).get_trials()) == 5
    assert len(mlflow_runs("two")[1]) == 5


def test_workers_split_the_cores() -> None:
    assert threads_per_worker(1, cores=8) == 8
    assert threads_per_worker(3, cores=8) == 2  # 3 x 2 threads: never more threads than cores
    assert threads_per_worker(4, cores=2) == 1  # more workers than cores: one thread each
    assert threads_per_worker(2) == max(1, usable_cores() // 2)


@pytest.mark.slow
def test_timeout_ends_the_search_with_the_trials_that_ran(workdir: Path,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    """A timeout shorter than one trial: the worker runs one trial (the baseline) and starts no other; the
    results cover it, the parent run ends, and the next run of the command continues the study."""
    path = write_spec(workdir, "late", """
search:
  trials: 3
  timeout: 0.001
  sampler: random
  pruner: {name: none}
  space:
    train.optimizer.lr: {low: 1e-3, high: 3e-2, log: true}
""", steps=10)
    assert main_tune(str(path)) == 0
    out = capsys.readouterr().out
    study = load(path)
    assert [t.state for t in study.get_trials()] == [TrialState.COMPLETE, TrialState.WAITING,
                                                     TrialState.WAITING]
    best = study.best_trial
    assert best.number == 0 and best.user_attrs["ablate.baseline"] is True
    assert "search.timeout (0.001 s) reached: 2 trials not started" in out
    assert f"trial 0: final/val/loss {best.value:.4g}" in out
    assert (workdir / "runs" / "late" / study.study_name / "best.yaml").exists()
    parent = mlflow_runs("late")[0][0]
    assert parent.info.status == "FINISHED" and parent.data.tags["ablate.trials_left"] == "2"
    assert parent.data.metrics["best/val/loss"] == pytest.approx(best.value)

    assert main_tune(str(path), ["search.timeout=null"]) == 0  # the same study, without the deadline
    study = load(path)
    assert [t.state for t in study.get_trials()] == [TrialState.COMPLETE] * 3
    assert_trials_match_runs(study, "late", runs=3)
    parent = mlflow_runs("late")[0][0]
    assert parent.info.status == "FINISHED" and parent.data.tags["ablate.trials_left"] == "0"


KILL_SPACE = """
search:
  trials: {trials}
  sampler: random
  pruner: {{name: none}}
  space:
    train.optimizer.lr: {{low: 1e-3, high: 3e-2, log: true}}
"""


def start_tune(workdir: Path, path: Path, log: str, storage: str | None = None) -> subprocess.Popen[bytes]:
    cmd = [sys.executable, "-m", "ablate", "tune", str(path)] + (["--storage", storage] if storage else [])
    return subprocess.Popen(cmd, cwd=workdir, stdout=open(workdir / log, "w"), stderr=subprocess.STDOUT)


def running_trial(worker: subprocess.Popen[bytes], path: Path, storage: str | None = None,
                  after_one: bool = False) -> int | None:
    """The trial `worker` is running and has checkpointed (after completing one, with `after_one`)."""
    try:
        trials = load(path, storage).get_trials()
    except KeyError:  # the study is not there yet
        return None
    mine = [t for t in trials if t.user_attrs.get(OWNER, {}).get("pid") == worker.pid]
    running = [t.number for t in mine if t.state == TrialState.RUNNING
               and Path(t.user_attrs.get("ablate.run_dir", "/nonexistent"), "last.pt").exists()]
    if not running or (after_one and not any(t.state == TrialState.COMPLETE for t in mine)):
        return None
    return running[0]


def kill_mid_trial(victim: subprocess.Popen[bytes], path: Path, storage: str | None = None,
                   after_one: bool = True) -> int:
    """SIGKILL `victim` in the middle of a trial (see `running_trial`); that trial's number."""
    deadline = time.time() + 400
    while time.time() < deadline and victim.poll() is None:
        number = running_trial(victim, path, storage, after_one)
        if number is not None:
            victim.send_signal(signal.SIGKILL)
            victim.wait()
            return number
        time.sleep(0.2)
    victim.wait()
    raise AssertionError("the worker ended before it could be killed mid-trial")


def assert_retried_once(study: optuna.Study, killed: int, budget: int, experiment: str) -> list[FrozenTrial]:
    """The killed trial failed, one retry resumed its run directory and MLflow run, `budget` trials
    completed, none twice; one child run per counted trial."""
    trials = study.get_trials()
    assert trials[killed].state == TrialState.FAIL
    retries = [t for t in trials if t.system_attrs.get("failed_trial") == killed]
    assert len(retries) == 1 and retries[0].state == TrialState.COMPLETE
    assert retries[0].user_attrs["ablate.run_dir"] == trials[killed].user_attrs["ablate.run_dir"]  # resumed
    # The dead attempt knew its run from the start (on_start), and the retry continued that run.
    assert trials[killed].user_attrs["mlflow_run_id"] == retries[0].user_attrs["mlflow_run_id"]
    counted = [t for t in trials if t.state == TrialState.COMPLETE]
    assert len(counted) == budget and len(trials) == budget + 1  # none lost, none duplicated
    assert assert_trials_match_runs(study, experiment, runs=budget) == counted
    parent = mlflow_runs(experiment)[0][0]
    assert parent.info.status == "FINISHED"
    return counted


@pytest.mark.soak
@pytest.mark.slow
def test_killed_worker_on_the_journal_store_is_retried(workdir: Path) -> None:
    """Two `ablate tune` processes on the default journal store; one is SIGKILLed mid-trial. The other sees
    its owner process gone, fails and re-queues the trial, resumes it and completes the study."""
    path = write_spec(workdir, "jkill", KILL_SPACE.format(trials=3), steps=40)
    victim = start_tune(workdir, path, "w0.log")
    deadline = time.time() + 300
    while running_trial(victim, path) is None and victim.poll() is None and time.time() < deadline:
        time.sleep(0.2)  # the victim holds a trial: the survivor cannot finish the study without it
    survivor = start_tune(workdir, path, "w1.log")
    killed = kill_mid_trial(victim, path, after_one=False)
    assert survivor.wait(timeout=600) == 0, (workdir / "w1.log").read_text()[-3000:]
    counted = assert_retried_once(load(path), killed, 3, "jkill")
    assert {t.user_attrs[OWNER]["pid"] for t in counted} == {survivor.pid}


@pytest.mark.soak
@pytest.mark.slow
def test_rerunning_an_interrupted_search_continues_it(workdir: Path) -> None:
    """The only worker is SIGKILLed mid-trial; running the command again fails and retries that trial
    (resuming its checkpoint) and runs the remaining slots: no trial lost, none run twice."""
    path = write_spec(workdir, "again", KILL_SPACE.format(trials=3), steps=40)
    killed = kill_mid_trial(start_tune(workdir, path, "first.log"), path)
    before = load(path).get_trials()
    assert before[killed].state == TrialState.RUNNING  # its owner is dead; nothing else knows yet
    assert main_tune(str(path)) == 0
    study = load(path)
    assert_retried_once(study, killed, 3, "again")
    done_before = [t.number for t in before if t.state == TrialState.COMPLETE]
    assert all(study.get_trials()[n].datetime_complete == before[n].datetime_complete for n in done_before)


def test_journal_owner_on_another_host_is_judged_by_its_heartbeat(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """A shared journal (NFS): a trial whose owner is on another host is alive while its heartbeat is fresh
    and is failed and re-queued once the heartbeat is older than the grace period."""
    monkeypatch.setenv("ABLATE_HEARTBEAT_INTERVAL", "1")
    monkeypatch.setenv("ABLATE_HEARTBEAT_GRACE", "30")
    journal = str(tmp_path / "shared.log")
    here = Store(journal)
    study = open_study(here, "nfs", ["minimize"])
    assert study is not None
    for _ in range(2):
        study.add_trial(optuna.create_trial(state=TrialState.WAITING))
    trial, _ = claim(study, here)
    assert trial is not None and trial.number == 0
    # Make trial 0 look as if a worker on another host ran it: its pid means nothing here.
    trial.set_user_attr(OWNER, {"host": "elsewhere.example", "pid": 1, "start": "1"})
    trial_id = here.trial_id("nfs", 0)

    def beat_age(seconds: float) -> None:
        here.storage.set_trial_system_attr(trial_id, HEARTBEAT, time.time() - seconds)

    other = Store(journal)  # another worker, reading the same file
    theirs = optuna.load_study(study_name="nfs", storage=other.storage)
    beat_age(5)
    assert reclaim(theirs, other) == []  # a recent beat: alive
    beat_age(3600)
    with here.beat(trial):  # the owner's beat refreshes it (first beat on entry, then every interval)
        assert reclaim(theirs, other) == []
        beat_age(3600)
        deadline = time.time() + 60
        while time.time() < deadline and theirs.get_trials()[0].system_attrs[HEARTBEAT] < time.time() - 600:
            time.sleep(0.1)
        assert reclaim(theirs, other) == []  # the daemon thread beat again
    beat_age(3600)  # the owner died an hour ago
    assert reclaim(theirs, other) == [0]
    trials = theirs.get_trials()
    assert trials[0].state == TrialState.FAIL
    assert [t.system_attrs.get("failed_trial") for t in trials if t.state == TrialState.WAITING] == [None, 0]
    assert reclaim(theirs, other) == []  # failed once, re-queued once


@pytest.mark.soak
@pytest.mark.slow
@pytest.mark.postgres
def test_postgres_workers_survive_a_killed_worker(workdir: Path, postgres_url: str,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """Two `ablate tune --storage postgresql://...` processes; one is SIGKILLed mid-trial. Its trial's
    heartbeat goes stale, it is failed and re-queued, the other process resumes it; N trials complete."""
    monkeypatch.setenv("ABLATE_HEARTBEAT_INTERVAL", "1")
    monkeypatch.setenv("ABLATE_HEARTBEAT_GRACE", "5")
    name = f"pgtune-{os.getpid()}-{int(time.time())}"
    path = write_spec(workdir, name, KILL_SPACE.format(trials=6), steps=60)
    victim = start_tune(workdir, path, "w0.log", postgres_url)
    survivor = start_tune(workdir, path, "w1.log", postgres_url)
    killed = kill_mid_trial(victim, path, postgres_url)
    assert survivor.wait(timeout=600) == 0, (workdir / "w1.log").read_text()[-3000:]
    counted = assert_retried_once(load(path, postgres_url), killed, 6, name)
    assert {t.user_attrs[OWNER]["pid"] for t in counted} == {victim.pid, survivor.pid}  # both did work
