"""A quality metric stuck at its floor or its ceiling, where a comparison says nothing about the design.

An untrained model scores exact match 0 (BLEU 0) whatever its residual or norm, and a task every variant
solves scores 1 (BLEU 100): "identical to the baseline" is then a fact about the training budget or the
task, not about the axis. The report warns when every finished run of a variant sits at a bound.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ablate.report.compute.loaded_study import Study

# metric suffix -> (floor, ceiling) of the scale the evaluator reports on; loss and perplexity are unbounded
# above and their floor is never reached in practice, so they get no check.
BOUNDS = {"bleu": (0.0, 100.0), "chrf": (0.0, 100.0), "exact_match": (0.0, 1.0)}
TOLERANCE = 1e-9


@dataclass(frozen=True)
class AtBound:
    metric: str
    bound: str  # 'floor' | 'ceiling'
    value: float
    variants: list[str]  # every finished run of each of these is at the bound
    of: int  # variants with a finished run on the metric


def at_bounds(study: Study, metric: str) -> list[AtBound]:
    """The variants whose every finished run has ``metric`` at its floor, then those at its ceiling."""
    limits = BOUNDS.get(metric.split("/")[-1])
    if limits is None:
        return []
    values = {v: [r.metrics[metric] for r in study.finished(v) if metric in r.metrics]
              for v in study.variants}
    measured = [v for v, xs in values.items() if xs]
    out = []
    for bound, value in zip(("floor", "ceiling"), limits, strict=True):
        stuck = [v for v in measured if all(abs(x - value) <= TOLERANCE for x in values[v])]
        if stuck:
            out.append(AtBound(metric, bound, value, stuck, len(measured)))
    return out


def bound_text(found: AtBound) -> str:
    """The warning shown at the top of the report."""
    who = ("every variant" if len(found.variants) == found.of
           else f"{len(found.variants)} of {found.of} variants ({', '.join(found.variants)})")
    value = f"{found.value:g}"
    if found.bound == "floor":
        why = ("the models did not learn the task (too few steps, too small a model, or a learning rate "
               "that does not train), so \"identical\" or \"no effect\" below says nothing about the design "
               "choices. Train longer or compare on another metric (`ablation.metric`, e.g. `val/loss`).")
    else:
        why = ("the task is solved by those runs, so the metric cannot separate them: \"identical\" or \"no "
               "effect\" below says nothing about the design choices. Use a harder task or another metric "
               "(`ablation.metric`, e.g. `val/loss`).")
    return (f"`{found.metric}` is at its {found.bound} ({value}) in every finished run of {who}: " + why)


def bound_suffix(found: list[AtBound], variant: str, baseline: str | None) -> str:
    """What a verdict on ``variant`` against ``baseline`` adds when both sit at the same bound."""
    for f in found:
        if variant in f.variants and baseline in f.variants:
            return (f" (warning: both at the metric's {f.bound}, {f.value:g}: this comparison is "
                    "uninformative)")
    return ""
