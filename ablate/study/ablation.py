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
from typing import Any

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
    from ablate.study import failfast, names
    from ablate.study.cells import CellQueue
    from ablate.study.parent import cells_table, parent_description
    from ablate.study.store import Store

    if dry_run:
        print(format_plan(plan))
        if plan.design is not None and Store.exists(storage):  # where a started study stands; reads only
            found = CellQueue(Store(storage, create=False), plan.store_name, plan.direction, create=False)
            records = found.records()
            if records:
                print(f"so far ({len(records)} cells in the store):")
                print(format_progress(plan, plan.design, records))
        return 0
    from ablate.study.workers import leave_open, open_parent, resume_command, run_workers
    from ablate.tracking.supersede import mark_study

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
    tracker: Any = None
    if plan.spec.tracking.enabled:
        assert plan.spec.ablation is not None
        tags = {R.KIND: "ablation", R.VARIANT: "study", R.OPTUNA_STUDY: plan.store_name,
                R.DESIGN: plan.spec.ablation.design, R.METRIC: R.final(plan.metric)}
        if plan.design is not None:  # what the report needs to state the sequential verdicts
            d = plan.design
            tags[R.SEQUENTIAL] = json.dumps({"looks": list(d.looks), "alpha": d.alpha,
                                             "min_effect": d.min_effect, "family": d.family})
        # A tag, not a param: a reopened study may state its expectations anew (params are final).
        tags[R.EXPECT] = json.dumps([claim.model_dump(mode="json") for claim in plan.spec.ablation.expect])
        with store.lock(plan.store_name):  # one parent run however many processes start at once
            tracker = open_parent(plan.spec, plan.name, tags, queue.get(PARENT),
                                  description=parent_description(plan, {}))
            queue.set(PARENT, tracker.run_id)
        tracker.log_text(format_plan(plan), R.CELLS_ARTIFACT)
        _say_superseded(mark_study(tracker.run_id))
    code = 130
    try:
        while True:
            code = run_workers(_worker, (spec_path, list(overrides), storage), max(1, workers))
            if code in (130, 143) or plan.design is None:
                break
            # the next round: open comparisons only
            added, _ = queue.enqueue(_wanted(plan, queue), **params)
            if not added:
                break
            print(format_progress(plan, plan.design, queue.records()))
            print(f"next round: {added} more cells for the comparisons still open", flush=True)
    except KeyboardInterrupt:
        code = preempt.exit_code()  # the running cell saved its checkpoint and went back to the queue
    finally:
        interrupted = code in (130, 143)
        records = queue.records()
        grid = format_grid(plan, records)
        print(grid)
        keys = [c.key for c in plan.cells] if plan.design is None else needed_keys(plan, plan.design, records)
        done = all(records.get(k) and records[k].status in TERMINAL for k in keys)
        why = None if interrupted else failfast.stopped(queue.study)
        if tracker is not None:
            tracker.set_tags({R.NOTE: parent_description(plan, records)})
            tracker.log_table(cells_table(plan, records), R.CELLS_TABLE_ARTIFACT)
            if why:
                tracker.set_tags({R.ERROR: why})
                tracker.end("failed")
            elif done:
                tracker.log_text(grid, R.STATUS_ARTIFACT)
                tracker.end("finished")
            elif interrupted:
                tracker.end("interrupted")
            else:
                leave_open(tracker)  # cells still run in other processes or machines
    failed = [c for c in plan.cells if records.get(c.key) and records[c.key].status == "failed"]
    if why:
        print(f"error: study stopped: its first {failfast.FIRST} cells failed the same way: {why}; fix that "
              "and run the same command again (the failed cells are queued again)", file=sys.stderr)
        return 2
    if interrupted:
        again = resume_command("ablate", spec_path, overrides, workers, storage)
        print(f"interrupted by {preempt.signal_name()}: running cells saved their checkpoints; resume with "
              f"`{again}`", file=sys.stderr)
        return code
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
