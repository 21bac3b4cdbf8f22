"""Each variant at its own best (``ablation.tune``): one Optuna search per variant, the same for
every variant (trials, fidelity, sampler, sampler seed, pruner), then the study's seeds at each variant's
best settings.

A variant's search is an ordinary search (ablate/study/search.py trains, prunes and records its trials)
over ``tune.space`` on the variant's spec at the tuning fidelity: its first trial is the baseline's own
settings (so the search also measures the variant *at the baseline's settings*, at the fidelity), its other
slots wait in the store for the sampler. Searches are Optuna studies of their own, named after the study,
the variant and a hash of what the trials depend on: rerunning tops each one up to ``tune.trials`` and
trains only what is missing (interrupted trials resume from their checkpoints), as `ablate tune` does.

`ablate study` runs the searches after the study's cells at the baseline's settings (`tune_variants`,
in this process or ``--workers`` processes sharing the store) and then the cells `tuned_cells` gives
(ablate/study/arms.py). Each search run records its best settings (tag ``ablate.best_settings``) and its
trials are its child runs: the report's own-best and tuning-budget sections read both
(ablate/report/sections/own_best.py, tuning_budget.py).
"""

from __future__ import annotations

import copy
import json
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import optuna
from optuna.trial import FrozenTrial, TrialState

from ablate.engine import preempt
from ablate.errors import AblateError
from ablate.spec.experiment import Objective, SearchSpec
from ablate.spec.load import set_dotted
from ablate.study import failfast, optuna_attrs
from ablate.study.arm_settings import best_overrides, sampler_seed, trial_overrides
from ablate.study.derived_specs import SearchPlan, derive
from ablate.study.designs import plan_study, spec_diff
from ablate.study.optuna_store import Store, claim, open_study
from ablate.study.parent_run import close_parent, search_description, trials_table
from ablate.study.precision import study_pin
from ablate.study.search import _fill, _pruner, _sampler, run_trial, search_key, trials_done
from ablate.study.study_plan import Cell, StudyPlan
from ablate.study.tuned_target import arm_fields, trial_loss
from ablate.study.worker_pool import IN_PROCESS, WorkerPool
from ablate.tracking import NullTracker, Tracker, record


@dataclass(frozen=True)
class Tuned:
    """One variant's search: its Optuna study, its best settings (values of the tuning space) and score,
    its score at the baseline's settings (the first trial), and every completed trial's score (the EVP
    curve's input; pruned and failed trials have none)."""

    label: str
    study: str
    best: dict[str, Any]
    value: float | None
    at_baseline: float | None
    scores: list[float] = field(default_factory=list)
    why: str | None = None  # a repeated failure stopped the search (ablate/study/failfast.py)
    loss: float | None = None  # the best trial's final val/loss (ablate/study/tuned_target.py)


def variants(plan: StudyPlan) -> dict[str, dict[str, object]]:
    """Each variant's label -> its overrides of the baseline (the baseline's are empty)."""
    return {c.label: dict(c.overrides) for c in plan.cells if c.seed == plan.seeds[0]}


def variant_search(plan: StudyPlan, overrides: Mapping[str, object]) -> SearchPlan:
    """The search of one variant: its spec at the fidelity (trained with the tuning seed) as the baseline,
    ``tune.space`` as the space, the study's metric as the one objective."""
    abl = plan.spec.ablation
    assert abl is not None and abl.tune is not None
    tune = abl.tune
    data = copy.deepcopy(plan.data)
    data.pop("ablation", None)
    for key, value in trial_overrides(tune, plan.baseline, overrides, {}).items():
        set_dotted(data, key, copy.deepcopy(value))
    data["seed"] = sampler_seed(tune, plan.spec)
    spec = derive(data, plan.smap, {}, plan.origin)
    search = SearchSpec(objectives=[Objective(metric=plan.metric, direction=plan.direction)],  # type: ignore[arg-type]
                        trials=tune.trials, sampler=tune.sampler, pruner=tune.pruner, space=tune.space)
    return SearchPlan(spec.model_copy(update={"search": search}), data, plan.smap, plan.origin,
                      list(tune.space))


def search_name(plan: StudyPlan, label: str, splan: SearchPlan) -> str:
    """The Optuna study of one variant's search: the study, the variant, what its trials depend on."""
    return f"{plan.spec.name}-tune-{label}-{search_key(splan)}"


@dataclass
class OpenSearch:
    """One variant's search, opened: its plan, Optuna study name, trial budget and search run (if any)."""

    label: str
    splan: SearchPlan
    name: str
    budget: int
    tracker: NullTracker | None = None


def open_search(plan: StudyPlan, label: str, overrides: Mapping[str, object], store: Store,
                parent: str | None = None) -> OpenSearch:
    """Open (or reopen) one variant's search and top its budget slots up to ``tune.trials``. With
    ``parent`` (the study's parent MLflow run) the search is a child run of it, kind ``search``, and its
    trials are the search run's children; the Optuna study remembers the search run, so a rerun reopens it."""
    splan = variant_search(plan, overrides)
    splan.precision = study_pin(store, plan.store_name, plan.direction)
    budget = splan.spec.search.trials  # type: ignore[union-attr]
    name = search_name(plan, label, splan)
    with store.lock(name):
        study = open_study(store, name, splan.directions)
        assert study is not None
        tracker = _search_run(splan, label, name, parent, study) if parent else None
    failfast.clear(study)  # stopped last time by a repeated failure: its cause may be fixed now
    _fill(study, store, splan, budget)
    return OpenSearch(label, splan, name, budget, tracker)


def run_search(search: OpenSearch, store: Store, parent: str | None, worker: int = 0) -> None:
    """Claim and train the search's waiting trials until none is waiting or running anywhere (the same
    loop as `ablate tune`'s workers: several processes or machines share one search)."""
    splan = search.splan
    study = open_study(store, search.name, splan.directions, sampler=_sampler(splan, worker, store,
                       search.budget), pruner=_pruner(splan))
    assert study is not None
    while not failfast.stopped(study):
        trial, busy = claim(study, store)
        if trial is None:
            if not busy:
                return
            time.sleep(min(5.0, float(store.heartbeat or 2)))  # another process's trial may yet die
            continue
        if run_trial(splan, study, store, trial, parent) == "failed":
            failfast.stop_if_repeated(study, store)  # the first trials failed the same way: stop


def close_search(search: OpenSearch, store: Store, interrupted: bool) -> Tuned:
    """The search's outcome; its run (if any) brought up to date and ended as the search ended, with its
    best settings (tag ``ablate.best_settings``) once every trial of its budget is done. A search that was
    complete before the process was interrupted (in a later search) ends finished: its own trials are all
    done, and a partial export read "search not finished" for every search otherwise."""
    study = open_study(store, search.name, search.splan.directions)
    assert study is not None
    trials = study.get_trials(deepcopy=False)
    why = failfast.stopped(study)
    result = outcome(trials, search.splan, search.label, search.name, why)
    if search.tracker is not None:
        done = not why and all(t.state.is_finished() for t in trials)  # open_search filled every slot
        if done:
            search.tracker.set_tags({record.BEST_SETTINGS: json.dumps(result.best, sort_keys=True)})
        note = search_description(search.splan, search.name, search.budget, trials)
        close_parent(search.tracker, note=note, table=trials_table(search.splan, trials),
                     table_artifact=record.TRIALS_TABLE_ARTIFACT, why=why, done=done, interrupted=interrupted)
    return result


def tune_variant(plan: StudyPlan, label: str, overrides: Mapping[str, object], store: Store,
                 parent: str | None = None) -> Tuned:
    """Run (or continue) one variant's search to ``tune.trials`` trials in this process; its outcome."""
    return _tune(plan, [open_search(plan, label, overrides, store, parent)], store, IN_PROCESS, None)[label]


def _search_run(splan: SearchPlan, label: str, name: str, parent: str, study: optuna.Study) -> NullTracker:
    """The variant's search run under the study's parent: the one the Optuna study remembers, else new."""
    tags = {record.KIND: "search", record.VARIANT: label, record.OPTUNA_STUDY: name,
            record.METRIC: record.final(splan.metrics[0])}
    known = study.user_attrs.get(optuna_attrs.PARENT)
    tracker: NullTracker | None = None
    if known:
        try:
            tracker = Tracker.start(splan.spec, run_name=f"{label} search", tags=tags, resume_run_id=known)
        except AblateError as exc:
            print(f"note: {exc}; starting a new search run", file=sys.stderr)
    if tracker is None:
        tracker = Tracker.start(splan.spec, run_name=f"{label} search", tags=tags, parent_run_id=parent,
                                variant=label)
    study.set_user_attr(optuna_attrs.PARENT, tracker.run_id)
    return tracker


def outcome(trials: Sequence[FrozenTrial], splan: SearchPlan, label: str, name: str, why: str | None = None
            ) -> Tuned:
    """What a variant's finished search says: best settings and score, the baseline trial's score (and
    ``why`` a repeated failure stopped it)."""
    maximize = splan.directions[0] == "maximize"
    done = [t for t in trials if t.state == TrialState.COMPLETE and t.values]
    first = next((t for t in done if t.user_attrs.get(optuna_attrs.BASELINE)), None)
    if not done:
        return Tuned(label, name, {}, None, None, why=why)
    best = (max if maximize else min)(done, key=lambda t: (t.values[0], -t.number))
    values = {k: splan.decode(k, v) for k, v in best.params.items()}
    return Tuned(label, name, values, float(best.values[0]),
                 float(first.values[0]) if first is not None else None, [float(t.values[0]) for t in done],
                 why, trial_loss(best, splan.spec.tracking.uri if splan.spec.tracking.enabled else None))


def tune_variants(plan: StudyPlan, storage: str | None = None, parent: str | None = None,
                  pool: WorkerPool = IN_PROCESS) -> dict[str, Tuned]:
    """Every variant's search, the baseline's first: one after the other in this process, or shared by
    the pool's worker processes (each claims the next waiting trial of the first search that has one)."""
    store = Store(storage)
    searches = [open_search(plan, label, fields, store, parent) for label, fields in variants(plan).items()]
    return _tune(plan, searches, store, pool, storage)


def _tune(plan: StudyPlan, searches: list[OpenSearch], store: Store, pool: WorkerPool, storage: str | None
          ) -> dict[str, Tuned]:
    """Run the opened searches and close them, however the run ends (Ctrl-C: re-raised once closed)."""
    interrupted = False
    try:
        if pool.size <= 1:
            for search in searches:
                run_search(search, store, search.tracker.run_id if search.tracker is not None else None)
        elif pool.run(_tune_worker, (plan.origin, list(plan.overrides), storage)) in preempt.STOP_CODES:
            raise KeyboardInterrupt  # the workers re-queued their trials: say so as one process would
    except KeyboardInterrupt:
        interrupted = True
        raise
    finally:
        outcomes = {s.label: close_search(s, store, interrupted) for s in searches}
    return outcomes


def _tune_worker(spec_path: str, overrides: list[str], storage: str | None, index: int, workers: int) -> int:
    """One of ``--workers`` processes: every variant's search in turn, until none has a trial waiting."""
    plan = plan_study(spec_path, overrides)
    store = Store(storage)
    for label, fields in variants(plan).items():
        splan = variant_search(plan, fields)
        splan.precision = study_pin(store, plan.store_name, plan.direction)
        name = search_name(plan, label, splan)
        study = open_study(store, name, splan.directions, create=False)
        parent = (study.user_attrs.get(optuna_attrs.PARENT)
                  if study is not None and plan.spec.tracking.enabled else None)
        run_search(OpenSearch(label, splan, name, splan.spec.search.trials), store, parent,  # type: ignore[union-attr]
                   worker=index)
    return 0


def tuned_cells(plan: StudyPlan, tuned: Mapping[str, Tuned]) -> list[Cell]:
    """The study's seeds at each variant's own best settings (at the cell's length): seed-major, as
    plan_study orders the cells at the baseline's settings, tagged as the own-best arm. A variant whose
    search completed no trial runs at the baseline's settings, and so does one whose best is the
    baseline's: its cells are then the very cells (same keys) of the baseline-settings arm, except in a
    study that decides by steps to a target, whose arm counts every cell's steps at the tuned baseline's
    own loss (ablate/study/tuned_target.py): there the arm's target is every cell's setting."""
    out: list[Cell] = []
    fields = arm_fields(plan.metric, tuned)
    for seed in plan.seeds:
        base_at_seed = derive(plan.data, plan.smap, fields, plan.origin, seed=seed)
        for label, overrides in variants(plan).items():
            best = tuned[label].best if label in tuned else {}
            own = {**best_overrides(overrides, best), **fields}
            spec = derive(plan.data, plan.smap, own, plan.origin, seed=seed)
            out.append(Cell(label, seed, spec, own, spec_diff(base_at_seed, spec), arm=record.OWN_BEST_ARM))
    return out


def stored_searches(plan: StudyPlan, storage: str | None) -> dict[str, tuple[Tuned, int]]:
    """Each variant's search as the store holds it (read only): its outcome so far and how many of its
    trials are done; variants whose search has not started are absent."""
    abl = plan.spec.ablation
    if abl is None or abl.tune is None or not Store.exists(storage):
        return {}
    store = Store(storage, create=False)
    out = {}
    for label, overrides in variants(plan).items():
        splan = variant_search(plan, overrides)
        study = open_study(store, search_name(plan, label, splan), splan.directions, create=False)
        if study is None:
            continue
        trials = study.get_trials(deepcopy=False)
        out[label] = (outcome(trials, splan, label, study.study_name, failfast.stopped(study)),
                      trials_done(trials))
    return out


def progress_lines(plan: StudyPlan, storage: str | None) -> list[str]:
    """Where each variant's search stands in the store (read only; nothing when none started)."""
    abl = plan.spec.ablation
    assert abl is not None and abl.tune is not None
    lines = []
    for label, (t, done) in stored_searches(plan, storage).items():
        best = ", ".join(f"{k}={v}" for k, v in t.best.items())
        shown = f"; best {t.value:.4g} at {best}" if t.value is not None else ""
        lines.append(f"  {label}: {done} of {abl.tune.trials} trials done{shown}")
    return (["tuning so far:", *lines]) if lines else []
