"""How long a study will take before it runs: one estimate, computed here for every dry run that prints one
(local workers and SLURM jobs; a power plan sized on a pilot study's cells takes the pilot's cell times).

- From the study's own finished cells when it has some: the median MLflow duration of a cell, in whole
  waves of ``parallel`` cells (`finished_cell_seconds`; measured with the study's own workers); a cell that
  trained in a pack of K (tag ``ablate.pack_size``) ran beside K - 1 others in its worker, so it counts
  1/K of its duration.
- Else from a probe of the baseline's spec (ablate/launch/cell_probe.py): every part of a cell measured
  here (a worker's start, data preparation, steps at the cell's batch shapes, evaluations with decoding
  scaled to a trained model's lengths, checkpoints, MLflow), with as many probes at once as workers share
  this machine (`Sharing`), so that the cores or the GPU they share are shared in the probe too.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ablate.errors import AblateError
from ablate.launch.cell_probe import CellParts, ProbeFailed, probe_cell, study_seconds
from ablate.launch.local_workers import threads_per_worker
from ablate.study.rungs import planned
from ablate.study.sizing import estimate_wall_s
from ablate.study.study_plan import TERMINAL, StudyPlan
from ablate.tracking import record
from ablate.tracking.read import find_study_runs

if TYPE_CHECKING:
    from ablate.spec.experiment import ExperimentSpec


@dataclass(frozen=True)
class CellTime:
    """Seconds one cell takes, and where the figure came from (said beside the estimate)."""

    seconds: float
    source: str  # "median of 4 finished cells of study x"


@dataclass(frozen=True)
class Sharing:
    """How a study's workers run: ``parallel`` cells at once in all, ``copies`` of them sharing one
    machine's cores (or one GPU) on ``threads`` torch threads each, as processes of their own
    (``spawned``) or, for a single local worker, in the command's own process."""

    parallel: int
    copies: int
    threads: int | None
    spawned: bool

    def text(self) -> str:
        threads = f", {self.threads} torch thread{'s' * (self.threads != 1)} each" if self.threads else ""
        return f"{self.copies} worker{'s' * (self.copies != 1)} at once on this machine{threads}"


def local_sharing(workers: int, gpus: int) -> Sharing:
    """``--workers N`` here: all N share the cores (their torch threads split them), and the workers
    placed round robin on one GPU share it."""
    copies = math.ceil(workers / gpus) if gpus else workers
    return Sharing(workers, copies, threads_per_worker(workers) if workers > 1 else None, workers > 1)


def job_sharing(jobs: int, per_job: int, cpus_per_job: int | None, gpus_per_job: int) -> Sharing:
    """``--slurm --jobs J``: each job is a process of its own whose ``per_job`` workers share its CPUs
    (``--cpus-per-job``, else this machine's) and GPUs; the jobs run side by side."""
    copies = math.ceil(per_job / gpus_per_job) if gpus_per_job else per_job
    threads = max(1, cpus_per_job // per_job) if cpus_per_job else threads_per_worker(per_job)
    return Sharing(jobs * per_job, copies, threads, True)


def _duration(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.1f} min" if seconds < 600 else f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


def format_estimate(cell: CellTime, cells: int, parallel: int) -> str:
    """The dry run's line from finished cells: whole waves of ``parallel`` cells."""
    wall = estimate_wall_s(cell.seconds, cells, parallel)
    return (f"estimated wall time: {_duration(wall)} for {cells} cells, {parallel} at a time, at "
            f"{_duration(cell.seconds)} a cell ({cell.source})")


def format_probe_estimate(parts: CellParts, cells: int, sharing: Sharing, seeds: int) -> str:
    """The dry run's line from a probe: the estimate, a cell's parts, and how the probe shared the machine."""
    wall = study_seconds(parts, cells, sharing.parallel, seeds)
    start = f"{_duration(parts.start_s)} to start each worker, " if sharing.spawned else ""
    return (f"estimated wall time: {_duration(wall)} for {cells} cells, {sharing.parallel} at a time, at "
            f"{_duration(parts.cell_s())} a cell ({parts.parts_text()}), plus {start}"
            f"{_duration(parts.prepare_s)} to prepare the data; probed here with {sharing.text()}")


def finished_cell_seconds(study: str) -> CellTime | None:
    """The median MLflow duration (end - start) of the study's finished cells, a packed cell's divided by
    its pack's size (the worker's time it took); None when it has none (or no MLflow record). A resumed
    cell's duration includes the pause, so the median, not the mean."""
    try:
        _, children = find_study_runs(study)
    except AblateError:
        return None
    kind, status = f"tags.{record.KIND}", f"tags.{record.STATUS}"
    if kind not in children or status not in children or "end_time" not in children:
        return None
    done = children[(children[kind] == "cell") & (children[status] == "finished")]
    pack = f"tags.{record.PACK_SIZE}"
    sizes = [_pack_size(v) for v in done[pack]] if pack in done else [1] * len(done)
    seconds = [(end - start).total_seconds() / size for start, end, size
               in zip(done["start_time"], done["end_time"], sizes, strict=True) if end is not None]
    seconds = [s for s in seconds if s == s and s > 0]  # NaT/NaN of runs still open are left out
    if not seconds:
        return None
    packed = sum(1 for size in sizes if size > 1)
    shared = f", {packed} of them packed: each counts its share of its pack's time" if packed else ""
    return CellTime(statistics.median(seconds),
                    f"median of {len(seconds)} finished cells of study {study}{shared}")


def _pack_size(value: Any) -> int:
    """A run's ``ablate.pack_size`` tag as a number of cells (1: it trained alone, or has no tag)."""
    try:
        return max(1, int(value))
    except (TypeError, ValueError):
        return 1


def probe(spec: ExperimentSpec, sharing: Sharing) -> CellParts | None:
    """A probe of ``spec`` as the study's workers will share this machine; None for a spec that ends by
    epochs only (its steps are not known before the data is)."""
    if spec.train.max_steps is None:
        return None
    return probe_cell(spec, sharing.copies, sharing.threads, sharing.spawned)


def remaining_wall_time(plan: StudyPlan, records: Mapping[str, Any], sharing: Sharing,
                        speedup: Callable[[Any], float] | None = None) -> str:
    """A dry run's estimate (``plan``: a StudyPlan, not imported: the plan prints the power plan, whose time
    line comes from here) for the cells at the baseline's settings not yet done, from the study's finished
    cells (MLflow, read only when the store has one), else a probe of the baseline. ``speedup``: how much
    faster a cell's training steps run in its pack (ablate/study/pack_plan.py), where cells pack."""
    left = [c for c in plan.cells if not (records.get(c.key) and records[c.key].status in TERMINAL)]
    if not left:
        return "estimated wall time: none (every cell at the baseline's settings is done)"
    ladder = bool(getattr(plan, "rungs", None))  # its cells' times differ by rung: a probe of the spec scales
    if not ladder and any(r.status == "finished" for r in records.values()):
        found = finished_cell_seconds(plan.name)
        if found is not None:
            return format_estimate(found, len(left), sharing.parallel)
    try:
        parts = probe(plan.baseline, sharing)
    except ProbeFailed as exc:
        return f"estimated wall time: unknown ({exc}; its error is above)"
    if parts is None:
        return "estimated wall time: unknown (train.max_steps is unset: a probe cannot scale to epochs)"
    if ladder:
        return _ladder_estimate(plan, left, parts, sharing, speedup)
    line = format_probe_estimate(parts, len(left), sharing, len({c.seed for c in left}))
    faster = [speedup(c) for c in left] if speedup is not None else []
    saved = sum(parts.steps * parts.step_s * (1 - 1 / s) for s in faster if s > 1)
    if saved <= 0:
        return line
    wall = study_seconds(parts, len(left), sharing.parallel, len({c.seed for c in left}))
    return (f"{line}; packed: {_duration(wall - saved / max(1, sharing.parallel))} (the packed cells' "
            "training steps at their probe's speed-up, their evaluations and records as alone)")


def _ladder_estimate(plan: StudyPlan, left: list[Any], parts: CellParts, sharing: Sharing,
                     speedup: Callable[[Any], float] | None = None) -> str:
    """A ladder's cells from a probe of the spec's own cell, its training scaled by each rung's planned
    FLOPs (training time grows with compute; data, evaluation and checkpoints are the same at every rung; a
    pilot ladder's measured times, in the power plan above, are the better figure); a packed cell's training
    at its rung's probed speed-up (``speedup``)."""
    base = planned(plan.baseline).flops
    scale = {r.name: r.compute.flops / base for r in plan.rungs} if base > 0 else {}
    training = parts.steps * parts.step_s
    fixed = parts.cell_s() - training
    faster = {id(c): max(1.0, speedup(c)) if speedup is not None else 1.0 for c in left}
    seconds = sum(fixed + training * scale.get(c.rung, 1.0) / faster[id(c)] for c in left)
    wall = parts.start_s + parts.prepare_s + seconds / max(1, sharing.parallel)
    packed = sum(1 for c in left if faster[id(c)] > 1)
    note = f", {packed} packed cells' training at their probe's speed-up" if packed else ""
    return (f"estimated wall time: {_duration(wall)} for {len(left)} cells of {len(plan.rungs)} rungs, "
            f"{sharing.parallel} at a time, from a probe of the spec's own cell "
            f"({_duration(parts.cell_s())}: {parts.parts_text()}), its training scaled to each rung by its "
            f"planned FLOPs (the spec's: {base:.3g}){note}; a pilot ladder's measured times are in the power "
            "plan")
