"""The MLflow record's names (ablate/tracking/record.py) and what reads them back: final/ results with old
records as a fallback, the experiment kind MLflow 3's UI opens on, run id prefixes, readable Optuna study
names that still resume old stores, and the dashboard's metric names and cell params."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import optuna
import pytest
from mlflow import MlflowClient
from mlflow.exceptions import MlflowException
from optuna.trial import TrialState

from ablate.errors import AblateError
from ablate.run.runner import RunResult, format_summary, run_label
from ablate.spec.load import load_spec
from ablate.study import study_names
from ablate.study.cell_queue import CellQueue
from ablate.study.optuna_store import Store
from ablate.tracking import record
from ablate.tracking.mlflow_store import experiment_id, latest_root_run, resolve_run_id

ROOT = Path(__file__).resolve().parents[2]


def test_final_names_read_back_and_old_records_fall_back() -> None:
    assert record.final("val/bleu") == "final/val/bleu" == record.final("final/val/bleu")
    assert record.unfinal("final/val/bleu") == "val/bleu" and record.unfinal("val/bleu") == "val/bleu"
    new = {"val/bleu": 20.0, "final/val/bleu": 25.0, "final/test/bleu": 24.0, "model/params": 10.0}
    assert record.result_metrics(new) == {"val/bleu": 25.0, "test/bleu": 24.0, "model/params": 10.0}
    old = {"val/bleu": 25.0, "test/bleu": 24.0}  # the result as the last value of the plain name
    assert record.result_metrics(old) == old
    assert record.result_value(new, "val/bleu") == 25.0 == record.result_value(old, "final/val/bleu")
    assert record.result_value({"val/loss": 3.0}, "val/loss") == 3.0  # a diverged run: its last value
    assert record.result_value({}, "val/loss") is None
    found = record.first_artifact(["a.json", "importance.json"], record.IMPORTANCE_ARTIFACT, "a.json")
    assert found == "importance.json"


def test_the_summary_uses_the_names_mlflow_has() -> None:
    spec = load_spec(ROOT / "experiments" / "quickstart.yaml")
    result = RunResult("finished", {"val/loss": 0.5, "test/exact_match": 0.9, "train/wall_time_s": 12.0,
                                    "model/params": 12345.0, "train/tokens_per_s": 100.0}, "abc", "runs/x")
    text = format_summary(spec, result)
    assert "  final/val/loss " in text and "  final/test/exact_match " in text
    assert "  final/train/wall_time_s " in text and "  final/train/tokens_per_s " in text
    assert "  model/params " in text and "final/model/params" not in text  # a constant, logged once
    old = RunResult("diverged", {"val/loss": 9.0, "wall_time_s": 3.0}, "abc", "runs/x")  # old summary.json
    text = format_summary(spec, old)
    assert "  val/loss " in text and "  final/train/wall_time_s " in text  # no final evaluation ran
    assert run_label("residual=post_norm", 1) == "residual=post_norm · seed 1"


def test_experiments_open_in_the_model_training_view_and_run_ids_take_prefixes(tmp_path: Path) -> None:
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    client = MlflowClient(uri)
    exp = experiment_id(client, "study-a", uri, description="what it compares")
    tags = client.get_experiment(exp).tags
    assert tags[record.EXPERIMENT_KIND] == record.MODEL_TRAINING_KIND
    assert tags[record.NOTE] == "what it compares"
    old = client.create_experiment("made-before")  # an experiment ablate made before the tag
    assert experiment_id(client, "made-before", uri) == old
    assert client.get_experiment(old).tags[record.EXPERIMENT_KIND] == record.MODEL_TRAINING_KIND

    parent = client.create_run(exp, run_name="study-a", tags={record.KIND: "ablation"}).info.run_id
    client.create_run(exp, run_name="baseline · seed 0", tags={record.PARENT_RUN: parent})
    latest = latest_root_run(uri)
    assert latest is not None and latest.run_id == parent  # the child started later, but has a parent
    assert resolve_run_id(parent[:8], tracking_uri=uri) == parent
    assert resolve_run_id(parent, tracking_uri=uri) == parent
    with pytest.raises(AblateError, match="no MLflow run id starts with"):
        resolve_run_id("zzzzzzzz", tracking_uri=uri)
    with pytest.raises(AblateError, match="ambiguous"):
        resolve_run_id(_common_prefix(client, exp), tracking_uri=uri)


class _LosesTheRace(MlflowClient):
    """A worker whose tag write loses to another worker's: the other's client writes the tag first, then
    this one's insert fails on the unique key, as MLflow's SQL store raised when two workers of an imported
    study tagged its experiment at once (``IntegrityError``, wrapped as an ``MlflowException``)."""

    def __init__(self, uri: str, winner_sets: bool) -> None:
        super().__init__(uri)
        self.winner = MlflowClient(uri)
        self.winner_sets = winner_sets

    def set_experiment_tag(self, experiment_id: str, key: str, value: Any) -> None:
        if self.winner_sets:
            self.winner.set_experiment_tag(experiment_id, key, value)
        raise MlflowException("(sqlite3.IntegrityError) UNIQUE constraint failed: experiment_tags.key")


def test_workers_racing_to_tag_an_imported_experiment_all_go_on(tmp_path: Path) -> None:
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    untagged = MlflowClient(uri).create_experiment("imported")  # no kind, no description
    loser = _LosesTheRace(uri, winner_sets=True)
    assert experiment_id(loser, "imported", uri, description="what it compares") == untagged
    tags = MlflowClient(uri).get_experiment(untagged).tags
    assert tags[record.NOTE] == "what it compares"
    assert tags[record.EXPERIMENT_KIND] == record.MODEL_TRAINING_KIND
    # a failure that left the tag unset is not a lost race: it still raises
    MlflowClient(uri).create_experiment("unreachable")
    with pytest.raises(MlflowException, match="UNIQUE"):
        experiment_id(_LosesTheRace(uri, winner_sets=False), "unreachable", uri, description="x")


def _common_prefix(client: MlflowClient, exp: str) -> str:
    ids = [r.info.run_id for r in client.search_runs([exp])]
    # a prefix shared by two runs: extend runs until two share a first character
    while len({i[0] for i in ids}) == len(ids):
        ids.append(client.create_run(exp).info.run_id)
    first = [i[0] for i in ids]
    return next(c for c in first if first.count(c) > 1)


def test_readable_study_names_resume_old_stores_and_keep_identities_apart(tmp_path: Path) -> None:
    store = Store(str(tmp_path / "journal.log"))
    assert study_names.resolve(store, "quick-axes", "a" * 16, "quick-axes-" + "a" * 16) == "quick-axes"
    study = optuna.create_study(study_name="quick-axes", storage=store.storage)
    study_names.write_attrs(study, study_names.study_attrs("a" * 16, "quick-axes", [], "ablation"))
    assert study_names.resolve(store, "quick-axes", "a" * 16, "quick-axes-" + "a" * 16) == "quick-axes"
    # the same spec name with other overrides: another identity, another (still readable) name
    assert study_names.resolve(store, "quick-axes", "b" * 16,
                               "quick-axes-" + "b" * 16) == "quick-axes-bbbbbbbb"
    other = optuna.create_study(study_name="quick-axes-bbbbbbbb", storage=store.storage)
    study_names.write_attrs(other, study_names.study_attrs("b" * 16, "quick-axes", ["train.max_steps=5"],
                                                           "ablation"))
    # a store written before readable names: its study is found under the old name
    optuna.create_study(study_name="quick-axes-" + "c" * 16, storage=store.storage)
    assert study_names.resolve(store, "quick-axes", "c" * 16,
                               "quick-axes-" + "c" * 16) == "quick-axes-" + "c" * 16
    known = {k.name: k.overrides for k in study_names.known_studies(store, "quick-axes", "ablation")}
    assert known == {"quick-axes": [], "quick-axes-bbbbbbbb": ["train.max_steps=5"],
                     "quick-axes-" + "c" * 16: None}


def test_ablation_cells_carry_their_axis_values_and_the_study_its_metric_name(tmp_path: Path) -> None:
    store = Store(str(tmp_path / "journal.log"))
    queue = CellQueue(store, "s", "maximize")
    queue.describe(study_names.study_attrs("k", "s", [], "ablation"), "final/val/exact_match")
    queue.enqueue([{"ablate.cell": "h1-s0", "label": "baseline", "seed": 0},
                   {"ablate.cell": "h2-s0", "label": "residual=post_norm", "seed": 0}])
    choices: dict[str, list[Any]] = {"residual": ["pre_norm", "post_norm"], "train.lr": [0.001, 0.01]}
    for values in ({"residual": "pre_norm", "train.lr": 0.001}, {"residual": "post_norm", "train.lr": 0.001}):
        trial, _ = queue.claim()
        assert trial is not None
        queue.set_params(trial, choices, values)
        queue.finish(trial, "finished", 0.5)
    study = optuna.load_study(study_name="s", storage=store.storage)
    assert study.metric_names == ["final/val/exact_match"]
    assert [t.params for t in study.trials] == [{"residual": "pre_norm", "train.lr": 0.001},
                                                {"residual": "post_norm", "train.lr": 0.001}]
    assert study.user_attrs[study_names.KEY] == "k"


def test_queued_cells_show_their_axis_values_before_a_worker_takes_them(tmp_path: Path) -> None:
    """Waiting trials carry their params from enqueue on (the dashboard's table of a running study), a
    worker's claim keeps them, and a re-queued failed cell has them too."""
    store = Store(str(tmp_path / "journal.log"))
    queue = CellQueue(store, "s", "maximize")
    choices = {"residual": ["pre_norm", "post_norm"]}
    values = {"h1-s0": {"residual": "pre_norm"}, "h2-s0": {"residual": "post_norm"}}
    assert queue.enqueue([{"ablate.cell": "h1-s0", "label": "baseline", "seed": 0},
                          {"ablate.cell": "h2-s0", "label": "residual=post_norm", "seed": 0}],
                         choices=choices, values=values) == (2, 0)
    study = optuna.load_study(study_name="s", storage=store.storage)
    waiting = study.get_trials(states=(TrialState.WAITING,))
    assert [(t.user_attrs["label"], t.params) for t in waiting] == [
        ("baseline", {"residual": "pre_norm"}), ("residual=post_norm", {"residual": "post_norm"})]
    trial, _ = queue.claim()
    assert trial is not None and trial.params == {"residual": "pre_norm"}
    queue.set_params(trial, choices, values["h1-s0"])
    queue.finish(trial, "failed", None, error="boom")
    assert queue.enqueue([{"ablate.cell": "h1-s0", "label": "baseline", "seed": 0}], retry_failed=True,
                         choices=choices, values=values) == (0, 1)
    latest = queue.latest()["h1-s0"]
    assert latest.state == TrialState.WAITING and latest.params == {"residual": "pre_norm"}


@pytest.mark.soak
@pytest.mark.slow
def test_the_ui_shows_runs_names_seeds_and_the_study_metric_in_a_browser(tmp_path: Path) -> None:
    """scripts/ui_check.py end to end: a small real store, `ablate ui`, headless Chromium (Debian's
    package; .ci/run installs it), MLflow's REST API; screenshots land in tmp_path."""
    import shutil
    import subprocess
    import sys

    if not (shutil.which("chromium") or shutil.which("chromium-browser")):
        pytest.skip("chromium is not installed (apt-get install -y chromium)")
    out = subprocess.run([sys.executable, str(ROOT / "scripts" / "ui_check.py"), "--out", str(tmp_path),
                          "--steps", "4"],  # the pages need runs and their records, not trained models
                         capture_output=True, text=True, timeout=1200, check=False)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "FAIL" not in out.stdout
    assert {p.name for p in tmp_path.glob("*.png")} == {"landing.png", "followed-link.png", "report.png",
                                                       "comparison.png", "study.png", "study-runs.png",
                                                       "cell-run.png", "single-run.png"}
