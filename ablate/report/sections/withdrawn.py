"""The appendix "Withdrawn cells": every run the comparisons leave out as superseded, with its values and
the reason it was withdrawn (an earlier implementation of its variant, another precision than the study's).

A withdrawn result stays visible: QK-norm v1 and ALiBi v1, every one of whose cells was worse than the
baseline, were withdrawn when their implementations were fixed, and a reader who sees only the fixed
versions' verdicts should be able to see what the study once measured and why it no longer counts.
"""

from __future__ import annotations

from ablate.report.compute import statistics as st
from ablate.report.compute.loaded_study import QUALITY, Run, Study
from ablate.report.render import Para, Section, Table
from ablate.report.section_api import Inputs, Part, section

TITLE = "Appendix: withdrawn cells"


def _withdrawn(study: Study) -> list[tuple[str, Run, str]]:
    """(arm, run, reason) over the study and its later arms, each run once, in variant and seed order."""
    seen: set[str] = set()
    out = []
    for arm, part in [("", study), *study.arms.items()]:
        for run, why in part.withdrawn:
            if run.shown_id not in seen:
                seen.add(run.shown_id)
                out.append((arm, run, why))
    return sorted(out, key=lambda t: (t[1].variant, t[1].seed, t[1].shown_id))


@section(220)
def part(inp: Inputs) -> Part | None:
    study = inp.study
    rows = _withdrawn(study)
    if not rows:
        return None
    val, primary = f"val/{study.quality}", study.primary
    metrics = list(dict.fromkeys([primary, val]))
    dec = QUALITY[study.quality][1] if study.quality in QUALITY else 3
    table = [[run.variant, str(run.seed), run.status,
              *[st.fmt(run.metrics[m], dec) if m in run.metrics else "—" for m in metrics], why]
             for _, run, why in rows]
    return Part("withdrawn", [Section(TITLE, [
        Para(f"{len(rows)} run(s) are left out of every comparison above: they are kept in the store, tagged "
             "superseded, and listed here with their values so that what the study once measured stays "
             "visible."),
        Table(["variant", "seed", "status", *metrics, "withdrawn because"], table, align="lrl" + "r" *
              len(metrics) + "l", caption="Withdrawn cells (their values never enter a verdict)")])],
        data={"withdrawn": [{"variant": run.variant, "seed": run.seed, "arm": arm or None, "reason": why,
                             "run_id": run.shown_id, **{m: run.metrics.get(m) for m in metrics}}
                            for arm, run, why in rows]})
