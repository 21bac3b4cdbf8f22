"""A worker's packs: the cell it claimed and, where the study decided its shape packs
(ablate/study/pack_plan.py), up to K - 1 more waiting cells of that shape, trained as one pack
(ablate/run/packed_run.py). Each cell keeps its trial: its heartbeat, its MLflow run, its result, and on a
stop its place back in the queue, from which it resumes alone or in another pack.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Mapping
from typing import Any

from ablate.run.packed_run import PackCell, run_pack
from ablate.run.runner import RunResult
from ablate.study.cell_queue import CellQueue
from ablate.study.cell_runs import cell_done, cell_failed, cell_run
from ablate.study.optuna_attrs import CELL
from ablate.study.pack_plan import key_id
from ablate.study.study_plan import Cell, StudyPlan


def pack_mates(cell: Cell, queue: CellQueue, sizes: Mapping[str, int],
               lookup: Callable[[Mapping[str, Any]], Cell]) -> list[tuple[Any, Cell]]:
    """The waiting cells this worker claims to pack with ``cell`` (none where its shape trains alone)."""
    size = sizes.get(key_id(cell.spec), 1)
    if size < 2:
        return []
    kid = key_id(cell.spec)
    trials = queue.claim_like(lambda attrs: CELL in attrs and key_id(lookup(attrs).spec) == kid, size - 1)
    return [(t, lookup(t.user_attrs)) for t in trials]


def run_packed_cells(plan: StudyPlan, claimed: list[tuple[Any, Cell]], queue: CellQueue,
                     parent: str | None, quiet: bool) -> list[str]:
    """Train the claimed cells as one pack; each cell's status, its trial finished as `run_cell` does."""
    runs = [cell_run(plan, cell, queue, trial, parent, quiet) for trial, cell in claimed]
    started = time.time()
    names = ", ".join(f"{run[0]} seed {cell.seed}" for run, (_, cell) in zip(runs, claimed, strict=True))
    print(f"pack of {len(claimed)}: {names}: started", flush=True)
    try:
        with contextlib.ExitStack() as beats:
            for trial, _ in claimed:
                beats.enter_context(queue.store.beat(trial))
            results = run_pack([PackCell(spec, options) for _, spec, options in runs])
    except KeyboardInterrupt:
        for trial, _ in claimed:
            queue.release(trial)  # each resumes from its own checkpoint, packed or alone
        raise
    statuses = []
    for (trial, cell), (name, _, _), result in zip(claimed, runs, results, strict=True):
        if isinstance(result, RunResult):
            statuses.append(cell_done(plan, queue, trial, name, cell.seed, result, started))
        else:
            statuses.append(cell_failed(queue, trial, name, cell.seed, result))
    return statuses
