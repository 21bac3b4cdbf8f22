"""A study's power plan: before its first cell, what its design can settle, what each claim would need,
and what it costs; ``seeds.max: auto`` chosen from a budget.

The noise comes from a pilot (``ablation.pilot``, ablate/study/pilot.py): each comparison's paired sd where
the pilot ran that variant, else the pilot's pooled sd, sized on its upper 80% confidence bound. Without a
pilot the study cannot be sized yet: the plan gives the smallest detectable effect in units of the paired
sd, and after the study's first look the same plan from its own seeds, for information only (a plan read
off a study's own data never moves its recorded design).

Power is simulated over the very procedure the study runs (ablate/stats/power.py).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path

from ablate.errors import AblateError
from ablate.spec.experiment import ExperimentSpec
from ablate.spec.ladder_section import SeedBudget
from ablate.spec.study_sections import AblationSpec
from ablate.stats.power import (
    MOST_SEEDS,
    SD_CONFIDENCE,
    claim_power,
    detectable,
    expected_truth,
    seeds_to_settle,
    simulate,
)
from ablate.stats.sequential import POWER, Design, Question
from ablate.stats.verdict import EQUIVALENCE_PAIRS, SIGN_FLIP_PAIRS, sign_flip_floor
from ablate.study.cell_queue import CellRecords
from ablate.study.pilot import PairedNoise, Pilot, paired_sd, read_pilot
from ablate.study.seed_rounds import ended_pairs, questions
from ablate.study.study_plan import StudyPlan


@dataclass(frozen=True)
class ComparisonPlan:
    """One comparison's line of the plan."""

    label: str
    question: Question  # its claim's (ablation.expect), None without one
    margin: float | None  # a none claim's margin (default min_effect)
    noise: PairedNoise | None
    detectable: float  # smallest effect found with 80% power (in sd units when there is no noise)
    power: float | None  # the chance its claim's question is answered as a true claim would be
    needed: int | None  # seeds.max the claim needs (None: more than MOST_SEEDS, or nothing to size)
    expected_seeds: float  # seeds it runs on average, at the claim's assumed truth

    @property
    def sized_sd(self) -> float | None:
        return None if self.noise is None else self.noise.upper


@dataclass(frozen=True)
class PowerPlan:
    design: Design
    metric: str
    source: str | None  # where the noise came from; None: not sized yet
    comparisons: list[ComparisonPlan]
    cell_seconds: dict[str, float]  # label -> a cell's measured training time
    step: int = 1
    informational: bool = False  # read off the study's own seeds: never moves its recorded design
    timed_on: str | None = None  # the machine(s) the cell times were measured on


def claim_text(label: str, question: Question, margin: float | None, min_effect: float | None) -> str:
    """'positions=rope better than the baseline' (the direction only), 'positions=rope better than the
    baseline by more than 0.05' (a margin claim: its own margin, never min_effect), 'norm=rms ≈ baseline
    (±0.5)'."""
    if question == "none":
        return f"{label} ≈ baseline (±{margin if margin is not None else min_effect:g})"
    if question == "identical":
        return f"{label} identical to the baseline"
    if question in ("better", "worse"):
        beyond = f" by more than {margin:g}" if margin is not None else ""
        return f"{label} {question} than the baseline{beyond}"
    return f"{label} against the baseline"


def power_plan(design: Design, metric: str, labels: list[str],
               asked: Mapping[str, tuple[Question, float | None]],
               noise_of: Callable[[str], PairedNoise | None], source: str | None,
               cell_seconds: Mapping[str, float], step: int = 1, informational: bool = False) -> PowerPlan:
    """The plan of every comparison (``labels``: variants other than the baseline)."""
    rows = []
    for label in labels:
        question, margin = asked.get(label, (None, None))
        noise = noise_of(label)
        sd = noise.upper if noise is not None else 1.0  # without noise: effects in units of the paired sd
        rows.append(ComparisonPlan(
            label, question, margin, noise, detectable(design, sd, question, margin),
            claim_power(design, sd, question, margin) if noise is not None else None,
            seeds_to_settle(design, sd, question, margin, step) if noise is not None else None,
            simulate(design, expected_truth(design, question, margin), sd, question, margin).mean_seeds))
    return PowerPlan(design, metric, source, rows, dict(cell_seconds), step, informational)


def pilot_of(spec: ExperimentSpec, origin: str, metric: str) -> Pilot | None:
    """The spec's pilot read for the deciding ``metric`` (or the pilot's own metric it names)."""
    abl = spec.ablation
    if abl is None or abl.pilot is None:
        return None
    return read_pilot(abl.pilot.study, Path(origin).parent, abl.pilot.metric or metric)


def from_pilot(design: Design, metric: str, labels: list[str], ablation: AblationSpec | None, pilot: Pilot,
               step: int = 1) -> PowerPlan:
    source = (f"pilot {pilot.name} ({pilot.metric} at the baseline's settings, seeds "
              f"{_seeds(pilot.seeds)})")
    seconds = {label: s for label in ["baseline", *labels] if (s := pilot.cell_seconds(label)) is not None}
    plan = power_plan(design, metric, labels, questions(ablation), pilot.noise, source, seconds, step)
    return replace(plan, timed_on=pilot.timed_on())


def _seeds(seeds: tuple[int, ...]) -> str:
    if seeds and list(seeds) == list(range(seeds[0], seeds[-1] + 1)):
        return f"{seeds[0]}-{seeds[-1]}"
    return ", ".join(str(s) for s in seeds)


def choose_max(design: Design, variants: int, budget: SeedBudget, seconds: Mapping[str, float],
               labels: list[str]) -> int:
    """seeds.max: auto: the largest maximum whose worst case (every variant, the baseline included, run to
    the last look) fits the budget ({cells} or {hours}, one cell at a time at the pilot's cell times)."""
    first = design.looks[0]
    per_seed = float(variants) if budget.cells is not None else seed_seconds(seconds, labels) / 3600.0
    if not math.isfinite(per_seed):
        raise AblateError("seeds.budget: hours needs the pilot's cell times (train/wall_time_s), which it "
                          "has not recorded; give the budget in cells")
    limit = budget.cells if budget.cells is not None else budget.hours
    assert limit is not None  # SeedBudget holds exactly one
    most = min(MOST_SEEDS, int(limit // per_seed))
    if most < first:
        unit = "cells" if budget.cells is not None else "hours"
        raise AblateError(f"seeds.budget: {limit:g} {unit} cannot run the first look ({first} seeds of "
                          f"{variants} variants need {first * per_seed:.3g} {unit})")
    return most


def seed_seconds(cell_seconds: Mapping[str, float], labels: list[str]) -> float:
    """One seed of the baseline and every variant in ``labels``, one cell at a time: a variant without a
    measured time takes the baseline's; NaN where neither was measured."""
    base = cell_seconds.get("baseline", math.nan)
    return sum(cell_seconds.get(label, base) for label in ["baseline", *labels])


def plan_record(pp: PowerPlan) -> dict[str, object]:
    """The plan as JSON-able data: what the parent run keeps and the report puts beside what was found."""
    d = pp.design
    return {"source": pp.source, "metric": pp.metric, "looks": list(d.looks), "alpha": d.alpha,
            "family": d.family, "min_effect": d.min_effect, "informational": pp.informational,
            "sd_confidence": SD_CONFIDENCE, "power": POWER, "timed_on": pp.timed_on,
            "comparisons": [{"label": c.label, "question": c.question, "margin": c.margin,
                             "sd": None if c.noise is None else c.noise.sd,
                             "df": None if c.noise is None else c.noise.df,
                             "sized_sd": c.sized_sd, "noise": None if c.noise is None else c.noise.basis,
                             "detectable": c.detectable if math.isfinite(c.detectable) else None,
                             "in_sd_units": c.noise is None, "power": c.power, "needed": c.needed,
                             "expected_seeds": c.expected_seeds} for c in pp.comparisons]}


# ---------------------------------------------------------------- printing
def _fmt(value: float | None, digits: int = 3) -> str:
    return "-" if value is None or not math.isfinite(value) else f"{value:.{digits}g}"


def format_power_plan(pp: PowerPlan, min_effect: float | None, workers: int = 1) -> str:
    d = pp.design
    looks = f"{d.looks[0]}..{d.looks[-1]} seeds" if len(d.looks) > 1 else f"{d.looks[0]} seeds"
    head = (f"power plan ({'information only: ' if pp.informational else ''}Pocock looks at {looks}, "
            f"{len(pp.comparisons)} comparison{'s' * (len(pp.comparisons) != 1)} at family-wise alpha "
            f"{d.alpha:g}, each at {d.level:.3g}; deciding metric {pp.metric}; {POWER:.0%} power, simulated "
            "over the study's own procedure):")
    lines = [head]
    if pp.source is None:
        lines.append("  not sized yet: no pilot (ablation.pilot names an earlier study on this cell); the "
                     "smallest detectable effects below are in units of the paired sd. After the first look "
                     "`--dry-run` prints this plan from the study's own seeds, for information only.")
    else:
        lines.append(f"  noise: paired sd of {pp.metric} from {pp.source}; sized on its upper "
                     f"{SD_CONFIDENCE:.0%} confidence bound")
    width = max([len(c.label) for c in pp.comparisons] + [10])
    lines.append(f"  {'comparison':<{width}}  {'sd (bound)':>14}  {'detects':>8}  {'power':>6}  needs  claim")
    for c in pp.comparisons:
        sd = "-" if c.noise is None else f"{c.noise.sd:.3g} ({c.noise.upper:.3g})"
        det = f"{c.detectable:.3g}" + ("" if c.noise is not None else " sd")
        unsized = c.question == "identical" or (c.question is None and d.min_effect is None)
        # read off the study's own seeds, a new study is sized at the effects they found (observed_needs.py)
        needs = "-" if unsized or c.noise is None or pp.informational else (
            str(c.needed) if c.needed is not None else f">{MOST_SEEDS}")
        lines.append(f"  {c.label:<{width}}  {sd:>14}  {det:>8}  {_fmt(c.power, 2):>6}  {needs:>5}  "
                     f"{claim_text(c.label, c.question, c.margin, min_effect)}"
                     + (f" [noise: {c.noise.basis}]" if c.noise is not None else ""))
        if c.noise is not None and not pp.informational and c.question not in (None, "identical") and (
                c.needed is None or c.needed > d.looks[-1]):
            about = f"about {c.needed}" if c.needed is not None else f"more than {MOST_SEEDS}"
            could = (f"the smallest design that could: seeds: {{min: {d.looks[0]}, max: {c.needed}}}"
                     if c.needed is not None else f"no design of up to {MOST_SEEDS} seeds could")
            lines.append(f"  cannot settle '{claim_text(c.label, c.question, c.margin, min_effect)}': needs "
                         f"{about} seeds at sd {c.sized_sd:.3g}; seeds.max is {d.looks[-1]}; {could}")
    lines.append(f"  sd: the spread (standard deviation) of the paired seed differences, variant minus "
                 f"baseline on the same seed, with its upper {SD_CONFIDENCE:.0%} confidence bound, which the "
                 f"plan sizes on; detects: the smallest true difference found with {POWER:.0%} power"
                 + (" (in units of that sd: '2 sd' is twice the spread)" if pp.source is None else "")
                 + "; power: the chance the claim's question is answered as a true claim would be; needs: "
                 + ("below, at the effects these seeds found; -: nothing to size" if pp.informational else
                    "the seeds.max that settles the claim (without one: finds an effect as large as "
                    "min_effect); -: nothing measured yet (no pilot) or nothing to size"))
    lines.extend(cost_lines(pp, workers))
    return "\n".join(lines)


def cost_lines(pp: PowerPlan, workers: int) -> list[str]:
    """Cells (worst case and expected) and hours, one cell at a time and with ``workers``."""
    d = pp.design
    n = len(pp.comparisons) + 1
    worst = n * d.looks[-1]
    expected = sum(c.expected_seeds for c in pp.comparisons) + max(
        [c.expected_seeds for c in pp.comparisons] + [float(d.looks[0])])
    line = f"  cells: {n * d.looks[0]} at the first look, {worst} at most, about {expected:.0f} expected"
    if not pp.cell_seconds:
        return [line + " (no cell time measured yet)"]
    worst_s = d.looks[-1] * seed_seconds(pp.cell_seconds, [c.label for c in pp.comparisons])
    mean_s = worst_s / worst
    # the hours are the pilot's machine's: on another, cells take another time
    measured = f"training time measured on {pp.timed_on}" if pp.timed_on else "measured training time"
    return [line, f"  time: {mean_s / 60:.1f} min a cell ({measured}); at most "
            f"{worst_s / 3600:.1f} h one cell at a time, about {expected * mean_s / 3600:.1f} h expected, "
            f"about {estimate_wall_s(mean_s, round(expected), workers) / 3600:.1f} h of wall time with "
            f"{workers} worker{'s' * (workers != 1)}"]


def reach_lines(plan: StudyPlan, pp: PowerPlan | None) -> list[str]:
    """One plain line per comparison its design cannot decide, with the smallest design that could: fixed
    seeds too few for the report's exact test (3 pairs: its smallest p is 0.25), a ``none`` claim under
    EQUIVALENCE_PAIRS pairs at the most (a claim the power plan, ``pp``, sized by a pilot, does not settle
    at ``seeds.max`` has its "cannot settle" line there). The report's verdicts and figures then say "not
    testable" or "not settled"."""
    abl = plan.ablation
    fixed = plan.design is None
    most = len(plan.seeds) if fixed else plan.verdict_design.looks[-1]
    asked = questions(abl)
    sized = {c.label: c for c in pp.comparisons} if pp is not None and pp.source is not None else {}
    lines = []
    for label in [v for v in plan.variants if v != "baseline"]:
        question, margin = asked.get(label, (None, None))
        plan_of = sized.get(label)
        needed = plan_of.needed if plan_of is not None else None
        why = None
        if fixed and most <= SIGN_FLIP_PAIRS:
            floor = sign_flip_floor(most)
            why = (f"{most} fixed seed{'s' * (most != 1)}: no test at all" if most < 2 else
                   f"{most} fixed seeds: the exact sign-flip test's smallest p is {floor:.2g}, never below "
                   f"alpha {abl.alpha:g}, so the report can only say 'not testable'")
        elif question == "none" and most < EQUIVALENCE_PAIRS:
            why = (f"at most {most} paired seeds: a none claim needs {EQUIVALENCE_PAIRS} at least to be "
                   "called no effect")
        if why is None:  # a sized claim that seeds.max does not settle: the power plan's own line says so
            continue
        top = max(EQUIVALENCE_PAIRS, SIGN_FLIP_PAIRS + 1, most, needed or 0)
        first = max(EQUIVALENCE_PAIRS, SIGN_FLIP_PAIRS + 1)
        guess = ("; a pilot (ablation.pilot) says how many it needs" if plan_of is None else
                 "" if needed is not None else f"; at its pilot's noise, more than {MOST_SEEDS}")
        lines.append(f"  cannot decide {claim_text(label, question, margin, abl.min_effect)}: {why}; the "
                     f"smallest design that could: seeds: {{min: {first}, max: {top}}}{guess}")
    return lines


# Fields that change a likelihood metric's own scale (loss, perplexity): label smoothing trains towards a
# flatter distribution, and a tokenizer changes what one token is; BLEU and bits per byte are unaffected.
SCALE_FIELDS = ("train.label_smoothing", "data.tokenizer")
LIKELIHOOD_WORDS = ("loss", "ppl")


def scale_note(label: str, metric: str, changed: Iterable[str]) -> str | None:
    """'`label` changes train.label_smoothing, which changes val/loss's own scale: ...' where ``metric`` is a
    likelihood and the variant's ``changed`` fields (dotted) touch one of SCALE_FIELDS, else None: the plan
    and the report say it in the same words."""
    if not any(word in metric for word in LIKELIHOOD_WORDS):
        return None
    fields = sorted({f for f in changed if f.startswith(SCALE_FIELDS)})
    if not fields:
        return None
    return (f"{label} changes {', '.join(fields)}, which changes {metric}'s own scale: its difference mixes "
            "the variant's effect with the scale's")


def scale_notes(plan: StudyPlan) -> list[str]:
    """One line per variant that changes the deciding metric's own scale (see scale_note)."""
    notes = [scale_note(cell.label, plan.metric, (f for f, _, _ in cell.diff))
             for cell in plan.cells if cell.seed == plan.seeds[0]]
    return [f"  note: {note}" for note in notes if note is not None]


# ---------------------------------------------------------------- a study's plan
def power_design(plan: StudyPlan) -> Design | None:
    """The design a study's verdicts follow (``StudyPlan.verdict_design``); None with a single fixed seed:
    no paired test to plan."""
    if plan.design is None and len(plan.seeds) < 2:
        return None
    return plan.verdict_design


def study_plan(plan: StudyPlan) -> PowerPlan | None:
    """The plan before the first cell: from the pilot, else not sized (effects in sd units)."""
    design = power_design(plan)
    if design is None:
        return None
    abl = plan.ablation
    labels = [v for v in plan.variants if v != "baseline"]
    step = plan.seed_step
    pilot = pilot_of(plan.spec, plan.origin, plan.metric)
    if pilot is not None:
        return from_pilot(design, plan.metric, labels, abl, pilot, step)
    return power_plan(design, plan.metric, labels, questions(abl), lambda _: None, None, {}, step)


def own_seeds_plan(plan: StudyPlan, records: CellRecords) -> PowerPlan | None:
    """The same plan from the study's own finished pairs, once a comparison has two: for information only
    (it never moves the recorded design)."""
    design = power_design(plan)
    if design is None:
        return None
    labels = [v for v in plan.variants if v != "baseline"]
    noise: dict[str, PairedNoise] = {}
    for label in labels:
        diffs = ended_pairs(plan, records, label, leading=False)
        done = [d for d in diffs if d is not None and math.isfinite(d)]
        if len(done) >= 2:
            noise[label] = PairedNoise(paired_sd(done), len(done) - 1, f"its own {len(done)} pairs")
    if not noise:
        return None
    abl = plan.ablation
    step = plan.seed_step
    return power_plan(design, plan.metric, labels, questions(abl), noise.get, "the study's own seeds",
                      {}, step, informational=True)


def estimate_wall_s(cell_seconds: float, cells: int, parallel: int) -> float:
    """Wall seconds for `cells` cells of `cell_seconds` each, run `parallel` at a time: whole waves."""
    if cells <= 0:
        return 0.0
    return math.ceil(cells / max(1, parallel)) * cell_seconds
