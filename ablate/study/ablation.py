"""Ablation studies: the spec is the baseline, its ``ablation`` section the design, and every cell
(variant x seed) one run of the shared trainer under the study's parent MLflow run.

    ablation:
      design: one_at_a_time          # baseline + each single change | full_factorial | variants
      axes:
        model.residual: [pre_norm, post_norm]
        train.schedule.warmup_steps: [400, 0]
      seeds: [0, 1, 2]               # or repeats: 3 (seeds spec.seed .. spec.seed+2)
                                     # or {min: 3, max: 8}: more seeds only where the verdict is open
      min_effect: 0.5                # with a seed range: smaller effects are not worth more seeds

A cell's identity is its resolved spec hash plus its seed (its spec has ``seed`` set to the cell's seed),
which is also its run directory: within a seed every variant sees the same batches in the same order and
starts from the same weights in every parameter it shares with the baseline (the batcher and
``build_model(seed=...)`` derive both from the seed alone).

Cells are coordinated through the Optuna store (ablate/study/cells.py): one Optuna study per ablation study,
each cell a trial enqueued once; workers pop waiting cells, so rerunning the command skips finished (and
diverged) cells, resumes interrupted ones from their checkpoints, and re-runs failed ones only with
``--retry-failed``; ``--workers N`` and several machines sharing ``--storage postgresql://...`` split them.

With a seed range the study runs in rounds (ablate/study/adaptive.py): ``min`` seeds first, then more
seeds only for the comparisons whose group-sequential verdict (ablate/study/sequential.py) is still open.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import ablate.tracking.record as R
from ablate.study.adaptive import format_progress, needed_keys
from ablate.study.attrs import CELL, PARENT
from ablate.study.plan import (  # noqa: F401  # the plan's names, importable from here too
    TERMINAL,
    Cell,
    StudyPlan,
    format_grid,
    format_plan,
    metric_direction,
    plan_study,
    spec_diff,
    study_metric,
)

if TYPE_CHECKING:
    from ablate.study.cells import CellQueue
    from ablate.tracking import NullTracker


def _run_cell(plan: StudyPlan, cell: Cell, queue: Any, trial: Any, parent: str | None, quiet: bool) -> str:
    from ablate.run.runner import run_experiment, run_label
    from ablate.study.workers import cached_data

    def hook(step: int, metrics: dict[str, float]) -> bool:
        queue.report(trial, step, metrics.get(plan.metric))  # the grid's "metric so far"
        return False

    queue.set_params(trial, plan.axis_params(), plan.cell_params(cell))
    tags = {R.VARIANT: cell.label, R.CELL: cell.key, R.KIND: "cell",
            R.OPTUNA_STUDY: plan.store_name, R.OVERRIDES: json.dumps(cell.overrides)}
    started = time.time()
    print(f"cell {cell.label} seed {cell.seed} [{cell.key}]: started", flush=True)
    try:
        with queue.store.beat(trial):
            result = run_experiment(cell.spec, hook=hook, tags=tags, parent_run_id=parent,
                                    run_name=run_label(cell.label, cell.seed), data=cached_data(cell.spec),
                                    quiet=quiet,
                                    on_start=lambda run_id: queue.started(trial, run_id))
    except KeyboardInterrupt:
        queue.release(trial)  # resumes from its checkpoint next time
        raise
    except Exception as exc:  # noqa: BLE001 - failure is data: record it, go on with the next cell
        queue.finish(trial, "failed", None, error=f"{type(exc).__name__}: {exc}")
        print(f"cell {cell.label} seed {cell.seed}: failed ({type(exc).__name__}: {exc})", file=sys.stderr,
              flush=True)
        return "failed"
    value = R.result_value(result.metrics, plan.metric)  # the number MLflow holds as final/<metric>
    queue.finish(trial, result.status, value, run_id=result.run_id, error=result.reason or None)
    shown = f"{value:.4g}" if value is not None else "-"
    took = f"{time.time() - started:.0f}s"
    if result.resumed_at is not None and R.WALL_TIME in result.metrics:  # MLflow's wall time counts them all
        total = result.metrics[R.WALL_TIME]
        took += f" from step {result.resumed_at}; {total:.0f}s of training over all its segments"
    print(f"cell {cell.label} seed {cell.seed}: {result.status}, {R.final(plan.metric)} {shown} ({took})",
          flush=True)
    return result.status


def _worker(spec_path: str, overrides: list[str], storage: str | None, index: int, workers: int) -> int:
    """Pop and run cells until none is waiting or running anywhere."""
    from ablate.study import failfast
    from ablate.study.cells import CellQueue
    from ablate.study.store import Store

    plan = plan_study(spec_path, overrides)
    store = Store(storage)
    plan.bind(store)
    queue = CellQueue(store, plan.store_name, plan.direction)
    parent = queue.get(PARENT) if plan.spec.tracking.enabled else None
    cells = {c.key: c for c in plan.cells}
    while not failfast.stopped(queue.study):
        trial, busy = queue.claim()
        if trial is None:
            if not busy:
                return 0
            time.sleep(min(5.0, float(queue.store.heartbeat or 2)))  # another worker's cell may yet die
            continue
        attrs = trial.user_attrs
        cell = cells.get(attrs[CELL]) or plan.rebuild(attrs)
        if _run_cell(plan, cell, queue, trial, parent, quiet=workers > 1) == "failed":
            failfast.stop_if_repeated(queue.study, queue.store)  # the same error twice first: stop
    return 0


def main_ablate(spec_path: str, overrides: Sequence[str] = (), workers: int = 1, storage: str | None = None,
                dry_run: bool = False, retry_failed: bool = False) -> int:
    """`ablate ablate SPEC`: run (or resume) every cell; 0 when all finished or diverged, 1 if some
    failed, 130 when interrupted. ``dry_run`` prints the cells and their diffs and writes nothing."""
    from ablate.engine import preempt

    preempt.install()
    plan = plan_study(spec_path, overrides)
    if dry_run:
        return _dry_run(plan, storage)
    queue, params = _queue_cells(plan, storage, retry_failed)
    tracker = _open_study_run(plan, queue) if plan.spec.tracking.enabled else None
    code = 130
    try:
        code = _run_rounds(plan, queue, params, (spec_path, list(overrides), storage), workers)
    except KeyboardInterrupt:
        code = preempt.exit_code()  # the running cell saved its checkpoint and went back to the queue
    finally:
        ended = _close_study(plan, queue, tracker, interrupted=code in (130, 143))
    return _exit_code(plan, ended, code, (spec_path, overrides, workers, storage))


def _dry_run(plan: StudyPlan, storage: str | None) -> int:
    """The cells and their diffs; where a started study stands (read only)."""
    from ablate.study.cells import CellQueue
    from ablate.study.store import Store

    print(format_plan(plan))
    if plan.design is not None and Store.exists(storage):
        found = CellQueue(Store(storage, create=False), plan.store_name, plan.direction, create=False)
        records = found.records()
        if records:
            print(f"so far ({len(records)} cells in the store):")
            print(format_progress(plan, plan.design, records))
    if plan.spec.ablation is not None and plan.spec.ablation.tune is not None:
        from ablate.study.tuned import progress_lines

        print("\n".join(progress_lines(plan, storage)) or "tuning: no search started yet")
    return 0


def _queue_cells(plan: StudyPlan, storage: str | None, retry_failed: bool
                 ) -> tuple[CellQueue, dict[str, Any]]:
    """The study's queue in the Optuna store, with the cells it still needs (and, asked to, the failed
    ones again) enqueued; the Optuna params every cell's trial carries."""
    from ablate.study import failfast, names
    from ablate.study.cells import CellQueue
    from ablate.study.store import Store

    store = Store(storage)
    with store.lock(plan.name):  # two processes starting one study agree on its name
        plan.bind(store)
        queue = CellQueue(store, plan.store_name, plan.direction)
        queue.describe(names.study_attrs(plan.baseline.spec_hash, plan.spec.name, plan.overrides, "ablation"),
                       R.final(plan.metric))
    failfast.clear(queue.study)  # stopped last time by a repeated failure: its cause may be fixed now
    params = _params(plan)  # the same for every round: each cell's axis values
    new, retried = queue.enqueue(_wanted(plan, queue), retry_failed, **params)
    print(format_plan(plan, diffs=False))
    print(f"store: {store.describe()} (Optuna study {plan.store_name}); {new} cells queued"
          + (f", {retried} failed ones re-queued" if retried else ""), flush=True)
    return queue, params


def _parent_tags(plan: StudyPlan) -> dict[str, str]:
    """What the study's parent run says about it: its kind, design, metric, and what the report needs to
    state the sequential verdicts and the published results it checks."""
    abl = plan.spec.ablation
    assert abl is not None
    tags = {R.KIND: "ablation", R.VARIANT: "study", R.OPTUNA_STUDY: plan.store_name, R.DESIGN: abl.design,
            R.METRIC: R.final(plan.metric)}
    if plan.design is not None:
        d = plan.design
        tags[R.SEQUENTIAL] = json.dumps({"looks": list(d.looks), "alpha": d.alpha, "min_effect": d.min_effect,
                                         "family": d.family})
    # A tag, not a param: a reopened study may state its expectations anew (params are final).
    tags[R.EXPECT] = json.dumps([claim.model_dump(mode="json") for claim in abl.expect])
    return tags


def _open_study_run(plan: StudyPlan, queue: CellQueue) -> NullTracker:
    """The study's parent MLflow run: the one the store remembers, else a new one; cells of an older
    implementation of their variant are marked superseded (and retrained)."""
    from ablate.study.parent import parent_description
    from ablate.study.workers import open_parent
    from ablate.tracking.supersede import mark_study

    with queue.store.lock(plan.store_name):  # one parent run however many processes start at once
        tracker = open_parent(plan.spec, plan.name, _parent_tags(plan), queue.get(PARENT),
                              description=parent_description(plan, {}))
        queue.set(PARENT, tracker.run_id)
    assert tracker.run_id is not None  # tracking is on: a real run
    tracker.log_text(format_plan(plan), R.CELLS_ARTIFACT)
    _say_superseded(mark_study(tracker.run_id))
    return tracker


def _run_rounds(plan: StudyPlan, queue: CellQueue, params: dict[str, Any], worker_args: tuple[Any, ...],
                workers: int) -> int:
    """Workers train the queued cells; with adaptive seeds, round after round while comparisons stay
    open. The workers' exit code."""
    from ablate.study.workers import run_workers

    while True:
        code = run_workers(_worker, worker_args, max(1, workers))
        if code in (130, 143) or plan.design is None:
            return code
        added, _ = queue.enqueue(_wanted(plan, queue), **params)  # the next round: open comparisons only
        if not added:
            return code
        print(format_progress(plan, plan.design, queue.records()))
        print(f"next round: {added} more cells for the comparisons still open", flush=True)


@dataclass(frozen=True)
class Ended:
    """How the study's run ended: its cells' records, and why a repeated failure stopped it (if it did)."""

    records: dict[str, Any]
    why: str | None
    interrupted: bool


def _close_study(plan: StudyPlan, queue: CellQueue, tracker: NullTracker | None, interrupted: bool) -> Ended:
    """Print the grid of outcomes and bring the parent run up to date, ending it as the study ended."""
    from ablate.study import failfast
    from ablate.study.parent import cells_table, close_parent, parent_description

    records = queue.records()
    grid = format_grid(plan, records)
    print(grid)
    keys = [c.key for c in plan.cells] if plan.design is None else needed_keys(plan, plan.design, records)
    done = all(records.get(k) and records[k].status in TERMINAL for k in keys)
    why = None if interrupted else failfast.stopped(queue.study)
    if tracker is not None:
        close_parent(tracker, note=parent_description(plan, records), table=cells_table(plan, records),
                     table_artifact=R.CELLS_TABLE_ARTIFACT, why=why, done=done, interrupted=interrupted,
                     done_text=(grid, R.STATUS_ARTIFACT))
    return Ended(records, why, interrupted)


def _exit_code(plan: StudyPlan, ended: Ended, code: int, command: tuple[str, Sequence[str], int, str | None]
               ) -> int:
    """2 for a study stopped by a repeated failure, the signal's code when interrupted (with the command
    that resumes it), 1 when cells failed, else the workers' code."""
    from ablate.engine import preempt
    from ablate.study import failfast
    from ablate.study.workers import resume_command

    spec_path, overrides, workers, storage = command
    if ended.why:
        print(f"error: study stopped: its first {failfast.FIRST} cells failed the same way: {ended.why}; fix "
              "that and run the same command again (the failed cells are queued again)", file=sys.stderr)
        return 2
    if ended.interrupted:
        again = resume_command("ablate", spec_path, overrides, workers, storage)
        print(f"interrupted by {preempt.signal_name()}: running cells saved their checkpoints; resume with "
              f"`{again}`", file=sys.stderr)
        return code
    failed = [c for c in plan.cells if ended.records.get(c.key) and ended.records[c.key].status == "failed"]
    if failed:
        print(f"{len(failed)} cells failed; `ablate ablate {spec_path} --retry-failed` runs them again",
              file=sys.stderr)
        return 1
    return code


def _say_superseded(stale: list[str]) -> None:
    """One line per cell whose variant's implementation changed since it ran (now tagged superseded)."""
    if stale:
        cells = "; ".join(stale)
        print(f"{len(stale)} cells ran an older implementation of their variant and are superseded (kept in "
              f"MLflow, left out of reports, retrained under the new version): {cells}", flush=True)


def _params(plan: StudyPlan) -> dict[str, Any]:
    """Every cell's axis values as Optuna params, for enqueue to record on the waiting trials."""
    return {"choices": plan.axis_params(), "values": {c.key: plan.cell_params(c) for c in plan.cells}}


def _wanted(plan: StudyPlan, queue: Any) -> list[dict[str, Any]]:
    """The cells to enqueue now: all of them, or with adaptive seeds those the open comparisons need."""
    if plan.design is None:
        return [c.attrs() for c in plan.cells]
    keys = set(needed_keys(plan, plan.design, queue.records()))
    return [c.attrs() for c in plan.cells if c.key in keys]
