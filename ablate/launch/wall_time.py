"""How long a study will take before it runs: one estimate, computed here for every dry run that prints one
(local workers, SLURM jobs, and a power plan sized on a pilot study's cells).

- `estimate_wall_s(cell_seconds, cells, parallel)`: the wall time of `cells` cells of `cell_seconds` each,
  `parallel` at a time (workers x jobs): they run in waves, so the last wave counts whole.
- `measured_cell_seconds(spec, study)`: the seconds one cell takes here, as `CellTime` (the number and where
  it came from): the median MLflow run duration of a study's finished cells (this study's, or a pilot's),
  else a short timed probe of the spec (`probe_cell_seconds`: a few steps, extrapolated to the cell's).

Cells that share a machine's cores or a GPU each run slower than alone; the estimate takes the measured
time as it is (measure with the same workers per machine, or read it as a lower bound).
"""

from __future__ import annotations

import statistics
import tempfile
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ablate.errors import AblateError
from ablate.run import runner
from ablate.study.rungs import planned
from ablate.study.sizing import estimate_wall_s
from ablate.study.study_plan import TERMINAL, StudyPlan
from ablate.tracking import record
from ablate.tracking.read import find_study_runs

if TYPE_CHECKING:
    from ablate.spec.experiment import ExperimentSpec

PROBE_STEPS = 10  # optimizer steps the timed probe trains (after one untimed step: allocation, warm-up)


@dataclass(frozen=True)
class CellTime:
    """Seconds one cell takes, and where the figure came from (said beside the estimate)."""

    seconds: float
    source: str  # "median of 4 finished cells of study x", "a 10-step probe, extrapolated to 1000 steps"
    training: float | None = None  # the part of ``seconds`` that trains (a probe's; the rest is fixed)


def format_estimate(cell: CellTime, cells: int, parallel: int) -> str:
    """The dry run's line: the estimate, its parts and where the cell time came from."""
    wall = estimate_wall_s(cell.seconds, cells, parallel)
    return (f"estimated wall time: {_duration(wall)} for {cells} cells, {parallel} at a time, at "
            f"{_duration(cell.seconds)} a cell ({cell.source})")


def _duration(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


def finished_cell_seconds(study: str) -> CellTime | None:
    """The median MLflow duration (end - start) of the study's finished cells; None when it has none (or no
    MLflow record). A resumed cell's duration includes the pause, so the median, not the mean."""
    try:
        _, children = find_study_runs(study)
    except AblateError:
        return None
    kind, status = f"tags.{record.KIND}", f"tags.{record.STATUS}"
    if kind not in children or status not in children or "end_time" not in children:
        return None
    done = children[(children[kind] == "cell") & (children[status] == "finished")]
    seconds = [(end - start).total_seconds() for start, end in zip(done["start_time"], done["end_time"],
                                                                    strict=True) if end is not None]
    seconds = [s for s in seconds if s == s and s > 0]  # NaT/NaN of runs still open are left out
    if not seconds:
        return None
    return CellTime(statistics.median(seconds), f"median of {len(seconds)} finished cells of study {study}")


def probe_cell_seconds(spec: ExperimentSpec, steps: int = PROBE_STEPS) -> CellTime | None:
    """Train `spec` for 1 + `steps` steps untracked in a temporary folder and extrapolate to its
    ``train.max_steps``: (whole probe - its training) + training per step x max_steps. None for a spec
    that ends by epochs only (its steps are not known before the data is)."""
    total = spec.train.max_steps
    if total is None:
        return None
    steps = min(steps, total)
    with tempfile.TemporaryDirectory(prefix="ablate-probe-") as tmp:
        probe = spec.model_copy(update={
            "train": spec.train.model_copy(update={"max_steps": 1 + steps, "out_dir": tmp,
                                                   "eval_every": 1 + steps, "checkpoint_every": 1 + steps}),
            "data": spec.data.model_copy(update={"cache_dir": tmp}),  # a dry run writes nothing of its own
            "tracking": spec.tracking.model_copy(update={"enabled": False})})
        started = time.perf_counter()
        result = runner.run_experiment(probe, run_dir=Path(tmp) / "probe", quiet=True)
        whole = time.perf_counter() - started
    training = result.metrics.get(record.WALL_TIME)
    if training is None or training <= 0:
        return CellTime(whole * total / (1 + steps), f"a {1 + steps}-step probe, scaled to {total} steps")
    per_step = training / (1 + steps)
    return CellTime(max(0.0, whole - training) + per_step * total,
                    f"a {1 + steps}-step probe here, extrapolated to {total} steps", per_step * total)


def measured_cell_seconds(spec: ExperimentSpec, study: str | None, probe: bool = True) -> CellTime | None:
    """A finished cell's time from `study` (this study or a pilot), else a timed probe of `spec` (when
    `probe`), else None."""
    found = finished_cell_seconds(study) if study else None
    if found is not None or not probe:
        return found
    return probe_cell_seconds(spec)


def remaining_wall_time(plan: StudyPlan, records: Mapping[str, Any], parallel: int) -> str:
    """A dry run's estimate (``plan``: a StudyPlan, not imported: the plan prints the power plan, whose time
    line comes from here) for the cells at the baseline's settings not yet done, from a finished cell of
    the study (MLflow, read only when the store has one) or a timed probe of the baseline."""
    left = [c for c in plan.cells if not (records.get(c.key) and records[c.key].status in TERMINAL)]
    if not left:
        return "estimated wall time: none (every cell at the baseline's settings is done)"
    finished = any(r.status == "finished" for r in records.values())
    if getattr(plan, "rungs", None):  # a ladder: its cells' times differ by rung, a probe of each scales
        finished = False
    cell = measured_cell_seconds(plan.baseline, plan.name if finished else None)
    if cell is None:
        return "estimated wall time: unknown (train.max_steps is unset: a probe cannot scale to epochs)"
    if getattr(plan, "rungs", None):
        return _ladder_estimate(plan, left, cell, parallel)
    return format_estimate(cell, len(left), parallel)


def _ladder_estimate(plan: Any, left: list[Any], cell: CellTime, parallel: int) -> str:
    """A ladder's cells at the spec's own cell time, its training part scaled by each rung's planned FLOPs
    (training time grows with compute; a pilot ladder's measured times, in the power plan above, are the
    better figure)."""
    base = planned(plan.baseline).flops
    scale = {r.name: r.compute.flops / base for r in plan.rungs} if base > 0 else {}
    training = cell.training if cell.training is not None else cell.seconds
    fixed = cell.seconds - training  # data and evaluation: the same at every rung
    seconds = sum(fixed + training * scale.get(c.rung, 1.0) for c in left)
    wall = seconds / max(1, parallel)
    return (f"estimated wall time: {_duration(wall)} for {len(left)} cells of {len(plan.rungs)} rungs, "
            f"{parallel} at a time, from the spec's own cell ({_duration(cell.seconds)}, {cell.source}) "
            f"scaled to each rung by its planned FLOPs (the spec's: {base:.3g}); a pilot ladder's measured "
            "times are in the power plan")
