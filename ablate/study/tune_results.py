"""What a finished search leaves behind: the best trial(s), a runnable best.yaml, importances, figures.

Everything is printed, written to ``<train.out_dir>/<name>/<optuna study>/`` and logged on the search's
parent MLflow run: ``best.yaml`` (`ablate run best.yaml` retrains the best trial), ``best/<metric>``
metrics, ``best.<field>`` params (and tags, which a later, longer search may overwrite),
``importance.json`` naming the evaluator (PED-ANOVA by default, fANOVA on request), ``pareto.json`` for two
objectives, and Optuna's matplotlib figures as PNGs under ``figures/``.
"""

from __future__ import annotations

import math
import warnings
from collections import Counter
from pathlib import Path
from typing import Any

import matplotlib
import matplotlib.pyplot as plt
import optuna
from optuna.importance import BaseImportanceEvaluator, FanovaImportanceEvaluator, PedAnovaImportanceEvaluator
from optuna.trial import FrozenTrial, TrialState
from optuna.visualization import matplotlib as ovm

from ablate.data.paths import with_absolute_roots
from ablate.spec.load import dump_spec_yaml
from ablate.study import optuna_attrs
from ablate.study.derived_specs import SearchPlan
from ablate.study.optuna_store import Store, open_study, reclaim
from ablate.tracking import NullTracker, record

FIGURE_DPI = 120


def _evaluator(name: str) -> BaseImportanceEvaluator:
    return FanovaImportanceEvaluator(seed=0) if name == "fanova" else PedAnovaImportanceEvaluator()


def _target(index: int, multi: bool, sign: float = 1.0) -> Any:
    return (lambda t: sign * t.values[index]) if multi else None


def importances(study: optuna.Study, plan: SearchPlan) -> tuple[str, dict[str, dict[str, float]]]:
    """(evaluator name, {objective: {field: importance}}); objectives with too few trials are left out."""
    evaluator = _evaluator(plan.search.importance)
    multi = len(plan.metrics) > 1
    out: dict[str, dict[str, float]] = {}
    for i, metric in enumerate(plan.metrics):
        # PED-ANOVA looks for what makes the target low: negate maximised objectives of a Pareto study.
        target = _target(i, multi, -1.0 if plan.directions[i] == "maximize" else 1.0)
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # "quantiles select the same trials" on small studies
                found = optuna.importance.get_param_importances(study, evaluator=evaluator, target=target)
        except (ValueError, RuntimeError, ZeroDivisionError) as exc:  # too few complete trials / one value
            print(f"importance of {metric}: not computed ({exc})")
            continue
        out[metric] = {k: float(v) for k, v in found.items()}
    return type(evaluator).__name__, out


def figures(study: optuna.Study, plan: SearchPlan, folder: Path) -> list[Path]:
    """Optuna's matplotlib plots as PNGs (Agg backend: no display needed)."""
    matplotlib.use("Agg")
    multi, metrics = len(plan.metrics) > 1, plan.metrics
    evaluator_name = type(_evaluator(plan.search.importance)).__name__
    first = {"target": _target(0, multi), "target_name": metrics[0]}
    plots: dict[str, Any] = {
        "optimization_history": lambda: ovm.plot_optimization_history(study, **first),
        "param_importances": lambda: ovm.plot_param_importances(
            study, evaluator=_evaluator(plan.search.importance), **first),
        "parallel_coordinate": lambda: ovm.plot_parallel_coordinate(study, **first),
    }
    if multi:
        plots["pareto_front"] = lambda: ovm.plot_pareto_front(study, target_names=metrics)
    else:
        plots["intermediate_values"] = lambda: ovm.plot_intermediate_values(study)
    folder.mkdir(parents=True, exist_ok=True)
    written = []
    for name, plot in plots.items():
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # experimental-API and degenerate-axis warnings
                axes = plot()
        except (ValueError, RuntimeError, ZeroDivisionError) as exc:
            print(f"figure {name}: skipped ({exc})")
            continue
        first_axes = axes.flat[0] if hasattr(axes, "flat") else axes
        if name == "param_importances":
            first_axes.set_title(f"Hyperparameter importances ({evaluator_name})")
        figure = first_axes.figure
        path = folder / f"{name}.png"
        figure.savefig(path, dpi=FIGURE_DPI, bbox_inches="tight")
        plt.close(figure)
        written.append(path)
    return written


def _lead(best: list[FrozenTrial], plan: SearchPlan) -> FrozenTrial:
    """The trial best.yaml reproduces: the best one, or on a Pareto front the best on the first objective."""
    sign = 1.0 if plan.directions[0] == "minimize" else -1.0
    return min(best, key=lambda t: sign * t.values[0])


def finish_search(plan: SearchPlan, store: Store, name: str, tracker: NullTracker | None,
                  timed_out: bool = False) -> bool:
    """Print and log the results when no trial is left to run (`timed_out`: none is running; the slots
    still waiting are for the next run); False (nothing logged) while some still run or wait."""
    study = open_study(store, name, plan.directions, create=False)
    if study is None:
        return False
    with store.lock(name):
        reclaim(study, store)  # a trial of a dead worker would otherwise count as running forever
    trials = study.get_trials(deepcopy=False)
    counts = Counter(t.state.name.lower() for t in trials)
    print("trials: " + ", ".join(f"{n} {state}" for state, n in sorted(counts.items())))
    waiting, running = counts.get("waiting", 0), counts.get("running", 0)
    if running or (waiting and not timed_out):
        print(f"{waiting + running} trials are still waiting or running: run the same command again to "
              "continue")
        return False
    if waiting:
        print(f"search.timeout ({plan.search.timeout:g} s) reached: {waiting} trials not started; the "
              "results below cover the trials that ran; run the same command again to continue")
    if tracker is not None:
        tracker.set_tags({record.TRIALS_LEFT: waiting})
    if not any(t.state == TrialState.COMPLETE for t in trials):
        print("no trial completed: there is no best trial")
        return True
    multi = len(plan.metrics) > 1
    best = list(study.best_trials) if multi else [study.best_trial]
    lead = _lead(best, plan)
    folder = Path(plan.spec.train.out_dir) / plan.spec.name / name
    folder.mkdir(parents=True, exist_ok=True)
    spec = plan.spec_for(lead.params, f"{plan.origin} (trial {lead.number})")
    # Its data paths resolve here (the search's folder): made absolute, the file runs from any folder.
    spec = spec.model_copy(update={"data": with_absolute_roots(spec.data)})
    text = (f"# best trial {lead.number} of Optuna study {name}: "
            + ", ".join(f"{record.final(m)} {v:.6g}" for m, v in zip(plan.metrics, lead.values, strict=True))
            + f"\n# retrain it with: ablate run {folder / 'best.yaml'}  (from {Path.cwd()}, where the search "
            "ran: its MLflow store and runs/ folder; its data paths are absolute)\n" + dump_spec_yaml(spec))
    (folder / "best.yaml").write_text(text)
    title = "Pareto front" if multi else "best trial"
    goals = ", ".join(f"{d} {record.final(m)}" for m, d in zip(plan.metrics, plan.directions, strict=True))
    print(f"{title} ({goals}):")
    for t in sorted(best, key=lambda t: t.number):
        values = ", ".join(f"{record.final(m)} {v:.4g}" for m, v in zip(plan.metrics, t.values, strict=True))
        shown = ", ".join(f"{k}={plan.decode(k, v)}" for k, v in t.params.items())
        print(f"  trial {t.number}: {values} [{shown}] run {t.user_attrs.get(optuna_attrs.RUN_ID, '-')}")
    print(f"best spec: {folder / 'best.yaml'}")
    evaluator, found = importances(study, plan)
    for metric, scores in found.items():
        ranked = ", ".join(f"{k} {v:.3f}" for k, v in sorted(scores.items(), key=lambda kv: -kv[1]))
        print(f"importance of {record.final(metric)} ({evaluator}): {ranked}")
    pictures = figures(study, plan, folder / "figures")
    if tracker is not None:
        _log(tracker, plan, lead, best, text, evaluator, found, pictures, len(trials) - waiting)
    return True


def _log(tracker: NullTracker, plan: SearchPlan, lead: FrozenTrial, best: list[FrozenTrial], text: str,
         evaluator: str, found: dict[str, dict[str, float]], pictures: list[Path], step: int) -> None:
    params = {f"best.{k}": plan.decode(k, v) for k, v in lead.params.items()}
    tracker.log_text(text, "best.yaml")
    tracker.set_tags({**params, record.BEST_TRIAL: lead.number,
                      record.BEST_RUN: lead.user_attrs.get(optuna_attrs.RUN_ID, "")})
    try:
        tracker.log_params(params)
    except Exception:  # noqa: BLE001 - a longer rerun found a new best: params are immutable, the tags hold it
        pass
    metrics = {f"best/{m}": v for m, v in zip(plan.metrics, lead.values, strict=True) if math.isfinite(v)}
    metrics.update({f"importance/{m}/{k}": v for m, values in found.items() for k, v in values.items()})
    tracker.log_metrics(metrics, step=step)  # the trial count: a longer rerun logs a later step
    tracker.log_dict({"evaluator": evaluator, "importances": found}, "importance.json")
    if len(plan.metrics) > 1:
        tracker.log_dict({"objectives": plan.metrics, "directions": plan.directions, "pareto": [
            {"trial": t.number, "values": t.values, "params": t.params,
             "run_id": t.user_attrs.get(optuna_attrs.RUN_ID)} for t in best]}, "pareto.json")
    for path in pictures:
        tracker.log_artifact(path, "figures")
