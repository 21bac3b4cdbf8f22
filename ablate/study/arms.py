"""The arms of a study that declares ``ablation.tune`` or ``ablation.confirm``, run by `ablate
study` in this order after one another:

1. the study's cells at the baseline's settings, with adaptive seeds (ablate/study/ablation.py): the
   study's own comparisons, the only cells its sequential design and its parent's verdicts count;
2. each variant's search (ablate/study/variant_searches.py): the same trials, fidelity, sampler, sampler seed
and
   pruner for every variant, each a child run of the parent and an Optuna study of its own;
3. the own-best arm: each variant at its own best settings on the study's seeds, with adaptive seeds;
4. the confirm arm: the comparisons the deciding arm (the own-best arm with ``tune:``, else the cells at
   the baseline's settings) decided, rerun at the larger setting on ``confirm.seeds``, paired by seed.

An arm is a `StudyPlan` whose cells are the arm's; every arm queues its cells in the study's one Optuna
study, so the same workers, ``--workers``, ``--storage postgresql://...`` and Ctrl-C resume them all. A
cell two arms share (a variant whose best settings are the baseline's) is one trial and one run: the
parent's ``arms.json`` lists it under both. Nothing here is remembered between commands: each run
recomputes every arm from the store (the searches end where they ended, each arm enqueues what it lacks),
so rerunning the command trains nothing twice.

A comparison counts as decided when its verdict is an effect or no effect as large as ``min_effect``:
by the study's group-sequential design with a seed range, else by one look at its fixed seeds (the same
paired t-test, Bonferroni over the study's comparisons). Identities are implementation checks: they are not
rerun at a larger scale.
"""

from __future__ import annotations

import dataclasses
import sys
from collections.abc import Callable, Mapping

from ablate.spec.experiment import flatten
from ablate.study.arm_settings import fidelity_steps, sampler_seed
from ablate.study.cell_queue import CellRecords
from ablate.study.confirm import confirm_cells, confirm_seeds
from ablate.study.derived_specs import show
from ablate.study.recorded_study import ArmDesign, ConfirmRecord, SequentialDesign, TuneRecord
from ablate.study.seed_rounds import comparison_progress, format_progress, needed_keys
from ablate.study.study_plan import TERMINAL, StudyPlan
from ablate.study.tuned_target import TARGET_FIELD, arm_fields
from ablate.study.variant_searches import Tuned, progress_lines, stored_searches, tune_variants, tuned_cells
from ablate.study.worker_pool import IN_PROCESS, WorkerPool
from ablate.tracking import record


def own_best_arm(plan: StudyPlan, tuned: Mapping[str, Tuned]) -> StudyPlan:
    return dataclasses.replace(plan, cells=tuned_cells(plan, tuned), arm=record.OWN_BEST_ARM)


def target_text(plan: StudyPlan, tuned: Mapping[str, Tuned]) -> str:
    """'; steps to ...' where the own-best arm counts steps to the tuned baseline's own loss, else ''."""
    fields = arm_fields(plan.metric, tuned)
    if not fields:
        return ""
    return (f"; steps to val/loss {fields[TARGET_FIELD]}, the tuned baseline's own final loss in its best "
            f"search trial (the spec's {plan.baseline.eval.target_loss} is the untuned baseline's)")


def decided(arm: StudyPlan, records: CellRecords) -> dict[str, str]:
    """The arm's comparisons with a decided verdict (label -> 'effect' | 'no_effect'), in the plan's order:
    ``verdict.Verdict.decided``, the verdicts a larger scale confirms."""
    found = comparison_progress(arm, arm.verdict_design, records)
    return {label: p.state for label, p in found.items() if p.verdict.decided}


def confirm_arm(plan: StudyPlan, deciding: StudyPlan, records: CellRecords,
                tuned: Mapping[str, Tuned]) -> StudyPlan:
    """The confirm arm: the deciding arm's decided comparisons at the larger setting, each variant at the
    settings its verdict was measured with."""
    settings = {label: t.best for label, t in tuned.items()}
    chosen = list(decided(deciding, records))
    cells = confirm_cells(plan, chosen, settings) if chosen else []  # nothing to confirm: no baseline either
    return dataclasses.replace(plan, cells=cells, seeds=confirm_seeds(plan), arm=record.CONFIRM_ARM)


def setting_text(plan: StudyPlan) -> str:
    """The larger setting as the spec gives it: the other spec's path, or the overrides."""
    abl = plan.spec.ablation
    assert abl is not None and abl.confirm is not None
    c = abl.confirm
    return c.spec or ", ".join(f"{k}={show(v)}" for k, v in c.overrides.items())


def arms_record(arms: Mapping[str, StudyPlan], records: CellRecords) -> dict[str, dict[str, str]]:
    """The parent's ``arms.json``: per arm, its cells the store holds (cell key -> variant)."""
    return {arm: {c.key: c.label for c in plan.cells if c.key in records} for arm, plan in arms.items()}


def arms_done(plan: StudyPlan, arms: Mapping[str, StudyPlan], records: CellRecords) -> bool:
    """Every arm the study declares has run, and each has every cell it needs terminal."""
    abl = plan.spec.ablation
    assert abl is not None
    if (abl.tune is not None and record.OWN_BEST_ARM not in arms) or (
            abl.confirm is not None and record.CONFIRM_ARM not in arms):
        return False
    for p in arms.values():
        keys = [c.key for c in p.cells] if p.design is None else needed_keys(p, p.design, records)
        if not all(records.get(k) and records[k].status in TERMINAL for k in keys):
            return False
    return True


def arm_records(plan: StudyPlan) -> tuple[ArmDesign | None, TuneRecord | None, ConfirmRecord | None]:
    """What the parent run's record says about the arms, for the report (ablate/study/recorded_study.py): the
    design they are judged by and the deciding arm, the tuning space with the baseline's values, the larger
    setting and its seeds (all None without tune: and confirm:)."""
    abl = plan.spec.ablation
    assert abl is not None
    if abl.tune is None and abl.confirm is None:
        return None, None, None
    deciding = record.OWN_BEST_ARM if abl.tune is not None else record.BASELINE_ARM
    design = ArmDesign(**SequentialDesign.of(plan.verdict_design).model_dump(), decided_by=deciding)
    tune = confirm = None
    if abl.tune is not None:
        t, base = abl.tune, flatten(plan.baseline.resolved())
        tune = TuneRecord(space=dict(t.space), baseline={k: base.get(k) for k in t.space}, trials=t.trials,
                          sampler=t.sampler, seed=sampler_seed(t, plan.spec), pruner=t.pruner.name,
                          fidelity_steps=fidelity_steps(t, plan.baseline),
                          cell_steps=plan.baseline.train.max_steps)
    if abl.confirm is not None:
        confirm = ConfirmRecord(setting=setting_text(plan), seeds=confirm_seeds(plan))
    return design, tune, confirm


RunArm = Callable[[StudyPlan], int]  # an arm -> the workers' exit code


def run_later_arms(plan: StudyPlan, arms: dict[str, StudyPlan], records: Callable[[], CellRecords],
                   run_arm: RunArm, *, storage: str | None, parent: str | None,
                   pool: WorkerPool = IN_PROCESS) -> int:
    """Phases 2-4 after the cells at the baseline's settings (module doc); each arm is added to ``arms``
    before it runs. 0, the workers' code when interrupted, 2 when a search was stopped by a repeated
    failure."""
    abl = plan.spec.ablation
    assert abl is not None
    tuned: dict[str, Tuned] = {}
    deciding = plan
    if abl.tune is not None:
        print(f"tuning: {len(plan.variants)} searches of {abl.tune.trials} trials each", flush=True)
        tuned = tune_variants(plan, storage, parent, pool)
        stopped = {label: t.why for label, t in tuned.items() if t.why}
        if stopped:
            label, why = next(iter(stopped.items()))
            print(f"error: the search of {label} stopped: its first trials failed the same way: {why}; fix "
                  "that and run the same command again", file=sys.stderr)
            return 2
        deciding = arms[record.OWN_BEST_ARM] = own_best_arm(plan, tuned)
        print(f"own best: the study's seeds at each variant's own best settings{target_text(plan, tuned)}",
              flush=True)
        code = run_arm(deciding)
        if code:
            return code
    if abl.confirm is not None:
        arm = arms[record.CONFIRM_ARM] = confirm_arm(plan, deciding, records(), tuned)
        chosen = [c.label for c in arm.cells if c.seed == arm.seeds[0] and c.label != "baseline"]
        print(f"confirm at {setting_text(plan)}: {', '.join(chosen) or 'no decided comparison'}", flush=True)
        if chosen:
            return run_arm(arm)
    return 0


def dry_run_lines(plan: StudyPlan, storage: str | None, records: CellRecords) -> list[str]:
    """Where the later arms stand (read only): the searches, the own-best cells once every search is
    done, and the comparisons the confirm arm would rerun so far."""
    abl = plan.spec.ablation
    assert abl is not None
    lines: list[str] = []
    deciding: StudyPlan | None = plan
    tuned: dict[str, Tuned] = {}
    if abl.tune is not None:
        lines += progress_lines(plan, storage) or ["tuning: no search started yet"]
        stored = stored_searches(plan, storage)
        complete = len(stored) == len(plan.variants) and all(n >= abl.tune.trials for _, n in stored.values())
        deciding = None
        if complete:
            tuned = {label: t for label, (t, _) in stored.items()}
            deciding = own_best_arm(plan, tuned)
            held = sum(c.key in records for c in deciding.cells)
            lines.append(f"own best: {held} of up to {len(deciding.cells)} cells in the store"
                         f"{target_text(plan, tuned)}")
            if deciding.design is not None and held:
                lines.append(format_progress(deciding, deciding.design, records))
        else:
            lines.append("own best: waits for every search to finish")
    if abl.confirm is not None:
        if deciding is None:
            lines.append("confirm: waits for the own-best verdicts")
        else:
            arm = confirm_arm(plan, deciding, records, tuned)
            chosen = [c.label for c in arm.cells if c.seed == arm.seeds[0] and c.label != "baseline"]
            held = sum(c.key in records for c in arm.cells)
            lines.append(f"confirm: decided so far: {', '.join(chosen) or 'none'}; "
                         f"{held} of {len(arm.cells)} cells in the store")
    return lines
