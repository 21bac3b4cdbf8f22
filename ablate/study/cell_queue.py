"""Ablation cells as trials: one Optuna study per ablation study, each cell (variant x seed) one enqueued
trial, the trial's state the cell's outcome. ablate/study/ablation.py runs them; the store
(ablate/study/optuna_store.py) makes every pop exact and re-queues the cells of dead workers."""

from __future__ import annotations

import math
import sys
import warnings
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypedDict

import optuna
from optuna.distributions import CategoricalChoiceType, CategoricalDistribution
from optuna.trial import FrozenTrial, TrialState

from ablate.study.optuna_attrs import CELL, ERROR, RUN_ID, STATUS, STEP, CellAttrs
from ablate.study.optuna_store import Store, claim, claim_where, open_study, requeue, resumed, trial_alive
from ablate.study.study_names import write_attrs


class CellParams(TypedDict):
    """Every cell's axis values as Optuna params (`CellQueue.enqueue`'s keywords): each axis's choices, and
    each cell's values (by cell key) among them."""

    choices: dict[str, list[CategoricalChoiceType]]
    values: dict[str, dict[str, CategoricalChoiceType]]


@dataclass
class CellRecord:
    """The latest trial of one cell, as `ablate status` shows it."""

    status: str  # pending | running | interrupted (resumes first) | finished | diverged | failed
    metric: float | None = None
    step: int | None = None
    run_id: str | None = None
    trial: int | None = None
    error: str | None = None


CellRecords = Mapping[str, CellRecord]  # each cell's record by its key (CellQueue.records)


class CellQueue:
    """One ablation study in the store: cells enqueued once, popped by workers, outcomes as trial states."""

    def __init__(self, store: Store, name: str, direction: str, *, create: bool = True) -> None:
        self.store, self.name = store, name
        self.study = open_study(store, name, [direction], create=create,
                                sampler=optuna.samplers.RandomSampler(seed=0))

    def latest(self) -> dict[str, FrozenTrial]:
        out: dict[str, FrozenTrial] = {}
        for t in self.study.get_trials(deepcopy=False) if self.study else []:
            if CELL in t.user_attrs:
                out[t.user_attrs[CELL]] = t  # trials come in number order: the last one wins
        return out

    def enqueue(self, cells: Sequence[CellAttrs], retry_failed: bool = False, *,
                choices: Mapping[str, Sequence[CategoricalChoiceType]] | None = None,
                values: Mapping[str, Mapping[str, CategoricalChoiceType]] | None = None) -> tuple[int, int]:
        """Enqueue cells the store has not seen (and failed ones with retry_failed): (new, retried).

        `values` (cell key -> axis values, over `choices`) become the waiting trial's params at once, so
        Optuna's dashboard tells a queued cell's variant from the others before any worker takes it."""
        assert self.study is not None
        new = retried = 0
        study_id = self.store.storage.get_study_id_from_name(self.name)
        with self.store.lock(self.name):
            latest = self.latest()
            for cell in cells:
                key = str(cell[CELL])
                t = latest.get(key)
                if t is None:
                    waiting = optuna.trial.create_trial(state=TrialState.WAITING, user_attrs=dict(cell))
                    trial_id = self.store.storage.create_new_trial(study_id, waiting)
                    if choices is not None and values is not None and key in values:
                        self._record_params(trial_id, {}, choices, values[key])
                    new += 1
                elif t.state == TrialState.FAIL and retry_failed:
                    requeue(self.study, t)
                    retried += 1
        return new, retried

    def requeue_runs(self, run_ids: Collection[str]) -> list[str]:
        """Queue again the cells whose latest trial finished as one of these MLflow runs (superseded since:
        ablate/study/precision.py); the run ids whose cells it queued."""
        assert self.study is not None
        queued: list[str] = []
        with self.store.lock(self.name):
            for t in self.latest().values():
                if t.state == TrialState.COMPLETE and t.user_attrs.get(RUN_ID) in run_ids:
                    requeue(self.study, t)
                    queued.append(t.user_attrs[RUN_ID])
        return queued

    def describe(self, attrs: Mapping[str, str], metric: str) -> None:
        """Record the study's identity attrs (once) and name its objective for Optuna's dashboard."""
        assert self.study is not None
        write_attrs(self.study, dict(attrs))
        if self.study.metric_names != [metric]:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
                self.study.set_metric_names([metric])

    def set_params(self, trial: optuna.Trial, choices: Mapping[str, Sequence[CategoricalChoiceType]],
                   values: Mapping[str, CategoricalChoiceType]) -> None:
        """Record the cell's axis values as the trial's params (categorical over every value the study
        gives that axis). Best effort: a store whose earlier trials hold other choices keeps going."""
        self._record_params(self.store.trial_id(self.name, trial.number), trial.params, choices, values)

    def _record_params(self, trial_id: int, recorded: Mapping[str, object],
                       choices: Mapping[str, Sequence[CategoricalChoiceType]],
                       values: Mapping[str, CategoricalChoiceType]) -> None:
        for name, value in values.items():
            if name in recorded or value not in choices.get(name, ()):
                continue
            dist = CategoricalDistribution(list(choices[name]))
            try:
                self.store.storage.set_trial_param(trial_id, name, dist.to_internal_repr(value), dist)
            except (ValueError, RuntimeError):
                pass  # incompatible with the study's earlier trials (its axes were edited)

    def get(self, key: str) -> Any:
        return self.study.user_attrs.get(key) if self.study else None

    def set(self, key: str, value: object) -> None:
        assert self.study is not None
        self.study.set_user_attr(key, value)

    def claim(self) -> tuple[optuna.Trial | None, bool]:
        assert self.study is not None
        return claim(self.study, self.store)

    def claim_like(self, same: Callable[[Mapping[str, Any]], bool], count: int) -> list[optuna.Trial]:
        """Pop up to ``count`` more WAITING cells whose attrs ``same`` accepts (a pack's mates), in the
        order `claim` pops them."""
        assert self.study is not None
        return claim_where(self.study, self.store, same, count)

    def started(self, trial: optuna.Trial, run_id: str | None) -> None:
        """The cell's MLflow run is open: the trial keeps its id from now on, whatever happens next."""
        if run_id:
            try:
                trial.set_user_attr(RUN_ID, run_id)
            except optuna.exceptions.UpdateFinishedTrialError:
                pass  # failed as stale meanwhile; finish() says so

    def report(self, trial: optuna.Trial, step: int, value: float | None) -> None:
        if value is not None and math.isfinite(value):
            try:
                trial.report(value, step)
            except optuna.exceptions.UpdateFinishedTrialError:
                pass  # failed as stale meanwhile; finish() says so

    def finish(self, trial: optuna.Trial, status: str, value: float | None, run_id: str | None = None,
               error: str | None = None, step: int | None = None) -> None:
        """finished/diverged -> COMPLETE (user attr status; no value counts as the worst), else FAIL;
        ``step``: the step the value was evaluated at."""
        assert self.study is not None
        try:
            trial.set_user_attr(STATUS, status)
            if step is not None:
                trial.set_user_attr(STEP, step)
            if run_id:
                trial.set_user_attr(RUN_ID, run_id)
            if error:
                trial.set_user_attr(ERROR, error[-2000:])
            if status in ("finished", "diverged"):
                if value is None or not math.isfinite(value):
                    value = math.inf if self.study.direction.name == "MINIMIZE" else -math.inf
                self.study.tell(trial, value)
            else:
                self.study.tell(trial, state=TrialState.FAIL)
        except (optuna.exceptions.UpdateFinishedTrialError, ValueError):
            # Its heartbeat went stale and another worker re-queued it: that copy resumes the checkpoint.
            print(f"cell trial {trial.number} was failed as stale meanwhile; its re-queued copy counts",
                  file=sys.stderr, flush=True)

    def release(self, trial: optuna.Trial) -> None:
        """An interrupted cell: FAIL this trial and queue the cell again (it resumes from its checkpoint)."""
        assert self.study is not None
        try:
            trial.set_user_attr(STATUS, "killed")
            self.study.tell(trial, state=TrialState.FAIL)
        except (optuna.exceptions.UpdateFinishedTrialError, ValueError):
            return
        requeue(self.study, self.study.get_trials(deepcopy=False)[trial.number])

    def failed_segments(self) -> dict[str, list[str]]:
        """Cell key -> the errors of its earlier trials that failed, for the cells queued again since
        (``--retry-failed``): their failure is history the latest trial no longer shows."""
        latest = self.latest()
        out: dict[str, list[str]] = {}
        for t in self.study.get_trials(deepcopy=False) if self.study else []:
            key = t.user_attrs.get(CELL)
            if key is None or latest.get(key) is t or t.user_attrs.get(STATUS) != "failed":
                continue
            out.setdefault(key, []).append(str(t.user_attrs.get(ERROR, "no error recorded")))
        return out

    def records(self) -> dict[str, CellRecord]:
        out: dict[str, CellRecord] = {}
        for key, t in self.latest().items():
            last = max(t.intermediate_values) if t.intermediate_values else t.user_attrs.get(STEP)
            metric = t.value if t.state == TrialState.COMPLETE else (
                t.intermediate_values[last] if last in t.intermediate_values else None)
            status = {TrialState.WAITING: "pending", TrialState.RUNNING: "running",
                      TrialState.FAIL: "failed"}.get(t.state, t.user_attrs.get(STATUS, "finished"))
            if t.state == TrialState.RUNNING and not trial_alive(t, self.store):
                status = "interrupted"
            elif t.state == TrialState.WAITING and resumed(t) and t.user_attrs.get(STATUS) != "failed":
                status = "interrupted"  # stopped part-way, queued again: resumes first, from its checkpoint
            if metric is not None and not math.isfinite(metric):
                metric = None
            out[key] = CellRecord(status, metric, last, t.user_attrs.get(RUN_ID), t.number,
                                  t.user_attrs.get(ERROR))
        return out

