"""`--study STUDY --best` (ablate/run/best_cell.py): the best finished cell of a study by the metric its
parent run ranks cells by, in that metric's direction; a diverged cell never wins, and a missing or doubled
choice is one line."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from mlflow import MlflowClient

from ablate.cli import main
from ablate.errors import AblateError
from ablate.run.best_cell import best_cell, chosen_run
from ablate.tracking import record


def _study(metric: str, cells: list[tuple[str, str, float]]) -> dict[str, str]:
    """A parent run ranking by ``metric`` and one child per (variant, status, value): label -> run id."""
    client = MlflowClient(os.environ["MLFLOW_TRACKING_URI"])  # this test's store, not an earlier one's
    exp = client.create_experiment("s")
    parent = client.create_run(exp, tags={record.STUDY: "s", record.KIND: "ablation", record.METRIC: metric})
    ids = {}
    for seed, (variant, status, value) in enumerate(cells):
        run = client.create_run(exp, tags={record.PARENT_RUN: parent.info.run_id, record.STUDY: "s",
                                           record.VARIANT: variant, record.SEED: str(seed),
                                           record.STATUS: status})
        client.log_metric(run.info.run_id, metric, value)
        ids[variant] = run.info.run_id
    return ids


def test_the_best_cell_is_found_in_the_metrics_direction(bare_workdir: Path,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    ids = _study("final/val/loss", [("baseline", "finished", 2.0), ("norm=rms", "finished", 1.9),
                                    ("ffn=swiglu", "diverged", 0.1)])
    assert best_cell("s") == ids["norm=rms"]  # the lowest loss among finished cells: not the diverged one
    said = capsys.readouterr().err
    assert f"by final/val/loss (lowest): norm=rms, seed 1, 1.9, run {ids['norm=rms']}" in said
    assert chosen_run(None, "s", True) == ids["norm=rms"] and chosen_run("abc", None, False) == "abc"
    for args, why in (((None, "s", False), "--study needs --best"), (("abc", "s", True), "not both"),
                      ((None, None, True), "--best needs --study"), ((None, None, False), "give a RUN_ID")):
        with pytest.raises(AblateError, match=why):
            chosen_run(*args)
    # the command line: one located line, exit 2, before any model is loaded
    assert main(["generate", "--study", "s"]) == 2
    assert "--study needs --best" in capsys.readouterr().err


def test_a_higher_is_better_metric_takes_the_highest(bare_workdir: Path) -> None:
    ids = _study("final/val/bleu", [("baseline", "finished", 20.0), ("residual=post_norm", "finished", 22.5)])
    assert best_cell("s") == ids["residual=post_norm"]
