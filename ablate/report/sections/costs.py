"""What each variant cost: the cost table of "Results" (parameters, throughput, memory, wall time) and the
"Quality vs cost" section with its Pareto front.

A cost is shown as the mean over seeds with the seeds' range, never a t-interval: a cost is never negative,
as a mean ± half-width of two seeds can be.
"""

from __future__ import annotations

import math

import ablate.spec.metricnames as MN
from ablate.report import plots as figs
from ablate.report.compute import statistics as st
from ablate.report.compute.loaded_study import COST_COLUMNS, QUALITY, Study, main_table_columns
from ablate.report.part import Inputs, Part
from ablate.report.render import Figure, Para, Section, Table


def cost_table(study: Study) -> Table | None:
    """Parameters, throughput, memory and wall time per variant; None when no run logged any of them."""
    cols = [c for c in main_table_columns(study) if c[0] in COST_COLUMNS]
    if not cols:
        return None
    rows = [[v, *[cost_cell([r.metrics[k] for r in study.finished(v) if k in r.metrics], d)
                  for k, _, d in cols]] for v in study.variants]
    caption = "Cost: mean over the seeds of finished runs (lowest–highest seed)"
    if any(k == MN.PEAK_MEMORY for k, _, _ in cols):
        caption += (". peak MB is the process's peak, which counts what the process held before the run "
                    "(in a study worker, what its earlier cells left): it grows with a cell's place in its "
                    "worker as well as with its variant")
        if any(k == MN.RUN_MEMORY for k, _, _ in cols):
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


def cost_points(study: Study, cost_key: str = MN.WALL_TIME) -> list[figs.CostPoint]:
    """Per variant with finished runs: mean cost and quality, each with the range of its seeds (lowest to
    highest measured value, so a wall time's bar never reaches below zero), and whether it is on the
    Pareto front of the means."""
    q = study.primary
    found = []
    for v in study.variants:
        runs = [r for r in study.finished(v) if cost_key in r.metrics and q in r.metrics
                and math.isfinite(r.metrics[cost_key]) and math.isfinite(r.metrics[q])]
        if runs:
            xs, ys = [r.metrics[cost_key] for r in runs], [r.metrics[q] for r in runs]
            found.append((v, sum(xs) / len(xs), min(xs), max(xs), sum(ys) / len(ys), min(ys), max(ys)))
    front = st.pareto_front([p[1] for p in found], [p[4] for p in found], QUALITY[study.quality][2])
    return [figs.CostPoint(*p, on_front=f) for p, f in zip(found, front, strict=True)]


def part(inp: Inputs) -> Part | None:
    """"Quality vs cost": the figure (written to the figures folder) and the variants on the Pareto front."""
    q = inp.study.primary
    pts = cost_points(inp.study)
    if not pts:
        return None
    figs.quality_vs_cost(pts, "wall time (s)", q, inp.fig_dir / "quality_vs_cost.png")
    on = [p.label for p in pts if p.on_front]
    return Part("costs", [Section("Quality vs cost", [
        Figure("figures/quality_vs_cost.png", f"{q} against wall time per variant (mean over finished seeds; "
               "bars: lowest to highest seed); the Pareto front is joined"),
        Para("On the Pareto front (no other variant is both cheaper and better): " + ", ".join(on) + ".")])])
