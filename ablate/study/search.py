"""`ablate tune`: the spec's search section as an Optuna study, one trained spec per trial.

Each trial samples the dotted fields of ``search.space`` (conditional ones only when their `when` holds),
trains the derived spec with the shared trainer, reports the first objective at every evaluation and stops
when the pruner says so. The baseline spec runs as the first trial. Trials are budget slots enqueued in the
store (see `_fill`), so N workers on one machine or many finish exactly ``--trials`` trials; with
``search.timeout`` they start no trial after the deadline (each worker runs at least one), the results
cover the trials that ran, and the slots left over wait for the next run of the same command.

Outcomes: finished -> COMPLETE; pruned -> PRUNED; **diverged -> PRUNED** (it stopped early on its own:
samplers rank it below every complete trial, and the study goes on; user attr ``status`` says diverged);
a crash or an invalid sampled spec -> FAIL, the study goes on; Ctrl-C -> the trial is re-queued.
"""

from __future__ import annotations

import json
import math
import socket
import sys
import time
import warnings
import zlib
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import optuna
from optuna.distributions import CategoricalChoiceType
from optuna.trial import FrozenTrial, TrialState

from ablate.data.check import check_data
from ablate.run import runner
from ablate.run.runner import run_label
from ablate.spec import metricnames
from ablate.spec.experiment import SearchParam, spec_hash
from ablate.spec.load import SpecError
from ablate.study import failfast, optuna_attrs
from ablate.study.cell_runs import cached_data
from ablate.study.derived_specs import SearchPlan, plan_search, point_key
from ablate.study.optuna_store import Store, claim, open_study, requeue
from ablate.study.parent_run import close_parent, open_parent, search_description, trials_table
from ablate.study.precision import QUEUE_ATTR, at_study_precision, search_pin
from ablate.study.study_names import resolve, study_attrs, write_attrs
from ablate.study.tune_results import finish_search
from ablate.study.worker_pool import IN_PROCESS, WorkerArgs, WorkerPool
from ablate.tracking import NullTracker, record

STATE_OF = {"finished": TrialState.COMPLETE, "pruned": TrialState.PRUNED, "diverged": TrialState.PRUNED}


def search_key(plan: SearchPlan) -> str:
    """A hash of what the trials depend on (not the trial budget): the search's identity."""
    s = plan.search
    key = {"baseline": plan.spec.identity(), "objectives": [o.model_dump() for o in s.objectives],
           "space": {k: v.model_dump() for k, v in s.space.items()}, "sampler": s.sampler}
    return spec_hash(key)


def search_name(plan: SearchPlan, store: Store | None = None) -> str:
    """The Optuna study: the spec's name, readable (ablate/study/study_names.py), found in ``store``; without
    a store, the legacy name (spec name and identity hash) that stores written before kept."""
    legacy = f"{plan.spec.name}-search-{search_key(plan)}"
    if store is None:
        return legacy

    return resolve(store, plan.spec.name, search_key(plan), legacy)


def _sampler(plan: SearchPlan, worker: int, store: Store, budget: int) -> optuna.samplers.BaseSampler:
    s = plan.search
    # Workers must not draw the same random start-up points: seed by worker (and host, across machines).
    seed = plan.spec.seed + worker + (zlib_crc(socket.gethostname()) if store.kind == "rdb" else 0)
    if s.sampler == "random":
        return optuna.samplers.RandomSampler(seed=seed)
    if s.sampler == "grid":  # `_fill` enqueues every grid point with its values: nothing is ever sampled
        return optuna.samplers.RandomSampler(seed=seed)
    conditional = any(p.when for p in s.space.values())
    return optuna.samplers.TPESampler(seed=seed, multivariate=True, group=conditional, constant_liar=True,
                                      n_startup_trials=max(2, min(10, budget // 3)))


def zlib_crc(text: str) -> int:
    return zlib.crc32(text.encode()) % 100_000


def _pruner(plan: SearchPlan) -> optuna.pruners.BasePruner:
    p, s = plan.search.pruner, plan.search
    if p.name == "none" or len(s.objectives) > 1:  # Optuna prunes single-objective studies only
        return optuna.pruners.NopPruner()
    if p.name == "hyperband":
        first = max(1, p.warmup_steps or plan.spec.train.eval_every)
        return optuna.pruners.HyperbandPruner(min_resource=first,
                                              max_resource=plan.spec.train.max_steps or "auto")
    return optuna.pruners.MedianPruner(n_startup_trials=p.startup_trials, n_warmup_steps=p.warmup_steps)


def _retried(trials: Sequence[FrozenTrial]) -> set[int]:
    return {n for t in trials for n in t.system_attrs.get(optuna_attrs.RETRY_HISTORY, [])}


def replaced_failures(trials: Sequence[FrozenTrial]) -> set[int]:
    """The failed trials a re-queued retry replaced (a dead or interrupted trial): their retry holds the
    budget slot, not they."""
    return _retried(trials) & {t.number for t in trials if t.state == TrialState.FAIL}


def trials_done(trials: Sequence[FrozenTrial]) -> int:
    """Budget slots whose trial has ended: complete, pruned, or failed with no retry queued."""
    replaced = replaced_failures(trials)
    return sum(t.state.is_finished() and t.number not in replaced for t in trials)


def _fill(study: optuna.Study, store: Store, plan: SearchPlan, budget: int) -> int:
    """Enqueue the baseline (first trial) and slots up to `budget` trials: empty ones the sampler fills,
    or with the grid sampler each grid point's values (the baseline's point once, first). A re-queued
    retry of a dead or interrupted trial takes its slot, so the study ends with exactly `budget` trials."""
    grid = plan.search.sampler == "grid"
    with store.lock(study.study_name):
        trials = study.get_trials(deepcopy=False)
        counted = len(trials) - len(replaced_failures(trials))
        todo: list[tuple[dict[str, Any], dict[str, Any]]] = []  # (params, user attrs) to enqueue
        base, notes = plan.baseline_point()
        if not trials:
            for note in notes:
                print(f"note: {note}", flush=True)
            if base is not None:
                todo.append((base, {optuna_attrs.BASELINE: True}))
        if grid:
            points = plan.grid_points()
            extra = base is not None and point_key(base) not in {point_key(p) for p in points}
            budget = min(budget, len(points) + extra)  # the grid caps --trials (the baseline may add one)
            seen = {point_key(_params(t)) for t in trials} | {point_key(p) for p, _ in todo}
            todo += [(p, {}) for p in points if point_key(p) not in seen]
        todo = todo[:max(0, budget - counted)]
        for params, attrs in todo:
            study.enqueue_trial(params, user_attrs=attrs)
        empty = 0 if grid else max(0, budget - counted - len(todo))  # a grid slot always has its point
        for _ in range(empty):
            study.add_trial(optuna.create_trial(state=TrialState.WAITING))
        return len(todo) + empty


def _params(t: FrozenTrial) -> dict[str, object]:
    """A trial's point: its values once sampled, the enqueued ones while it waits."""
    return dict(t.params) or dict(t.system_attrs.get(optuna_attrs.FIXED_PARAMS, {}))


def _suggest(trial: optuna.Trial, name: str, p: SearchParam, encoded: bool) -> CategoricalChoiceType:
    if p.choice is not None:
        return trial.suggest_categorical(name, [json.dumps(c, sort_keys=True) for c in p.choice]
                                         if encoded else p.choice)
    assert p.low is not None and p.high is not None  # a range without choices
    if p.int:
        return trial.suggest_int(name, int(p.low), int(p.high), step=int(p.step or 1), log=p.log)
    return trial.suggest_float(name, p.low, p.high, step=p.step, log=p.log)


def _tell(study: optuna.Study, trial: optuna.Trial, status: str, values: list[float] | None = None,
          **attrs: object) -> bool:
    """Record the outcome; False when the trial was taken over meanwhile (its heartbeat went stale)."""
    state = STATE_OF.get(status, TrialState.FAIL)
    try:
        trial.set_user_attr(optuna_attrs.STATUS, status)
        for key, value in attrs.items():
            if value is not None:
                trial.set_user_attr(key, value)
        study.tell(trial, values if state == TrialState.COMPLETE else None, state=state)
    except (optuna.exceptions.UpdateFinishedTrialError, ValueError):
        print(f"trial {trial.number}: already failed as stale and re-queued; this result is dropped",
              file=sys.stderr, flush=True)
        return False
    return True


def sample(trial: optuna.Trial, plan: SearchPlan) -> dict[str, object]:
    """The trial's values of the active dimensions, in dependency order (`when` sees earlier choices)."""
    values: dict[str, Any] = {}
    with warnings.catch_warnings():
        # A baseline outside its range runs as enqueued: `_fill` printed a note already.
        warnings.filterwarnings("ignore", message="Fixed parameter .* is out of range")
        for name in plan.order:
            if plan.active(name, {k: plan.decode(k, v) for k, v in values.items()}):
                values[name] = _suggest(trial, name, plan.space[name], plan.encoded(name))
    return values


def run_trial(plan: SearchPlan, study: optuna.Study, store: Store, trial: optuna.Trial,
              parent: str | None) -> str:
    """Sample, train, tell. A crash is a FAILed trial and the study goes on; divergence counts as pruned."""
    n, values = trial.number, sample(trial, plan)
    run_dir = trial.user_attrs.get(optuna_attrs.RUN_DIR) or str(
        Path(plan.spec.train.out_dir) / plan.spec.name / study.study_name / f"trial-{n}")
    trial.set_user_attr(optuna_attrs.RUN_DIR, run_dir)  # a retry resumes this checkpoint (and MLflow run)
    try:
        spec = plan.spec_for(values, f"{plan.origin} (trial {n})")
    except SpecError as exc:
        _tell(study, trial, "failed", error=str(exc))
        return "failed"
    pinned = at_study_precision(spec, plan.precision)
    metrics, single = plan.metrics, len(plan.metrics) == 1


    def hook(step: int, evaluation: dict[str, float]) -> bool:
        value = evaluation.get(metrics[0])
        if not single or value is None or not math.isfinite(value):
            return False
        try:
            trial.report(value, step)
            return trial.should_prune()
        except optuna.exceptions.UpdateFinishedTrialError:
            return True  # failed as stale and re-queued elsewhere: stop, the retry resumes the checkpoint

    def opened(run_id: str | None) -> None:  # the trial knows its run even if training then crashes
        if run_id:
            try:
                trial.set_user_attr(optuna_attrs.RUN_ID, run_id)
            except optuna.exceptions.UpdateFinishedTrialError:
                pass  # failed as stale meanwhile: the hook stops the run

    tags = {record.TRIAL: str(n), record.KIND: "trial", record.OPTUNA_STUDY: study.study_name}
    if pinned is not spec:
        tags[record.SPEC_PRECISION] = spec.train.precision  # reports read the spec's auto, as for its cells
        spec = pinned
    try:
        with store.beat(trial):
            # through the module, as train_cells does: one place where a study starts a training run
            result = runner.run_experiment(spec, hook=hook, run_dir=Path(run_dir), tags=tags,
                                           parent_run_id=parent, run_name=run_label(f"trial-{n}", spec.seed),
                                           data=cached_data(spec), quiet=True, variant=f"trial-{n}",
                                           on_start=opened)
    except KeyboardInterrupt:
        if _tell(study, trial, "killed"):
            requeue(study, study.get_trials(deepcopy=False)[n])  # the next run resumes it
        raise
    except Exception as exc:  # noqa: BLE001 - a crashing trial is data, not the end of the study
        _tell(study, trial, "failed", error=f"{type(exc).__name__}: {exc}"[-2000:])
        print(f"trial {n}: failed ({type(exc).__name__}: {exc})", file=sys.stderr, flush=True)
        return "failed"
    status = result.status
    got = [record.result_value(result.metrics, m) for m in metrics]  # what MLflow holds as final/<metric>
    if status == "finished" and any(v is None for v in got):
        missing = metrics[got.index(None)]
        status, error = "failed", f"no {missing} in the run's metrics: {sorted(result.metrics)}"
    elif status == "finished" and not all(math.isfinite(v) for v in got):  # type: ignore[arg-type]
        status, error = "diverged", None
    else:
        error = result.reason if status != "finished" else None
    loss = record.result_value(result.metrics, metricnames.VAL_LOSS) if status == "finished" else None
    loss = loss if loss is not None and math.isfinite(loss) else None
    _tell(study, trial, status, [float(v) for v in got] if status == "finished" else None,  # type: ignore[arg-type]
          mlflow_run_id=result.run_id, error=error, **{optuna_attrs.FINAL_LOSS: loss})
    shown = ", ".join(f"{k}={plan.decode(k, v)}" for k, v in values.items())
    score = ", ".join(f"{record.final(m)} {v:.4g}" for m, v in zip(metrics, got,
                                                                   strict=True) if v is not None)
    print(f"trial {n}: {status} {score} [{shown}]", flush=True)
    return status


def _search_worker(spec_path: str, overrides: list[str], storage: str | None, deadline: float | None,
                   budget: int, index: int, workers: int) -> int:
    plan = plan_search(spec_path, overrides)
    store = Store(storage)
    study = open_study(store, search_name(plan, store), plan.directions,
                       sampler=_sampler(plan, index, store, budget), pruner=_pruner(plan))
    assert study is not None
    parent = study.user_attrs.get(optuna_attrs.PARENT)
    if plan.precision is None and plan.spec.train.precision == "auto":  # stand-alone: main_tune pinned it
        plan.precision = study.user_attrs.get(QUEUE_ATTR)
    started = 0
    # Like Optuna's optimize(timeout=...): no trial starts after the deadline, but each worker runs one.
    while deadline is None or not started or time.time() < deadline:
        if failfast.stopped(study):
            break  # the first trials failed the same way: main_tune says why
        trial, busy = claim(study, store)
        if trial is None:
            if not busy:
                break
            time.sleep(min(5.0, float(store.heartbeat or 2)))  # others still run trials: one may die
            continue
        started += 1
        outcome = run_trial(plan, study, store, trial, parent)
        if outcome == "failed" and failfast.stop_if_repeated(study, store):
            break
    return 0


@dataclass
class TuneRun:
    """A started search: its plan and trial budget, the store and Optuna study its trials are queued in,
    its parent MLflow run (None with tracking off) and the deadline of ``search.timeout``."""

    plan: SearchPlan
    budget: int
    store: Store
    name: str
    study: optuna.Study
    tracker: NullTracker | None
    deadline: float | None


def start_tune(spec_path: str, overrides: Sequence[str], storage: str | None, trials: int | None = None
                ) -> TuneRun:
    """Plan the spec's search, check its data, open (or find) its Optuna study with the trial slots
    enqueued, pin its precision and open its parent run: everything before the first trial trains."""
    plan = plan_search(spec_path, overrides)
    check_data(spec_path, overrides, plan.spec)  # a missing or malformed data file: now, not in a trial
    search = plan.search
    assert search is not None  # plan_search checked
    budget = trials or search.trials
    store = Store(storage)
    with store.lock(plan.spec.name):  # two processes starting one search agree on its name
        name = search_name(plan, store)
        study = open_study(store, name, plan.directions)
        assert study is not None
        write_attrs(study, study_attrs(search_key(plan), plan.spec.name, list(overrides), "search"))
        plan.precision = search_pin(study, plan.spec.train.precision)
    if study.metric_names != [record.final(m) for m in plan.metrics]:
        with warnings.catch_warnings():  # "experimental" since Optuna 3.2; the dashboard reads the names
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            study.set_metric_names([record.final(m) for m in plan.metrics])
    failfast.clear(study)  # stopped last time by a repeated failure: its cause may be fixed now
    added = _fill(study, store, plan, budget)
    goals = ", ".join(f"{d} {m}" for m, d in zip(plan.metrics, plan.directions, strict=True))
    print(f"search {name}: {budget} trials ({added} newly queued), sampler {search.sampler}, pruner "
          f"{search.pruner.name}, {goals}; store: {store.describe()}", flush=True)
    if plan.precision:
        print(f"precision: every trial trains in {plan.precision} (train.precision: auto, resolved once for "
              "the search)", flush=True)
    tracker: NullTracker | None = None
    if plan.spec.tracking.enabled:
        with store.lock(name):  # one parent run however many processes start at once
            tags = {record.KIND: "search", record.VARIANT: "search", record.OPTUNA_STUDY: name,
                    record.METRIC: ", ".join(record.final(m) for m in plan.metrics)}
            note = search_description(plan, name, budget)
            tracker = open_parent(plan.spec, f"{plan.spec.name}-search", tags,
                                  study.user_attrs.get(optuna_attrs.PARENT), description=note)
            study.set_user_attr(optuna_attrs.PARENT, tracker.run_id)
    deadline = time.time() + search.timeout if search.timeout else None
    return TuneRun(plan, budget, store, name, study, tracker, deadline)


def run_tune(search: TuneRun, worker_args: WorkerArgs, pool: WorkerPool = IN_PROCESS) -> int:
    """The search's trials, trained by ``pool``'s workers until the budget or the deadline is spent; the
    workers' exit code. ``worker_args``: the spec path, its overrides and the storage."""
    return pool.run(_search_worker, (*worker_args, search.deadline, search.budget))


def close_tune(search: TuneRun, interrupted: bool) -> int:
    """Write the search's results once it is done (its best trial, importances, figures: finish_search)
    and bring the parent run up to date; 2 when a repeated failure stopped it, else 0."""
    plan, study = search.plan, search.study
    timed_out = search.deadline is not None and time.time() >= search.deadline
    why = None if interrupted else failfast.stopped(study)
    done = not interrupted and not why and finish_search(plan, search.store, search.name, search.tracker,
                                                         timed_out=timed_out)
    if why:
        print(f"error: search stopped: its first {failfast.FIRST} trials failed the same way: {why}; fix "
              "that and run the same command again (the failed trials are queued again)", file=sys.stderr)
    if search.tracker is not None:
        all_trials = study.get_trials(deepcopy=False)
        close_parent(search.tracker, note=search_description(plan, search.name, search.budget, all_trials),
                     table=trials_table(plan, all_trials), table_artifact=record.TRIALS_TABLE_ARTIFACT,
                     why=why, done=done, interrupted=interrupted)
    return 2 if why else 0
