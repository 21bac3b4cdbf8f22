"""`ablate study` with ``tune:`` and ``confirm:`` (ablate/study/arms.py): the phases in order, each arm's
cells in the study's one queue, nothing trained twice on a rerun, an interrupt in any phase resumed, and a
study that adds the sections later keeping every cell it has. Training is the known function of
tests/tuned_studies.py, recorded as real MLflow runs."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

import pytest
from mlflow import MlflowClient

from ablate.errors import AblateError
from ablate.launch.local_study import main_ablate
from ablate.launch.status import main_status
from ablate.study.designs import plan_study
from ablate.study.optuna_store import Store
from ablate.tracking import record
from tests.factories import STUDY_CELL, write_tiny_spec
from tests.tuned_studies import BASE_LR, LONG, SHORT, fake_training, write_study


def _runs(name: str) -> tuple[object, list]:
    """(the study's parent run, every other run of its experiment: cells, searches and their trials)."""
    client = MlflowClient(os.environ["MLFLOW_TRACKING_URI"])
    exp = client.get_experiment_by_name(name)
    assert exp is not None
    runs = client.search_runs([exp.experiment_id], max_results=1000)
    parents = [r for r in runs if record.PARENT_RUN not in r.data.tags]
    assert len(parents) == 1  # one study, one parent, however often the command ran
    return parents[0], [r for r in runs if record.PARENT_RUN in r.data.tags]


def _arms_json(run_id: str) -> dict[str, dict[str, str]]:
    client = MlflowClient(os.environ["MLFLOW_TRACKING_URI"])
    local = client.download_artifacts(run_id, record.ARMS_ARTIFACT, tempfile.mkdtemp())
    return json.loads(Path(local).read_text())


def _key(spec: object) -> str:
    return f"{spec.spec_hash}-s{spec.seed}"  # type: ignore[attr-defined]


@pytest.mark.slow  # a real training or study (the fast tier stays under 3 minutes)
def test_every_phase_runs_in_order_and_a_rerun_trains_nothing(workdir: Path, monkeypatch: pytest.MonkeyPatch,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    trained = fake_training(monkeypatch)
    path = write_study(workdir, "phases")
    assert main_ablate(str(path)) == 0
    steps = [s.train.max_steps for s in trained]
    # a: the cells at the baseline's settings, 3 variants x 3 seeds (each comparison decided at look 1)
    assert steps[:9] == [SHORT] * 9 and {s.train.optimizer.lr for s in trained[:9]} == {BASE_LR}
    # b: one search per variant, the same 4 grid trials at the fidelity, with the same (tuning) seed: the
    # first after every evaluation seed (the study's 0-3 and the confirmation's 10-13)
    assert steps[9:21] == [5] * 12 and {s.seed for s in trained[9:21]} == {14}
    assert [s.model.norm for s in trained[9:21]] == ["builtin"] * 4 + ["custom"] * 4 + ["builtin"] * 4
    # c: at its own best only norm=custom is new (3x the learning rate): the others' best is the baseline's
    assert [(s.model.norm, s.train.optimizer.lr, s.seed, s.train.max_steps) for s in trained[21:24]] == [
        ("custom", 3 * BASE_LR, seed, SHORT) for seed in (0, 1, 2)]
    # ... equal to the baseline there, but 3 paired seeds are too few to call that no effect
    # (stats.verdict.EQUIVALENCE_PAIRS): the arm's next round adds seed 3 to both sides
    assert sorted((s.model.norm, s.train.optimizer.lr, s.seed) for s in trained[24:26]) == [
        ("builtin", BASE_LR, 3), ("custom", 3 * BASE_LR, 3)]
    # d: both decided comparisons and the baseline at the larger setting, each at its own best, seeds 10-13
    confirm = trained[26:]
    assert len(confirm) == 12 and {s.train.max_steps for s in confirm} == {LONG}
    assert [s.seed for s in confirm] == [10, 10, 10, 11, 11, 11, 12, 12, 12, 13, 13, 13]
    assert {(s.model.norm, s.model.residual, s.train.optimizer.lr) for s in confirm} == {
        ("builtin", "pre_norm", BASE_LR), ("custom", "pre_norm", 3 * BASE_LR),
        ("builtin", "post_norm", BASE_LR)}

    parent, children = _runs("phases")
    assert parent.info.status == "FINISHED"  # type: ignore[attr-defined]
    cells = [r for r in children if r.data.tags.get(record.KIND) == "cell"]
    assert len(cells) == 26 and len({r.data.tags[record.CELL] for r in cells}) == 26  # each cell once
    assert sorted(r.data.tags[record.ARM] for r in cells) == \
        [record.BASELINE_ARM] * 10 + [record.CONFIRM_ARM] * 12 + [record.OWN_BEST_ARM] * 4  # + seed 3
    searches = [r for r in children if r.data.tags.get(record.KIND) == "search"]
    assert sorted(r.data.tags[record.VARIANT] for r in searches) == [
        "baseline", "norm=custom", "residual=post_norm"]
    arms = _arms_json(parent.info.run_id)  # type: ignore[attr-defined]
    assert [len(arms[a]) for a in record.ARMS] == [10, 11, 12]  # the baseline's seed 3 in two arms
    # the parent's description in MLflow's UI lists every arm's cells under its heading
    note = parent.data.tags["mlflow.note.content"]  # type: ignore[attr-defined]
    own, confirmed = note.index("**Each variant at its own best settings**"), note.index(
        "**The decided comparisons at the larger setting**")
    assert own < confirmed and note[own:confirmed].count("| norm=custom |") == 4  # seeds 0-3
    assert note[confirmed:].count("| norm=custom |") == 4
    own_best = arms[record.OWN_BEST_ARM]
    shared = set(arms[record.BASELINE_ARM]) & set(own_best)  # the baseline's and post_norm's cells
    assert sorted(own_best[k] for k in shared) == ["baseline"] * 4 + ["residual=post_norm"] * 3

    capsys.readouterr()
    assert main_ablate(str(path)) == 0  # a rerun: every phase is complete in the store
    assert len(trained) == 38
    out = capsys.readouterr().out
    assert "0 cells queued" in out and "11 cells needed now, 0 newly queued; 7 of them are cells at the " \
        "baseline's settings too" in out and "12 cells needed now, 0 newly queued" in out
    assert len(_runs("phases")[1]) == len(children)
    assert main_ablate(str(path), dry_run=True) == 0  # where every phase stands, read only
    out = capsys.readouterr().out
    assert "  norm=custom: 4 of 4 trials done; best 1.003" in out and "at train.optimizer.lr=0.003" in out
    assert "own best: 11 of up to 12 cells in the store" in out
    assert "confirm: decided so far: norm=custom, residual=post_norm; 12 of 12 cells in the store" in out
    assert "in all, every phase together: 1,020 steps at most" in out  # 240 + 60 + 240 + 480
    assert main_status(str(path)) == 0  # `ablate status` says where the later phases stand too
    out = capsys.readouterr().out
    assert "  norm=custom: 4 of 4 trials done; best 1.003" in out
    assert "own best: 11 of up to 12 cells in the store" in out and "confirm: decided so far: " in out
    assert len(trained) == 38


def test_adding_arm_settings_to_a_recorded_study_is_refused_and_keeps_its_cells(workdir: Path,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    trained = fake_training(monkeypatch)
    path = write_study(workdir, "grown", tune=False, confirm=False)
    assert main_ablate(str(path)) == 0
    before = plan_study(str(path))
    store_name = before.bind(Store(None))
    ran = {_key(s) for s in trained}
    assert len(ran) == 9
    parent, children = _runs("grown")

    write_study(workdir, "grown")  # the same spec file, now with tune: and confirm:
    after = plan_study(str(path))
    assert [c.key for c in after.cells] == [c.key for c in before.cells]  # the same cell identities
    assert after.bind(Store(None)) == store_name  # the same Optuna study
    # the own-best comparisons would join the family its verdicts were recorded with: a design chosen after
    # the data, refused in one line; the study, its cells and its runs stay as they were
    with pytest.raises(AblateError, match=r"^ablation.axes or ablation.tune .*pre-registered with family 2, "
                                          r"the spec now gives 4"):
        main_ablate(str(path))
    assert len(trained) == 9
    again, now = _runs("grown")
    assert again.info.run_id == parent.info.run_id  # type: ignore[attr-defined]
    assert {r.info.run_id for r in children} == {r.info.run_id for r in now}


@pytest.mark.slow  # a real study, training or subprocess (the fast tier stays under 3 minutes)
def test_an_interrupt_in_any_phase_resumes_where_it_stopped(workdir: Path, monkeypatch: pytest.MonkeyPatch,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    # Ctrl-C in the searches' 4th trial, then (after the rerun's 12 calls to finish) in an own-best cell and
    # then in a confirmation cell
    trained = fake_training(monkeypatch, interrupt_at={12, 23, 30})
    path = write_study(workdir, "stopped")
    for _ in range(3):
        assert main_ablate(str(path)) == 130
        assert "interrupted by SIGINT" in capsys.readouterr().err
    assert main_ablate(str(path)) == 0
    assert len(trained) == 38 + 3  # every interrupted call ran again, nothing else did
    parent, children = _runs("stopped")
    assert parent.info.status == "FINISHED"  # type: ignore[attr-defined]
    cells = [r for r in children if r.data.tags.get(record.KIND) == "cell"]
    assert len(cells) == 26 and {r.data.tags[record.STATUS] for r in cells} == {"finished"}
    searches = [r for r in children if r.data.tags.get(record.KIND) == "search"]
    assert len(searches) == 3 and {json.loads(r.data.tags[record.BEST_SETTINGS])["train.optimizer.lr"]
                                   for r in searches} == {BASE_LR, 3 * BASE_LR}
    assert {r.info.status for r in searches} == {"FINISHED"}  # reopened and ended by the rerun
    trials = [r for r in children if r.data.tags.get(record.KIND) == "trial"]
    # 12 trials, the interrupted one's MLflow run never opened: a search's trials are its run's children
    assert len(trials) == 12
    assert {r.data.tags[record.PARENT_RUN] for r in trials} == {r.info.run_id for r in searches}


def test_a_worker_process_runs_every_variants_search(workdir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """What each of `--workers N` processes runs in phase b (here in this process, where the stand-in for
    training applies): it claims trials of every variant's search until none is waiting."""
    from ablate.study.variant_searches import _tune_worker, close_search, open_search, variants
    from ablate.tracking import Tracker

    trained = fake_training(monkeypatch)
    path = write_study(workdir, "shared", confirm=False)
    plan = plan_study(str(path))
    store = Store(None)
    parent = Tracker.start(plan.spec, run_name="shared", tags={record.KIND: "ablation",
                                                               record.VARIANT: "study"})
    searches = [open_search(plan, label, fields, store, parent.run_id)
                for label, fields in variants(plan).items()]
    assert _tune_worker(str(path), [], None, 1, 2) == 0
    assert len(trained) == 12 and {s.train.max_steps for s in trained} == {5}
    outcomes = {s.label: close_search(s, store, interrupted=False) for s in searches}
    assert outcomes["norm=custom"].best == {"train.optimizer.lr": 3 * BASE_LR}
    parent.end("finished")
    _, children = _runs("shared")
    by_search = {r.info.run_id: r for r in children if r.data.tags.get(record.KIND) == "search"}
    trials = [r for r in children if r.data.tags.get(record.KIND) == "trial"]
    assert len(by_search) == 3 and len(trials) == 12  # each trial under its variant's search run
    assert {r.data.tags[record.PARENT_RUN] for r in trials} == set(by_search)


REAL = """ablation:
  axes: {model.norm: [builtin, custom]}
  seeds: {min: 4, max: 4}            # one look at 4 seeds: the fewest "no effect" rests on
  metric: val/loss
  min_effect: 100.0                  # every comparison decided (an effect, or none that large): confirm runs
  tune:
    space: {train.optimizer.lr: {choice: [0.003, 0.01]}}
    trials: 2
    sampler: grid
    pruner: {name: none}
    fidelity: {steps: 5}
  confirm:
    overrides: {train.max_steps: 30}
    seeds: [5, 6]
"""


@pytest.mark.soak
def test_a_trained_study_runs_every_phase_and_reports_them(workdir: Path) -> None:
    """The phases with real training (tiny cells; about 24 runs, over a minute on 2 busy cores: the soak
    tier): run folders, checkpoints and records of every arm apart, and the report's sections made from
    them, CPU time logged by every run."""
    from tests.factories import STUDY_CELL, write_tiny_spec

    changes = {"name": "real", "train.max_steps": 20, "train.optimizer.lr": 0.003}
    path = write_tiny_spec(workdir, STUDY_CELL, changes, extra=REAL, filename="real.yaml")
    assert main_ablate(str(path)) == 0
    parent, children = _runs("real")
    assert parent.info.status == "FINISHED"  # type: ignore[attr-defined]
    cells = [r for r in children if r.data.tags.get(record.KIND) == "cell"]
    arms = {r.data.tags[record.ARM] for r in cells}
    assert record.CONFIRM_ARM in arms and {r.data.tags[record.STATUS] for r in cells} == {"finished"}
    assert len([r for r in children if r.data.tags.get(record.KIND) == "trial"]) == 4
    confirm = [r for r in cells if r.data.tags[record.ARM] == record.CONFIRM_ARM]
    assert {int(r.data.params["train.max_steps"]) for r in confirm} == {30}
    assert all(r.data.metrics[record.final(record.CPU_TIME)] > 0 for r in children
               if record.KIND in r.data.tags and r.data.tags[record.KIND] in ("cell", "trial"))
    assert main_ablate(str(path)) == 0 and len(_runs("real")[1]) == len(children)  # nothing trains again

    from ablate.cli import main as cli_main

    assert cli_main(["report", "real", "--out", str(workdir / "rep")]) == 0
    data = json.loads((workdir / "rep" / "report.json").read_text())
    # the one comparison, decided at its 4 seeds (an effect, or no effect as large as 100), is rerun at scale
    assert [v["small"] in ("better", "worse", "none") for v in data["scale"]["verdicts"]] == [True]
    assert sorted(data["evp"]) == ["baseline", "norm=custom"]
    assert [len(c) for c in data["evp"].values()] == [2, 2]
    assert [p["runs_without_cpu_time"] for p in data["compute"]] == [0, 0, 0, 0]
    assert all(p["cpu_hours"] > 0 for p in data["compute"] if p["runs"])


@pytest.mark.soak
@pytest.mark.postgres
def test_two_processes_share_every_phase_through_postgresql(workdir: Path, postgres_url: str) -> None:
    """Two `ablate study --storage postgresql://...` (two machines) on the trained study above: the cells,
    the searches' trials, the own-best and the confirmation cells are each trained once, by one process or
    the other, and both end 0."""
    name = f"pg-arms-{os.getpid()}-{int(time.time())}"
    changes = {"name": name, "train.max_steps": 20, "train.optimizer.lr": 0.003}
    path = write_tiny_spec(workdir, STUDY_CELL, changes, extra=REAL, filename=f"{name}.yaml")
    cmd = [sys.executable, "-m", "ablate", "ablate", str(path), "--storage", postgres_url]
    logs = [workdir / f"worker{i}.log" for i in range(2)]
    procs = [subprocess.Popen(cmd, cwd=workdir, stdout=log.open("w"), stderr=subprocess.STDOUT)
             for log in logs]
    codes = [p.wait(timeout=600) for p in procs]
    assert codes == [0, 0], [log.read_text()[-3000:] for log in logs]
    parents, children = _runs(name)
    kinds = Counter(r.data.tags.get(record.KIND) for r in children)
    assert kinds["search"] == 2 and kinds["trial"] == 4  # one search per variant, each trial once
    cells = [r for r in children if r.data.tags.get(record.KIND) == "cell"]
    per_cell = Counter(r.data.tags[record.CELL] for r in cells)
    assert set(per_cell.values()) == {1}  # no cell trained twice
    assert {r.data.tags[record.ARM] for r in cells} >= {record.BASELINE_ARM, record.CONFIRM_ARM}
    assert {r.data.tags[record.STATUS] for r in cells} == {"finished"}
    trials = Counter(r.data.tags[record.OPTUNA_STUDY] + "#" + r.data.tags[record.TRIAL] for r in children
                     if r.data.tags.get(record.KIND) == "trial")
    assert set(trials.values()) == {1}
