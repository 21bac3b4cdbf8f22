"""`ablate status STUDY` (its spec file or its name): where a study stands, read from its store.

Finds the study the spec names even without the ``--set`` overrides it was started with (it lists the
studies of that spec in the store with their overrides and shows the latest), and prints the grid of cells
with status and metric so far (and, with adaptive seeds, where each comparison stands); with ``tune:`` or
``confirm:``, where each later phase stands too (each variant's search, the own-best cells, the
comparisons the confirm phase reruns), as ``ablate study --dry-run`` says it; for a study submitted with
``--slurm``, its jobs beside the cells (pending, running, requeued, done: ablate/launch/slurm_queue.py).
"""

from __future__ import annotations

import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ablate.errors import AblateError
from ablate.launch.slurm_queue import jobs_lines
from ablate.launch.slurm_submit import log_folder
from ablate.spec.study_ref import is_spec_file
from ablate.study import study_names
from ablate.study.arms import dry_run_lines
from ablate.study.cell_queue import CellQueue
from ablate.study.designs import format_grid, plan_study
from ablate.study.optuna_store import Store
from ablate.tracking import record
from ablate.tracking.read import find_study_runs, read_text_artifact


def main_status(spec_path: str, overrides: Sequence[str] = (), storage: str | None = None) -> int:
    """`ablate status STUDY`: the grid of cells with status and metric so far; reads, never writes. STUDY is
    the spec file, or the study's name (its spec read back from the study's parent run)."""
    if not is_spec_file(spec_path):
        with tempfile.TemporaryDirectory(prefix="ablate-status-") as tmp:
            return main_status(_recorded_spec(spec_path, Path(tmp)), overrides, storage)
    plan = plan_study(spec_path, overrides)
    records: dict[str, Any] = {}
    failed_before: dict[str, list[str]] = {}
    if Store.exists(storage):
        store = Store(storage, create=False)
        plan.bind(store)
        queue = CellQueue(store, plan.store_name, plan.direction, create=False)
        if queue.study is None:  # not with these overrides: say which the store has, show the latest
            known = study_names.known_studies(store, plan.spec.name, "ablation")
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
            failed_before = queue.failed_segments()
    print(format_grid(plan, records))
    for line in failed_lines(plan, failed_before):
        print(line)
    abl = plan.spec.ablation
    if abl is not None and (abl.tune is not None or abl.confirm is not None):
        print("\n".join(dry_run_lines(plan, storage, records)))
    for line in jobs_lines(log_folder(plan)):  # a study submitted with --slurm: its jobs, as SLURM says
        print(line)
    return 0


def failed_lines(plan: Any, failed: dict[str, list[str]]) -> list[str]:
    """A line per cell that failed before and was queued again (``--retry-failed``): the grid shows its
    latest trial only, and its MLflow run its last segment (tag ablate.failed_segments keeps the rest)."""
    cells = {c.key: c for c in plan.cells}
    lines = []
    for key, errors in failed.items():
        cell = cells.get(key)
        name = f"{cell.label} seed {cell.seed}" if cell is not None else key
        lines.append(f"  {name}: failed {len(errors)}x before this attempt (last: {errors[-1][:200]})")
    return ["earlier failed attempts:", *lines] if lines else []


def _recorded_spec(study: str, folder: Path) -> str:
    """The spec a study ran with, as its parent run recorded it (overrides applied), written to ``folder``."""
    parent, _ = find_study_runs(study)
    text = read_text_artifact(parent["run_id"], record.SPEC_ARTIFACT)
    if not text:
        raise AblateError(f"study {study!r}: its parent run {parent['run_id']} has no "
                          f"{record.SPEC_ARTIFACT}; give the study's spec file instead")
    path = folder / f"{study}.yaml"
    path.write_text(text, encoding="utf-8")
    return str(path)
