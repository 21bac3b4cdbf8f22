"""Each variant at its own best (``ablation.tune``, issue 29): one Optuna search per variant, the same for
every variant (trials, fidelity, sampler, sampler seed, pruner), then the study's seeds at each variant's
best settings.

A variant's search is an ordinary search (ablate/study/search.py trains, prunes and records its trials)
over ``tune.space`` on the variant's spec at the tuning fidelity: its first trial is the baseline's own
settings (so the search also measures the variant *at the baseline's settings*, at the fidelity), its other
slots wait in the store for the sampler. Searches are Optuna studies of their own, named after the study,
the variant and a hash of what the trials depend on: rerunning tops each one up to ``tune.trials`` and
trains only what is missing (interrupted trials resume from their checkpoints), as `ablate tune` does.

Not wired into `ablate ablate` yet: `tune_variants` runs the searches and `tuned_cells` gives the cells
that run each variant at its own best; the report's side (both effects, the EVP curves of
ablate/report/evp.py, the best-settings table) reads what `Tuned` holds.
"""

from __future__ import annotations

import copy
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from optuna.trial import TrialState

import ablate.tracking.record as R
from ablate.spec.experiment import Objective, SearchSpec
from ablate.spec.load import set_dotted
from ablate.study import attrs as A
from ablate.study import search as S
from ablate.study.plan import Cell, StudyPlan, spec_diff
from ablate.study.space import SearchPlan, derive
from ablate.study.store import Store, claim, open_study
from ablate.study.tuning import best_overrides, sampler_seed, trial_overrides

if TYPE_CHECKING:
    from ablate.tracking import NullTracker


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


def variants(plan: StudyPlan) -> dict[str, dict[str, Any]]:
    """Each variant's label -> its overrides of the baseline (the baseline's are empty)."""
    return {c.label: dict(c.overrides) for c in plan.cells if c.seed == plan.seeds[0]}


def variant_search(plan: StudyPlan, overrides: Mapping[str, Any]) -> SearchPlan:
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
    return f"{plan.spec.name}-tune-{label}-{S.search_key(splan)}"


def tune_variant(plan: StudyPlan, label: str, overrides: Mapping[str, Any], store: Store,
                 parent: str | None = None) -> Tuned:
    """Run (or continue) one variant's search to ``tune.trials`` trials; its outcome. With ``parent`` (the
    study's parent MLflow run) the search is a child run of it, kind ``search``, and its trials are the
    search run's children; the Optuna study remembers the search run, so a rerun reopens it."""
    splan = variant_search(plan, overrides)
    budget = splan.spec.search.trials  # type: ignore[union-attr]
    name = search_name(plan, label, splan)
    with store.lock(name):
        study = open_study(store, name, splan.directions)
        assert study is not None
        tracker = _search_run(splan, label, name, parent, study) if parent else None
    S._fill(study, store, splan, budget)
    study = open_study(store, name, splan.directions, sampler=S._sampler(splan, 0, store, budget),
                       pruner=S._pruner(splan))
    assert study is not None
    interrupted = False
    try:
        while True:
            trial, busy = claim(study, store)
            if trial is None:
                if not busy:
                    break
                time.sleep(min(5.0, float(store.heartbeat or 2)))  # another process's trial may yet die
                continue
            S.run_trial(splan, study, store, trial, tracker.run_id if tracker is not None else None)
    except KeyboardInterrupt:
        interrupted = True
        raise
    finally:
        trials = study.get_trials(deepcopy=False)
        if tracker is not None:
            from ablate.study.parent import close_parent, search_description, trials_table

            done = not interrupted and all(t.state.is_finished() for t in trials)
            close_parent(tracker, note=search_description(splan, name, budget, trials),
                         table=trials_table(splan, trials), table_artifact=R.TRIALS_TABLE_ARTIFACT, why=None,
                         done=done, interrupted=interrupted)
    return outcome(trials, splan, label, name)


def _search_run(splan: SearchPlan, label: str, name: str, parent: str, study: Any) -> NullTracker:
    """The variant's search run under the study's parent: the one the Optuna study remembers, else new."""
    from ablate.errors import AblateError
    from ablate.tracking import Tracker

    tags = {R.KIND: "search", R.VARIANT: label, R.OPTUNA_STUDY: name, R.METRIC: R.final(splan.metrics[0])}
    known = study.user_attrs.get(A.PARENT)
    tracker: NullTracker | None = None
    if known:
        try:
            tracker = Tracker.start(splan.spec, run_name=f"{label} search", tags=tags, resume_run_id=known)
        except AblateError as exc:
            print(f"note: {exc}; starting a new search run", file=sys.stderr)
    if tracker is None:
        tracker = Tracker.start(splan.spec, run_name=f"{label} search", tags=tags, parent_run_id=parent,
                                variant=label)
    study.set_user_attr(A.PARENT, tracker.run_id)
    return tracker


def outcome(trials: Any, splan: SearchPlan, label: str, name: str) -> Tuned:
    """What a variant's finished search says: best settings and score, the baseline trial's score."""
    maximize = splan.directions[0] == "maximize"
    done = [t for t in trials if t.state == TrialState.COMPLETE and t.values]
    first = next((t for t in done if t.user_attrs.get(A.BASELINE)), None)
    if not done:
        return Tuned(label, name, {}, None, None)
    best = (max if maximize else min)(done, key=lambda t: (t.values[0], -t.number))
    values = {k: splan.decode(k, v) for k, v in best.params.items()}
    return Tuned(label, name, values, float(best.values[0]),
                 float(first.values[0]) if first is not None else None, [float(t.values[0]) for t in done])


def tune_variants(plan: StudyPlan, storage: str | None = None, parent: str | None = None) -> dict[str, Tuned]:
    """Every variant's search, the baseline's first, one after the other (one training at a time)."""
    store = Store(storage)
    return {label: tune_variant(plan, label, overrides, store, parent)
            for label, overrides in variants(plan).items()}


def tuned_cells(plan: StudyPlan, tuned: Mapping[str, Tuned]) -> list[Cell]:
    """The study's seeds at each variant's own best settings (at the cell's length): seed-major, as
    plan_study orders the cells at the baseline's settings. A variant whose search completed no trial runs
    at the baseline's settings."""
    out: list[Cell] = []
    for seed in plan.seeds:
        base_at_seed = derive(plan.data, plan.smap, {}, plan.origin, seed=seed)
        for label, overrides in variants(plan).items():
            best = tuned[label].best if label in tuned else {}
            own = best_overrides(overrides, best)
            spec = derive(plan.data, plan.smap, own, plan.origin, seed=seed)
            out.append(Cell(label, seed, spec, own, spec_diff(base_at_seed, spec)))
    return out


def progress_lines(plan: StudyPlan, storage: str | None) -> list[str]:
    """Where each variant's search stands in the store (read only; nothing when none started)."""
    abl = plan.spec.ablation
    if abl is None or abl.tune is None or not Store.exists(storage):
        return []
    store = Store(storage, create=False)
    lines = []
    for label, overrides in variants(plan).items():
        splan = variant_search(plan, overrides)
        study = open_study(store, search_name(plan, label, splan), splan.directions, create=False)
        if study is None:
            continue
        trials = study.get_trials(deepcopy=False)
        t = outcome(trials, splan, label, study.study_name)
        done = sum(x.state.is_finished() for x in trials)
        best = ", ".join(f"{k}={v}" for k, v in t.best.items())
        shown = f"; best {t.value:.4g} at {best}" if t.value is not None else ""
        lines.append(f"  {label}: {done} of {abl.tune.trials} trials done{shown}")
    return (["tuning so far:", *lines]) if lines else []
