"""One study cell's run, whether it trains alone (ablate/study/train_cells.py) or in a pack
(ablate/study/pack_cells.py): its name, spec and run options (`cell_run`), how its trial ends (`cell_done`,
`cell_failed`), and the prepared data a worker reuses from cell to cell (`cached_data`).
"""

from __future__ import annotations

import json
import sys
import time
from typing import Any

from ablate.data.prepare import prepare_data
from ablate.run import runner
from ablate.run.runner import RunResult, run_label
from ablate.spec.experiment import ExperimentSpec
from ablate.study.cell_queue import CellQueue
from ablate.study.precision import QUEUE_ATTR as PRECISION_ATTR
from ablate.study.precision import at_study_precision
from ablate.study.study_plan import Cell, StudyPlan
from ablate.tracking import record

# How an arm's runs are named in MLflow beside the cells at the baseline's settings ('norm=custom · seed 0').
ARM_SUFFIX = {record.OWN_BEST_ARM: " @ own best", record.CONFIRM_ARM: " @ larger scale",
              record.LADDER_TUNE_ARM: " (tuning)"}


def cell_run(plan: StudyPlan, cell: Cell, queue: CellQueue, trial: Any, parent: str | None,
             quiet: bool) -> tuple[str, ExperimentSpec, runner.RunOptions]:
    """What one cell's run is made of: its name in MLflow, the spec it trains, and the run's options (its
    tags, parent, hook and data); records the cell's axis values on its trial."""
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
    # The study's experiment even for a confirmation cell of another spec file (its own name).
    options = runner.RunOptions(hook=hook, tags=tags, parent_run_id=parent, experiment=plan.name,
                                run_name=run_label(name, cell.seed), data=cached_data(cell.spec), quiet=quiet,
                                on_start=lambda run_id: queue.started(trial, run_id))
    return name, spec, options


def cell_failed(queue: CellQueue, trial: Any, name: str, seed: int, exc: BaseException) -> str:
    """A cell whose run raised: its trial failed with the error, said on stderr."""
    queue.finish(trial, "failed", None, error=f"{type(exc).__name__}: {exc}")
    print(f"cell {name} seed {seed}: failed ({type(exc).__name__}: {exc})", file=sys.stderr, flush=True)
    return "failed"


def cell_done(plan: StudyPlan, queue: CellQueue, trial: Any, name: str, seed: int, result: RunResult,
              started: float) -> str:
    """A cell's run ended: its trial gets the final metric and status, and one line says so."""
    value = record.result_value(result.metrics, plan.metric)  # the number MLflow holds as final/<metric>
    queue.finish(trial, result.status, value, run_id=result.run_id, error=result.reason or None,
                 step=result.history[-1][0] if result.history else None)
    shown = f"{value:.4g}" if value is not None else "-"
    took = f"{time.time() - started:.0f}s"
    # MLflow's wall time counts every segment of a resumed cell
    if result.resumed_at is not None and record.WALL_TIME in result.metrics:
        total = result.metrics[record.WALL_TIME]
        took += f" from step {result.resumed_at}; {total:.0f}s of training over all its segments"
    print(f"cell {name} seed {seed}: {result.status}, {record.final(plan.metric)} {shown} ({took})",
          flush=True)
    return result.status


def cached_data(spec: Any) -> Any:
    """Prepared data, reused by the next cell/trial of this process with the same data section and seed."""
    key = json.dumps([spec.data.model_dump(mode="json"), spec.seed], sort_keys=True)
    if _DATA.get("key") != key:
        _DATA.clear()
        _DATA.update(key=key, data=prepare_data(spec))
    return _DATA["data"]


_DATA: dict[str, Any] = {}
