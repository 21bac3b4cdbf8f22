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
Workers and rounds: ablate/study/rounds.py. With ``tune:`` and ``confirm:`` (tuning each variant, confirming
at a larger scale) more arms follow the cells at the baseline's settings, in the same queue:
ablate/study/arms.py.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import ablate.tracking.record as R
from ablate.data.check import check_data
from ablate.errors import AblateError
from ablate.study.adaptive import format_progress, needed_keys
from ablate.study.attrs import PARENT
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
from ablate.study.precision import QUEUE_ATTR as PRECISION_ATTR
from ablate.study.rounds import cell_params, run_rounds, wanted

if TYPE_CHECKING:
    from ablate.study.cells import CellQueue
    from ablate.tracking import NullTracker


def main_ablate(spec_path: str, overrides: Sequence[str] = (), workers: int | None = 1,
                storage: str | None = None, dry_run: bool = False, retry_failed: bool = False,
                workers_per_gpu: int | None = None) -> int:
    """`ablate ablate SPEC`: run (or resume) every cell, then with ``tune:`` each variant's search and its
    cells at its own best, then with ``confirm:`` the decided comparisons at the larger setting
    (ablate/study/arms.py); 0 when all finished or diverged, 1 if some failed, 2 when a repeated failure
    stopped it, 130 when interrupted. ``dry_run`` prints the cells, their diffs and the budget of every
    phase, and where each stands, and writes nothing. The workers spread over the visible GPUs
    (ablate/study/devices.py); ``--slurm`` runs them as SLURM jobs instead (ablate/study/launch.py)."""
    from ablate.engine import preempt
    from ablate.study.workers import local_workers

    workers = local_workers(workers, workers_per_gpu)
    preempt.install()
    plan = plan_study(spec_path, overrides)
    check_data(spec_path, overrides, plan.spec)  # a missing or malformed data file: now, not in a cell
    if dry_run:
        return _dry_run(plan, storage, workers)
    queue, params = _queue_cells(plan, storage, retry_failed, workers)
    tracker = _open_study_run(plan, queue) if plan.spec.tracking.enabled else None
    _pin_precision(plan, queue, tracker)
    arms: dict[str, StudyPlan] = {R.BASELINE_ARM: plan}
    worker_args = (spec_path, list(overrides), storage)
    code = 130
    try:
        code = run_rounds(plan, queue, params, worker_args, workers)
        if code == 0 and not _stopped(queue) and _has_later_arms(plan):
            code = _later_arms(plan, queue, arms, tracker, worker_args, workers, retry_failed)
    except KeyboardInterrupt:
        code = preempt.exit_code()  # the running cell saved its checkpoint and went back to the queue
    finally:
        ended = _close_study(plan, queue, tracker, arms, interrupted=code in preempt.STOP_CODES)
    return _exit_code(arms, ended, code, (spec_path, overrides, workers, storage))


def _stopped(queue: CellQueue) -> bool:
    from ablate.study import failfast

    return bool(failfast.stopped(queue.study))


def _has_later_arms(plan: StudyPlan) -> bool:
    abl = plan.spec.ablation
    return abl is not None and (abl.tune is not None or abl.confirm is not None)


def _later_arms(plan: StudyPlan, queue: CellQueue, arms: dict[str, StudyPlan], tracker: NullTracker | None,
                worker_args: tuple[Any, ...], workers: int, retry_failed: bool) -> int:
    """The searches, the own-best arm and the confirm arm (ablate/study/arms.py), each arm's cells in the
    study's queue; the parent's arms.json brought up to date before each arm runs."""
    from ablate.study.arms import arms_record, run_later_arms
    from ablate.study.rounds import run_arm

    def run(arm: StudyPlan) -> int:
        code = run_arm(arm, plan, queue, worker_args, workers, retry_failed)
        if tracker is not None:
            tracker.log_dict(arms_record(arms, queue.records()), R.ARMS_ARTIFACT)
        return 2 if code == 0 and _stopped(queue) else code

    return run_later_arms(plan, arms, queue.records, run, storage=worker_args[2],
                          parent=tracker.run_id if tracker is not None else None, workers=workers)


def _dry_run(plan: StudyPlan, storage: str | None, workers: int = 1) -> int:
    """The cells and their diffs, the power plan, the budget of every phase; where a started study stands
    (read only); 2 when a start would refuse the spec (its design differs from the recorded one)."""
    from ablate.study import preregister
    from ablate.study.cells import CellQueue
    from ablate.study.optuna_store import Store
    from ablate.study.walltime import remaining_wall_time

    print(format_plan(plan))
    records: dict[str, Any] = {}
    pinned = None
    if Store.exists(storage):
        store = Store(storage, create=False)
        plan.bind(store)  # reads the store's study names; writes nothing
        found = CellQueue(store, plan.store_name, plan.direction, create=False)
        if why := preregister.check_only(found, plan):
            print(f"error: {why}", file=sys.stderr)
            return 2
        records = dict(found.records())
        if pinned := found.get(PRECISION_ATTR):
            print(f"precision: every cell trains in {pinned} (train.precision: auto, resolved once for the "
                  "study; a cell that ran at another precision is trained again)")
    if plan.spec.train.precision == "auto" and not pinned:
        print(_precision_to_come(bool(records)))
    print(_power_lines(plan, records, workers), flush=True)
    own = {c.key for c in plan.cells} & set(records)  # the later arms' cells are counted with them
    if plan.design is not None and own:
        print(f"so far ({len(own)} cells in the store):")
        print(format_progress(plan, plan.design, records))
    if _has_later_arms(plan):
        from ablate.study.arms import dry_run_lines

        print("\n".join(dry_run_lines(plan, storage, records)))
    print(workers_line(workers))
    if not _pilot_times(plan):  # the plan gave the time from the pilot's cells; else measure it here
        print(remaining_wall_time(plan, records, workers))
    return 0


def _pilot_times(plan: StudyPlan) -> bool:
    """Whether the study names a pilot, whose measured cell times the power plan's time line used."""
    abl = plan.spec.ablation
    return abl is not None and abl.pilot is not None and plan.design is not None


def workers_line(workers: int) -> str:
    """Where the dry run's workers would train: the GPUs this process sees, round robin, or the CPU."""
    from ablate.hardware import visible_gpus
    from ablate.study.devices import worker_devices

    gpus = visible_gpus()
    if not gpus:
        return f"workers: {workers}, on the CPU (no GPU visible to torch)"
    return (f"workers: {workers}, round robin over the {len(gpus)} visible GPUs: "
            + ", ".join(str(d) for d in worker_devices(workers, gpus)))


def _queue_cells(plan: StudyPlan, storage: str | None, retry_failed: bool, workers: int = 1
                 ) -> tuple[CellQueue, dict[str, Any]]:
    """The study's queue in the Optuna store, with its design recorded (or a changed one refused) and the
    cells it still needs (and, asked to, the failed ones again) enqueued; the Optuna params every cell's
    trial carries."""
    from ablate.study import failfast, names, preregister
    from ablate.study.cells import CellQueue
    from ablate.study.optuna_store import Store

    store = Store(storage)
    with store.lock(plan.name):  # two processes starting one study agree on its name
        plan.bind(store)
        queue = CellQueue(store, plan.store_name, plan.direction)
        text, data = "", None
        if not queue.get(preregister.STORE_ATTR):  # the first start: the plan the design is recorded with
            from ablate.study.sizing import plan_record, study_plan

            planned = study_plan(plan)
            text = _power_lines(plan, {}, workers, planned)
            data = None if planned is None else plan_record(planned)
            print(text, flush=True)
        preregister.record_or_refuse(queue, plan, text, data)
        queue.describe(names.study_attrs(plan.baseline.spec_hash, plan.spec.name, plan.overrides, "ablation"),
                       R.final(plan.metric))
    failfast.clear(queue.study)  # stopped last time by a repeated failure: its cause may be fixed now
    params = cell_params(plan)  # the same for every round: each cell's axis values
    new, retried = queue.enqueue(wanted(plan, queue), retry_failed, **params)
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
    if abl.tuned_on is not None:
        tags[R.TUNED_ON] = abl.tuned_on
    from ablate.study.arms import parent_tags

    return tags | parent_tags(plan)  # tune: and confirm: (tags: a confirm: may be added to a running study)


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
    _record_design(tracker, queue)
    _say_superseded(*mark_study(tracker.run_id))
    return tracker


def _record_design(tracker: NullTracker, queue: CellQueue) -> None:
    """The pre-registered design on the parent run (a tag) and the plan it was recorded with (plan.txt)."""
    from ablate.study import preregister

    design = queue.get(preregister.STORE_ATTR)
    if design:
        tracker.set_tags({R.PREREGISTERED: design})
    text, data = preregister.recorded_plan(queue)
    if data is not None:
        tracker.set_tags({R.POWER_PLAN: json.dumps(data, sort_keys=True)})
    if text:
        tracker.log_text(text, R.PLAN_ARTIFACT)



def _power_lines(plan: StudyPlan, records: Mapping[str, Any], workers: int, planned: Any = None) -> str:
    """The power plan (ablate/study/sizing.py; ``planned`` when already computed): from the pilot before the
    first cell, and once the study has pairs of its own, the same plan from them, for information only."""
    from ablate.study.sizing import format_power_plan, own_seeds_plan, scale_notes, study_plan

    abl = plan.spec.ablation
    assert abl is not None
    planned = planned if planned is not None else study_plan(plan)
    if planned is None:
        return "power plan: one seed per variant, no paired test to plan"
    lines = [format_power_plan(planned, abl.min_effect, workers)]
    if abl.metric == "auto":
        lines.append(f"  ablation.metric: auto resolved to {plan.metric}: it decides; other metrics are "
                     "reported beside it and never decide")
    lines += scale_notes(plan)
    own = [r for c in plan.cells if (r := records.get(c.key)) is not None]
    if own and (mine := own_seeds_plan(plan, records)) is not None:
        lines.append(format_power_plan(mine, abl.min_effect, workers))
    return "\n".join(lines)


@dataclass(frozen=True)
class Ended:
    """How the study's run ended: its cells' records, and why a repeated failure stopped it (if it did)."""

    records: dict[str, Any]
    why: str | None
    interrupted: bool


def _close_study(plan: StudyPlan, queue: CellQueue, tracker: NullTracker | None,
                 arms: Mapping[str, StudyPlan], interrupted: bool) -> Ended:
    """Print the grid of outcomes (one per arm) and bring the parent run up to date, ending it as the
    study ended."""
    from ablate.study import failfast
    from ablate.study.arms import arms_done, arms_record
    from ablate.study.parent import cells_table, close_parent, parent_description

    records = queue.records()
    grids = [format_grid(arm, records) if name == R.BASELINE_ARM else f"{ARM_TITLE[name]}:\n" + format_grid(
        arm, records) for name, arm in arms.items() if arm.cells]
    grid = "\n".join(grids)
    print(grid)
    if _has_later_arms(plan):
        done = arms_done(plan, arms, records)
    else:
        keys = [c.key for c in plan.cells] if plan.design is None else needed_keys(plan, plan.design, records)
        done = all(records.get(k) and records[k].status in TERMINAL for k in keys)
    why = None if interrupted else failfast.stopped(queue.study)
    if tracker is not None:
        if len(arms) > 1:
            tracker.log_dict(arms_record(arms, records), R.ARMS_ARTIFACT)
        later = {ARM_TITLE[name]: arm for name, arm in arms.items() if name != R.BASELINE_ARM}
        close_parent(tracker, note=parent_description(plan, records, later), table=cells_table(plan, records),
                     table_artifact=R.CELLS_TABLE_ARTIFACT, why=why, done=done, interrupted=interrupted,
                     done_text=(grid, R.STATUS_ARTIFACT))
    return Ended(records, why, interrupted)


# The heading of each later arm's grid of outcomes.
ARM_TITLE = {R.OWN_BEST_ARM: "each variant at its own best settings",
             R.CONFIRM_ARM: "the decided comparisons at the larger setting"}


def _exit_code(arms: Mapping[str, StudyPlan], ended: Ended, code: int,
               command: tuple[str, Sequence[str], int, str | None]) -> int:
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
    keys = {c.key for arm in arms.values() for c in arm.cells}
    failed = [k for k in keys if ended.records.get(k) and ended.records[k].status == "failed"]
    if failed:
        print(f"{len(failed)} cells failed; `ablate ablate {spec_path} --retry-failed` runs them again",
              file=sys.stderr)
        return 1
    return code


def _precision_to_come(started: bool) -> str:
    """The dry run's precision line for a study that has not pinned one yet (it reads no MLflow run)."""
    from ablate.study.precision import resolve_here

    here = resolve_here()
    if started:
        return (f"precision: train.precision: auto is resolved when the study next starts: to its first "
                f"finished cell's precision (each run's ablate.precision tag), else this machine's {here}; "
                "a cell that ran at another precision is then trained again")
    return (f"precision: every cell trains in {here} (train.precision: auto, this machine's, resolved once "
            "for the study)")


def _pin_precision(plan: StudyPlan, queue: CellQueue, tracker: NullTracker | None) -> None:
    """Resolve ``train.precision: auto`` once for the whole study (ablate/study/precision.py): record it,
    and queue again the finished cells that ran at another precision, tagged superseded with the reason."""
    from ablate.study.precision import QUEUE_ATTR, other_precision, pinned_precision
    from ablate.tracking.read import find_study_runs
    from ablate.tracking.supersede import tag_stale

    children = None
    if tracker is not None and tracker.run_id is not None:
        try:
            _, children = find_study_runs(tracker.run_id)
        except AblateError:  # no cell has run yet
            children = None
    with queue.store.lock(plan.store_name):  # every process of the study agrees on the first answer
        pin = pinned_precision(plan.spec.train.precision, queue.get(QUEUE_ATTR), children)
        if pin is None:
            return
        if queue.get(QUEUE_ATTR) != pin:
            queue.set(QUEUE_ATTR, pin)
    if tracker is None:
        return
    tracker.set_tags({R.STUDY_PRECISION: pin})
    if children is None:
        return

    def reason(rec: dict[str, Any], tags: dict[str, str], params: dict[str, str]) -> str | None:
        # a finished cell, not already superseded for another reason (an older variant version)
        why = other_precision(tags, params, pin)
        keep = why is None or tags.get(R.KIND) != "cell" or rec.get("status") != "FINISHED"
        return None if keep or tags.get(R.SUPERSEDED, why) != why else why

    stale = {run_id: cell for run_id, cell, _, _ in tag_stale(children, reason)}
    if queued := queue.requeue_runs(set(stale)):
        print(f"{len(queued)} cells ran at another precision than the study's {pin} and are superseded (kept "
              f"in MLflow, left out of reports, trained again in {pin}): "
              f"{'; '.join(sorted(stale[r] for r in queued))}", flush=True)


def _say_superseded(stale: list[str], earlier: list[str]) -> None:
    """One line listing the cells whose variant's implementation changed since they ran (tagged superseded
    now), and a short one for those an earlier command tagged."""
    if stale:
        cells = "; ".join(stale)
        print(f"{len(stale)} cells ran an older implementation of their variant and are superseded (kept in "
              f"MLflow, left out of reports, retrained under the new version): {cells}", flush=True)
    if earlier:
        print(f"{len(earlier)} cells of an older implementation stay superseded (tagged earlier; reports "
              "list them)", flush=True)
