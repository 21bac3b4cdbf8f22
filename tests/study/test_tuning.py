"""An ablation's ``tune:`` and ``confirm:`` sections: their shape, located errors, the run
identity they leave alone, and the budget `ablate study --dry-run` prints."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

from ablate.cli import main as cli_main
from ablate.launch.local_study import main_ablate
from ablate.spec.load import SpecError, dump_spec_yaml, load_spec
from ablate.study.arm_settings import fidelity_steps, sampler_seed, trial_overrides
from ablate.study.designs import plan_study
from tests.factories import STUDY_CELL, write_tiny_spec

AXES = "  axes: {model.residual: [pre_norm, post_norm], model.norm: [builtin, custom]}\n  seeds: [0, 1]\n"
TUNE = """  tune:
    space:
      train.optimizer.lr: {low: 1.0e-4, high: 1.0e-2, log: true}
      train.schedule.warmup_steps: {low: 0, high: 4, int: true}
    trials: 4
    fidelity: {fraction: 0.25}
    seed: 3
"""
CONFIRM = """  confirm:
    overrides: {train.max_steps: 40}
    seeds: 3
"""


def write(folder: Path, ablation: str, name: str = "tuned") -> Path:
    changes = {"name": name, "train.max_steps": 20, "train.eval_every": 10}
    return write_tiny_spec(folder, STUDY_CELL, changes, extra="ablation:\n" + ablation,
                           filename=f"{name}.yaml")


def test_arm_settings_leave_the_run_identity_and_the_dumped_record_alone(tmp_path: Path) -> None:
    (tmp_path / "a").mkdir()
    plain = load_spec(write(tmp_path, AXES))
    tuned = load_spec(write(tmp_path / "a", AXES + TUNE + CONFIRM))
    assert tuned.spec_hash == plain.spec_hash  # the ablation section is not in a run's identity
    assert "tune" not in plain.resolved()["ablation"] and "confirm" not in plain.resolved()["ablation"]
    abl = tuned.ablation
    assert abl is not None and abl.tune is not None and abl.confirm is not None
    assert abl.tune.trials == 4 and abl.tune.seed == 3 and abl.tune.sampler == "tpe"
    assert fidelity_steps(abl.tune, tuned) == 5  # a quarter of 20 steps
    assert abl.confirm.seed_list(tuned.seed) == [0, 1, 2]
    again = tmp_path / "again.yaml"
    again.write_text(dump_spec_yaml(tuned))
    assert load_spec(again).resolved() == tuned.resolved()  # the dump loads back to the same spec


def test_a_trial_trains_the_variant_at_the_sampled_values_for_the_fidelity(tmp_path: Path) -> None:
    plan = plan_study(str(write(tmp_path, AXES + TUNE)))
    tune = plan.spec.ablation.tune  # type: ignore[union-attr]
    assert tune is not None
    over = trial_overrides(tune, plan.baseline, {"model.residual": "post_norm"}, {"train.optimizer.lr": 3e-3})
    assert over == {"model.residual": "post_norm", "train.optimizer.lr": 3e-3, "train.max_steps": 5}
    # the study's cells are as without tune: the same hashes
    plain = plan_study(str(write(tmp_path, AXES, "tuned")))
    assert [c.key for c in plan.cells] == [c.key for c in plain.cells]


def _problems(tmp_path: Path, ablation: str) -> str:
    path = write(tmp_path, ablation)
    with pytest.raises(SpecError) as err:
        plan_study(str(path))
    text = str(err.value)
    for line in text.splitlines():  # every problem located at the file and a line
        assert re.match(rf"{re.escape(str(path))}:\d+", line), line
    return text


@pytest.mark.parametrize("tune,expected", [
    ("    trials: 0\n", "ablation.tune.trials"),
    ("    trials: 4\n    fidelity: {steps: 5, fraction: 0.5}\n", "give steps or fraction"),
    ("    trials: 4\n    fidelity: {fraction: 1.5}\n", "ablation.tune.fidelity.fraction"),
    ("    trials: 4\n    fidelity: {steps: 50}\n", "50 steps is longer than a cell (20"),
    ("    trials: 4\n    seed: -1\n", "ablation.tune.seed"),
    # a search on an evaluation seed chooses what suits that seed, then is judged on it
    ("    trials: 4\n    seed: 1\n", "ablation.tune.seed: seed 1 is also one of the study's evaluation "
                                      "seeds"),
    ("    trials: 4\n    sampler: grid\n", "the grid sampler needs choice, int or stepped ranges"),
])
def test_bad_tune_values_are_located_spec_errors(tmp_path: Path, tune: str, expected: str) -> None:
    space = "  tune:\n    space: {train.optimizer.lr: {low: 1.0e-4, high: 1.0e-2, log: true}}\n"
    assert expected in _problems(tmp_path, AXES + space + tune)


@pytest.mark.parametrize("space,expected", [
    ("train.optimizer.lrr: {low: 0.1, high: 0.2}", "ablation.tune.space.train.optimizer.lrr"),
    ("model.residual: {choice: [pre_norm]}", "is what the variants change (model.residual)"),
    ("train.schedule.warmup_steps: {low: 0, high: 10}", "integer field: add `int: true`"),
    ("model.d_model: {choice: [16, 15], int: true}", "model.d_model=15 gives an invalid spec"),
    ("train.optimizer.lr: {low: 0.2, high: 0.1}", "low 0.2 must be below high 0.1"),
    # the cell trains 20 steps, so a trial at the full length too: a 20-step warm-up never reaches its peak
    ("train.schedule.warmup_steps: {low: 0, high: 20, int: true}",
     "warm-ups up to 20 steps reach past the 20 steps a tuning trial trains"),
    ("train.schedule.warmup_steps: {choice: [0, 5, 30]}", "warm-ups up to 30 steps reach past the 20"),
])
def test_bad_tuning_spaces_are_located_spec_errors(tmp_path: Path, space: str, expected: str) -> None:
    assert expected in _problems(tmp_path, AXES + f"  tune:\n    space: {{{space}}}\n    trials: 2\n")


@pytest.mark.parametrize("confirm,expected", [
    ("    seeds: 3\n", "give the larger setting as overrides"),
    ("    overrides: {train.max_steps: 40}\n    spec: other.yaml\n    seeds: 3\n", "exactly one"),
    ("    overrides: {train.max_steps: 40}\n    seeds: 1\n", "ablation.confirm.seeds"),
    ("    overrides: {train.max_steps: 40}\n    seeds: [0, 0]\n", "seeds must be distinct"),
    ("    overrides: {model.norm: custom}\n    seeds: 2\n", "must leave the variants as they are"),
    ("    overrides: {train.max_stepz: 40}\n    seeds: 2\n", "ablation.confirm.overrides.train.max_stepz"),
    ("    overrides: {model.heads: 3}\n    seeds: 2\n", "at the larger setting, the baseline gives an"),
    ("    spec: missing.yaml\n    seeds: 2\n", "file not found"),
])
def test_bad_confirm_values_are_located_spec_errors(tmp_path: Path, confirm: str, expected: str) -> None:
    assert expected in _problems(tmp_path, AXES + "  confirm:\n" + confirm)


def test_confirm_spec_is_read_relative_to_the_file_that_names_it(tmp_path: Path) -> None:
    sub = tmp_path / "sub"
    sub.mkdir()
    write_tiny_spec(sub, STUDY_CELL, {"name": "larger", "train.max_steps": 60}, filename="larger.yaml")
    plan = plan_study(str(write(tmp_path, AXES + "  confirm:\n    spec: sub/larger.yaml\n    seeds: [4, 5]\n")
                                ))
    text = "\n".join(plan_lines(plan))
    assert "confirm at sub/larger.yaml: each decided comparison rerun on seeds 4, 5, paired by seed" in text
    assert "at most 3 variants x 2 seeds = 6 cells of 60 steps; 360 steps at most" in text
    # named in a file that another extends: relative to the file that names it
    write(sub, AXES + "  confirm:\n    spec: larger.yaml\n    seeds: 2\n", "base")
    child = tmp_path / "child.yaml"
    child.write_text("extends: sub/base.yaml\nname: child\n")
    assert "cells of 60 steps" in "\n".join(plan_lines(plan_study(str(child))))


def plan_lines(plan: object) -> list[str]:
    from ablate.study.designs import format_plan

    return format_plan(plan).splitlines()  # type: ignore[arg-type]


def test_dry_run_shows_the_tuning_budget_and_the_confirm_cells(bare_workdir: Path,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    path = write(bare_workdir, AXES + TUNE + CONFIRM)
    assert main_ablate(str(path), dry_run=True) == 0
    out = capsys.readouterr().out
    # 3 variants (baseline, post_norm, custom norm) x 4 trials of 5 steps (a quarter of the cell's 20)
    assert ("tuning: 4 trials per variant x 3 variants = 12 trials of 5 steps each, 25% of a cell; "
            "60 steps at most") in out
    assert "over train.optimizer.lr, train.schedule.warmup_steps: sampler tpe (seed 3), pruner median" in out
    assert "the study's cells: up to 6 x 20 = 120 steps" in out
    assert "own best: up to 6 x 20 = 120 steps more (a variant whose best settings are the baseline's" in out
    assert ("confirm at train.max_steps=40: each decided comparison rerun on seeds 0, 1, 2, paired by seed: "
            "at most 3 variants x 3 seeds = 9 cells of 40 steps; 360 steps at most") in out
    assert "in all, every phase together: 660 steps at most" in out  # 120 + 60 + 120 + 360
    assert "tuning: no search started yet" in out
    assert "own best: waits for every search to finish\nconfirm: waits for the own-best verdicts" in out
    assert sorted(os.listdir(bare_workdir)) == ["tuned.yaml"]  # nothing written


def test_dry_run_of_a_bad_tune_section_exits_2(bare_workdir: Path, capsys: pytest.CaptureFixture[str]
                                               ) -> None:
    path = write(bare_workdir, AXES + "  tune:\n    space: {train.optimizer.lrr: {low: 0.1, high: 0.2}}\n"
                 "    trials: 2\n")
    assert cli_main(["ablate", str(path), "--dry-run"]) == 2
    assert f"{path}:" in capsys.readouterr().err


def test_confirm_cells_are_the_baseline_and_the_decided_variants_at_the_larger_setting(tmp_path: Path
                                                                                       ) -> None:
    from ablate.study.confirm import confirm_cells

    plan = plan_study(str(write(tmp_path, AXES + CONFIRM)))
    cells = confirm_cells(plan, ["norm=custom"])
    assert [(c.label, c.seed) for c in cells] == [(label, s) for s in (0, 1, 2)
                                                  for label in ("baseline", "norm=custom")]
    assert {c.spec.train.max_steps for c in cells} == {40}  # the larger setting
    assert all(c.spec.model.norm == ("custom" if c.label == "norm=custom" else "builtin") for c in cells)
    assert not {c.key for c in cells} & {c.key for c in plan.cells}  # cells of their own
    assert cells[1].diff == [("model.norm", "builtin", "custom")]
    with pytest.raises(ValueError, match="no variant 'positions=rope'"):
        confirm_cells(plan, ["positions=rope"])
    # the larger setting as another spec
    larger = write_tiny_spec(tmp_path, STUDY_CELL, {"name": "tuned", "train.max_steps": 60,
                                                    "model.d_model": 32}, filename="larger.yaml")
    other = plan_study(str(write(tmp_path, AXES + f"  confirm:\n    spec: {larger.name}\n    seeds: [7, 8]\n",
                                 "other")))
    cells = confirm_cells(other, ["residual=post_norm", "norm=custom"])
    assert [c.label for c in cells[:3]] == ["baseline", "residual=post_norm", "norm=custom"]
    assert {(c.spec.train.max_steps, c.spec.model.d_model, c.seed) for c in cells[:3]} == {(60, 32, 7)}


def test_changes_say_how_far_each_best_setting_lies_from_the_baselines() -> None:
    from ablate.spec.study_sections import SearchParam
    from ablate.study.arm_settings import changes

    space = {"train.optimizer.lr": SearchParam(low=1e-4, high=1e-2, log=True),
             "train.schedule.warmup_steps": SearchParam(low=0, high=800, int=True),
             "train.schedule.name": SearchParam(choice=["inverse_sqrt", "constant"]),
             "model.dropout": SearchParam(low=0.0, high=0.3)}
    base = {"train.optimizer.lr": 1e-3, "train.schedule.warmup_steps": 400,
            "train.schedule.name": "inverse_sqrt", "model.dropout": 0.1}
    best = {"train.optimizer.lr": 3e-3, "train.schedule.warmup_steps": 200, "train.schedule.name": "constant"}
    got = {c.field: (c.shown, c.of_range) for c in changes(space, base, best)}
    assert got["train.optimizer.lr"] == ("x3", pytest.approx(0.2386, abs=1e-4))  # log 3 / log 100
    assert got["train.schedule.warmup_steps"] == ("-200", 0.25)
    assert got["train.schedule.name"] == ("inverse_sqrt -> constant", 1.0)
    assert got["model.dropout"] == ("same", 0.0)  # not in the best point: the baseline's value
    # an ordered numeric choice moves by its steps: 512 -> 1024 is one step of the list's three
    d_ff = {"model.d_ff": SearchParam(choice=[2048, 512, 1024, 4096])}
    (step,) = changes(d_ff, {"model.d_ff": 512}, {"model.d_ff": 1024})
    assert (step.shown, step.of_range) == ("512 -> 1024", pytest.approx(1 / 3))
    (jump,) = changes(d_ff, {"model.d_ff": 512}, {"model.d_ff": 4096})
    assert jump.of_range == 1.0


def test_the_searches_train_after_the_evaluation_seeds_unless_told_otherwise(tmp_path: Path) -> None:
    """Left out, the tuning seed is the first after every seed the study may evaluate on: a list's
    largest, a range's max, or the confirmation cells' largest."""
    def seed_of(ablation: str, name: str) -> int:
        tune = ("  tune:\n    space: {train.optimizer.lr: {low: 1.0e-4, high: 1.0e-2, log: true}}\n"
                "    trials: 2\n")
        spec = load_spec(write(tmp_path, ablation + tune, name))
        assert spec.ablation is not None and spec.ablation.tune is not None
        return sampler_seed(spec.ablation.tune, spec)

    assert seed_of(AXES, "listed") == 2
    ranged = "  axes: {model.norm: [builtin, custom]}\n  seeds: {min: 3, max: 6}\n"
    assert seed_of(ranged, "ranged") == 6
    # the confirmation cells' seeds are evaluation seeds too: 5 of them from the spec's seed 0
    confirmed = AXES + "  confirm:\n    overrides: {train.max_steps: 40}\n    seeds: 5\n"
    assert seed_of(confirmed, "confirmed") == 5
