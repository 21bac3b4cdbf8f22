"""Optuna in ablate: the only package importing optuna.

* `ablate.tune.store`: the trial store every study coordinates through (journal file or PostgreSQL): exact
  pops under a store-wide lock, owners and heartbeats, dead workers' trials re-queued.
* `ablate.tune.cells`: `CellQueue`, which ablation studies (ablate/study.py) use to run each cell once.
* `ablate.tune.search`: ``ablate tune``, the spec's search section as an Optuna study (`main_tune`).
* `ablate.tune.space`: the search space over spec fields (no Optuna: order, conditions, derived specs).
* `ablate.tune.results`: best trial / Pareto front, best.yaml, importances, figures.
* `ablate.tune.workers`: local worker processes (spawn) sharing the CPU cores.
"""

from __future__ import annotations

from typing import Any

__all__ = ["main_tune"]


def main_tune(spec_path: str, overrides: Any = (), workers: int = 1, storage: str | None = None,
              trials: int | None = None) -> int:
    """`ablate tune SPEC [--workers N] [--storage URL] [--trials N]` (see ablate.tune.search)."""
    from ablate.tune.search import main_tune as run

    return run(spec_path, overrides, workers, storage, trials)
