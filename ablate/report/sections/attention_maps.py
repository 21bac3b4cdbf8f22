"""Attention heat maps of a finished run that used ``model.attention: explicit``, either architecture: the
last layer's head-averaged maps of one example (ablate/report/compute/heat_maps.py computes them) are
drawn. Optional: a failure becomes a note, never a failed report.
"""

from __future__ import annotations

from pathlib import Path

from ablate.report import plots as figs
from ablate.report.compute.heat_maps import attention_of_run
from ablate.report.render import Figure, Note, Section
from ablate.report.section_api import Inputs, Part, section


@section(200, ("ablation", "search"))
def part(inp: Inputs) -> Part | None:
    """Heat maps for one sample when a finished run used ``model.attention: explicit``. Never fatal, and
    never ``failed``: a figure that cannot be drawn is an optional extra, so a note says why."""
    study = inp.study
    candidates = [r for r in study.runs
                  if r.status == "finished" and r.params.get("model.attention") == "explicit"]
    if not candidates:
        return None
    run = candidates[0]
    try:
        caption = draw_attention(run.run_id, inp.fig_dir / "attention.png")
    except Exception as exc:  # noqa: BLE001 - an optional figure: report why, keep the report
        why = f"{type(exc).__name__}: {exc}"
        return Part("attention", [Section("Attention", [Note(
            f"attention maps of run {run.variant} (seed {run.seed}) could not be drawn: {why}", "info")])])
    return Part("attention", [Section("Attention", [Figure("figures/attention.png",
                                                           f"{run.variant}, seed {run.seed}: {caption}")])])


def draw_attention(run_id: str, path: Path) -> str:
    """Draw the run's attention maps (ablate/report/compute/heat_maps.py) into ``path``; their caption."""
    found = attention_of_run(run_id)
    figs.attention_heatmaps(found.maps, found.labels, path)
    return found.caption
