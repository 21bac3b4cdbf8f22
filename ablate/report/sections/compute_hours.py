"""The report's "Compute by part" section for a study with ``tune:`` or ``confirm:`` (tuning each variant,
confirming at a larger scale): what each part of the study cost, from its runs' own records: the wall time
and the process CPU time (every thread, so core-hours) each run logged with its result
(``final/train/wall_time_s``, ``final/train/cpu_time_s``).

The parts: the cells at the baseline's settings, the searches (every trial of every variant), the cells at
each variant's own best that the first part did not already run (a shared cell counts once, where it ran
first), and the confirmation cells at the larger setting.

A run that did not log a time (one that failed, or ran before ablate logged CPU time) adds nothing to the
wall column, and the table says how many. Left out of the CPU column, such runs would make a part that ran
before CPU time was logged look several times cheaper than it was, and the shares wrong: so a run with a
wall time but no CPU time counts at its wall time times the CPU per wall hour of the study's runs that
logged both, marked as an estimate (≈) with the ratio and how many runs it rests on.
"""

from __future__ import annotations

from dataclasses import dataclass

from ablate.report.compute.loaded_study import Run, Study
from ablate.report.render import Block, Para, Section, Table
from ablate.report.section_api import Inputs, Part, section
from ablate.tracking import record


def parts(study: Study) -> list[tuple[str, list[Run]]]:
    """(part, its runs), each run in the first part that ran it."""
    seen = {r.run_id for r in study.runs}
    out = [("cells at the baseline's settings", list(study.runs))]
    if len(study.rungs) > 1:  # a ladder: every rung's cells, not only the largest's
        out = [(f"cells at rung `{name}`", list(rung.runs)) for name, rung in study.rungs.items()]
        seen = {r.run_id for rung in study.rungs.values() for r in rung.runs}
    out.append(("searches (every trial)", [t for s in study.searches for t in s.trials]))
    for arm, name in ((record.OWN_BEST_ARM, "cells at each variant's own best"),
                      (record.CONFIRM_ARM, "confirmation cells at the larger setting")):
        runs = [r for r in study.arms[arm].runs if r.run_id not in seen] if arm in study.arms else []
        seen |= {r.run_id for r in runs}
        out.append((name, runs))
    return out


def _hours(runs: list[Run], key: str) -> tuple[float, int]:
    """(hours summed over the runs that logged ``key``, runs that did not)."""
    have = [r.metrics[key] for r in runs if key in r.metrics]
    return sum(have) / 3600.0, len(runs) - len(have)


@dataclass(frozen=True)
class CpuRate:
    """CPU hours per wall hour of the runs that logged both, and how many runs that is."""

    per_wall: float
    runs: int


def cpu_rate(runs: list[Run]) -> CpuRate | None:
    both = [r for r in runs if record.WALL_TIME in r.metrics and record.CPU_TIME in r.metrics]
    wall = sum(r.metrics[record.WALL_TIME] for r in both)
    return CpuRate(sum(r.metrics[record.CPU_TIME] for r in both) / wall, len(both)) if wall > 0 else None


@dataclass(frozen=True)
class PartCost:
    name: str
    runs: int
    wall_hours: float
    no_wall: int
    cpu_logged: float  # hours, over the runs that logged CPU time
    no_cpu: int
    cpu_estimated: float  # hours added for the runs with a wall time and no CPU time, at the study's rate

    @property
    def cpu_hours(self) -> float:
        return self.cpu_logged + self.cpu_estimated


def cost(name: str, runs: list[Run], rate: CpuRate | None) -> PartCost:
    wall, no_wall = _hours(runs, record.WALL_TIME)
    cpu, no_cpu = _hours(runs, record.CPU_TIME)
    unlogged_wall = sum(r.metrics[record.WALL_TIME] for r in runs
                        if record.CPU_TIME not in r.metrics and record.WALL_TIME in r.metrics) / 3600.0
    estimated = unlogged_wall * rate.per_wall if rate else 0.0
    return PartCost(name, len(runs), wall, no_wall, cpu, no_cpu, estimated)


def _cpu_cell(c: PartCost) -> str:
    return f"≈ {c.cpu_hours:.2f}" if c.cpu_estimated > 0 else f"{c.cpu_hours:.2f}"


def _missing(c: PartCost) -> str:
    said = [f"{c.no_wall} without wall time"] if c.no_wall else []
    if c.no_cpu:
        split = f" ({c.cpu_logged:.2f} h logged, {c.cpu_estimated:.2f} h estimated)"
        said.append(f"{c.no_cpu} without CPU time" + (split if c.cpu_estimated > 0 else ""))
    return ", ".join(said)


@section(180)
def part(inp: Inputs) -> Part | None:
    """``data['compute']``: per part, its runs, wall hours and CPU hours (logged, and estimated for the runs
    that logged no CPU time), with the runs missing each."""
    study = inp.study
    if study.record.arm_design is None:
        return None
    split = parts(study)
    all_runs = [r for _, runs in split for r in runs]
    rate = cpu_rate(all_runs)
    costs = [*(cost(name, runs, rate) for name, runs in split), cost("**all**", all_runs, rate)]
    total_cpu = costs[-1].cpu_hours
    rows, records = [], []
    for c in costs[:-1]:
        share = f"{c.cpu_hours / total_cpu:.0%}" if total_cpu > 0 else "—"
        rows.append([c.name, str(c.runs), f"{c.wall_hours:.2f}", _cpu_cell(c), share, _missing(c)])
        records.append({"part": c.name, "runs": c.runs, "wall_hours": c.wall_hours, "cpu_hours": c.cpu_hours,
                        "cpu_hours_logged": c.cpu_logged, "cpu_hours_estimated": c.cpu_estimated,
                        "runs_without_wall_time": c.no_wall, "runs_without_cpu_time": c.no_cpu})
    whole = costs[-1]
    rows.append([whole.name, str(whole.runs), f"{whole.wall_hours:.2f}", _cpu_cell(whole), "", ""])
    blocks: list[Block] = [Para(
        "What each part of the study cost, summed over its runs' own records: wall-clock hours and CPU hours "
        "(the process's CPU time over every thread: core-hours, so a run on 2 busy threads counts about "
        "twice its wall time). A cell two parts share counts once, in the part that ran it first.")]
    blocks.append(Table(["part", "runs", "wall hours", "CPU hours", "share of CPU", "not logged"], rows,
                        "lrrrrl", "Compute by part"))
    if whole.cpu_estimated > 0 and rate is not None:
        blocks.append(Para(
            f"≈: {whole.no_cpu} run(s) logged a wall time but no CPU time (they ran before ablate logged "
            f"it). Each counts at its wall time times {rate.per_wall:.2f} CPU hours per wall hour, the ratio "
            f"of the study's {rate.runs} run(s) that logged both: {whole.cpu_estimated:.2f} of the "
            f"{whole.cpu_hours:.2f} CPU hours are that estimate. It assumes those runs kept the cores as "
            "busy as the logged ones did."))
    return Part("compute", [Section("Compute by part", blocks)],
                data={"compute": records, "cpu_per_wall_hour": rate.per_wall if rate else None})
