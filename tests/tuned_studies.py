"""A synthetic study with a known answer for ``ablation.tune`` and ``ablation.confirm``, and a
stand-in for training that records real MLflow runs, so `ablate study` and `ablate report` run end to end
in seconds.

The answer, by construction (`score`):

- ``norm=custom`` needs 3x the baseline's learning rate: one grid step away it scores 1 less, so at the
  baseline's settings it is worse, and at its own best it equals the baseline (no effect as large as
  ``min_effect``);
- ``residual=post_norm`` is 0.2 better on the study's short cells (and its searches') at any learning
  rate, and 0.2 worse at the larger setting (``train.max_steps`` 40): a verdict that reverses at scale;
- each (variant, seed, length) gets its own small noise (sd 0.01), the same at every learning rate.
"""

from __future__ import annotations

import math
import random
from collections.abc import Collection
from pathlib import Path
from typing import Any

import pytest

from ablate.run.rundir import RunResult
from ablate.spec.experiment import ExperimentSpec
from ablate.tracking import record
from tests.factories import STUDY_CELL, write_tiny_spec

BASE_LR = 1e-3
SHORT, LONG = 20, 40  # the study's cells, the larger setting
AXES = """ablation:
  axes: {model.norm: [builtin, custom], model.residual: [pre_norm, post_norm]}
  seeds: {min: 3, max: 4}
  min_effect: 0.1
  metric: val/exact_match
"""
TUNE = f"""  tune:
    space:
      train.optimizer.lr: {{choice: [{BASE_LR / 3}, {BASE_LR}, {3 * BASE_LR}, {9 * BASE_LR}]}}
    trials: 4
    sampler: grid
    pruner: {{name: none}}
    fidelity: {{steps: 5}}
"""
CONFIRM = f"""  confirm:
    overrides: {{train.max_steps: {LONG}}}
    seeds: [10, 11, 12, 13]
"""


def score(spec: ExperimentSpec) -> float:
    """The run's val/exact_match (module doc)."""
    best = 3 * BASE_LR if spec.model.norm == "custom" else BASE_LR
    value = 1.0 - (math.log(spec.train.optimizer.lr / best) / math.log(3)) ** 2
    if spec.model.residual == "post_norm":
        value += 0.2 if (spec.train.max_steps or 0) <= SHORT else -0.2
    noise = random.Random(f"{spec.model.norm}/{spec.model.residual}/{spec.seed}/{spec.train.max_steps}")
    return value + noise.gauss(0.0, 0.01)


def write_study(folder: Path, name: str, tune: bool = True, confirm: bool = True) -> Path:
    extra = AXES + (TUNE if tune else "") + (CONFIRM if confirm else "")
    return write_tiny_spec(folder, STUDY_CELL, {"name": name, "train.max_steps": SHORT,
                                                "train.optimizer.lr": BASE_LR}, extra=extra,
                           filename=f"{name}.yaml")


def fake_training(monkeypatch: pytest.MonkeyPatch, interrupt_at: Collection[int] = ()
                  ) -> list[ExperimentSpec]:
    """Replace training with `score`: each call opens a real MLflow run (tags, params, parent as a trained
    one has), logs its result under final/ names with 2 s of wall time and 3 s of CPU time, and ends it.
    The calls numbered in ``interrupt_at`` (0-based, counted over all calls) raise KeyboardInterrupt first,
    as Ctrl-C would. Returns the specs trained, in order (the interrupted calls included)."""
    from ablate.tracking import Tracker

    trained: list[ExperimentSpec] = []

    def run(spec: ExperimentSpec, *, run_dir: Path | None = None, tags: dict[str, str] | None = None,
            parent_run_id: str | None = None, experiment: str | None = None, run_name: str | None = None,
            on_start: Any = None, variant: str | None = None, **_: Any) -> RunResult:
        trained.append(spec)
        if len(trained) - 1 in interrupt_at:
            raise KeyboardInterrupt
        tracker = Tracker.start(spec, experiment=experiment, run_name=run_name, tags=tags,
                                parent_run_id=parent_run_id, variant=variant)
        if on_start is not None:
            on_start(tracker.run_id)
        value = score(spec)
        metrics = {"val/exact_match": value, "val/loss": 2.0 - value, record.WALL_TIME: 2.0,
                   record.CPU_TIME: 3.0}
        tracker.log_metrics({record.final(k): v for k, v in metrics.items()}, step=spec.train.max_steps or 1)
        tracker.end("finished")
        return RunResult("finished", metrics, spec.spec_hash, str(run_dir or ""), run_id=tracker.run_id)

    monkeypatch.setattr("ablate.run.runner.run_experiment", run)
    monkeypatch.setattr("ablate.study.search.cached_data", lambda spec: None)
    monkeypatch.setattr("ablate.study.cell_runs.cached_data", lambda spec: None)
    return trained
