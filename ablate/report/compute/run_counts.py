"""Each variant's runs in one summary: how many, how many ended each way, their seeds, and each main-table
metric's seed mean with its interval (finished runs only); the report's Results table reads it."""

from __future__ import annotations

from dataclasses import dataclass

from ablate.report.compute.loaded_study import Study, main_table_columns
from ablate.stats.fixed_sample import Summary, mean_ci


@dataclass(frozen=True)
class VariantSummary:
    """One variant's runs: how many, how many ended each way, their seeds, and a `Summary` per main-table
    metric (finished runs only)."""

    runs: int
    finished: int
    diverged: int
    failed: int
    pruned: int
    seeds: list[int]
    metrics: dict[str, Summary]


def summarise(study: Study) -> dict[str, VariantSummary]:
    """Per variant: its `VariantSummary`."""
    out: dict[str, VariantSummary] = {}
    for v in study.variants:
        runs, done = study.of(v), study.finished(v)
        counts = {s: sum(1 for r in runs if r.status == s)
                  for s in ("finished", "diverged", "failed", "pruned")}
        out[v] = VariantSummary(
            len(runs), counts["finished"], counts["diverged"], counts["failed"], counts["pruned"],
            sorted(r.seed for r in runs),
            {key: mean_ci([r.metrics[key] for r in done if key in r.metrics])
             for key, _, _ in main_table_columns(study)})
    return out
