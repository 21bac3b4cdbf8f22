"""The report's "Divergence and failures": every run that did not finish, with its last step, its last
training loss and the reason it recorded (``ablate.reason`` / ``ablate.error``). Failure is data: such
runs are counted, never hidden.
"""

from __future__ import annotations

import math

from ablate.report.compute import statistics as st
from ablate.report.render import Note, Para, Section, Table
from ablate.report.section_api import Inputs, Part, section
from ablate.spec import metricnames
from ablate.tracking import record
from ablate.tracking.read import metric_history


@section(190, ("ablation", "search"))
def part(inp: Inputs) -> Part:
    study = inp.study
    bad = [r for r in study.runs if r.status != "finished"]
    title = "Divergence and failures"
    if not bad:
        return Part("failures", [Section(title, [Para(f"All {len(study.runs)} runs finished.")])])

    rows = []
    for r in bad:
        history = metric_history(r.run_id, metricnames.TRAIN_LOSS)
        loss = history[-1][1] if history else r.metrics.get(metricnames.TRAIN_LOSS, math.nan)
        step = str(history[-1][0]) if history else "—"
        reason = r.tags.get(record.REASON) or r.tags.get(record.ERROR) or ""
        shown = st.fmt(loss, 4) if loss < 1e8 else f"{loss:.3g}"  # the trainer logs 1e9 for a non-finite loss
        rows.append([r.variant, str(r.seed), r.status, step, shown, reason])
    return Part("failures", [Section(title, [
        Note(f"{len(bad)} of {len(study.runs)} runs ended {', '.join(sorted({r.status for r in bad}))}: "
             "they are counted in the main table and left out of its means."),
        Table(["variant", "seed", "status", "last step", "last train/loss", "reason"], rows, "lrlrrl")])])
