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
import json
from collections.abc import Mapping
from typing import Any

from ablate.study.seed_rounds import format_progress, needed_keys
from ablate.study.study_plan import StudyPlan
from ablate.tracking import record


def rung_plans(plan: StudyPlan) -> list[StudyPlan]:
    """One sub-plan per rung in order of compute (the plan itself, in a list, without a ladder)."""
    if not plan.rungs:
        return [plan]
    return [dataclasses.replace(plan, cells=[c for c in plan.cells if c.rung == r.name], rung=r.name)
            for r in plan.rungs]


def needed(plan: StudyPlan, records: Mapping[str, Any]) -> list[str]:
    """The cell keys the study needs now: every cell with fixed seeds, else what each rung's open
    comparisons need (seed_rounds.needed_keys per rung), in the plan's order."""
    design = plan.design
    if design is None:
        return [c.key for c in plan.cells]
    keys = {k for sub in rung_plans(plan) for k in needed_keys(sub, design, records)}  # one design for all
    return [c.key for c in plan.cells if c.key in keys]


def progress_text(plan: StudyPlan, records: Mapping[str, Any]) -> str:
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


def scales_record(plan: StudyPlan) -> dict[str, Any]:
    """What the ladder's parent run records (tag ``ablate.scales``): the rungs in order of compute, the
    target and the margin the transfer verdicts are judged by."""
    scales = plan.ablation.scales
    assert scales is not None
    margin = scales.margin if scales.margin is not None else plan.ablation.min_effect
    out = {"rungs": [{"name": r.name, "overrides": r.overrides, "params": r.compute.params,
                      "tokens": r.compute.tokens, "flops": r.compute.flops, "tokens_from": r.tokens_from,
                      **_fair_rung(r)} for r in plan.rungs],
           "target": scales.target, "margin": margin, "tokens_per_param": scales.tokens_per_param}
    # a fair ladder's fields (ablation.scales: tokens_counted, rule, match, budgets, speedup), only where
    # given, so that every ladder recorded before them keeps its record
    fair = scales.model_dump(mode="json", include={"tokens_counted", "rule", "match", "budgets", "speedup"},
                             exclude_none=True)
    return {**out, **fair}


def _fair_rung(rung: Any) -> dict[str, Any]:
    """A data budget's rung: its size rung and multiple; every parameter where the tokens counted them."""
    out: dict[str, Any] = {}
    if rung.budget is not None:
        out.update(size=rung.size_rung, budget=rung.budget)
    if rung.params_all is not None:
        out["params_all"] = rung.params_all
    return out


def scales_tag(plan: StudyPlan) -> dict[str, str]:
    """The parent's tag of a ladder (none without one)."""
    return {record.SCALES: json.dumps(scales_record(plan), sort_keys=True)} if plan.rungs else {}
