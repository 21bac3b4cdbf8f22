"""Running an ablation study's queued cells: one cell (`run_cell`), the worker loop that pops cells from
the study's queue (`worker`), and the rounds of an arm (`run_arm`): enqueue what the arm needs, let the
workers train it, and with adaptive seeds enqueue the next round for the comparisons still open.

Every arm of a study (its cells at the baseline's settings, each variant at its own best, the
confirmation at a larger scale: ablate/study/arms.py) queues its cells in the same Optuna study, so one
worker loop runs them all, resumes them and shares them between processes and machines alike. A worker
finds each cell in the plan, or rebuilds it from the attributes the store keeps (`StudyPlan.rebuild`).
"""

from __future__ import annotations

import json
import sys
import time
from typing import Any

import optuna

from ablate.data.prepare import prepare_data
from ablate.data.prepared import PreparedData
from ablate.engine import preempt
from ablate.run import runner
from ablate.run.runner import run_label
from ablate.spec.experiment import ExperimentSpec
from ablate.study import failfast, rung_rounds
from ablate.study.cell_queue import CellParams, CellQueue
from ablate.study.designs import plan_study
from ablate.study.optuna_attrs import CELL, CELL_SPEC_HASH, PARENT, CellAttrs
from ablate.study.optuna_store import Store
from ablate.study.precision import QUEUE_ATTR as PRECISION_ATTR
from ablate.study.precision import at_study_precision
from ablate.study.study_plan import Cell, StudyPlan
from ablate.study.worker_pool import IN_PROCESS, WorkerArgs, WorkerPool
from ablate.tracking import record

# How an arm's runs are named in MLflow beside the cells at the baseline's settings ('norm=custom · seed 0').
ARM_SUFFIX = {record.OWN_BEST_ARM: " @ own best", record.CONFIRM_ARM: " @ larger scale",
              record.LADDER_TUNE_ARM: " (tuning)"}


def run_cell(plan: StudyPlan, cell: Cell, queue: CellQueue, trial: optuna.Trial, parent: str | None,
             quiet: bool) -> str:
    """Train one cell (resuming its checkpoint) as a child run of the study's parent; its status."""
    def hook(step: int, metrics: dict[str, float]) -> bool:
        queue.report(trial, step, metrics.get(plan.metric))  # the grid's "metric so far"
        return False

    queue.set_params(trial, plan.axis_params(), plan.cell_params(cell))
    tags = {record.VARIANT: cell.label, record.CELL: cell.key, record.KIND: "cell", record.ARM: cell.arm,
            record.OPTUNA_STUDY: plan.store_name, record.OVERRIDES: json.dumps(cell.overrides)}
    if cell.rung is not None:  # a ladder's cell: paired by seed within its rung
        tags[record.RUNG] = cell.rung
        rung = next((r for r in plan.rungs if r.name == cell.rung), None)
        if rung is not None and rung.budget is not None:  # a data budget: its size and multiple
            tags[record.SIZE_RUNG] = rung.size_rung
            tags[record.DATA_BUDGET] = f"{rung.budget:g}"
    spec = at_study_precision(cell.spec, queue.get(PRECISION_ATTR))
    if spec is not cell.spec:
        # the run's folder and logged spec say the precision it trains at; its spec hash tag stays the cell's
        # identity (train.precision: auto), which an import gives back to the cell's trial, and reports read
        # its train.precision as the spec's, like the cells' that ran before the study pinned one
        tags[record.SPEC_HASH] = cell.spec.spec_hash
        tags[record.SPEC_PRECISION] = cell.spec.train.precision
    name = cell.label + ARM_SUFFIX.get(cell.arm, "") + (f" @ {cell.rung}" if cell.rung is not None else "")
    started = time.time()
    print(f"cell {name} seed {cell.seed} [{cell.key}]: started", flush=True)
    try:
        with queue.store.beat(trial):
            # The study's experiment even for a confirmation cell of another spec file (its own name).
            result = runner.run_experiment(spec, hook=hook, tags=tags, parent_run_id=parent,
                                    experiment=plan.name, run_name=run_label(name, cell.seed),
                                    data=cached_data(cell.spec), quiet=quiet,
                                    on_start=lambda run_id: queue.started(trial, run_id))
    except KeyboardInterrupt:
        queue.release(trial)  # resumes from its checkpoint next time
        raise
    except Exception as exc:  # noqa: BLE001 - failure is data: record it, go on with the next cell
        queue.finish(trial, "failed", None, error=f"{type(exc).__name__}: {exc}")
        print(f"cell {name} seed {cell.seed}: failed ({type(exc).__name__}: {exc})", file=sys.stderr,
              flush=True)
        return "failed"
    value = record.result_value(result.metrics, plan.metric)  # the number MLflow holds as final/<metric>
    queue.finish(trial, result.status, value, run_id=result.run_id, error=result.reason or None,
                 step=result.history[-1][0] if result.history else None)
    shown = f"{value:.4g}" if value is not None else "-"
    took = f"{time.time() - started:.0f}s"
    # MLflow's wall time counts every segment of a resumed cell
    if result.resumed_at is not None and record.WALL_TIME in result.metrics:
        total = result.metrics[record.WALL_TIME]
        took += f" from step {result.resumed_at}; {total:.0f}s of training over all its segments"
    print(f"cell {name} seed {cell.seed}: {result.status}, {record.final(plan.metric)} {shown} ({took})",
          flush=True)
    return result.status


def worker(spec_path: str, overrides: list[str], storage: str | None, index: int, workers: int) -> int:
    """Pop and run cells (of any arm) until none is waiting or running anywhere."""
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
        if cell.spec.spec_hash != attrs.get(CELL_SPEC_HASH, cell.spec.spec_hash):
            # Rebuilt from the store into another spec (the spec file changed under it): never train a
            # different run under this cell's identity.
            queue.finish(trial, "failed", None, error=f"cell {attrs[CELL]} rebuilds to spec hash "
                         f"{cell.spec.spec_hash} from this spec: it was queued from another one")
        elif run_cell(plan, cell, queue, trial, parent, quiet=workers > 1) == "failed":
            failfast.stop_if_repeated(queue.study, queue.store)  # the same error twice first: stop
    return 0


def cell_params(plan: StudyPlan, base: StudyPlan | None = None) -> CellParams:
    """Every cell's axis values as Optuna params, for enqueue to record on the waiting trials; an arm's
    cells keep the choices of the study's own axes (``base``), so their params stay comparable."""
    choices = plan.axis_params()
    if base is not None:
        choices.update(base.axis_params())
    return {"choices": choices, "values": {c.key: plan.cell_params(c) for c in plan.cells}}


def wanted(plan: StudyPlan, queue: CellQueue) -> list[CellAttrs]:
    """The cells to enqueue now: all of them, or with adaptive seeds those the open comparisons need."""
    keys = set(rung_rounds.needed(plan, queue.records()))  # each rung's comparisons walk their own looks
    return [c.attrs() for c in plan.cells if c.key in keys]


def run_rounds(plan: StudyPlan, queue: CellQueue, params: CellParams, worker_args: WorkerArgs,
               pool: WorkerPool = IN_PROCESS) -> int:
    """Workers train the queued cells; with adaptive seeds, round after round while comparisons stay
    open. The workers' exit code."""
    while True:
        code = pool.run(worker, worker_args)
        if code in preempt.STOP_CODES or plan.design is None:
            return code
        added, _ = queue.enqueue(wanted(plan, queue), **params)  # the next round: open comparisons only
        if not added:
            return code
        print(rung_rounds.progress_text(plan, queue.records()))
        print(f"next round: {added} more cells for the comparisons still open", flush=True)


def run_arm(arm: StudyPlan, base: StudyPlan, queue: CellQueue, worker_args: WorkerArgs,
            pool: WorkerPool = IN_PROCESS, retry_failed: bool = False) -> int:
    """Enqueue what an arm needs (a cell another arm queued already is shared: the same key is the same
    run) and run its rounds; the workers' exit code."""
    params = cell_params(arm, base)
    needed = wanted(arm, queue)
    new, retried = queue.enqueue(needed, retry_failed, **params)
    shared = len({c[CELL] for c in needed} & {c.key for c in base.cells})
    print(f"{len(needed)} cells needed now, {new} newly queued"
          + (f", {retried} failed ones re-queued" if retried else "")
          + (f"; {shared} of them are cells at the baseline's settings too" if shared else ""), flush=True)
    return run_rounds(arm, queue, params, worker_args, pool)


def cached_data(spec: ExperimentSpec) -> PreparedData:
    """Prepared data, reused by the next cell/trial of this process with the same data section and seed."""
    key = json.dumps([spec.data.model_dump(mode="json"), spec.seed], sort_keys=True)
    if _DATA.get("key") != key:
        _DATA.clear()
        _DATA.update(key=key, data=prepare_data(spec))
    return _DATA["data"]


_DATA: dict[str, Any] = {}  # key: the data section and seed as JSON; data: its PreparedData
