"""Optuna searches: the space, pruning, failures, parallel workers and dead workers on real stores.

Real Optuna stores (journal file, PostgreSQL), real MLflow sqlite in a temporary folder, tiny synthetic
specs (d_model 16, 1+1 layers, a few dozen steps).
"""

from __future__ import annotations

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
from optuna.trial import TrialState

from ablate.specload import SpecError, load_spec
from ablate.tune import main_tune
from ablate.tune.search import sample, search_name
from ablate.tune.space import plan_search
from ablate.tune.store import OWNER, Store

BASE = """\
name: {name}
seed: 0
data:
  source: synthetic
  synthetic: {{task: reverse, vocab_size: 12, min_len: 3, max_len: 6, train_size: 200, val_size: 16,
              test_size: 16}}
  max_len: 8
  batch_tokens: 256
model: {{d_model: 16, heads: 2, encoder_layers: 1, decoder_layers: 1, d_ff: 32, dropout: 0.0}}
train:
  max_steps: {steps}
  eval_every: 10
  checkpoint_every: 5
  divergence_factor: 1.5
  optimizer: {{lr: 0.01}}
  schedule: {{name: inverse_sqrt, warmup_steps: 10}}
eval: {{metric: exact_match, samples: 0, bleu_during_training: false}}
tracking: {{log_checkpoint: false}}
"""


def write_spec(folder: Path, name: str, search: str, steps: int = 30) -> Path:
    path = folder / f"{name}.yaml"
    path.write_text(BASE.format(name=name, steps=steps) + search)
    return path


def load(path: Path, storage: str | None = None) -> optuna.Study:
    plan = plan_search(str(path))
    return optuna.load_study(study_name=search_name(plan), storage=Store(storage).storage)


def mlflow_runs(experiment: str) -> tuple[list, list]:
    client = MlflowClient(os.environ["MLFLOW_TRACKING_URI"])
    exp = client.get_experiment_by_name(experiment)
    assert exp is not None
    runs = client.search_runs([exp.experiment_id], max_results=1000)
    return ([r for r in runs if "mlflow.parentRunId" not in r.data.tags],
            [r for r in runs if "mlflow.parentRunId" in r.data.tags])


def assert_trials_match_runs(study: optuna.Study, experiment: str) -> None:
    """One parent; each counted trial's run is a child of it tagged with that trial's number."""
    parents, children = mlflow_runs(experiment)
    assert len(parents) == 1 and parents[0].data.tags["ablate.kind"] == "search"
    assert study.user_attrs["ablate.parent_run_id"] == parents[0].info.run_id
    by_id = {r.info.run_id: r for r in children}
    for t in study.get_trials(states=(TrialState.COMPLETE, TrialState.PRUNED)):
        run = by_id[t.user_attrs["mlflow_run_id"]]
        assert run.data.tags["mlflow.parentRunId"] == parents[0].info.run_id
        assert run.data.tags["ablate.trial"] == str(t.number)
        assert run.data.tags["ablate.status"] == t.user_attrs["status"]


# ---------------------------------------------------------------- the space (nothing trains)
def test_space_errors_name_the_dimension(tmp_path: Path) -> None:
    path = write_spec(tmp_path, "bad", """
search:
  space:
    model.d_model: {choice: [16, 15]}
    train.schedule.warmup_steps: {low: 0, high: 100}
    train.optimizer.lr: {low: 1e-4, high: 1e-2, log: true, when: {train.schedul.name: inverse_sqrt}}
  objectives: [{metric: val/bleu, direction: maximize}]
""")
    with pytest.raises(SpecError) as err:
        plan_search(str(path))
    text = str(err.value)
    assert "search.space.train.schedule.warmup_steps: train.schedule.warmup_steps is an integer field" in text
    assert "search.space.train.optimizer.lr.when: 'train.schedul.name' is not a spec field" in text
    assert "val/bleu needs text data" in text
    assert f"{path}:" in text
    fixed = path.read_text().replace("{low: 0, high: 100}", "{low: 0, high: 100, int: true}").replace(
        "schedul.name", "schedule.name").replace("val/bleu, direction: maximize", "val/loss")
    path.write_text(fixed)
    with pytest.raises(SpecError, match=r"search.space.model.d_model: model.d_model=15 gives an invalid"):
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
    assert plan.baseline_params() == {
        "model.residual": "pre_norm", "train.optimizer.betas": "[0.9, 0.98]",
        "train.schedule.name": "inverse_sqrt", "train.schedule.warmup_steps": 10}
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


def test_experiment_searches_plan() -> None:
    root = Path(__file__).resolve().parents[2] / "experiments" / "search"
    quick, multi = plan_search(str(root / "quick.yaml")), plan_search(str(root / "multi30k.yaml"))
    assert any(k.startswith("model.") and p.choice for k, p in quick.space.items())  # a component choice
    assert quick.space["train.schedule.warmup_steps"].when == {"train.schedule.name": "inverse_sqrt"}
    assert quick.spec.data.source == "synthetic" and quick.metrics == ["val/loss"]
    assert multi.metrics == ["val/bleu", "train/tokens_per_s"]
    assert multi.directions == ["maximize", "maximize"]


@pytest.mark.parametrize("name", ["ped_anova", "fanova"])
def test_importances_name_their_evaluator(tmp_path: Path, name: str) -> None:
    from ablate.tune.results import importances

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
def test_search_prunes_survives_crashes_and_divergence_and_reproduces_its_best(
        workdir: Path, crashing_ffn: str, capsys: pytest.CaptureFixture[str]) -> None:
    """Grid over lr {0.01, 1e-6, 100} x ffn {linear, crash}: the baseline (lr 0.01, linear) runs first;
    1e-6 is pruned against it, 100 diverges (counted as pruned), the crashing FFN fails; the study ends."""
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
    assert len(trials) == 7  # the baseline + the 6 grid points (the grid caps --trials)
    assert trials[0].params == {"train.optimizer.lr": 0.01, "model.ffn": "linear"}
    assert trials[0].user_attrs["ablate.baseline"] is True
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
    assert len(finished) == 2 and all(t.state == TrialState.COMPLETE for t in finished)
    # A pruned trial stops at its first evaluation: fewer logged steps than a finished one.
    client = MlflowClient(os.environ["MLFLOW_TRACKING_URI"])
    steps = {t.number: sorted(m.step for m in client.get_metric_history(t.user_attrs["mlflow_run_id"],
                                                                         "train/loss"))
             for t in pruned + finished}  # train/loss: logged while training, not by the final evaluation
    assert max(steps[pruned[0].number]) <= 10 < max(steps[finished[0].number])
    assert len(steps[pruned[0].number]) < len(steps[finished[0].number])
    assert sorted(pruned[0].intermediate_values) == [10]
    assert_trials_match_runs(study, "grid")

    # Results: the best trial printed, logged on the parent, best.yaml runnable, importances named.
    best = study.best_trial
    assert f"trial {best.number}: val/loss {best.value:.4g}" in out
    assert "PedAnovaImportanceEvaluator" in out
    parent = mlflow_runs("grid")[0][0]
    assert parent.info.status == "FINISHED"
    assert parent.data.metrics["best/val/loss"] == pytest.approx(best.value)
    assert parent.data.tags["ablate.best_trial"] == str(best.number)
    assert parent.data.params["best.model.ffn"] == "linear"
    artifacts = {a.path for a in client.list_artifacts(parent.info.run_id)}
    assert {"best.yaml", "importance.json", "figures"} <= artifacts
    figures = {Path(a.path).name for a in client.list_artifacts(parent.info.run_id, "figures")}
    assert {"optimization_history.png", "param_importances.png", "parallel_coordinate.png"} <= figures
    best_yaml = workdir / "runs" / "grid" / study.study_name / "best.yaml"
    assert yaml.safe_load(best_yaml.read_text())["search"] is None

    # `ablate run best.yaml` retrains the best trial to the same metric (same seed, fresh run dir).
    from ablate.runner import run_experiment

    spec = load_spec(best_yaml, ["train.out_dir=rerun", "tracking.enabled=false"])
    assert run_experiment(spec, quiet=True).metrics["val/loss"] == pytest.approx(best.value, rel=1e-5)


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
    assert len({t.user_attrs["mlflow_run_id"] for t in trials}) == 5
    assert_trials_match_runs(study, "two")
    client = MlflowClient(os.environ["MLFLOW_TRACKING_URI"])
    parent = mlflow_runs("two")[0][0]
    assert "pareto.json" in {a.path for a in client.list_artifacts(parent.info.run_id)}
    figures = {Path(a.path).name for a in client.list_artifacts(parent.info.run_id, "figures")}
    assert "pareto_front.png" in figures
    assert main_tune(str(path), workers=2) == 0  # rerun: the study is complete, nothing new runs
    assert len(load(path).get_trials()) == 5


@pytest.mark.postgres
def test_postgres_workers_survive_a_killed_worker(workdir: Path, postgres_url: str,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """Two `ablate tune --storage postgresql://...` processes; one is SIGKILLed mid-trial. Its trial's
    heartbeat goes stale, it is failed and re-queued, the other process resumes it; N trials complete."""
    monkeypatch.setenv("ABLATE_HEARTBEAT_INTERVAL", "1")
    monkeypatch.setenv("ABLATE_HEARTBEAT_GRACE", "5")
    name = f"pgtune-{os.getpid()}-{int(time.time())}"
    path = write_spec(workdir, name, """
search:
  trials: 6
  sampler: random
  pruner: {name: none}
  space:
    train.optimizer.lr: {low: 1e-3, high: 3e-2, log: true}
""", steps=60)
    cmd = [sys.executable, "-m", "ablate", "tune", str(path), "--storage", postgres_url]
    logs = [open(workdir / f"w{i}.log", "w") for i in range(2)]
    victim = subprocess.Popen(cmd, cwd=workdir, stdout=logs[0], stderr=subprocess.STDOUT)
    survivor = subprocess.Popen(cmd, cwd=workdir, stdout=logs[1], stderr=subprocess.STDOUT)
    killed = None
    deadline = time.time() + 400
    while killed is None and time.time() < deadline and victim.poll() is None:
        time.sleep(0.2)
        try:
            trials = load(path, postgres_url).get_trials()
        except KeyError:
            continue
        mine = [t for t in trials if t.user_attrs.get(OWNER, {}).get("pid") == victim.pid]
        running = [t for t in mine if t.state == TrialState.RUNNING
                   and Path(t.user_attrs.get("ablate.run_dir", "/nonexistent"), "last.pt").exists()]
        if running and any(t.state == TrialState.COMPLETE for t in mine):  # it did work and is mid-trial
            victim.send_signal(signal.SIGKILL)
            killed = running[0].number
    victim.wait()
    assert killed is not None, (workdir / "w0.log").read_text()[-3000:]
    assert survivor.wait(timeout=600) == 0, (workdir / "w1.log").read_text()[-3000:]

    study = load(path, postgres_url)
    trials = study.get_trials()
    assert trials[killed].state == TrialState.FAIL
    retries = [t for t in trials if t.system_attrs.get("failed_trial") == killed]
    assert len(retries) == 1 and retries[0].state == TrialState.COMPLETE
    assert retries[0].user_attrs["ablate.run_dir"] == trials[killed].user_attrs["ablate.run_dir"]  # resumed
    counted = [t for t in trials if t.state == TrialState.COMPLETE]
    assert len(counted) == 6 and len(trials) == 7  # none lost, none duplicated: 6 slots + the dead attempt
    owners = {t.user_attrs[OWNER]["pid"] for t in counted}
    assert owners == {victim.pid, survivor.pid}  # both processes completed trials
    assert len({t.user_attrs["mlflow_run_id"] for t in counted}) == 6
