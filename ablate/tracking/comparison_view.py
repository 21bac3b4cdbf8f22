"""The view `ablate ui` opens a study's runs on: MLflow's own runs page, in its chart view, with the study's
cells grouped by variant (seeds pooled: each group's curve is the mean of its seeds, with their min-max band;
a ladder's by rung, then variant) and the charts narrowed to the deciding metric, on a y-axis fitted to the
cells' values (MLflow's own charts start from 0 for a loss, where a 0.02-nat gap between variants at 3.4
is a line's width): the comparison the study was run for, at first sight. A ladder also gets one view per
rung, its variants' gaps on that rung's own scale. Also the URLs of a study's runs in the UI (a run's page,
a set of runs as a filtered runs page), which the report's landing page links its variants and rungs to.

MLflow 3 keeps such a page state as a *shared view*: an experiment tag ``mlflow.sharedViewState.<key>``
holding the state as JSON (the runs filter and sort, ``groupBy``, the charts' search filter and the charts
themselves, ``compareRunCharts``, each with its ``range``), opened by
``#/experiments/<id>/runs?viewStateShareKey=<key>`` (the UI's own "Share" button writes the same tag). A
search's trials are not variants: its view sorts them by the metric, ungrouped.
"""

from __future__ import annotations

import hashlib
import json
import math
import urllib.parse
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from mlflow import MlflowClient
from mlflow.exceptions import MlflowException

from ablate.spec import metricnames
from ablate.tracking import record
from ablate.tracking.mlflow_store import is_server_uri

DEFAULT_UI = "http://127.0.0.1:5000"  # where `ablate ui` serves MLflow unless told another port


def ui_base(uri: str) -> str:
    """The MLflow UI the runs of the store at ``uri`` are seen in: the tracking server itself, else where
    `ablate ui` serves a local store by default."""
    return uri.rstrip("/") if is_server_uri(uri) else DEFAULT_UI


def run_url(base_url: str, experiment_id: str, run_id: str) -> str:
    """A run's page, in the model-training view."""
    return f"{base_url}/#/experiments/{experiment_id}/runs/{run_id}?{record.WORKFLOW_QUERY}"


def _ids_filter(run_ids: Sequence[str]) -> str:
    """MLflow's search for exactly these runs."""
    return f"{record.RUN_ID_ATTRIBUTE} IN (" + ", ".join(f"'{i}'" for i in sorted(set(run_ids))) + ")"


def runs_url(base_url: str, experiment_id: str, run_ids: Sequence[str]) -> str:
    """These runs: one run's page, or the experiment's runs page filtered to exactly these ids (MLflow's
    search syntax: ``attributes.run_id IN (...)``), in the model-training view. (The runs page shows cells
    folded under their study's parent run, which it fetches to show them nested: `runs_link` opens them
    grouped instead.)"""
    ids = sorted(set(run_ids))
    if len(ids) == 1:
        return run_url(base_url, experiment_id, ids[0])
    found = urllib.parse.quote(_ids_filter(ids))
    return (f"{base_url}/#/experiments/{experiment_id}/runs?{record.SEARCH_FILTER_QUERY}={found}&"
            f"{record.WORKFLOW_QUERY}")


def runs_link(uri: str, base_url: str, experiment_id: str, run_ids: Sequence[str], ladder: bool,
              metric: str) -> str:
    """These runs in the UI at ``base_url`` as a person should see them: one run's page, or a shared view of
    the runs page (its tag written into the experiment in the store at ``uri`` when missing) filtered to
    exactly these ids and grouped by variant (by rung, then variant, for a ladder), each group open on its
    runs, where the plain filtered page (`runs_url`) shows them folded under their parent run. Sorted by
    ``metric`` (a final/ name; sorted by date, or not at all, the page fetches the runs' parent run too and
    shows it beside them). Where the tag cannot be written (a read-only store), the plain filtered page."""
    ids = sorted(set(run_ids))
    if len(ids) == 1:
        return run_url(base_url, experiment_id, ids[0])
    keys = [record.RUNG, record.VARIANT] if ladder else [record.VARIANT]
    state = json.dumps({"searchFilter": _ids_filter(ids), "orderByKey": f"metrics.`{metric}`",
                        "orderByAsc": metricnames.mode(metric) == "min", "runListHidden": False,
                        "useGroupedValuesInCharts": True,
                        "groupBy": {"groupByKeys": [{"mode": "tag", "groupByData": k} for k in keys],
                                    "aggregateFunction": "average"}}, sort_keys=True)
    key = "ablate-runs-" + hashlib.sha256(state.encode()).hexdigest()[:12]
    try:
        client = MlflowClient(uri)
        if client.get_experiment(experiment_id).tags.get(record.SHARED_VIEW_PREFIX + key) != state:
            client.set_experiment_tag(experiment_id, record.SHARED_VIEW_PREFIX + key, state)
    except MlflowException:
        return runs_url(base_url, experiment_id, ids)
    return (f"{base_url}/#/experiments/{experiment_id}/runs?{record.SHARED_VIEW_QUERY}={key}&"
            f"{record.WORKFLOW_QUERY}")


def fitted_range(values: Sequence[float], higher_is_better: bool, *, lead: float = 0.0) -> dict[str, float]:
    """A y-axis that shows the differences between ``values``: their span with a margin of 15% of it (the
    span at least 0.5% of their size and 0.01, so that equal values, an exact match of 0 in every cell
    included, get a readable axis), and ``lead`` spans more on the side the metric comes from while it
    trains (above a loss, below a BLEU), where a curve's last part shows; for values that are never
    negative (every metric ablate logs) that side stops at 0. Rounded to 4 significant digits; empty
    without finite values (MLflow's own axis then)."""
    finite = [v for v in values if math.isfinite(v)]
    if not finite:
        return {}
    least, most = min(finite), max(finite)  # the values' range (not an interval: nothing is decided here)
    span = max(most - least, 0.005 * max(abs(least), abs(most)), 0.01)
    pad = 0.15 * span
    below, above = pad + (lead * span if higher_is_better else 0.0), pad + (0.0 if higher_is_better
                                                                           else lead * span)
    bottom = least - below if least < 0 else max(least - below, min(0.0, least - pad))
    return {"yMin": _round(bottom), "yMax": _round(most + above)}


def _round(value: float) -> float:
    return float(f"{value:.4g}")


def _section_of(metric: str) -> str:
    return metric.rpartition("/")[0] or metric


def _chart(metric: str, y_range: dict[str, float]) -> dict[str, Any]:
    """A line chart of ``metric`` against step (MLflow's ``RunsChartsLineCardConfig``), on ``y_range``."""
    return {"uuid": f"ablate-{metric}", "type": "LINE", "metricKey": metric, "selectedMetricKeys": [metric],
            "metricSectionId": f"ablate-{_section_of(metric)}",
            "isGenerated": False, "deleted": False, "runsCountToCompare": 10, "lineSmoothness": 0,
            "useGlobalLineSmoothing": False, "scaleType": "linear", "xAxisScaleType": "linear",
            "xAxisKey": "step", "selectedXAxisMetricKey": "", "useGlobalXaxisKey": False,
            "ignoreOutliers": False, "range": dict(y_range)}


@dataclass(frozen=True)
class CellValues:
    """The cells' values a view's axes are fitted to: each cell's final metric and its curve's last
    value (what MLflow's run record holds as the metric's latest)."""

    final: tuple[float, ...] = ()
    curve: tuple[float, ...] = ()


def view_state(kind: str, metric: str, ladder: bool = False, values: CellValues | None = None,
               rung: str | None = None) -> dict[str, Any]:
    """The runs page's state for a study of ``kind`` (ablation | search) deciding on ``metric`` (a final/
    name): its child runs only (of ``rung`` alone, if given), grouped by variant for an ablation (by rung,
    then variant, for a ladder's every rung: pooling its rungs would average runs of different sizes), the
    charts of the metric's final value and its curve, on axes fitted to ``values``."""
    child = "cell" if kind == "ablation" else "trial"
    where = f"tags.`{record.KIND}` = '{child}'"  # the cells, not the study's parent run
    if rung is not None:
        where += f" AND tags.`{record.RUNG}` = '{rung}'"
    curve = metric.removeprefix(record.FINAL)
    state: dict[str, Any] = {
        "searchFilter": where, "orderByKey": f"metrics.`{metric}`", "orderByAsc": False,
        "chartsSearchFilter": curve,  # 'val/bleu': its curve and final/val/bleu
        "useGroupedValuesInCharts": True, "runListHidden": False,
    }
    if kind == "ablation":
        keys = [record.RUNG, record.VARIANT] if ladder and rung is None else [record.VARIANT]
        state["groupBy"] = {"groupByKeys": [{"mode": "tag", "groupByData": k} for k in keys],
                            "aggregateFunction": "average"}
    if values is not None and values.final:
        better = metricnames.higher_is_better(metric)
        charts = [_chart(metric, fitted_range(values.final, better))]
        if curve != metric:
            charts.append(_chart(curve, fitted_range(values.curve or values.final, better, lead=2.0)))
        names = [_section_of(c["metricKey"]) for c in charts]
        state["compareRunCharts"] = charts
        state["compareRunSections"] = [
            *({"uuid": f"ablate-{n}", "name": n, "display": True, "isReordered": False, "deleted": False,
               "isGenerated": True} for n in dict.fromkeys(names)),
            *({"uuid": f"ablate-{n}", "name": n, "display": False, "isReordered": False, "deleted": False,
               "isGenerated": True} for n in record.UI_METRIC_SECTIONS)]
        state["isAccordionReordered"] = False
    return state


def cell_values(uri: str, experiment_id: str, kind: str, metric: str) -> dict[str | None, CellValues]:
    """The values of the study's cells (or trials) on ``metric`` and its curve, by rung (None: all of
    them; a rung's key only for a ladder's cells), in order of their rung's mean parameter count."""
    child = "cell" if kind == "ablation" else "trial"
    runs = MlflowClient(uri).search_runs([experiment_id], f"tags.`{record.KIND}` = '{child}'",
                                         max_results=5000)
    curve = metric.removeprefix(record.FINAL)
    groups: dict[str | None, list[Any]] = {None: list(runs)}
    for run in runs:
        rung = run.data.tags.get(record.RUNG)
        if rung is not None:
            groups.setdefault(rung, []).append(run)

    def size(item: tuple[str | None, list[Any]]) -> tuple[int, float, str]:
        params = [r.data.metrics.get(record.MODEL_PARAMS) for r in item[1]]
        known = [p for p in params if p is not None]
        return (item[0] is not None, sum(known) / len(known) if known else math.inf, item[0] or "")

    return {rung: CellValues(tuple(r.data.metrics[metric] for r in group if metric in r.data.metrics),
                             tuple(r.data.metrics[curve] for r in group if curve in r.data.metrics))
            for rung, group in sorted(groups.items(), key=size)}


def comparison_view(uri: str, experiment_id: str, kind: str, metric: str, ladder: bool = False,
                    values: CellValues | None = None, rung: str | None = None) -> str:
    """The key of the experiment's comparison view in the store at ``uri``, its tag written when missing or
    changed (the key names the view, the state holds its axes: a study that gained cells keeps its key, its
    axes refitted)."""
    client = MlflowClient(uri)
    state = json.dumps(view_state(kind, metric, ladder, values, rung), sort_keys=True)
    what = json.dumps(view_state(kind, metric, ladder, None, rung), sort_keys=True)
    key = "ablate-" + hashlib.sha256(what.encode()).hexdigest()[:12]
    tags = client.get_experiment(experiment_id).tags
    if tags.get(record.SHARED_VIEW_PREFIX + key) != state:
        client.set_experiment_tag(experiment_id, record.SHARED_VIEW_PREFIX + key, state)
    return key


def comparison_url(base_url: str, experiment_id: str, key: str) -> str:
    """The runs page in its chart view with the shared view ``key`` applied, in the model-training view."""
    return (f"{base_url}/#/experiments/{experiment_id}/runs?{record.SHARED_VIEW_QUERY}={key}&"
            f"{record.CHART_MODE_QUERY}&{record.WORKFLOW_QUERY}")


def report_url(uri: str, base_url: str, experiment_id: str, run_id: str) -> str | None:
    """The study's report (its verdicts, tables and figures: `ablate report` logs it under ``report/`` in
    the parent run) in MLflow's artifact view of the parent run; None before a report was logged."""
    if report_path(uri, run_id) is None:
        return None
    return (f"{base_url}/#/experiments/{experiment_id}/runs/{run_id}/artifacts/{record.REPORT_DIR}/"
            f"report.html?{record.WORKFLOW_QUERY}")


def report_path(uri: str, run_id: str) -> str | None:
    """The artifact path of the report `ablate report` logged in the study's parent run, or None."""
    try:
        logged = {a.path for a in MlflowClient(uri).list_artifacts(run_id, record.REPORT_DIR)}
    except MlflowException:
        return None
    page = f"{record.REPORT_DIR}/report.html"
    return page if page in logged else None
