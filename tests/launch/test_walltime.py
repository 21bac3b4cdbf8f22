"""The one wall-time estimate dry runs print: from a study's finished cells (MLflow durations), else from a
probe that measures every part of a cell (ablate/launch/cell_probe.py) as the study's workers will share
the machine. Whether the estimate holds is measured, not asserted: scripts/wall_time_check.py compares it
with real studies (docs/scaling.md)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from ablate.data.prepare import prepare_data
from ablate.engine.decode import length_sorted_batches
from ablate.engine.trainer import Trainer
from ablate.launch import cell_probe
from ablate.launch.cell_probe import CellParts, counts, decode_steps, probe_cell, probe_parts, study_seconds
from ablate.launch.local_study import main_ablate
from ablate.launch.wall_time import (
    CellTime,
    estimate_wall_s,
    finished_cell_seconds,
    format_estimate,
    format_probe_estimate,
    job_sharing,
    local_sharing,
)
from ablate.run.runner import build
from ablate.spec.experiment import ExperimentSpec
from tests.factories import STUDY_CELL, tiny_spec, write_tiny_spec
from tests.study.test_study import study_runs

PARTS = CellParts(start_s=5.0, prepare_s=20.0, reprepare_s=2.0, build_s=0.5, step_s=0.05, eval_s=1.5,
                  final_s=6.0, checkpoint_s=0.1, best_s=0.05, tracking_s=2.0, steps=1000, evals=5,
                  checkpoints=5)


def test_a_cell_is_the_sum_of_its_parts_and_a_study_runs_in_waves() -> None:
    assert PARTS.cell_s() == pytest.approx(0.5 + 1000 * 0.05 + 5 * (1.5 + 0.05) + 5 * 0.1 + 6.0 + 2.0)
    cell = PARTS.cell_s()
    # 4 cells, 2 at a time: 2 waves; each worker starts once and prepares each of its 2 seeds (cold, cache)
    assert study_seconds(PARTS, 4, 2, seeds=2) == pytest.approx(5.0 + 20.0 + 2.0 + 2 * cell)
    assert study_seconds(PARTS, 5, 2, seeds=1) == pytest.approx(5.0 + 20.0 + 3 * cell)  # the last wave whole
    assert study_seconds(PARTS, 0, 2, seeds=1) == 0.0
    line = format_probe_estimate(PARTS, 4, local_sharing(2, gpus=0), seeds=2)
    assert line.startswith("estimated wall time: 2.7 min for 4 cells, 2 at a time, at 67 s a cell (1000 "
                           "steps x 50 ms, 5 evaluations x 1.6 s, 5 checkpoints x 100 ms, final evaluation "
                           "6.0 s")
    assert ("plus 5 s to start each worker, 20 s to prepare the data; probed here with 2 workers at once"
            in line)


def test_finished_cells_run_in_whole_waves_of_parallel_ones() -> None:
    assert estimate_wall_s(60.0, 9, 4) == 180.0  # the last wave counts whole
    line = format_estimate(CellTime(1380.0, "median of 3 finished cells"), 48, 8)
    assert line.startswith("estimated wall time: 2.3 h for 48 cells, 8 at a time, at 23 min a cell (median")


def test_workers_share_the_machine_as_they_will_in_the_study() -> None:
    two = local_sharing(2, gpus=0)
    assert (two.parallel, two.copies, two.spawned) == (2, 2, True) and two.threads is not None
    one = local_sharing(1, gpus=0)
    assert (one.copies, one.threads, one.spawned) == (1, None, False)  # the command's own process
    assert local_sharing(8, gpus=4).copies == 2  # round robin: 2 workers on each GPU
    jobs = job_sharing(jobs=3, per_job=2, cpus_per_job=8, gpus_per_job=0)
    assert (jobs.parallel, jobs.copies, jobs.threads, jobs.spawned) == (6, 2, 4, True)


def test_the_probe_counts_the_evaluations_and_checkpoints_the_trainer_makes(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    spec = ExperimentSpec.model_validate(tiny_spec({"train.max_steps": 23, "train.eval_every": 10,
                                                    "train.checkpoint_every": 4}))
    data = prepare_data(spec)
    cpu = torch.device("cpu")
    trainer = Trainer(spec, data, build(spec, data, cpu), tmp_path / "run", cpu, show_progress=False)
    saves: list[int] = []
    monkeypatch.setattr(trainer, "save", lambda: saves.append(trainer.state.step))
    trainer.fit()
    assert counts(spec, trainer.total_steps) == (len(trainer.state.history), len(saves)) == (3, 7)


def test_decoding_is_sized_on_the_references_a_trained_model_reproduces() -> None:
    spec = ExperimentSpec.model_validate(tiny_spec())
    data = prepare_data(spec)
    part = data.splits["val"]
    steps = sum(len(chunk) * (max(len(part.tgt_ids[i]) for i in chunk) + 1)
                for chunk, _ in length_sorted_batches(part.src_ids, range(len(part.src_ids)), 128, 0))
    assert decode_steps(spec, data, "val", None) == steps
    assert decode_steps(spec, data, "val", 5) < steps


def test_a_probe_measures_each_part_and_writes_nothing(tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    spec = ExperimentSpec.model_validate(tiny_spec({"train.max_steps": 400, "train.eval_every": 100,
                                                    "train.checkpoint_every": 50}))
    parts = probe_parts(spec)
    assert (parts.steps, parts.evals, parts.checkpoints) == (400, 4, 8)
    for name in ("prepare_s", "build_s", "step_s", "eval_s", "final_s", "checkpoint_s", "best_s"):
        assert getattr(parts, name) > 0, name
    assert parts.start_s == 0.0 and parts.tracking_s == 0.0  # in this process; tracking off in tiny_spec
    assert list(tmp_path.iterdir()) == []  # the probe trained in a temporary folder of its own


@pytest.mark.soak
@pytest.mark.slow
def test_spawned_probes_time_their_start_and_a_tracked_cell_its_mlflow_share(workdir: Path) -> None:
    spec = ExperimentSpec.model_validate(tiny_spec({"train.max_steps": 50, "tracking.enabled": True}))
    before = sorted(p.name for p in workdir.iterdir())
    parts = probe_cell(spec, copies=2, threads=1, spawned=True)
    assert parts.start_s > 0 and parts.tracking_s > 0
    assert sorted(p.name for p in workdir.iterdir()) == before  # its MLflow store was a temporary one


def test_a_failed_probe_makes_the_estimate_unknown(monkeypatch: pytest.MonkeyPatch) -> None:
    from ablate.launch import wall_time

    def fails(*args: object, **kwargs: object) -> CellParts:
        raise cell_probe.ProbeFailed("a probe process exited with code 1")

    monkeypatch.setattr(wall_time, "probe_cell", fails)

    class Plan:
        cells = [type("Cell", (), {"key": "k-s0", "seed": 0})()]
        baseline = ExperimentSpec.model_validate(tiny_spec())
        name = "x"

    assert wall_time.remaining_wall_time(Plan(), {}, local_sharing(2, 0)) == (
        "estimated wall time: unknown (a probe process exited with code 1; its error is above)")


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
