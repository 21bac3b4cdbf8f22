"""Running an ablation study's queued cells: one cell (`run_cell`), the worker loop that pops cells from
the study's queue (`worker`), and the rounds of an arm (`run_arm`): enqueue what the arm needs, let the
workers train it, and with adaptive seeds enqueue the next round for the comparisons still open.

Every arm of a study (its cells at the baseline's settings, each variant at its own best, the
confirmation at a larger scale: ablate/study/arms.py) queues its cells in the same Optuna study, so one
worker loop runs them all, resumes them and shares them between processes and machines alike. A worker
finds each cell in the plan, or rebuilds it from the attributes the store keeps (`StudyPlan.rebuild`).
"""

from __future__ import annotations

import time
from typing import Any

import optuna

from ablate.engine import preempt
from ablate.run import runner
from ablate.study import failfast, rung_rounds
from ablate.study.cell_queue import CellParams, CellQueue
from ablate.study.cell_runs import cell_done, cell_failed, cell_run
from ablate.study.designs import plan_study
from ablate.study.optuna_attrs import CELL, CELL_SPEC_HASH, PARENT, CellAttrs
from ablate.study.optuna_store import Store
from ablate.study.pack_cells import pack_mates, run_packed_cells
from ablate.study.pack_plan import decided_sizes
from ablate.study.study_plan import Cell, StudyPlan
from ablate.study.worker_pool import IN_PROCESS, WorkerArgs, WorkerPool


def run_cell(plan: StudyPlan, cell: Cell, queue: CellQueue, trial: optuna.Trial, parent: str | None,
             quiet: bool) -> str:
    """Train one cell (resuming its checkpoint) as a child run of the study's parent; its status."""
    name, spec, options = cell_run(plan, cell, queue, trial, parent, quiet)
    started = time.time()
    print(f"cell {name} seed {cell.seed} [{cell.key}]: started", flush=True)
    try:
        with queue.store.beat(trial):
            o = options
            result = runner.run_experiment(spec, hook=o.hook, tags=o.tags, parent_run_id=o.parent_run_id,
                                           experiment=o.experiment, run_name=o.run_name, data=o.data,
                                           quiet=o.quiet, on_start=o.on_start)
    except KeyboardInterrupt:
        queue.release(trial)  # resumes from its checkpoint next time
        raise
    except Exception as exc:  # noqa: BLE001 - failure is data: record it, go on with the next cell
        return cell_failed(queue, trial, name, cell.seed, exc)
    return cell_done(plan, queue, trial, name, cell.seed, result, started)


def worker(spec_path: str, overrides: list[str], storage: str | None, index: int, workers: int) -> int:
    """Pop and run cells (of any arm) until none is waiting or running anywhere."""
    plan = plan_study(spec_path, overrides)
    store = Store(storage)
    plan.bind(store)
    queue = CellQueue(store, plan.store_name, plan.direction)
    parent = queue.get(PARENT) if plan.spec.tracking.enabled else None
    cells = {c.key: c for c in plan.cells}
    sizes = decided_sizes()  # each shape's pack size, as the study command decided it (1: alone)

    def lookup(attrs: Any) -> Cell:
        return cells.get(attrs[CELL]) or plan.rebuild(attrs)

    while not failfast.stopped(queue.study):
        trial, busy = queue.claim()
        if trial is None:
            if not busy:
                return 0
            time.sleep(min(5.0, float(queue.store.heartbeat or 2)))  # another worker's cell may yet die
            continue
        attrs = trial.user_attrs
        cell = lookup(attrs)
        mates = [] if cell.spec.spec_hash != attrs.get(CELL_SPEC_HASH, cell.spec.spec_hash) else \
            pack_mates(cell, queue, sizes, lookup)
        if mates:  # packed with the waiting cells of its shape: each still its own trial and run
            statuses = run_packed_cells(plan, [(trial, cell), *mates], queue, parent, quiet=workers > 1)
            if "failed" in statuses:
                failfast.stop_if_repeated(queue.study, queue.store)
        elif cell.spec.spec_hash != attrs.get(CELL_SPEC_HASH, cell.spec.spec_hash):
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
