"""`ablate status SPEC`: where a study stands, read from its store (never written).

Finds the study the spec names even without the ``--set`` overrides it was started with (it lists the
studies of that spec in the store with their overrides and shows the latest), and prints the grid of cells
with status and metric so far (and, with adaptive seeds, where each comparison stands); with ``tune:`` or
``confirm:``, where each later phase stands too (each variant's search, the own-best cells, the
comparisons the confirm phase reruns), as ``ablate ablate --dry-run`` says it; for a study submitted with
``--slurm``, its jobs beside the cells (pending, running, requeued, done: ablate/study/slurm_jobs.py).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ablate.study.plan import format_grid, plan_study


def main_status(spec_path: str, overrides: Sequence[str] = (), storage: str | None = None) -> int:
    """`ablate status SPEC`: the grid of cells with status and metric so far; reads, never writes."""
    from ablate.study import names
    from ablate.study.cells import CellQueue
    from ablate.study.store import Store

    plan = plan_study(spec_path, overrides)
    records: dict[str, Any] = {}
    if Store.exists(storage):
        store = Store(storage, create=False)
        plan.bind(store)
        queue = CellQueue(store, plan.store_name, plan.direction, create=False)
        if queue.study is None:  # not with these overrides: say which the store has, show the latest
            known = names.known_studies(store, plan.spec.name, "ablation")
            if known:
                print(f"no study of {spec_path} with " + (f"--set {' --set '.join(overrides)}" if overrides
                      else "no --set overrides") + " in the store; it has:")
                for k in known:
                    sets = "unknown overrides (older store)" if k.overrides is None else (
                        " ".join(f"--set {o}" for o in k.overrides) or "no overrides")
                    print(f"  {k.name}: {sets} ({k.trials} cells)")
                latest = next((k for k in reversed(known) if k.overrides is not None), None)
                if latest is not None and latest.overrides != list(overrides):
                    print(f"showing {latest.name}:")
                    return main_status(spec_path, latest.overrides or [], storage)
        else:
            records = queue.records()
    print(format_grid(plan, records))
    abl = plan.spec.ablation
    if abl is not None and (abl.tune is not None or abl.confirm is not None):
        from ablate.study.arms import dry_run_lines

        print("\n".join(dry_run_lines(plan, storage, records)))
    from ablate.study.slurm import log_folder
    from ablate.study.slurm_jobs import jobs_lines

    for line in jobs_lines(log_folder(plan)):  # a study submitted with --slurm: its jobs, as SLURM says
        print(line)
    return 0
