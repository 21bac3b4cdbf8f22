"""The report of a search study: the best trial and how to rerun it, the ranking, parameter importances,
the optimisation history and a parallel-coordinates plot.

Read from what ``ablate.study`` logged (this module never imports optuna): child runs tagged
``ablate.trial`` (trial number) and ``ablate.kind: trial``, the objectives in the parent's
``search.objectives`` param, the tuner's best trial in its ``ablate.best_trial`` tag, the runnable
``best.yaml`` (an artifact of the parent, and a file under ``<train.out_dir>/<name>/<ablate.optuna_study>/``
where the search ran) and the parameter importances in the parent's ``importance.json`` artifact
(``{"evaluator", "importances": {objective: ...}}``).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import PurePosixPath
from typing import TYPE_CHECKING, Any

from ablate.report import plots as figs
from ablate.report.compute import statistics as st
from ablate.report.compute.loaded_study import design_params
from ablate.report.render import Block, Bullets, Figure, Note, Para, Section, Table
from ablate.report.section_api import Inputs, Part, section
from ablate.spec import metricnames
from ablate.tracking import record
from ablate.tracking.read import list_artifacts, read_text_artifact

if TYPE_CHECKING:
    from pathlib import Path

    from ablate.report.compute.loaded_study import Run, Study

TRIAL_TAGS = (record.TRIAL, "optuna.trial_number")
IMPORTANCES = (record.IMPORTANCE_ARTIFACT, "importances.json")  # study/tune_results.py writes the first
TOP_TRIALS = 10
# Below this many finished trials an importance is a rough ordering: the evaluators fit a model of the
# objective over the searched space, and a handful of points cannot pin it down.
FEW_TRIALS = 20
NOT_VARIED = "did not vary"
DECIMALS = {metricnames.MODEL_PARAMS: 0, metricnames.WALL_TIME: 1}  # other metrics of the ranking: 4


def objectives(study: Study) -> list[tuple[str, bool]]:
    """[(metric, maximize)] from the parent's ``search.objectives`` param (JSON), else val/loss minimised."""
    raw = study.parent["params"].get("search.objectives")
    try:
        parsed = json.loads(raw) if raw else None
    except ValueError:
        parsed = None
    if isinstance(parsed, list) and parsed and all(isinstance(o, dict) and "metric" in o for o in parsed):
        return [(str(o["metric"]), o.get("direction") == "maximize") for o in parsed]
    return [(metricnames.VAL_LOSS, False)]


def trial_number(run: Run, fallback: int) -> int:
    for tag in TRIAL_TAGS:
        value = run.tags.get(tag, "")
        if value.isdigit():
            return int(value)
    return fallback


def importances(study: Study, objective: str) -> tuple[str, list[tuple[str, float]]]:
    """(evaluator, sorted (field, importance)) of ``objective`` from the tuner's importance.json.

    study/tune_results.py logs ``{"evaluator": name, "importances": {objective: {field: value}}}``; a plain
    ``{field: value}`` is accepted too.
    """
    text = None
    for name in IMPORTANCES:
        text = read_text_artifact(study.parent["run_id"], name)
        if text:
            break
    try:
        data = json.loads(text) if text else {}
    except ValueError:
        data = {}
    evaluator = str(data.get("evaluator", "")) if isinstance(data, dict) else ""
    found = data.get("importances", data) if isinstance(data, dict) else {}
    if isinstance(found, dict) and found and all(isinstance(v, dict) for v in found.values()):
        found = found.get(objective) or found[sorted(found)[0]]
    if not isinstance(found, dict):
        return evaluator, []
    pairs = [(str(k), float(v)) for k, v in found.items() if isinstance(v, int | float)]
    return evaluator, sorted(pairs, key=lambda kv: (-kv[1], kv[0]))


def _shown(text: str) -> str:
    """Sampled floats at 4 significant digits (0.008558894657793087 -> 0.008559); other values as logged."""
    try:
        number = float(text)
    except ValueError:
        return text
    return text if number.is_integer() or len(text) <= 8 else f"{number:.4g}"


def _value(text: str) -> float | str:
    try:
        return float(text)
    except ValueError:
        return text


def fmt_importance(value: float) -> str:
    """Two decimals: the evaluators' numbers are shares of explained variance, not measurements."""
    return "<0.01" if 0 <= value < 0.005 else f"{value:.2f}"


# ---------------------------------------------------------------- the trials, ranked
@dataclass(frozen=True)
class Importances:
    """What the tuner logged, kept to the parameters that varied over the finished trials."""

    evaluator: str
    values: list[tuple[str, float]]  # (param, importance), most important first
    constant: list[str]  # params with one value in every finished trial: no importance


@dataclass
class Trials:
    objectives: list[tuple[str, bool]]  # [(metric, maximize)]; the first one ranks
    trials: list[tuple[int, Run]]  # (trial number, run), by number
    done: list[tuple[int, Run]]  # finished, with the first objective
    ranked: list[tuple[int, Run]]  # done, best first
    varied: list[str]  # design params that take more than one value over all trials

    @property
    def metric(self) -> str:
        return self.objectives[0][0]


def read_trials(study: Study) -> Trials:
    objs = objectives(study)
    metric, maximize = objs[0]
    trials = sorted(((trial_number(r, i), r) for i, r in enumerate(study.runs)), key=lambda t: t[0])
    keys = sorted({k for _, r in trials for k in design_params(r.params)})
    varied = [k for k in keys if len({r.params.get(k) for _, r in trials}) > 1]
    done = [(n, r) for n, r in trials if r.status == "finished" and metric in r.metrics]
    ranked = sorted(done, key=lambda t: ((-1 if maximize else 1) * t[1].metrics[metric], t[0]))
    return Trials(objs, trials, done, ranked, varied)


def best_spec_path(study: Study) -> str | None:
    """Where the tuner wrote best.yaml (``<train.out_dir>/<name>/<optuna study>/best.yaml``, relative to
    the folder the search ran in), from the parent's params and tags; None for records without them."""
    params, tags = study.parent["params"], study.parent["tags"]
    out_dir, name = params.get("train.out_dir"), params.get("name")
    optuna_study = tags.get(record.OPTUNA_STUDY)
    if not (out_dir and name and optuna_study):
        return None
    return str(PurePosixPath(out_dir) / name / optuna_study / record.BEST_SPEC_ARTIFACT)


def _has_best_artifact(study: Study) -> bool:
    try:
        return record.BEST_SPEC_ARTIFACT in list_artifacts(study.parent["run_id"])
    except Exception:  # noqa: BLE001 - an unreadable artifact store only loses the hint
        return False


def search_summary(study: Study, trials: Trials | None = None) -> list[Block]:
    """The first thing the report says: the best trial, its values and parameters, its best.yaml and the
    command that retrains it."""
    t = trials or read_trials(study)
    if not t.ranked:
        return [Note(f"no trial of the {len(t.trials)} finished with a value of `{t.metric}`: there is no "
                     "best trial (see the trials below).")]
    by_number = dict(t.trials)
    tag = study.parent["tags"].get(record.BEST_TRIAL, "")
    tuner_best = int(tag) if tag.isdigit() and int(tag) in by_number else None
    number, run = t.ranked[0]
    values = ", ".join(f"`{m}` {st.fmt(run.metrics[m], 4)}" for m, _ in t.objectives if m in run.metrics)
    params = ", ".join(f"`{k}`={_shown(run.params.get(k, '—'))}" for k in t.varied) or "no searched parameter"
    items = [f"**Best trial: {number}** (run `{run.variant}`, MLflow run `{run.run_id}`): {values}; "
             f"{params}."]
    path = best_spec_path(study)
    logged = _has_best_artifact(study)
    reproduced = tuner_best if tuner_best is not None else number
    where = f"`{path}`" if path else "not recorded"
    if logged:
        where += f" (also logged as `best.yaml` in the parent run `{study.parent['run_id']}`)"
    items.append(f"Best spec (trial {reproduced}): {where}.")
    if path:
        items.append(f"Rerun it: `ablate run {path}` (from the folder the search ran in).")
    elif logged:
        items.append(f"Rerun it: `mlflow artifacts download -r {study.parent['run_id']} -a best.yaml -d .` "
                     "then `ablate run best.yaml`.")
    blocks: list[Block] = [Para(f"**Summary** of the search on `{t.metric}` "
                                f"({'max' if t.objectives[0][1] else 'min'}imised):"), Bullets(items)]
    if tuner_best is not None and tuner_best != number:
        blocks.append(Note(f"the tuner's best trial ({tuner_best}, the one best.yaml retrains) is not the "
                           f"first-ranked finished trial here ({number}): the tuner "
                           + ("weighs several objectives (Pareto front)." if len(t.objectives) > 1
                              else "may rank by a value this report does not read (e.g. a pruned trial's "
                                   "last report)."), "info"))
    return blocks


# ---------------------------------------------------------------- sections
def importance_rows(imp: list[tuple[str, float]], done: list[tuple[int, Run]]
                    ) -> tuple[list[tuple[str, float]], list[str]]:
    """(importances of the parameters that varied over the finished trials, names of those that did not).

    A parameter with one value in every finished trial cannot explain any of the objective's variation,
    whatever number an evaluator gives it. A name no run has as a param is kept as logged."""
    kept: list[tuple[str, float]] = []
    constant: list[tuple[str, float]] = []
    for name, value in imp:
        seen = {r.params[name] for _, r in done if name in r.params}
        (constant if len(seen) == 1 else kept).append((name, value))
    return kept, [name for name, _ in constant]


def _overview(study: Study, t: Trials) -> list[Block]:
    """How many trials ended how, the objectives, the sampler and pruner, the tuner's best trial."""
    objs, trials = t.objectives, t.trials
    counts = {s: sum(1 for _, r in trials if r.status == s) for s in sorted({r.status for _, r in trials})}
    p = study.parent["params"]
    goals = ", ".join(f"`{m}` ({'max' if mx else 'min'}imise)" for m, mx in objs)
    best_tag = study.parent["tags"].get(record.BEST_TRIAL)
    blocks: list[Block] = [Para(
        f"{len(trials)} trials ({', '.join(f'{n} {s}' for s, n in counts.items())}); objective"
        f"{'s' if len(objs) > 1 else ''}: " + goals
        + (f"; sampler `{p['search.sampler']}`" if "search.sampler" in p else "")
        + (f"; pruner `{p['search.pruner.name']}`" if "search.pruner.name" in p else "")
        + (f"; best trial (tuner): {best_tag}" if best_tag else "") + ".")]
    if len(t.done) < len(trials):
        blocks.append(Note(f"{len(trials) - len(t.done)} trial(s) were pruned, diverged or failed: they are "
                           "left out of the ranking (their last values are not comparable).", "info"))
    return blocks


def _ranking(study: Study, t: Trials) -> tuple[list[Block], list[int] | None]:
    """The top trials by the first objective, and with two objectives their Pareto front (trial numbers)."""
    objs, done, varied = t.objectives, t.done, t.varied
    obj_cols = [m for m, _ in objs]
    # model/params: a sampled component can change the parameter count, so the ranking shows it.
    extra = [k for k in (f"test/{study.quality}", metricnames.WALL_TIME, metricnames.MODEL_PARAMS)
             if k not in obj_cols and any(k in r.metrics for _, r in done)]
    shown_metrics = obj_cols + extra
    rows = [[str(i + 1), str(n), r.variant,
             *[st.fmt(r.metrics.get(m, math.nan), DECIMALS.get(m, 4)) for m in shown_metrics],
             *[_shown(r.params.get(k, "—")) for k in varied]]
            for i, (n, r) in enumerate(t.ranked[:TOP_TRIALS])]
    blocks: list[Block] = [Table(["rank", "trial", "run", *obj_cols, *extra, *[f"`{k}`" for k in varied]],
                                 rows, "rrl" + "r" * len(obj_cols + extra) + "l" * len(varied),
                                 f"Top {min(TOP_TRIALS, len(t.ranked))} finished trials by {t.metric}")]
    if len(objs) != 2:
        return blocks, None
    (m0, max0), (m1, max1) = objs
    both = [(n, r) for n, r in done if m1 in r.metrics]
    # Objective 0 as a cost (lower is better after the sign flip), objective 1 as the quality.
    front = st.pareto_front([-r.metrics[m0] if max0 else r.metrics[m0] for _, r in both],
                            [r.metrics[m1] for _, r in both], higher_quality_is_better=max1)
    on = [n for (n, _), f in zip(both, front, strict=True) if f]
    blocks.append(Para(f"Pareto front of `{m0}` and `{m1}`: trials {', '.join(map(str, on)) or '—'}."))
    return blocks, on


def _importance(study: Study, t: Trials, fig_dir: Path) -> tuple[list[Block], Importances]:
    """The tuner's importances of the parameters that varied, their bar chart, and a caveat for few trials."""
    metric, n = t.metric, len(t.done)
    evaluator, logged = importances(study, metric)
    imp, constant = importance_rows(logged, t.done)
    found = Importances(evaluator, imp, constant)
    if not logged:
        return [Note(f"the parent run has no {IMPORTANCES[0]} (too few complete trials?): no parameter "
                     "importances to show.", "info")], found
    by = f" ({evaluator})" if evaluator else ""
    blocks: list[Block] = []
    if n < FEW_TRIALS:
        blocks.append(Note(f"these importances rest on {n} finished trial{'s' * (n != 1)} (fewer than "
                           f"{FEW_TRIALS}): read them as a rough ordering, not a measurement; run more "
                           "trials before trusting a small difference."))
    blocks.append(Table(
        ["param", "importance"],
        [[f"`{k}`", fmt_importance(v)] for k, v in imp] + [[f"`{k}`", NOT_VARIED] for k in constant],
        "lr", f"Importance of each searched parameter for {metric}{by}, as logged by the tuner, from {n} "
              "finished trials; a parameter that kept one value gets none"))
    if imp:
        figs.importances_bar(imp, fig_dir / "importances.png")
        blocks.append(Figure("figures/importances.png", f"Parameter importances for {metric}{by}"))
    return blocks, found


def _history(t: Trials, fig_dir: Path) -> list[Block]:
    """The objective per finished trial with the best so far, and the parallel coordinates of the search."""
    metric, done, varied = t.metric, t.done, t.varied
    figs.optimisation_history([(n, r.metrics[metric]) for n, r in done], metric, t.objectives[0][1],
                              fig_dir / "optimisation_history.png")
    plots: list[Block] = [Figure("figures/optimisation_history.png",
                                 f"{metric} per finished trial and the best so far")]
    if varied and len(done) >= 2:
        table = [[_value(r.params.get(k, "")) for k in varied] for _, r in done]
        figs.parallel_coordinates(varied, table, [r.metrics[metric] for _, r in done], metric,
                                  fig_dir / "parallel_coords.png")
        plots.append(Figure("figures/parallel_coords.png",
                            f"Parallel coordinates of the searched parameters, coloured by {metric} "
                            "(colour scale on the right)"))
    return plots


@section(30, ("search",))
def part(inp: Inputs) -> Part:
    """The search report: the best trial as the opening lines, then the search, its ranking, importances
    and history; ``data``: objectives, trials, importances, best trial and spec (and the Pareto front)."""
    study = inp.study
    t = read_trials(study)
    best, pareto = _ranking(study, t)
    imp_blocks, imp = _importance(study, t, inp.fig_dir)
    sections = [Section("Search", _overview(study, t)), Section("Best trials", best),
                Section("Parameter importances", imp_blocks),
                Section("Optimisation history", _history(t, inp.fig_dir))]
    obj_cols = [m for m, _ in t.objectives]
    data: dict[str, Any] = {
        "objectives": [{"metric": m, "maximize": mx} for m, mx in t.objectives],
        "importances": dict(imp.values), "importance_evaluator": imp.evaluator,
        "did_not_vary": imp.constant, "importance_trials": len(t.done), "best_spec": best_spec_path(study),
        "trials": [{"number": n, "run": r.variant, "status": r.status,
                    "values": {m: r.metrics.get(m) for m in obj_cols},
                    "params": {k: r.params.get(k) for k in t.varied}} for n, r in t.trials],
        "best_trial": t.ranked[0][0] if t.ranked else None}
    if pareto is not None:
        data["pareto_trials"] = pareto
    return Part("search", sections, intro=search_summary(study, t), data=data)
