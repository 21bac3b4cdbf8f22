"""The report's "Compute by part" section for a study with ``tune:`` or ``confirm:`` (issue 29): what each
part of the study cost, from its runs' own records: the wall time and the process CPU time (every thread,
so core-hours) each run logged with its result (``final/train/wall_time_s``, ``final/train/cpu_time_s``).

The parts: the cells at the baseline's settings, the searches (every trial of every variant), the cells at
each variant's own best that the first part did not already run (a shared cell counts once, where it ran
first), and the confirmation cells at the larger setting. A run that did not log a time (one that failed,
or ran before ablate logged CPU time) adds nothing to that column, and the table says how many.
"""

from __future__ import annotations

import ablate.tracking.record as R
from ablate.report.data import Run, Study
from ablate.report.part import Inputs, Part
from ablate.report.render import Para, Section, Table


def parts(study: Study) -> list[tuple[str, list[Run]]]:
    """(part, its runs), each run in the first part that ran it."""
    seen = {r.run_id for r in study.runs}
    out = [("cells at the baseline's settings", list(study.runs)),
           ("searches (every trial)", [t for s in study.searches for t in s.trials])]
    for arm, name in ((R.OWN_BEST_ARM, "cells at each variant's own best"),
                      (R.CONFIRM_ARM, "confirmation cells at the larger setting")):
        runs = [r for r in study.arms[arm].runs if r.run_id not in seen] if arm in study.arms else []
        seen |= {r.run_id for r in runs}
        out.append((name, runs))
    return out


def _hours(runs: list[Run], key: str) -> tuple[float, int]:
    """(hours summed over the runs that logged ``key``, runs that did not)."""
    have = [r.metrics[key] for r in runs if key in r.metrics]
    return sum(have) / 3600.0, len(runs) - len(have)


def part(inp: Inputs) -> Part | None:
    """``data['compute']``: per part, its runs, wall hours and CPU hours (and the runs missing each)."""
    study = inp.study
    if R.ARM_DESIGN not in study.parent["tags"]:
        return None
    rows, records = [], []
    total_cpu = sum(_hours(runs, R.CPU_TIME)[0] for _, runs in parts(study))
    for name, runs in parts(study):
        wall, no_wall = _hours(runs, R.WALL_TIME)
        cpu, no_cpu = _hours(runs, R.CPU_TIME)
        lacking = ((no_wall, "wall time"), (no_cpu, "CPU time"))
        missing = ", ".join(f"{n} without {what}" for n, what in lacking if n)
        share = f"{cpu / total_cpu:.0%}" if total_cpu > 0 else "—"
        rows.append([name, str(len(runs)), f"{wall:.2f}", f"{cpu:.2f}", share, missing])
        records.append({"part": name, "runs": len(runs), "wall_hours": wall, "cpu_hours": cpu,
                        "runs_without_wall_time": no_wall, "runs_without_cpu_time": no_cpu})
    all_runs = [r for _, runs in parts(study) for r in runs]
    wall_all, cpu_all = _hours(all_runs, R.WALL_TIME)[0], _hours(all_runs, R.CPU_TIME)[0]
    rows.append(["**all**", str(len(all_runs)), f"{wall_all:.2f}", f"{cpu_all:.2f}", "", ""])
    return Part("compute", [Section("Compute by part", [
        Para("What each part of the study cost, summed over its runs' own records: wall-clock hours and "
             "CPU hours (the process's CPU time over every thread: core-hours, so a run on 2 busy threads "
             "counts about twice its wall time). A cell two parts share counts once, in the part that ran "
             "it first."),
        Table(["part", "runs", "wall hours", "CPU hours", "share of CPU", "not logged"], rows, "lrrrrl",
              "Compute by part")])], data={"compute": records})
