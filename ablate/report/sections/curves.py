"""The report's "Learning curves": train and validation loss (and the quality metric) over the steps of
every finished run, one line per variant with a band over its seeds, read from MLflow's metric histories.
"""

from __future__ import annotations

from ablate.report import plots as figs
from ablate.report.render import Block, Figure, Note, Section
from ablate.report.section_api import Inputs, Part, section
from ablate.spec import metricnames
from ablate.tracking.read import metric_history


@section(150)
def part(inp: Inputs) -> Part | None:
    study = inp.study
    metrics = [metricnames.TRAIN_LOSS,
               metricnames.VAL_LOSS] + ([f"val/{study.quality}"] if study.quality != "loss" else [])
    curves: dict[str, dict[str, list[list[tuple[int, float]]]]] = {}
    for v in study.variants:
        for r in study.finished(v):
            for m in metrics:
                curves.setdefault(v, {}).setdefault(m, []).append(metric_history(r.run_id, m))
    if not curves:
        return None
    figs.learning_curves(curves, metrics, inp.fig_dir / "learning_curves.png")
    blocks: list[Block] = [Figure("figures/learning_curves.png",
                                  "Per variant (own colour, line style and marker): mean over seeds, band = "
                                  "min to max across seeds (finished runs)")]
    for group in figs.overlapping_variants(curves, metrics):
        blocks.append(Note(f"{', '.join(group)} have identical curves in every seed: their lines lie on top "
                           "of each other (told apart by line style and marker only).", "info"))
    return Part("curves", [Section("Learning curves", blocks)])
