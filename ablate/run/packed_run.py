"""Several cells of one shape run as one pack (ablate/engine/packed_trainer.py), each still a run of its own.

:func:`run_pack` takes the steps of :func:`ablate.run.runner.run_experiment` for each cell (its run folder,
its MLflow run opened or resumed, its data, its model from its seed, its trainer, its resume point), trains
the cells together, then takes each cell's result and ends its run alone: the cell's metrics, samples,
best checkpoint, summary.json and MLflow status are what the cell alone writes. Every run records its pack
(tags ``ablate.pack_size`` and ``ablate.pack_index``). A cell already finished is reported as it is; a cell
resumes from its own checkpoint, whatever pack (or none) wrote it.

Each cell's random stream (its dropout masks) starts where the cell's own set-up leaves torch's generators,
as alone: seeded by its seed, or restored from its checkpoint (ablate/engine/cell_rng.py).

A SIGTERM or Ctrl-C checkpoints every cell at the step's boundary and raises
:class:`~ablate.run.runner.Interrupted` once every cell's run is marked interrupted.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, replace

import torch

from ablate.engine import preempt
from ablate.engine.cell_rng import CellStreams, State
from ablate.engine.packed_trainer import PackedTrainer
from ablate.engine.progress import PeakMemory
from ablate.engine.trainer import Trainer
from ablate.run import runner
from ablate.run.runner import Place, RunOptions, RunResult
from ablate.spec.experiment import ExperimentSpec
from ablate.tracking import NullTracker, record

__all__ = ["PackCell", "run_pack"]


@dataclass(frozen=True)
class PackCell:
    """One cell of a pack: what it trains and how its run is made (as ``run_experiment``'s arguments)."""

    spec: ExperimentSpec
    options: RunOptions


@dataclass
class _Open:
    """A cell whose run is open and whose trainer is ready."""

    index: int
    cell: PackCell
    place: Place
    tracker: NullTracker
    trainer: Trainer
    memory: PeakMemory
    padding: float
    resume: runner.Checkpoint | None
    rng: State  # torch's generators as its set-up left them


def pack_tags(size: int, index: int) -> dict[str, str]:
    """The tags that say a run trained packed: the pack's size and the cell's place in it."""
    return {record.PACK_SIZE: str(size), record.PACK_INDEX: str(index)}


def run_pack(cells: Sequence[PackCell]) -> list[RunResult | BaseException]:
    """Train ``cells`` as one pack; per cell its :class:`RunResult`, or the exception that ended it (a
    failure of one cell's set-up leaves it out of the pack; the others train). After a stop signal every
    cell's run is interrupted and :class:`~ablate.run.runner.Interrupted` is raised for the first."""
    threads_before = torch.get_num_threads()
    if cells and cells[0].spec.train.threads:
        torch.set_num_threads(cells[0].spec.train.threads)
    try:
        return _run_pack(cells)
    finally:
        torch.set_num_threads(threads_before)


def _run_pack(cells: Sequence[PackCell]) -> list[RunResult | BaseException]:
    results: dict[int, RunResult | BaseException] = {}
    opened: list[_Open] = []
    try:
        for index, cell in enumerate(cells):
            cpu = time.process_time()
            try:
                ready = _open(index, cell, len(cells))
            except KeyboardInterrupt:
                raise
            except Exception as exc:  # noqa: BLE001 - failure is data: this cell failed, the pack goes on
                results[index] = exc
                continue
            for other in opened:  # opening this cell (its data, its model) is not the others' CPU time
                other.trainer.segment_cpu += time.process_time() - cpu
            if isinstance(ready, RunResult):
                results[index] = ready
            else:
                opened.append(ready)
        trainer = None
        if opened:
            streams = CellStreams([o.rng for o in opened], opened[0].place.device)
            trainer = PackedTrainer([o.trainer for o in opened], streams)
        outcomes = trainer.fit() if trainer is not None else []
    except KeyboardInterrupt:
        for o in opened:
            o.tracker.end("interrupted")
        raise
    except BaseException as exc:
        for o in opened:
            _failed(o.tracker, exc)
        raise
    interrupted: runner.Interrupted | None = None
    for i, (o, outcome) in enumerate(zip(opened, outcomes, strict=True)):
        spec = o.cell.spec
        cpu = time.process_time()
        try:
            assert trainer is not None
            with trainer.cell_streams.drawing(i):  # its final evaluation and checkpoint: its own stream
                metrics = runner.result_metrics(spec, o.place, o.trainer.data, o.trainer.model, o.trainer,
                                                o.tracker, outcome, o.memory, o.padding)
                for other in opened:  # this cell's final evaluation is its own CPU time, not the others'
                    if other is not o:
                        other.trainer.segment_cpu += time.process_time() - cpu
                results[o.index] = runner.finish(spec, o.place, o.trainer, o.tracker, outcome, metrics,
                                                 o.resume)
        except runner.Interrupted as stop:
            interrupted = interrupted or stop
            results[o.index] = stop
        except Exception as exc:  # noqa: BLE001 - this cell's result failed; the others still end
            _failed(o.tracker, exc)
            results[o.index] = exc
    if interrupted is not None and preempt.requested() is not None:
        raise interrupted
    return [results[i] for i in range(len(cells))]


def _open(index: int, cell: PackCell, size: int) -> _Open | RunResult:
    """:func:`ablate.run.runner._run`'s steps up to training, for one cell of the pack."""
    spec = cell.spec
    options = replace(cell.options, tags={**(cell.options.tags or {}), **pack_tags(size, index)})
    place = runner.find_place(spec, options.run_dir)
    if place.dist.enabled:
        raise ValueError("a pack trains in one process: under torchrun each cell is its own run")
    done = runner.finished_run(spec, place)
    if done is not None:
        return done
    runner.check_tracking_store(spec, place)
    memory = PeakMemory(place.device)
    memory.reset()
    data = runner.prepare(spec, options.data)
    model = runner.build(spec, data, place.device)
    resume = runner.agreed_resume(place)
    with preempt.held():
        tracker = runner.open_tracker(spec, options, place, resume)
        if options.on_start is not None:
            options.on_start(tracker.run_id)
    try:
        trainer = Trainer(spec, data, model, place.run_dir, place.device, sink=tracker, hook=options.hook,
                          memory=memory, show_progress=False)
        padding = runner.start_or_resume(trainer, resume, tracker, data, place, model)
    except BaseException as exc:
        _failed(tracker, exc)
        raise
    return _Open(index, cell, place, tracker, trainer, memory, padding, resume, CellStreams.now(place.device))


def _failed(tracker: NullTracker, exc: BaseException) -> None:
    try:
        tracker.set_tags({record.ERROR: f"{type(exc).__name__}: {exc}"[-2000:]})
        tracker.end("failed")
    except Exception:  # noqa: BLE001 - the store may be what failed: keep the first error
        pass
