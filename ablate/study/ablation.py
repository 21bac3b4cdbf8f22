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

Cells are coordinated through the Optuna store (ablate/study/cell_queue.py): one Optuna study per ablation
study, each cell a trial enqueued once; workers pop waiting cells, so rerunning the command skips finished
(and diverged) cells, resumes interrupted ones from their checkpoints, and re-runs failed ones only with
``--retry-failed``; ``--workers N`` and several machines sharing ``--storage postgresql://...`` split them.

With a seed range the study runs in rounds (ablate/study/seed_rounds.py): ``min`` seeds first, then more
seeds only for the comparisons whose group-sequential verdict (ablate/stats/sequential.py) is still open.
Workers and rounds: ablate/study/train_cells.py. With ``tune:`` and ``confirm:`` (tuning each variant,
confirming at a larger scale) more arms follow the cells at the baseline's settings, in the same queue:
ablate/study/arms.py.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ablate.errors import AblateError
from ablate.study import (
    failfast,
    ladder_checks,
    ladder_tuning,
    precision,
    preregister,
    rung_rounds,
    study_names,
)
from ablate.study.arms import arm_records, arms_done, arms_record, dry_run_lines, run_later_arms
from ablate.study.cell_queue import CellParams, CellQueue, CellRecords
from ablate.study.designs import format_grid, format_plan
from ablate.study.observed_needs import found_lines, ladder_found_lines
from ablate.study.optuna_attrs import PARENT
from ablate.study.optuna_store import Store
from ablate.study.parent_run import cells_table, close_parent, open_parent, parent_description
from ablate.study.precision import QUEUE_ATTR as PRECISION_ATTR
from ablate.study.precision import other_precision, pinned_precision
from ablate.study.recorded_study import SequentialDesign, StudyRecord, as_json, to_tags
from ablate.study.sized_ladder import format_ladder_plan, ladder_plan
from ablate.study.sized_ladder import plan_record as ladder_plan_record
from ablate.study.sizing import (
    PowerPlan,
    format_power_plan,
    own_seeds_plan,
    plan_record,
    reach_lines,
    scale_notes,
    study_plan,
)
from ablate.study.study_plan import TERMINAL, StudyPlan
from ablate.study.train_cells import cell_params, run_arm, run_rounds, wanted
from ablate.study.worker_pool import IN_PROCESS, WorkerArgs, WorkerPool
from ablate.tracking import NullTracker, record
from ablate.tracking.read import find_study_runs
from ablate.tracking.supersede import mark_study, tag_stale


@dataclass
class OpenStudy:
    """A started study: its plan, its queue of cells in the Optuna store with the params each cell's trial
    carries, its parent MLflow run (None with tracking off) and the arms run so far (the baseline's first)."""

    plan: StudyPlan
    queue: CellQueue
    params: CellParams
    tracker: NullTracker | None
    arms: dict[str, StudyPlan]


def open_study(plan: StudyPlan, storage: str | None, retry_failed: bool = False,
               workers: int = 1) -> OpenStudy:
    """Queue the cells the study needs (its design recorded, or a changed one refused), open its parent
    run and pin its precision: everything before the first cell trains."""
    queue, params = _queue_cells(plan, storage, retry_failed, workers)
    tracker = _open_study_run(plan, queue) if plan.spec.tracking.enabled else None
    _pin_precision(plan, queue, tracker)
    return OpenStudy(plan, queue, params, tracker, {record.BASELINE_ARM: plan})


def run_study(study: OpenStudy, worker_args: WorkerArgs, pool: WorkerPool = IN_PROCESS,
              retry_failed: bool = False) -> int:
    """Train the cells at the baseline's settings round by round, then with ``tune:`` and ``confirm:`` the
    later arms (ablate/study/arms.py), all through ``pool``'s workers; the workers' exit code."""
    if ladder_tuning.tuning(study.plan) is not None:  # a tuned ladder: its tuning first, then its cells
        return _tuned_ladder(study, worker_args, pool, retry_failed)
    code = run_rounds(study.plan, study.queue, study.params, worker_args, pool)
    if code == 0 and not stopped(study.queue) and has_later_arms(study.plan):
        code = _later_arms(study, worker_args, pool, retry_failed)
    return code


def _tuned_ladder(study: OpenStudy, worker_args: WorkerArgs, pool: WorkerPool, retry_failed: bool
                  ) -> int:
    """A tuned ladder (ablate/study/ladder_tuning.py): the tuning arm's cells, each variant's best point per
    rung recorded on the parent, then the study's cells at those points, which every verdict reads. The
    study's plan becomes the tuned one, so its grid and parent run show the cells that ran."""
    plan, queue = study.plan, study.queue
    ran = -1
    while True:  # a rung whose grid comes from the rungs below is known once they are tuned: one phase a size
        arm = study.arms[record.LADDER_TUNE_ARM] = ladder_tuning.tune_arm(plan, queue.records())
        if len(arm.cells) == ran:
            break
        ran = len(arm.cells)
        print(f"tuning: {ran} cells, every variant at every grid point known so far", flush=True)
        code = run_arm(arm, plan, queue, worker_args, pool, retry_failed)
        if code or stopped(queue):
            return code or 2
    bests = ladder_tuning.best_per_rung(plan, queue.records())
    print("each variant's best per rung:\n" + "\n".join(ladder_tuning.format_bests(bests)), flush=True)
    if study.tracker is not None:
        study.tracker.set_tags(ladder_tuning.tuning_tag(plan, bests))
    if not ladder_tuning.complete(bests):
        print("error: the tuning is not complete (a cell is still pending): run the same command again",
              file=sys.stderr)
        return 1
    tuned = study.plan = study.arms[record.BASELINE_ARM] = ladder_tuning.tuned_plan(plan, bests)
    print("the study's cells: each variant at its own best point at every rung", flush=True)
    return run_arm(tuned, tuned, queue, worker_args, pool, retry_failed)


def close_study(study: OpenStudy, interrupted: bool) -> Ended:
    """Print the grid of outcomes (one per arm) and bring the parent run up to date, ending it as the
    study ended."""
    return _close_study(study.plan, study.queue, study.tracker, study.arms, interrupted)


def dry_run(plan: StudyPlan, storage: str | None, workers: int = 1) -> dict[str, object] | None:
    """Print the cells and their diffs, the power plan, the budget of every phase and where a started study
    stands (read only); the store's cell records, or None when a start would refuse the spec (its design
    differs from the recorded one: said on stderr). Writes nothing."""
    print(format_plan(plan))
    for line in ladder_lines(plan):
        print(line)
    records: dict[str, Any] = {}
    pinned = None
    if Store.exists(storage):
        store = Store(storage, create=False)
        plan.bind(store)  # reads the store's study names; writes nothing
        found = CellQueue(store, plan.store_name, plan.direction, create=False)
        if why := preregister.check_only(found, plan):
            print(f"error: {why}", file=sys.stderr)
            return None
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
        print(rung_rounds.progress_text(plan, records))
    if has_later_arms(plan):
        print("\n".join(dry_run_lines(plan, storage, records)))
    if ladder_tuning.tuning(plan) is not None and records:
        bests = ladder_tuning.best_per_rung(plan, records)
        print("tuning so far:\n" + "\n".join(ladder_tuning.format_bests(bests)))
    return records


def ladder_lines(plan: StudyPlan) -> list[str]:
    """A ladder's fairness in the dry run: its scaling rule, what changes between rungs, the tokens
    counted, the data budgets, each variant's size beside the baseline's, and its tuning."""
    abl = plan.spec.ablation
    if not plan.rungs or abl is None:
        return []
    variants = [ladder_checks.Variant(label, own, "")
                for label, own in ladder_tuning.variant_overrides(plan).items()]
    return (ladder_checks.describe(abl, plan.rungs, variants, plan.data, plan.smap, plan.origin)
            + ladder_tuning.describe(plan))


def stopped(queue: CellQueue) -> bool:
    """Whether a repeated failure stopped the study (ablate/study/failfast.py)."""
    return bool(failfast.stopped(queue.study))


def has_later_arms(plan: StudyPlan) -> bool:
    """Whether the study tunes each variant or confirms at a larger scale (arms after the baseline's)."""
    abl = plan.spec.ablation
    return abl is not None and (abl.tune is not None or abl.confirm is not None)


def _later_arms(study: OpenStudy, worker_args: WorkerArgs, pool: WorkerPool, retry_failed: bool) -> int:
    """The searches, the own-best arm and the confirm arm (ablate/study/arms.py), each arm's cells in the
    study's queue; the parent's arms.json brought up to date before each arm runs."""
    plan, queue, tracker, arms = study.plan, study.queue, study.tracker, study.arms

    def run(arm: StudyPlan) -> int:
        code = run_arm(arm, plan, queue, worker_args, pool, retry_failed)
        if tracker is not None:
            tracker.log_dict(arms_record(arms, queue.records()), record.ARMS_ARTIFACT)
        return 2 if code == 0 and stopped(queue) else code

    return run_later_arms(plan, arms, queue.records, run, storage=worker_args[2],
                          parent=tracker.run_id if tracker is not None else None, pool=pool)


def pilot_times(plan: StudyPlan) -> bool:
    """Whether the study names a pilot, whose measured cell times the power plan's time line used."""
    abl = plan.spec.ablation
    return abl is not None and abl.pilot is not None and plan.design is not None


def _queue_cells(plan: StudyPlan, storage: str | None, retry_failed: bool, workers: int = 1
                 ) -> tuple[CellQueue, CellParams]:
    """The study's queue in the Optuna store, with its design recorded (or a changed one refused) and the
    cells it still needs (and, asked to, the failed ones again) enqueued; the Optuna params every cell's
    trial carries."""
    store = Store(storage)
    with store.lock(plan.name):  # two processes starting one study agree on its name
        plan.bind(store)
        queue = CellQueue(store, plan.store_name, plan.direction)
        text, data = "", None
        if not queue.get(preregister.STORE_ATTR):  # the first start: the plan the design is recorded with
            if plan.rungs:  # a ladder: sized rung by rung
                laddered = ladder_plan(plan)
                text = _power_lines(plan, {}, workers)
                data = None if laddered is None else ladder_plan_record(laddered)
            else:
                planned = study_plan(plan)
                text = _power_lines(plan, {}, workers, planned)
                data = None if planned is None else plan_record(planned)
            print(text, flush=True)
        preregister.record_or_refuse(queue, plan, text, data)
        attrs = study_names.study_attrs(plan.baseline.spec_hash, plan.spec.name, plan.overrides, "ablation")
        queue.describe(attrs, record.final(plan.metric))
    failfast.clear(queue.study)  # stopped last time by a repeated failure: its cause may be fixed now
    params = cell_params(plan)  # the same for every round: each cell's axis values
    # a tuned ladder's cells wait for its tuning (their settings are its outcome): none is queued yet
    first = wanted(plan, queue) if ladder_tuning.tuning(plan) is None else []
    new, retried = queue.enqueue(first, retry_failed, **params)
    print(format_plan(plan, diffs=False))
    print(f"store: {store.describe()} (Optuna study {plan.store_name}); {new} cells queued"
          + (f", {retried} failed ones re-queued" if retried else ""), flush=True)
    return queue, params


def study_record(plan: StudyPlan, queue: CellQueue) -> StudyRecord:
    """What the study states about itself for its report (ablate/study/recorded_study.py): its design, metric,
    sequential design, the published results it checks, its arms and ladder, and the design and power plan
    it was recorded with before its first cell (the queue's, ablate/study/preregister.py)."""
    abl = plan.spec.ablation
    assert abl is not None
    registered = queue.get(preregister.STORE_ATTR)
    _, power_plan = preregister.recorded_plan(queue)
    arm_design, tune, confirm = arm_records(plan)
    return StudyRecord(
        kind="ablation", design=abl.design, metric=record.final(plan.metric),
        sequential=None if plan.design is None else SequentialDesign.of(plan.design), expect=list(abl.expect),
        tuned_on=abl.tuned_on, arm_design=arm_design, tune=tune, confirm=confirm,
        ladder=rung_rounds.ladder_record(plan), preregistered=json.loads(registered) if registered else None,
        power_plan=power_plan)


def _parent_tags(plan: StudyPlan, rec: StudyRecord) -> dict[str, str]:
    """The study's parent run's tags: its kind and Optuna study, and the record's per-field tags (tags, not
    params: a reopened study may state its expectations anew, and a confirm: may be added to a running
    study; params are final)."""
    return {record.KIND: "ablation", record.VARIANT: "study", record.OPTUNA_STUDY: plan.store_name,
            **to_tags(rec)}


def _open_study_run(plan: StudyPlan, queue: CellQueue) -> NullTracker:
    """The study's parent MLflow run: the one the store remembers, else a new one, with the study's record
    (written once per command: ablate/study/recorded_study.py); cells of an older implementation of their
    variant are marked superseded (and retrained)."""
    rec = study_record(plan, queue)
    with queue.store.lock(plan.store_name):  # one parent run however many processes start at once
        tracker = open_parent(plan.spec, plan.name, _parent_tags(plan, rec), queue.get(PARENT),
                              description=parent_description(plan, {}))
        queue.set(PARENT, tracker.run_id)
    assert tracker.run_id is not None  # tracking is on: a real run
    tracker.log_dict(as_json(rec), record.STUDY_RECORD_ARTIFACT)
    tracker.log_text(format_plan(plan), record.CELLS_ARTIFACT)
    text, _ = preregister.recorded_plan(queue)
    if text:
        tracker.log_text(text, record.PLAN_ARTIFACT)
    _say_superseded(*mark_study(tracker.run_id))
    return tracker


def _power_lines(plan: StudyPlan, records: CellRecords, workers: int, planned: PowerPlan | None = None
                 ) -> str:
    """The power plan (ablate/study/sizing.py; ``planned`` when already computed): from the pilot before the
    first cell, and once the study has pairs of its own, the same plan from them, for information only."""
    abl = plan.spec.ablation
    assert abl is not None
    if plan.rungs:
        return _simulated_rules_lines(plan, records)
    planned = planned if planned is not None else study_plan(plan)
    if planned is None:
        one = "power plan: one seed per variant, no paired test to plan"
        return "\n".join([one, *reach_lines(plan, None)])
    lines = [format_power_plan(planned, abl.min_effect, workers), *reach_lines(plan, planned)]
    if abl.metric == "auto":
        lines.append(f"  ablation.metric: auto resolved to {plan.metric}: it decides; other metrics are "
                     "reported beside it and never decide")
    lines += scale_notes(plan)
    own = [r for c in plan.cells if (r := records.get(c.key)) is not None]
    if own and (mine := own_seeds_plan(plan, records)) is not None:
        lines.append(format_power_plan(mine, abl.min_effect, workers))
        lines += found_lines(plan, records)
    return "\n".join(lines)


def _simulated_rules_lines(plan: StudyPlan, records: CellRecords) -> str:
    """A ladder's power plan (ablate/study/sized_ladder.py), and once it has pairs of its own the same plan
    from them, for information only."""
    planned = ladder_plan(plan)
    if planned is None:
        return "power plan: one seed per variant, no paired test to plan"
    lines = [format_ladder_plan(planned)]
    if records and (mine := ladder_plan(plan, records)) is not None:
        lines.append(format_ladder_plan(mine))
        lines += ladder_found_lines(plan, records)
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
    records = queue.records()
    grids = [format_grid(arm,
                         records) if name == record.BASELINE_ARM else f"{ARM_TITLE[name]}:\n" + format_grid(
        arm, records) for name, arm in arms.items() if arm.cells]
    grid = "\n".join(grids)
    print(grid)
    if has_later_arms(plan):
        done = arms_done(plan, arms, records)
    else:
        keys = rung_rounds.needed(plan, records)
        done = all(records.get(k) and records[k].status in TERMINAL for k in keys)
    why = None if interrupted else failfast.stopped(queue.study)
    if tracker is not None:
        if len(arms) > 1:
            tracker.log_dict(arms_record(arms, records), record.ARMS_ARTIFACT)
        later = {ARM_TITLE[name]: arm for name, arm in arms.items() if name != record.BASELINE_ARM}
        close_parent(tracker, note=parent_description(plan, records, later), table=cells_table(plan, records),
                     table_artifact=record.CELLS_TABLE_ARTIFACT, why=why, done=done, interrupted=interrupted,
                     done_text=(grid, record.STATUS_ARTIFACT))
    return Ended(records, why, interrupted)


# The heading of each later arm's grid of outcomes.
ARM_TITLE = {record.OWN_BEST_ARM: "each variant at its own best settings",
             record.CONFIRM_ARM: "the decided comparisons at the larger setting",
             record.LADDER_TUNE_ARM: "the ladder's tuning: every variant at every grid point of every rung"}


def _precision_to_come(started: bool) -> str:
    """The dry run's precision line for a study that has not pinned one yet (it reads no MLflow run)."""
    here = precision.resolve_here()  # through the module: a test pins this machine's precision there
    if started:
        return (f"precision: train.precision: auto is resolved when the study next starts: to its first "
                f"finished cell's precision (each run's ablate.precision tag), else this machine's {here}; "
                "a cell that ran at another precision is then trained again")
    return (f"precision: every cell trains in {here} (train.precision: auto, this machine's, resolved once "
            "for the study)")


def _pin_precision(plan: StudyPlan, queue: CellQueue, tracker: NullTracker | None) -> None:
    """Resolve ``train.precision: auto`` once for the whole study (ablate/study/precision.py): record it,
    and queue again the finished cells that ran at another precision, tagged superseded with the reason."""
    children = None
    if tracker is not None and tracker.run_id is not None:
        try:
            _, children = find_study_runs(tracker.run_id)
        except AblateError:  # no cell has run yet
            children = None
    with queue.store.lock(plan.store_name):  # every process of the study agrees on the first answer
        pin = pinned_precision(plan.spec.train.precision, queue.get(PRECISION_ATTR), children)
        if pin is None:
            return
        if queue.get(PRECISION_ATTR) != pin:
            queue.set(PRECISION_ATTR, pin)
    if tracker is None:
        return
    tracker.set_tags({record.STUDY_PRECISION: pin})
    if children is None:
        return

    def reason(rec: dict[str, object], tags: dict[str, str], params: dict[str, str]) -> str | None:
        # a finished cell, not already superseded for another reason (an older variant version)
        why = other_precision(tags, params, pin)
        keep = why is None or tags.get(record.KIND) != "cell" or rec.get("status") != "FINISHED"
        return None if keep or tags.get(record.SUPERSEDED, why) != why else why

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
