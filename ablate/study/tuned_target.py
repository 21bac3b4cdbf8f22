"""The own-best arm's target in a tuned study that decides by steps to a target loss (``ablation.metric:
val/steps_to_target`` with ``ablation.tune``).

"Reaches the baseline's final loss in fewer steps", asked of tuned variants, is asked at the *tuned*
baseline's final loss (Wen et al. 2025): the spec's target, fixed before tuning, is the untuned baseline's
loss, which every tuned run reaches early. The arm's adaptive rounds decide on each cell's logged steps, so
the target must be fixed before the arm's seeds run, and be the same for every worker and every resume: it
is the tuned baseline's own final val/loss in its best search trial (on the tuning seed, apart from the
evaluation seeds: ablate/study/arm_settings.py ``sampler_seed``; at the search's fidelity). One seed's
loss, and the best of a grid's, it can sit below what the tuned baseline reaches on the evaluation seeds,
which then reach it late or never: the censoring-aware comparison in the report reads such runs as "more
than the budget", and the group-sequential verdict, which counts them at the budget, understates the
variant's lead, never overstates it. Every own-best cell, the baseline's included, trains
with ``eval.target_loss`` set to it (:func:`arm_fields`): each logs its steps at the arm's target, the
rounds and the report read the same numbers, and a worker rebuilds the cell, target and all, from the
overrides its trial records. The report reads it back from the cells (ablate/report/compute/target_reach.py).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Protocol

from optuna.trial import FrozenTrial

from ablate.spec import metricnames
from ablate.study import optuna_attrs
from ablate.tracking import record
from ablate.tracking.read import run_metrics

TARGET_FIELD = "eval.target_loss"
DIGITS = 6  # the target as the cells' specs carry it: a loss to a millionth of a nat


class HasLoss(Protocol):
    @property
    def loss(self) -> float | None: ...


def trial_loss(trial: FrozenTrial, tracking_uri: str | None = None) -> float | None:
    """A search trial's final val/loss: as the trial recorded it, else (a trial recorded before it did)
    its MLflow run's in the store at ``tracking_uri`` (the spec's ``tracking.uri``; the environment's
    ``MLFLOW_TRACKING_URI`` first, as everywhere); None where neither has it."""
    value = trial.user_attrs.get(optuna_attrs.FINAL_LOSS)
    if value is not None:
        return float(value)
    run_id = trial.user_attrs.get(optuna_attrs.RUN_ID)
    if not run_id:
        return None
    metrics = run_metrics(str(run_id), tracking_uri)
    if metrics is None:  # an unreachable store or a deleted run: the arm keeps the spec's target
        return None
    return record.result_value(metrics, metricnames.VAL_LOSS)


def arm_fields(metric: str, tuned: Mapping[str, HasLoss]) -> dict[str, object]:
    """What every own-best cell sets besides its own best settings: ``eval.target_loss`` at the tuned
    baseline's best trial's final loss where the study decides by steps to a target; else nothing."""
    base = tuned.get("baseline")
    if metric != metricnames.VAL_STEPS_TO_TARGET or base is None or base.loss is None:
        return {}
    return {TARGET_FIELD: round(base.loss, DIGITS)}
