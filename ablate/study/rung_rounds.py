"""A ladder study's rounds: one sub-plan per rung, each paired by seed within its rung.

A ladder (``ablation.scales``, ablate/study/rungs.py) runs every variant at every rung. A comparison is a
variant against the baseline *at one rung*: its cells share the rung's sizes and steps and differ in the
variant's choice alone. Each rung's cells therefore form a plan of their own (the study's plan with only
that rung's cells, ``rung`` set), and everything that walks comparisons (the adaptive rounds of
ablate/study/seed_rounds.py, the grid of outcomes, the power plan) walks each rung's sub-plan in turn. The
cells a ladder needs are the union of what its rungs need.

"""

from __future__ import annotations

import dataclasses

from ablate.study.cell_queue import CellRecords
from ablate.study.recorded_study import LadderRecord, Rung
from ablate.study.seed_rounds import format_progress, needed_keys
from ablate.study.study_plan import StudyPlan


def rung_plans(plan: StudyPlan) -> list[StudyPlan]:
    """One sub-plan per rung in order of compute (the plan itself, in a list, without a ladder)."""
    if not plan.rungs:
        return [plan]
    return [dataclasses.replace(plan, cells=[c for c in plan.cells if c.rung == r.name], rung=r.name)
            for r in plan.rungs]


def needed(plan: StudyPlan, records: CellRecords) -> list[str]:
    """The cell keys the study needs now: every cell with fixed seeds, else what each rung's open
    comparisons need (seed_rounds.needed_keys per rung), in the plan's order."""
    design = plan.design
    if design is None:
        return [c.key for c in plan.cells]
    keys = {k for sub in rung_plans(plan) for k in needed_keys(sub, design, records)}  # one design for all
    return [c.key for c in plan.cells if c.key in keys]


def progress_text(plan: StudyPlan, records: CellRecords) -> str:
    """Each rung's comparisons, one block a rung (the study's own block without a ladder)."""
    design = plan.design
    if design is None:
        return ""
    if not plan.rungs:
        return format_progress(plan, design, records)
    return "\n".join(f"rung {sub.rung}:\n" + format_progress(sub, design, records)
                     for sub in rung_plans(plan))


def describe(plan: StudyPlan) -> list[str]:
    """The dry run's lines on the ladder: each rung's overrides, budget and planned compute."""
    scales = plan.ablation.scales
    if not plan.rungs or scales is None:
        return []
    span = plan.rungs[-1].compute.flops / plan.rungs[0].compute.flops
    lines = [f"ladder: {len(plan.rungs)} rungs, {span:.3g}x in planned training compute (the baseline's), "
             "each variant paired by seed within a rung:"]
    lines += [f"  {r.describe()}" for r in plan.rungs]
    if scales.target is not None:
        lines.append(f"  target {scales.target:.3g} FLOPs: each comparison's gap is extrapolated there, "
                     f"{scales.target / plan.rungs[-1].compute.flops:.3g}x beyond the largest rung")
    return lines


def ladder_record(plan: StudyPlan) -> LadderRecord | None:
    """What the ladder's parent run records (ablate/study/recorded_study.py): the rungs in order of compute,
    the target and the margin the transfer verdicts are judged by; None without a ladder."""
    scales = plan.ablation.scales
    if not plan.rungs or scales is None:
        return None
    margin = scales.margin if scales.margin is not None else plan.ablation.min_effect
    fair = scales.model_dump(include={"tokens_counted", "rule", "match", "budgets", "speedup"})
    return LadderRecord(
        rungs=[Rung(name=r.name, overrides=r.overrides, params=r.compute.params, tokens=r.compute.tokens,
                    flops=r.compute.flops, tokens_from=r.tokens_from,
                    size=r.size_rung if r.budget is not None else None, budget=r.budget,
                    params_all=r.params_all) for r in plan.rungs],
        target=scales.target, margin=margin, tokens_per_param=scales.tokens_per_param, **fair)
