"""The report's "Tuning budget" section (``ablation.tune``): Dodge et al.'s expected validation
performance of each variant's search (`ablate.report.compute.expected_validation`): the best validation score
expected of n trials, n = 1 to the trials run, with its spread (mean ± std, clipped to the observed scores).
Curves that cross say the ranking of the variants depends on the tuning budget.

A variant's observed scores are its search's finished trials on the study's metric (at the tuning
fidelity); pruned, diverged and failed trials have no final score and are left out (the count is shown).
"""

from __future__ import annotations

import math

from ablate.report import plots as figs
from ablate.report.compute import statistics as st
from ablate.report.compute.arm_verdicts import tuning
from ablate.report.compute.comparisons import decided_metric
from ablate.report.compute.expected_validation import EVPPoint, evp_curve, leaders
from ablate.report.compute.loaded_study import Search, quality_meta
from ablate.report.render import Figure, Para, Section
from ablate.report.section_api import Inputs, Part, section


def scores(search: Search, metric: str) -> list[float]:
    """The search's finished trials' scores, in trial order."""
    done = [t for t in search.trials if t.status == "finished" and metric in t.metrics
            and math.isfinite(t.metrics[metric])]
    return [t.metrics[metric] for t in sorted(done, key=lambda t: (t.start_time, t.run_id))]


@section(110)
def part(inp: Inputs) -> Part | None:
    """``data['evp']``: per variant, the curve's points and the trials left out."""
    study = inp.study
    if not study.searches:
        return None
    metric = decided_metric(study)
    unit, dec, higher = quality_meta(metric)
    curves: dict[str, list[EVPPoint]] = {}
    left_out: dict[str, int] = {}
    for search in study.searches:
        found = scores(search, metric)
        left_out[search.run.variant] = len(search.trials) - len(found)
        if found:
            curves[search.run.variant] = evp_curve(found, maximize=higher)
    if not curves:
        return None
    path = figs.expected_best({v: [(p.n, p.mean, p.low, p.high) for p in c] for v, c in curves.items()},
                              f"expected best {metric}", inp.fig_dir / "expected_validation.png")
    lead = leaders(curves, maximize=higher)
    waiting = [s.run.variant for s in study.searches if s.run.variant not in curves]
    if len(curves) < 2:  # one curve ranks nothing
        ranking = (f"Only `{next(iter(curves))}` has finished trials yet: there is no ranking to read "
                   f"({len(waiting)} search{'es' * (len(waiting) != 1)} without one).")
    elif len(lead) == 1:
        ranking = (f"`{lead[0][1]}` has the best expected score at every budget from 1 to "
                   f"{min(len(c) for c in curves.values())} trials: the ranking's winner does not depend on "
                   "the budget.")
    else:
        ranking = "The leader changes with the budget: " + ", ".join(
            f"`{label}` from {n} trial{'s' * (n != 1)}" for n, label in lead) + "."
    dropped = {v: n for v, n in left_out.items() if n}
    note = (" Left out (pruned, diverged or failed, no final score): " + ", ".join(
        f"{v} {n}" for v, n in dropped.items()) + ".") if dropped else ""
    best = "; ".join(f"{v}: {st.fmt(c[-1].mean, dec)} at {c[-1].n}" for v, c in curves.items())
    tune = tuning(study)
    planned = 0 if tune is None else tune.trials
    full = not waiting and all(len(s.trials) >= planned for s in study.searches)  # pruned ones count
    so_far = "the full budget" if full else "the trials finished so far"
    return Part("budget", [Section("Tuning budget", [
        Figure(f"figures/{path.name}",
               f"Expected best `{metric}` of a search with n trials (Dodge et al. 2019, \"Show Your Work\"), "
               "from each variant's finished trials at the tuning fidelity; band: ± one standard deviation, "
               "clipped to the observed scores."),
        Para(f"{ranking} Expected best at {so_far} ({unit}): {best}.{note}")])],
        data={"evp": {v: [{"n": p.n, "mean": p.mean, "std": p.std, "low": p.low, "high": p.high} for p in c]
                      for v, c in curves.items()},
              "evp_left_out": left_out})
