"""A study resolves ``train.precision: auto`` once (ablate/study/precision.py). The modern-axes Multi30k
study ran on two kinds of CPU: its baseline's cells trained in fp32 and many variant cells in bf16, so
their paired differences measured the precision as well as the variant. Here a study runs its first cell on
an fp32 machine and the rest on a bf16 one, as an ablate without the pin did; the report must say the
cells mix precisions, and the next `ablate study` must train every cell again at the first cell's
precision, leave the others out of the report as superseded, and say why."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from ablate.cli import main as cli_main
from ablate.launch.local_study import main_ablate
from ablate.spec.experiment import ExperimentSpec
from ablate.study.precision import at_study_precision, pinned_precision
from ablate.tracking import record
from tests.factories import STUDY_CELL, write_tiny_spec
from tests.tuned_studies import AXES, BASE_LR, SHORT, TUNE, fake_training


def _machines(monkeypatch: pytest.MonkeyPatch, first: str, then: str, interrupt_at: tuple[int, ...] = ()
              ) -> list[ExperimentSpec]:
    """Fake training (tests/tuned_studies.py) whose runs tag the precision `auto` resolves to: `first` for
    the first call, `then` after it (the study moved to another machine)."""
    import ablate.run.runner as runner

    trained = fake_training(monkeypatch, interrupt_at)
    inner = runner.run_experiment

    def run(spec: ExperimentSpec, *, tags: dict[str, str] | None = None, **kw: Any) -> Any:
        here = first if not trained else then
        resolved = here if spec.train.precision == "auto" else spec.train.precision
        return inner(spec, tags={**(tags or {}), record.PRECISION: resolved}, **kw)

    monkeypatch.setattr(runner, "run_experiment", run)
    return trained


def _report(name: str, out: Path) -> tuple[str, dict[str, Any]]:
    assert cli_main(["report", name, "--out", str(out)]) == 0
    return (out / "report.md").read_text(), json.loads((out / "report.json").read_text())


@pytest.mark.soak
@pytest.mark.slow  # a real training or study (the fast tier stays under 3 minutes)
def test_cells_that_ran_at_another_precision_train_again_at_the_first_cells(
        workdir: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    spec = write_tiny_spec(workdir, STUDY_CELL, {"name": "mixed", "train.max_steps": SHORT,
                                                 "train.optimizer.lr": BASE_LR, "train.precision": "auto"},
                           extra=AXES, filename="mixed.yaml")
    monkeypatch.setattr("ablate.study.precision.resolve_here", lambda: "fp32")
    assert main_ablate(str(spec), dry_run=True) == 0  # a new study: this machine's precision
    assert ("precision: every cell trains in fp32 (train.precision: auto, this machine's"
            in capsys.readouterr().out)
    # an ablate from before the pin: each cell resolves auto where it runs
    with monkeypatch.context() as m:
        m.setattr("ablate.study.ablation._pin_precision", lambda *a: None)
        before = _machines(m, first="fp32", then="bf16")
        assert main_ablate(str(spec)) == 0
    assert len(before) == 9 and all(s.train.precision == "auto" for s in before)
    assert main_ablate(str(spec), dry_run=True) == 0  # cells but no pin: the next start decides
    assert "resolved when the study next starts: to its first finished cell's" in capsys.readouterr().out
    text, _ = _report("mixed", workdir / "before")
    assert ("the cells did not all train at one precision: bf16 (8), fp32 (1). A paired comparison whose "
            "two cells differ in precision") in text

    # now on the bf16 machine: the study's precision is its first cell's, fp32, not this machine's
    monkeypatch.setattr("ablate.study.precision.resolve_here", lambda: "bf16")
    capsys.readouterr()
    stopped = _machines(monkeypatch, first="bf16", then="bf16", interrupt_at=(1,))
    assert main_ablate(str(spec)) == 130 and len(stopped) == 2
    said = capsys.readouterr().out
    assert "8 cells ran at another precision than the study's fp32 and are superseded" in said
    # halfway, the report already leaves the bf16 cells out: one comparison rests on the one pair retrained
    text, data = _report("mixed", workdir / "halfway")
    assert "did not all train at one precision" not in text
    assert sum(c["pairs"] for c in data["sequential"]["comparisons"]) <= 1

    again = _machines(monkeypatch, first="bf16", then="bf16")
    assert main_ablate(str(spec)) == 0
    assert "another precision" not in capsys.readouterr().out  # queued once, by the interrupted command
    assert len(again) == 7 and {s.train.precision for s in stopped + again} == {"fp32"}
    assert {(s.model.norm, s.model.residual, s.seed) for s in stopped + again} == {
        (s.model.norm, s.model.residual, s.seed) for s in before[1:]}

    text, data = _report("mixed", workdir / "after")
    assert "did not all train at one precision" not in text
    assert "`train.precision`" not in text.split("## Axes and what differs")[1].split("## Results")[0]
    assert ("8 run(s) that trained at another precision than the study's cells are left out (ran in bf16; "
            "the study's cells train in fp32 (train.precision: auto, pinned per study)): ") in text
    seq = {c["variant"]: c["pairs"] for c in data["sequential"]["comparisons"]}
    assert seq == {"norm=custom": 3, "residual=post_norm": 3}

    # the dry run says which precision the study's cells train in
    capsys.readouterr()
    assert main_ablate(str(spec), dry_run=True) == 0
    assert "precision: every cell trains in fp32 (train.precision: auto" in capsys.readouterr().out
    # a third run changes nothing: the superseded cells stay tagged, none is queued again
    third = _machines(monkeypatch, first="bf16", then="bf16")
    capsys.readouterr()
    assert main_ablate(str(spec)) == 0
    assert third == [] and "another precision" not in capsys.readouterr().out


def test_the_pin_applies_to_auto_alone() -> None:
    from tests.factories import tiny_spec

    spec = ExperimentSpec.model_validate(tiny_spec({"train.precision": "auto"}))
    assert spec.train.precision == "auto"
    pinned = at_study_precision(spec, "bf16")
    assert pinned.train.precision == "bf16" and pinned.spec_hash != spec.spec_hash
    assert at_study_precision(spec, None) is spec
    named = at_study_precision(pinned, "fp32")
    assert named is pinned  # a spec that names its precision is one setting for every cell already
    assert pinned_precision("fp16", None, None) is None
    assert pinned_precision("auto", "fp32", None) == "fp32"  # the store's answer outlives every machine


def test_the_own_best_section_says_when_the_searches_ran_at_another_precision() -> None:
    from ablate.report.compute.loaded_study import Run, Search, Study
    from ablate.report.sections.own_best import _precisions

    def run(variant: str, precision: str, kind: str = "cell") -> Run:
        return Run(run_id=f"{variant}-{precision}", variant=variant, seed=0, status="finished", spec_hash="",
                   params={}, metrics={}, tags={record.KIND: kind,
                                                record.PRECISION: precision}, start_time=0.0)

    cells = [run("baseline", "fp32"), run("norm=rms", "fp32")]
    study = Study("s", "ablation", {}, cells, ["baseline", "norm=rms"], "baseline", "bleu", "val/bleu")
    study.searches = [Search(run(v, "search"), [run(v, "bf16", "trial")]) for v in study.variants]
    assert _precisions(study).startswith(" The searches' trials trained in bf16, the cells in fp32: a "
                                         "setting chosen at one precision is measured at another")
    study.searches[1].trials = [run("norm=rms", "fp32", "trial")]
    assert "did not all run alike" in _precisions(study)
    study.searches[1].trials = [run("norm=rms", "bf16", "trial")]
    study.runs = [run("baseline", "bf16"), run("norm=rms", "bf16")]
    assert _precisions(study) == ""


@pytest.mark.slow  # trains a study's cells twice over; the units above keep the rule in the fast tier
def test_a_study_trains_every_cell_at_one_resolved_precision(workdir: Path) -> None:
    """Real training: `auto` becomes this machine's precision once, every cell trains at it, and each run
    keeps its cell's identity (spec hash tag) and its spec's `auto` beside what it trained at."""
    from ablate.study.precision import resolve_here
    from tests.study.test_study import assert_each_cell_once, study_runs

    spec = write_tiny_spec(workdir, STUDY_CELL, {"name": "pinned", "train.max_steps": 6,
                                                 "train.eval_every": 6, "train.precision": "auto"},
                           extra="ablation:\n  axes: {model.norm: [builtin, custom]}\n", filename="p.yaml")
    assert main_ablate(str(spec)) == 0
    children = assert_each_cell_once(spec)  # the spec hash tag is the cell's, not the pinned spec's
    parents, _ = study_runs("pinned")
    here = resolve_here()
    assert parents[0].data.tags[record.STUDY_PRECISION] == here
    for run in children:
        assert (run.data.tags[record.PRECISION], run.data.params["train.precision"],
                run.data.tags[record.SPEC_PRECISION]) == (here, here, "auto")


@pytest.mark.slow  # a real study, training or subprocess (the fast tier stays under 3 minutes)
def test_a_tuned_studys_searches_train_at_its_precision_too(workdir: Path, monkeypatch: pytest.MonkeyPatch
                                                             ) -> None:
    """Each variant's search must run alike: its trials train at the study's precision, like its cells."""
    spec = write_tiny_spec(workdir, STUDY_CELL, {"name": "tuned", "train.max_steps": SHORT,
                                                 "train.optimizer.lr": BASE_LR, "train.precision": "auto"},
                           extra=AXES + TUNE, filename="tuned.yaml")
    monkeypatch.setattr("ablate.study.precision.resolve_here", lambda: "bf16")
    trained = _machines(monkeypatch, first="fp32", then="fp32")  # what auto would give, unpinned
    assert main_ablate(str(spec)) == 0
    # 9 cells, 12 trials, 3 at the variants' own best, and the 4th seed each arm's comparison needs before
    # it may read "no effect" (stats.verdict.EQUIVALENCE_PAIRS)
    assert len(trained) == 9 + 12 + 3 + 2 and {s.train.precision for s in trained} == {"bf16"}
    text, _ = _report("tuned", workdir / "report")  # unpinned trials (fp32 here) would make it say so
    assert "## Each variant at its own best" in text and "The searches' trials trained in" not in text


def test_a_stand_alone_search_trains_every_trial_at_the_precision_it_first_resolved(
        workdir: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """`ablate tune` with `auto`, begun on a bf16 machine and continued on an fp32 one: every trial trains in
    bf16, as one search's trials are compared with each other; a spec that names fp32 pins nothing."""
    from ablate.launch.tune_command import main_tune
    from tests.study.test_tune import SEARCH_TRIAL

    search = """
search:
  trials: 4
  sampler: random
  objectives: [{metric: val/exact_match, direction: maximize}]
  space:
    train.optimizer.lr: {low: 1.0e-3, high: 1.0e-1, log: true}
"""
    def spec(name: str, precision: str) -> Path:
        changes = {"name": name, "train.max_steps": SHORT, "train.precision": precision}
        return write_tiny_spec(workdir, STUDY_CELL, SEARCH_TRIAL, changes, extra=search,
                               filename=f"{name}.yaml")

    path = spec("pinned-search", "auto")
    trained = fake_training(monkeypatch)
    monkeypatch.setattr("ablate.study.precision.resolve_here", lambda: "bf16")
    assert main_tune(str(path), trials=2) == 0
    assert "precision: every trial trains in bf16 (train.precision: auto" in capsys.readouterr().out
    monkeypatch.setattr("ablate.study.precision.resolve_here", lambda: "fp32")  # continued elsewhere
    assert main_tune(str(path)) == 0
    assert "every trial trains in bf16" in capsys.readouterr().out
    assert len(trained) == 4 and {s.train.precision for s in trained} == {"bf16"}

    named = spec("named-search", "fp32")
    del trained[:]
    assert main_tune(str(named), trials=2) == 0
    assert "every trial trains in" not in capsys.readouterr().out
    assert len(trained) == 2 and {s.train.precision for s in trained} == {"fp32"}
