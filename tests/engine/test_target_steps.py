"""val/steps_to_target (ablate/engine/metrics.py): the step at which the evaluations' validation loss first
reaches eval.target_loss, interpolated between evaluations, censored at the budget."""

from __future__ import annotations

import pytest

from ablate.engine.metrics import steps_to_target
from ablate.spec import metricnames
from ablate.spec.experiment import ExperimentSpec

LOSS = metricnames.VAL_LOSS
HISTORY = [(50, {LOSS: 5.0}), (100, {LOSS: 4.4}), (150, {LOSS: 4.0}), (200, {LOSS: 4.1})]


def test_the_crossing_is_interpolated_between_the_evaluations_around_it() -> None:
    # 4.4 at step 100, 4.0 at 150: 4.1 is three quarters of the way
    assert steps_to_target(HISTORY, 4.1, 200) == pytest.approx(137.5)
    assert steps_to_target(HISTORY, 4.4, 200) == 100.0  # reached exactly at an evaluation
    assert steps_to_target(HISTORY, 6.0, 200) == 50.0  # already there at the first evaluation


def test_a_target_never_reached_counts_the_whole_budget() -> None:
    assert steps_to_target(HISTORY, 3.9, 200) == 200.0
    assert steps_to_target([(10, {LOSS: float("nan")}), (20, {LOSS: 3.0})], 3.5, 40) == 20.0
    assert steps_to_target([], 3.0, 600) == 600.0


def test_the_metric_is_a_result_only_with_a_target() -> None:
    base = {"name": "t", "ablation": {"axes": {"model.norm": ["builtin", "rms"]},
                                      "metric": metricnames.VAL_STEPS_TO_TARGET}}
    with pytest.raises(ValueError, match="set eval.target_loss"):
        ExperimentSpec.model_validate(base)
    spec = ExperimentSpec.model_validate({**base, "eval": {"target_loss": 4.2}})
    assert spec.eval.target_loss == 4.2
    assert metricnames.direction(metricnames.VAL_STEPS_TO_TARGET) == "minimize"
    assert "target_loss" not in ExperimentSpec.model_validate({"name": "t"}).resolved()["eval"]
