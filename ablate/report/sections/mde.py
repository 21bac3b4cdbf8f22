"""What the design could settle, beside what was found: the power plan a study recorded before its first
cell (ablate/study/sizing.py), each comparison's minimal detectable effect next to its observed difference,
and the same plan read off the study's own seeds, for information only (it never moves the design); all
computed by ablate/report/compute/detectable_effects.py, rendered here.

The table opens the report (an intro block), so that a reader sees at once whether a "not settled" was
the design's foreseeable answer; the advice for what is left open is a new study, sized by the study's
own noise at the effect it found and across that effect's interval (never at an assumed effect), never
more seeds in this one.
"""

from __future__ import annotations

import math
from typing import Any

from ablate.report.compute import statistics as st
from ablate.report.compute.detectable_effects import (
    Design,
    Forecast,
    Plans,
    SeedsAcross,
    plans_of,
    settled_forecast,
)
from ablate.report.compute.loaded_study import quality_meta
from ablate.report.render import Block, Para, Table
from ablate.report.section_api import Inputs, Part, section


def setup_line(plans: Plans) -> str:
    """The Setup section's line: where the plan came from and what each comparison's design detects, as
    planned and at the spread of the study's own seeds; the table that opens the report gives the rest."""
    unit, dec, _ = quality_meta(plans.metric)
    planned = _planned(plans.recorded)
    if plans.recorded is not None:
        head = ("Power plan, recorded before the first cell from "
                + (plans.recorded.get("source") or "no pilot (effects in units of the paired sd)"))
    else:
        head = "Power plan: none recorded before the first cell" + (
            " (the study predates pre-registration)" if plans.registered is None else "")
    own = ", ".join(f"{f.label} {_fmt(f.detectable, dec)}" for f in plans.found)
    before = ", ".join(f"{f.label} {_planned_detects(p, dec)}" for f in plans.found
                       if (p := planned.get(f.label)))
    return (f"{head}. The smallest effect the design detects with 80% power on `{plans.metric}` ({unit}): "
            + (f"planned: {before}; " if before else "")
            + f"at the spread of the study's own seeds (information only): {own}. The opening table, What "
            "the design could settle, sets them beside what was found.")


def _planned(plan: dict[str, Any] | None) -> dict[str, dict[str, Any]]:
    return {str(c["label"]): c for c in (plan or {}).get("comparisons", [])}


def _planned_detects(comparison: dict[str, Any], dec: int) -> str:
    """A recorded plan's detectable effect for one comparison ('0.049', or '1.23 sd' without a pilot)."""
    return _fmt(comparison.get("detectable"), dec) + (" sd" if comparison.get("in_sd_units") else "")


def _fmt(value: Any, dec: int) -> str:
    missing = value is None or (isinstance(value, float) and not math.isfinite(value))
    return "—" if missing else st.fmt(value, dec)


@section(65)  # after the verdicts: the report opens on what was found, then on what the design could settle
def part(inp: Inputs) -> Part | None:
    plans = inp.derived(plans_of)
    if plans is None:
        return None
    design, metric, plan, registered, found = (plans.design, plans.metric, plans.recorded, plans.registered,
                                               plans.found)
    _, dec, _ = quality_meta(metric)
    planned = _planned(plan)
    rows = []
    for f in found:
        p = planned.get(f.label, {})
        sd_planned = (f"{_fmt(p.get('sd'), dec + 1)} ({_fmt(p.get('sized_sd'), dec + 1)})"
                      if p.get("sd") is not None else "—")
        mde = _planned_detects(p, dec) if p else "—"
        needed = "settled" if f.settled else (_across(f.across) if f.across is not None
                                              else (">100" if f.sizable and f.n >= 2 else "—"))
        rows.append([f.label, sd_planned, mde, str(f.n), st.fmt(f.diff, dec, signed=True),
                     _fmt(f.sd, dec + 1), _fmt(f.detectable, dec), needed])
    blocks: list[Block] = [Para(_opening(registered, plan, design, metric)), Table(
        ["comparison", "planned sd (bound)", "planned detects", "pairs", "found Δ", "found sd",
         "detects at found sd", "seeds a new study needs"], rows, align="lrrrrrrr",
        caption=f"{metric}: the smallest effect each comparison's design detects with 80% power, as planned "
                "and at the spread its own seeds showed (information only: it never moves the design). sd: "
                "the spread (standard deviation) of the paired seed differences, variant minus baseline on "
                "the same seed; the planned one with its upper bound, which the plan sized on. The last "
                "column is the seeds a new study would need to settle the comparison's claim at the effect "
                "these seeds found, and in brackets at the two ends of its interval (a paired t test at 80% "
                "power; without a claim, either way its looks settle it: an interval that excludes 0 or lies "
                "within min_effect; on a ladder the sd carries the rung-level variance where one is "
                "estimated); — where there is nothing to size (an identity check, or no min_effect)")]
    open_claims = [f for f in found if not f.settled and f.sizable and f.n >= 2]
    forecast = settled_forecast(plan, found)
    if forecast is not None:
        blocks.append(Para(forecast_sentence(forecast)))
    if open_claims:
        blocks.append(Para("Left open by this design: " + "; ".join(
            f"{f.label}: {new_study_advice(f.needed, f.at_observed, f.across)}" for f in open_claims) + "."))
    data = {"power_plan": {"registered": registered, "plan": plan, "metric": metric,
                           "found": [{"label": f.label, "pairs": f.n, "diff": f.diff, "sd": f.sd,
                                      "detectable": f.detectable, "seeds_needed": f.needed,
                                      "seeds_across": None if f.across is None else f.across.as_dict(),
                                      "settled": f.settled} for f in found],
                           "forecast": None if forecast is None else forecast.as_dict()}}
    return Part("mde", intro=blocks, data=data)


def _count(n: int | None) -> str:
    return ">100" if n is None else str(n)


def _across(a: SeedsAcross) -> str:
    """'31 (9–>100)': at the observed effect, then at its interval's two ends."""
    ends = sorted((a.at_lo, a.at_hi), key=lambda n: 10 ** 9 if n is None else n)
    if ends[0] == ends[1] == a.observed:  # the same at every end (more than 100 at all three, say)
        return _count(a.observed)
    return f"{_count(a.observed)} ({_count(ends[0])}–{_count(ends[1])})"


def new_study_advice(needed: int | None, at_observed: bool = False, across: SeedsAcross | None = None) -> str:
    """What would settle a comparison this study left open, at the spread its own seeds showed and the effect
    they found, and across that effect's interval: never at an assumed one."""
    if across is not None:
        noise = (f"; its sd carries the ladder's rung-level variance, sd {math.sqrt(across.rung_var):.3g}"
                 if across.rung_var > 0 else "")
        return (f"{across.words()} (a paired t test, 80% power; these seeds had {across.power_here:.0%} at "
                f"the effect found{noise})")
    if at_observed:
        if needed is None:
            return "at the effect it found, no study of up to 100 seeds would settle it"
        return (f"at the effect it found, a new study would need about {needed} seeds (a paired t test, 80% "
                "power)")
    if needed is None:
        return "a new study would need more than 100 seeds at this spread"
    return f"a new study with seeds.max {needed} would tell"


def _opening(registered: dict[str, Any] | None, plan: dict[str, Any] | None, design: Design,
             metric: str) -> str:
    looks = (f"{design.looks[0]}..{design.looks[-1]} seeds" if len(design.looks) > 1
             else f"{design.looks[0]} seeds")
    if registered is None:
        head = (f"**What the design could settle.** This study started before designs were pre-registered: "
                f"its design ({metric}, looks at {looks}, alpha {design.alpha:g} over {design.family} "
                "comparisons) is read from its tags, and it recorded no power plan.")
    else:
        head = (f"**What the design could settle.** Pre-registered before the first cell: {metric}, looks at "
                f"{looks}, alpha {design.alpha:g} over {design.family} comparisons"
                + (f", min_effect {design.min_effect:g}" if design.min_effect is not None else "") + ".")
    if plan is not None:
        source = plan.get("source") or "no pilot (effects in units of the paired sd)"
        head += f" Its power plan sized the noise from {source}."
    return head


def forecast_sentence(forecast: Forecast) -> str:
    """The forecast line: the plan's powers and the count it expected with its 90% interval, against the
    count the study settled, and the chance of as few (and as many) as found were the plan right."""
    each = ", ".join(f"{label} {p:.2f}" for label, p in forecast.powers.items())
    settled, few, many = forecast.settled, forecast.as_few, forecast.as_many
    if few < 0.05:
        verdict = "fewer than the plan explains: its noise or effects were optimistic"
    elif many < 0.05:
        verdict = "more than the plan explains: its noise or effects were pessimistic"
    else:
        verdict = "within what the plan explains"
    return (f"**Planned against found.** The plan gave each comparison a power ({each}): "
            f"{forecast.expected:.2f} of {len(forecast.powers)} expected to settle, {forecast.fewest} to "
            f"{forecast.most} by chance alone (90%). The study settled {settled}; were the plan right, as "
            f"few would settle with probability {few:.2f} and as many with {many:.2f}: {verdict}.")
