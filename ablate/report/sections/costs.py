"""What each variant cost: the cost table of "Results" (parameters, throughput, memory, wall time) and the
"Quality vs cost" section with its Pareto front.

A cost is shown as the mean over seeds with the seeds' range, never a t-interval: a cost is never negative,
as a mean ± half-width of two seeds can be. Costs compare like with like: every variant over the same
seeds (those every variant finished; an adaptive study gives some variants more seeds than others, and a
mean over seeds 0-2 beside one over 0-7 is not a comparison) and on one hardware (the CPU and GPU that ran
most of the study's runs: a cell's time on another machine measures the machine).
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass

from ablate.report import plots as figs
from ablate.report.compute import statistics as st
from ablate.report.compute.loaded_study import COST_COLUMNS, QUALITY, Run, Study, hardware, main_table_columns
from ablate.report.render import Figure, Para, Section, Table
from ablate.report.section_api import Inputs, Part, section
from ablate.spec import metricnames


@dataclass(frozen=True)
class Comparable:
    """The finished runs whose costs compare: per variant, on one hardware, over the seeds all share."""

    runs: dict[str, list[Run]]
    hardware: str | None  # None: every finished run on one machine kind (nothing left out)
    seeds: list[int]
    left_out: int  # finished runs outside: other hardware, or a seed some variant lacks there


def comparable_runs(study: Study) -> Comparable:
    finished = [r for v in study.variants for r in study.finished(v)]
    kinds = Counter(hardware(r) for r in finished)
    main = kinds.most_common(1)[0][0] if kinds else None
    here = [r for r in finished if hardware(r) == main]
    by_variant = {v: {r.seed for r in here if r.variant == v} for v in study.variants}
    present = [s for s in by_variant.values() if s]
    seeds = sorted(set.intersection(*present)) if present else []
    runs = {v: [r for r in here if r.variant == v and r.seed in seeds] for v in study.variants}
    kept = sum(len(x) for x in runs.values())
    return Comparable(runs, main if len(kinds) > 1 else None, seeds, len(finished) - kept)


def _seed_list(seeds: list[int]) -> str:
    if seeds and seeds == list(range(seeds[0], seeds[-1] + 1)) and len(seeds) > 2:
        return f"{seeds[0]}-{seeds[-1]}"
    return ", ".join(str(s) for s in seeds)


def scope_words(comp: Comparable) -> str:
    """What the cost figures are over: 'seeds 0-2 (the seeds every variant finished)' and the hardware."""
    words = f"seed{'s' * (len(comp.seeds) != 1)} {_seed_list(comp.seeds)}, the seeds every variant finished"
    if comp.hardware is not None:
        words += f", on {comp.hardware} (the hardware of most runs)"
    if comp.left_out:
        words += f"; {comp.left_out} finished run{'s' * (comp.left_out != 1)} outside that left out"
    return words


def cost_table(study: Study) -> Table | None:
    """Parameters, throughput, memory and wall time per variant; None when no run logged any of them."""
    cols = [c for c in main_table_columns(study) if c[0] in COST_COLUMNS]
    if not cols:
        return None
    comp = comparable_runs(study)
    rows = [[v, *[cost_cell([r.metrics[k] for r in comp.runs[v] if k in r.metrics], d)
                  for k, _, d in cols]] for v in study.variants]
    caption = f"Cost: mean over {scope_words(comp)} (lowest–highest seed)"
    if any(k == metricnames.PEAK_MEMORY for k, _, _ in cols):
        caption += (". peak MB is the process's peak, which counts what the process held before the run "
                    "(in a study worker, what its earlier cells left): it grows with a cell's place in its "
                    "worker as well as with its variant")
        if any(k == metricnames.RUN_MEMORY for k, _, _ in cols):
            caption += "; run MB is the run's own footprint above the memory at its start"
    return Table(["variant", *[h for _, h, _ in cols]], rows, caption=caption)


def cost_cell(values: list[float], decimals: int) -> str:
    """Mean and the seeds' range (see the module docstring)."""
    finite = [x for x in values if math.isfinite(x)]
    if not finite:
        return "—"
    mean = st.fmt(sum(finite) / len(finite), decimals)
    lo, hi = st.fmt(min(finite), decimals), st.fmt(max(finite), decimals)
    return mean if lo == hi else f"{mean} ({lo}–{hi})"


def cost_points(study: Study, cost_key: str = metricnames.WALL_TIME) -> list[figs.CostPoint]:
    """Per variant with finished runs: mean cost and quality, each with the range of its seeds (lowest to
    highest measured value, so a wall time's bar never reaches below zero), and whether it is on the
    Pareto front of the means."""
    q = study.primary
    found = []
    comp = comparable_runs(study)
    for v in study.variants:
        runs = [r for r in comp.runs[v] if cost_key in r.metrics and q in r.metrics
                and math.isfinite(r.metrics[cost_key]) and math.isfinite(r.metrics[q])]
        if runs:
            xs, ys = [r.metrics[cost_key] for r in runs], [r.metrics[q] for r in runs]
            found.append((v, sum(xs) / len(xs), min(xs), max(xs), sum(ys) / len(ys), min(ys), max(ys)))
    front = st.pareto_front([p[1] for p in found], [p[4] for p in found], QUALITY[study.quality][2])
    return [figs.CostPoint(*p, on_front=f) for p, f in zip(found, front, strict=True)]


@section(170)
def part(inp: Inputs) -> Part | None:
    """"Quality vs cost": the figure (written to the figures folder) and the variants on the Pareto front."""
    q = inp.study.primary
    pts = cost_points(inp.study)
    if not pts:
        return None
    figs.quality_vs_cost(pts, "wall time (s)", q, inp.fig_dir / "quality_vs_cost.png")
    on = [p.label for p in pts if p.on_front]
    return Part("costs", [Section("Quality vs cost", [
        Figure("figures/quality_vs_cost.png", f"{q} against wall time per variant (mean over "
               f"{scope_words(comparable_runs(inp.study))}; bars: lowest to highest seed); the Pareto front "
               "is joined"),
        Para("On the Pareto front (no other variant is both cheaper and better): " + ", ".join(on) + ".")])])
