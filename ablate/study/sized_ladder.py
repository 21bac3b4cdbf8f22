"""A ladder's power plan (``ablation.scales``): noise changes with scale, so a ladder is sized rung by rung.

The noise of each rung is a pilot ladder's (``ablation.pilot`` naming an earlier ladder study on the same
rungs: its runs.csv's ``rung`` column), each comparison's paired sd at that rung, its pooled sd for a
variant the pilot did not run, sized on its upper 80% confidence bound (ablate/stats/power.py
``upper_sd``). Without a pilot the plan is in units of each rung's paired sd; once the study has pairs of
its own, the same plan from its own first seeds, for information only (it never moves the recorded
design).

Per rung the plan gives each comparison's smallest detectable effect at the study's seeds (simulated
over the very procedure the study runs, every rung's comparisons in one family), the seeds an effect as
large as the ladder's margin needs, and the rung's hours at the pilot's measured cell times (the largest
rungs cost the most). With ``scales.budget`` it says which rungs the budget affords at the study's seeds
(from the smallest up) and how many seeds every rung could get. For each comparison it says what the
transfer verdict can settle (ablate/stats/simulated_rules.py ``rule_power``, its rules simulated with the
gap's rung-level variance where the pilot's rungs estimate one): the smallest change of the gap over the
ladder read as "grows" with 80% power, and the chance that a gap that does not move reads "holds".
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ablate.stats.power import POWER, SD_CONFIDENCE, detectable, seeds_needed
from ablate.stats.sequential import Design
from ablate.stats.simulated_rules import rule_power, rung_noise
from ablate.stats.transfer import GapRung
from ablate.stats.verdict import SIGN_FLIP_PAIRS, sign_flip_floor
from ablate.study.cell_queue import CellRecords
from ablate.study.pilot import RUNG_COLUMN, PairedNoise, Pilot, paired_sd, pilot_from_rows, pilot_rows
from ablate.study.study_plan import StudyPlan
from ablate.tracking import record


@dataclass(frozen=True)
class RungPlan:
    """One rung's line of the plan."""

    rung: str
    compute: float  # the baseline's planned compute
    noise: dict[str, PairedNoise | None]  # comparison -> its paired sd there (None: not sized)
    detects: dict[str, float]  # comparison -> smallest detectable effect at the study's seeds
    needs: dict[str, int | None]  # comparison -> seeds an effect as large as the margin needs
    cell_seconds: float | None  # one seed of every variant at this rung (the pilot's times)
    seeds: int  # the seeds the study runs here (at most)

    @property
    def hours(self) -> float | None:
        return None if self.cell_seconds is None else self.cell_seconds * self.seeds / 3600.0


@dataclass(frozen=True)
class TransferPlan:
    label: str
    detectable: float  # the change over the ladder read as "grows" with 80% power (inf: none at these seeds)
    holds: float | None  # the chance a gap that does not move reads "holds"
    noise: str = ""  # the rung-level variance the simulation carried, in words


@dataclass(frozen=True)
class LadderPlan:
    design: Design  # every rung's comparisons in one family
    metric: str
    source: str | None  # where the noise came from; None: not sized
    rungs: list[RungPlan]
    transfers: list[TransferPlan]
    margin: float | None
    budget: Any  # scales.budget (cells or hours), or None
    informational: bool = False

    @property
    def hours(self) -> float | None:
        times = [r.hours for r in self.rungs]
        return None if any(t is None for t in times) else sum(t for t in times if t is not None)

    def affordable(self) -> list[str] | None:
        """The rungs the budget affords at the study's seeds, from the smallest up (None: no budget or no
        cell times)."""
        if self.budget is None:
            return None
        spent, out = 0.0, []
        for r in self.rungs:
            cost = (len(r.noise) + 1) * r.seeds if self.budget.cells is not None else r.hours
            if cost is None:
                return None
            spent += cost
            if spent > (self.budget.cells if self.budget.cells is not None else self.budget.hours):
                break
            out.append(r.rung)
        return out

    def seeds_afforded(self) -> int | None:
        """How many seeds every rung could get within the budget (None: no budget or no cell times)."""
        if self.budget is None:
            return None
        if self.budget.cells is not None:
            per_seed = float(sum(len(r.noise) + 1 for r in self.rungs))
            return int(self.budget.cells // per_seed)
        seconds = [r.cell_seconds for r in self.rungs]
        if any(s is None for s in seconds):
            return None
        return int(self.budget.hours * 3600.0 // sum(s for s in seconds if s is not None))


def ladder_design(plan: StudyPlan) -> Design | None:
    """The design every rung's comparisons are judged by, one family over the ladder: the sequential one
    with a seed range (looks per rung), else one look at the fixed seeds; its smallest effect the margin."""
    abl = plan.ablation
    scales = abl.scales
    assert scales is not None  # a ladder's plan
    margin = scales.margin if scales.margin is not None else abl.min_effect
    family = plan.family
    if plan.design is not None:
        return Design(plan.design.looks, abl.alpha, margin, family)
    if len(plan.seeds) < 2:
        return None
    return Design((len(plan.seeds),), abl.alpha, margin, family)


def pilot_ladder(plan: StudyPlan) -> tuple[dict[str, Pilot], str] | None:
    """The pilot ladder's noise and cell times per rung, and its name (None without ablation.pilot)."""
    abl = plan.ablation
    if abl.pilot is None:
        return None
    rows = pilot_rows(abl.pilot.study, Path(plan.origin).parent)
    metric = record.unfinal(abl.pilot.metric or plan.metric)
    out = {}
    for rung in plan.rungs:
        mine = [row for row in rows if str(row.get(RUNG_COLUMN) or "") == rung.name]
        if mine:
            out[rung.name] = pilot_from_rows(f"{abl.pilot.study} rung {rung.name}", mine, metric)
    return out, abl.pilot.study


def ladder_plan(plan: StudyPlan, records: CellRecords | None = None) -> LadderPlan | None:
    """The plan before the first cell (from the pilot ladder, else in sd units), or with ``records`` the
    same plan from the study's own pairs (information only)."""
    design = ladder_design(plan)
    if design is None:
        return None
    abl = plan.ablation
    labels = [v for v in plan.variants if v != "baseline"]
    informational = records is not None
    pilots: dict[str, Pilot] = {}
    source = None
    differences: dict[str, dict[str, list[float]]] = {}
    if informational:
        differences = _own_differences(plan, records or {}, labels)
        own = _own_noise(differences)
        if not own:
            return None
        source = "the study's own seeds"
    else:
        found = pilot_ladder(plan)
        if found is not None:
            pilots, name = found
            differences = {rung: p.differences for rung, p in pilots.items()}
            source = f"pilot ladder {name} ({plan.metric} per rung)"
    rungs = []
    for rung in plan.rungs:
        if informational:
            noise = {label: own.get(rung.name, {}).get(label) for label in labels}
            seconds = None
        else:
            pilot = pilots.get(rung.name)
            noise = {label: pilot.noise(label) if pilot else None for label in labels}
            seconds = _seed_seconds(pilot, labels) if pilot else None
        rungs.append(_rung_plan(rung.name, rung.compute.flops, noise, design, seconds, design.looks[-1]))
    # no rung decided, no transfer verdict: the plain line says so (ladder_reach_line)
    transfers = [] if undecidable(design) else _transfer_plans(rungs, labels, abl.alpha, design.min_effect,
                                                               _gaps(plan, labels, differences))
    return LadderPlan(design, plan.metric, source, rungs, transfers, design.min_effect,
                      abl.scales.budget if abl.scales is not None else None, informational)


def _seed_seconds(pilot: Pilot, labels: list[str]) -> float | None:
    times = [pilot.cell_seconds(label) for label in ["baseline", *labels]]
    return None if any(t is None for t in times) else sum(t for t in times if t is not None)


def _rung_plan(name: str, compute: float, noise: dict[str, PairedNoise | None], design: Design,
               seconds: float | None, seeds: int) -> RungPlan:
    detects, needs = {}, {}
    for label, n in noise.items():
        sd = n.upper if n is not None else 1.0  # without noise: in units of the paired sd
        # the simulation tests like a t-test; at these seeds the report's exact test decides nothing
        detects[label] = math.inf if undecidable(design) else detectable(design, sd)
        needs[label] = seeds_needed(design, sd, "better", None) if n is not None else None
    return RungPlan(name, compute, noise, detects, needs, seconds, seeds)


def _transfer_plans(rungs: list[RungPlan], labels: list[str], alpha: float, margin: float | None,
                    gaps: dict[str, list[GapRung]]) -> list[TransferPlan]:
    """Each comparison's transfer power, simulated over the verdict's own rules with its rung variance
    (ablate/stats/simulated_rules.py), from each rung's sized sd and the gaps ``gaps`` gives per rung."""
    out = []
    for label in labels:
        sds = [r.noise[label].upper if r.noise[label] is not None else math.nan for r in rungs]  # type: ignore[union-attr]
        if any(math.isnan(s) for s in sds):
            continue
        tau2, words = rung_noise(gaps.get(label, []))
        found = rule_power([r.compute for r in rungs], sds, min(r.seeds for r in rungs),
                           alpha / max(1, len(labels)), margin, math.sqrt(tau2))
        out.append(TransferPlan(label, found.detectable, found.holds, words))
    return out


def _gaps(plan: StudyPlan, labels: list[str], diffs: dict[str, dict[str, list[float]]]
          ) -> dict[str, list[GapRung]]:
    """label -> its paired differences at each rung (``diffs``: rung -> label -> differences)."""
    return {label: [GapRung(r.name, r.compute.flops, tuple(diffs.get(r.name, {}).get(label, [])))
                    for r in plan.rungs] for label in labels}


def _own_differences(plan: StudyPlan, records: CellRecords, labels: list[str]
                     ) -> dict[str, dict[str, list[float]]]:
    """Per rung, each comparison's paired differences over the study's own finished pairs."""
    out: dict[str, dict[str, list[float]]] = {}
    by = {(c.rung, c.label, c.seed): records.get(c.key) for c in plan.cells}
    for rung in plan.rungs:
        for label in labels:
            diffs = []
            for seed in plan.seeds:
                b, v = by.get((rung.name, "baseline", seed)), by.get((rung.name, label, seed))
                if b is None or v is None or b.status != "finished" or v.status != "finished":
                    continue
                if b.metric is None or v.metric is None:
                    continue
                diffs.append(v.metric - b.metric)
            out.setdefault(rung.name, {})[label] = diffs
    return out


def _own_noise(diffs: dict[str, dict[str, list[float]]]) -> dict[str, dict[str, PairedNoise]]:
    """Per rung, each comparison's paired sd over its own pairs (two or more)."""
    return {rung: {label: PairedNoise(paired_sd(d), len(d) - 1, f"its own {len(d)} pairs")
                   for label, d in by_label.items() if len(d) >= 2}
            for rung, by_label in diffs.items() if any(len(d) >= 2 for d in by_label.values())}


def plan_record(lp: LadderPlan) -> dict[str, object]:
    """The plan as JSON-able data (the parent run keeps it beside the design)."""
    d = lp.design
    return {"kind": "ladder", "source": lp.source, "metric": lp.metric, "looks": list(d.looks),
            "alpha": d.alpha, "family": d.family, "margin": lp.margin, "power": POWER,
            "sd_confidence": SD_CONFIDENCE, "informational": lp.informational, "hours": lp.hours,
            "affordable": lp.affordable(), "seeds_afforded": lp.seeds_afforded(),
            "rungs": [{"rung": r.rung, "compute": r.compute, "seeds": r.seeds, "hours": r.hours,
                       "comparisons": {label: {"sd": None if n is None else n.sd,
                                               "sized_sd": None if n is None else n.upper,
                                               "noise": None if n is None else n.basis,
                                               "detectable": _finite(r.detects[label]),
                                               "needs": r.needs[label]}
                                       for label, n in r.noise.items()}} for r in lp.rungs],
            "transfers": [{"label": t.label, "detectable_change": _finite(t.detectable), "holds": t.holds,
                           "noise": t.noise}
                          for t in lp.transfers]}


def _finite(value: float) -> float | None:
    return value if math.isfinite(value) else None


def undecidable(design: Design) -> bool:
    """True where the last look's seeds leave every rung to the exact sign-flip test (at most
    SIGN_FLIP_PAIRS pairs) and its smallest p is not below alpha: every rung then reads "not testable"."""
    seeds = design.looks[-1]
    return seeds <= SIGN_FLIP_PAIRS and sign_flip_floor(seeds) >= design.alpha


def ladder_reach_line(design: Design) -> str | None:
    """The plain line a ladder's plan opens with where no rung can be decided at its seeds, else None."""
    if not undecidable(design):
        return None
    seeds = design.looks[-1]
    return (f"  cannot decide any rung: {seeds} seed{'s' * (seeds != 1)} a rung: the exact sign-flip test's "
            f"smallest p is {sign_flip_floor(seeds):.2g}, never below alpha {design.alpha:g}, so every rung "
            "reads 'not testable' and no transfer verdict (grows, shrinks, reverses, holds) can be read from "
            f"the rungs; the smallest design that could: {SIGN_FLIP_PAIRS + 1} seeds a rung (the paired "
            "t-test)")


def format_ladder_plan(lp: LadderPlan) -> str:
    d = lp.design
    looks = f"{d.looks[0]}..{d.looks[-1]} seeds" if len(d.looks) > 1 else f"{d.looks[0]} seeds"
    lines = [f"power plan of the ladder ({'information only: ' if lp.informational else ''}{looks} at each "
             f"rung, {d.family} verdicts over {len(lp.rungs)} rungs in one family at alpha {d.alpha:g}, each "
             f"at {d.level:.3g}; deciding metric {lp.metric}; {POWER:.0%} power):"]
    reach = ladder_reach_line(d)
    if reach is not None:
        lines.append(reach)
    if lp.source is None:
        lines.append("  not sized yet: no pilot ladder (ablation.pilot names an earlier ladder on these "
                     "rungs); the detectable effects below are in units of each rung's paired sd")
    else:
        lines.append(f"  noise: each rung's paired sd from {lp.source}; sized on its upper "
                     f"{SD_CONFIDENCE:.0%} confidence bound")
    margin = f" {lp.margin:g}" if lp.margin is not None else " (no margin: scales.margin)"
    for r in lp.rungs:
        hours = "" if r.hours is None else f", {r.hours:.2f} h at {r.seeds} seeds"
        lines.append(f"  rung {r.rung} ({r.compute:.3g} FLOPs{hours}):")
        for label, n in r.noise.items():
            sd = "-" if n is None else f"sd {n.sd:.3g} ({n.upper:.3g})"
            det = ("nothing (not testable)" if math.isinf(r.detects[label]) else
                   f"{r.detects[label]:.3g}" + ("" if n is not None else " sd"))
            need = r.needs[label]
            needs = "-" if n is None else (str(need) if need is not None else ">100")
            # read off the study's own seeds, a new study is sized at the gaps found (observed_needs.py)
            sized = "" if lp.informational else f", an effect of{margin} needs {needs} seeds"
            lines.append(f"    {label}: {sd}, detects {det}{sized}")
    for t in lp.transfers:
        holds = ""
        if t.holds is not None:
            settles = "can" if t.holds >= POWER else "cannot"
            holds = (f"; a gap that does not move reads holds with probability {t.holds:.2f}: it {settles} "
                     f"settle 'holds within ±{lp.margin:g}' at these seeds")
        change = (f"a change of {t.detectable:.3g} or more over the ladder reads grows"
                  if math.isfinite(t.detectable) else "no change over the ladder reads grows")
        lines.append(f"  transfer {t.label}: {change} with {POWER:.0%} power (its rules simulated, {t.noise})"
                     f"{holds}")
    if lp.hours is not None:
        lines.append(f"  time: {lp.hours:.2f} h one cell at a time (the pilot's measured cell times)")
    afforded = lp.affordable()
    if afforded is not None:
        budget = lp.budget
        limit = f"{budget.cells} cells" if budget.cells is not None else f"{budget.hours:g} h"
        lines.append(f"  budget {limit}: affords rungs {', '.join(afforded) or 'none'} at {d.looks[-1]} "
                     f"seeds; every rung could get {lp.seeds_afforded()} seeds")
    return "\n".join(lines)

