"""Wen et al.'s speedup on a ladder with data budgets (``ablation.scales.budgets``): for each variant at each
size rung, the data the tuned baseline needs to reach the variant's final loss, and the speedup's trend
with size.

A budget's cells are a rung of their own, tagged with the size rung they train and the multiple of its
tokens (``record.SIZE_RUNG``, ``record.DATA_BUDGET``); each budget's runs end their own schedule, so a final
metric is always a schedule's end. At each size the baseline's budgets (three or more) give its
loss-against-tokens fit; the variant's final loss at the size's smallest budget (the one every variant
trains at) gives its speedup (``ablate.stats.data_speedup``, which decides everything here), with the
size's compute the baseline's mean ``train/flops`` at that budget.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ablate.report.compute.comparisons import decided_metric
from ablate.report.compute.loaded_study import Study
from ablate.spec import metricnames
from ablate.stats.data_speedup import Budget, RungBudgets, Speedup, SpeedupTrend, data_speedup, speedup_trend
from ablate.tracking import record

__all__ = ["DataSpeedups", "Speedup", "SpeedupTrend", "VariantSpeedups", "as_record", "speedups_of"]


@dataclass
class VariantSpeedups:
    variant: str
    at: list[Speedup | None]  # per size, in order of compute (None: no speedup there)
    trend: SpeedupTrend | None


@dataclass
class DataSpeedups:
    metric: str
    sizes: list[str]
    compute: list[float]  # the baseline's mean train/flops at each size's smallest budget
    budgets: list[list[float]]  # the multiples each size trained the baseline at
    variants: list[VariantSpeedups]
    notes: list[str] = field(default_factory=list)  # why a size gave no speedup


def _mean(runs: list[Any], key: str) -> float:
    values = [r.metrics[key] for r in runs if key in r.metrics and math.isfinite(r.metrics[key])]
    return float(np.mean(values)) if values else math.nan


def _by_size(study: Study) -> dict[str, list[tuple[float, Study]]]:
    """Each size rung's budget rungs, (multiple, rung's study) by the multiple; {} without budgets."""
    out: dict[str, list[tuple[float, Study]]] = {}
    for rung in study.rungs.values():
        tags = next((r.tags for r in rung.runs if record.DATA_BUDGET in r.tags), None)
        if tags is None:
            continue
        out.setdefault(tags[record.SIZE_RUNG], []).append((float(tags[record.DATA_BUDGET]), rung))
    return {size: sorted(budgets, key=lambda b: b[0]) for size, budgets in out.items()}


def _values(rung: Study, variant: str, metric: str) -> tuple[float, ...]:
    return tuple(r.metrics[metric] for r in sorted(rung.finished(variant), key=lambda r: r.seed)
                 if metric in r.metrics and math.isfinite(r.metrics[metric]))


def speedups_of(study: Study) -> DataSpeedups | None:
    """The speedups of a ladder with data budgets; None for a study without them."""
    sizes = _by_size(study)
    if not sizes or study.baseline is None:
        return None
    metric = decided_metric(study)
    base = study.baseline
    order = sorted(sizes, key=lambda s: _mean(sizes[s][0][1].finished(base), metricnames.TRAIN_FLOPS))
    computes = [_mean(sizes[s][0][1].finished(base), metricnames.TRAIN_FLOPS) for s in order]
    notes: list[str] = []
    variants = []
    for v in list(study.variants)[1:]:
        at: list[Speedup | None] = []
        for size in order:
            budgets = sizes[size]
            first = budgets[0][1]
            rung = RungBudgets(size, _mean(first.finished(base), metricnames.TRAIN_FLOPS),
                               tuple(Budget(_mean(b.finished(base), metricnames.TRAIN_TOKENS),
                                            _values(b, base, metric), m) for m, b in budgets),
                               _mean(first.finished(v), metricnames.TRAIN_TOKENS), _values(first, v, metric))
            try:
                at.append(data_speedup(rung))
            except ValueError as err:
                at.append(None)
                notes.append(f"{v}: {err}")
        found = [(s, c) for s, c in zip(at, computes, strict=True) if s is not None]
        trend = speedup_trend([s for s, _ in found], [c for _, c in found]) if found else None
        variants.append(VariantSpeedups(v, at, trend))
    return DataSpeedups(metric, order, computes, [[m for m, _ in sizes[s]] for s in order], variants, notes)


def as_record(d: DataSpeedups) -> dict[str, object]:
    return {"metric": d.metric, "sizes": d.sizes, "compute": d.compute, "budgets": d.budgets,
            "variants": {v.variant: {"speedups": [None if s is None else s.as_dict() for s in v.at],
                                     "trend": None if v.trend is None else v.trend.as_dict()}
                         for v in d.variants}, "notes": d.notes}
