"""The one wall-time estimate dry runs print: waves of parallel cells, at a cell time measured from a study's
finished cells (MLflow durations) or from a timed probe of the spec."""

from __future__ import annotations

from pathlib import Path

import pytest

from ablate.launch.local_study import main_ablate
from ablate.launch.wall_time import (
    CellTime,
    estimate_wall_s,
    finished_cell_seconds,
    format_estimate,
    measured_cell_seconds,
    probe_cell_seconds,
)
from ablate.spec.experiment import ExperimentSpec
from tests.factories import STUDY_CELL, tiny_spec, write_tiny_spec
from tests.study.test_study import study_runs


def test_cells_run_in_whole_waves_of_parallel_ones() -> None:
    assert estimate_wall_s(60.0, 8, 4) == 120.0
    assert estimate_wall_s(60.0, 9, 4) == 180.0  # the last wave counts whole
    assert estimate_wall_s(60.0, 3, 8) == 60.0
    assert estimate_wall_s(60.0, 0, 2) == 0.0
    line = format_estimate(CellTime(1380.0, "a probe"), 48, 8)
    assert line.startswith("estimated wall time: 2.3 h for 48 cells, 8 at a time, at 23 min a cell (a probe)")


def test_a_probe_times_a_few_steps_and_scales_to_the_cell(tmp_path: Path) -> None:
    spec = ExperimentSpec.model_validate(tiny_spec({"train.max_steps": 400, "train.out_dir": str(tmp_path)}))
    found = probe_cell_seconds(spec, steps=4)
    assert found is not None and found.seconds > 0
    assert found.source == "a 5-step probe here, extrapolated to 400 steps"  # the trainer's own wall time
    assert list(tmp_path.iterdir()) == []  # the probe trained in a temporary folder of its own
    epochs = ExperimentSpec.model_validate(tiny_spec({"train.max_steps": None, "train.epochs": 2}))
    assert probe_cell_seconds(epochs) is None  # steps unknown before the data


@pytest.mark.slow
def test_a_finished_study_gives_its_cells_median_duration(workdir: Path) -> None:
    extra = "\nablation:\n  axes: {model.residual: [pre_norm, post_norm]}\n  seeds: [0]\n"
    path = write_tiny_spec(workdir, STUDY_CELL, {"name": "timed"}, filename="timed.yaml", extra=extra)
    assert finished_cell_seconds("timed") is None  # no study in MLflow yet
    assert main_ablate(str(path)) == 0
    _, children = study_runs("timed")
    durations = sorted((r.info.end_time - r.info.start_time) / 1000 for r in children)
    found = finished_cell_seconds("timed")
    assert found is not None and "median of 2 finished cells of study timed" in found.source
    assert abs(found.seconds - sum(durations) / 2) < 0.01  # the median of two: their mean
    spec = ExperimentSpec.model_validate(tiny_spec())
    assert measured_cell_seconds(spec, "timed") == found  # a finished cell first, no probe
